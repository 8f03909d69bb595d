"""The largest free share of any GPU, kept between calls (`ClusterView.max_free_share`) and read by each call's plan
while neither has changed (`Planner.max_free_share`): it must be the free shares' max after every allocation,
release, closing and reopening, and a plan's own once it takes or gives back GPUs, or outlives a change of the view.
"""

from __future__ import annotations

import random

from conftest import small_cluster, start_run

from policies.placement import Planner
from scheduler.core.contention import ContentionModel
from scheduler.core.model import Job
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.workloads import catalog

SHARES = (0.25, 0.5, 0.75, 1.0)


def test_the_kept_max_is_the_free_shares_max_as_the_cluster_and_plans_change() -> None:
    rng = random.Random(5)
    state = ClusterState(small_cluster(nodes=4, gpus=4), catalog())
    model = ContentionModel(state.cluster)
    started: dict[int, Job] = {}  # every job started (`start_run` numbers them by its size)
    jobs: dict[int, Job] = {}  # those running
    view = ClusterView(state, model, jobs)
    old_plan = Planner(view)
    for _ in range(300):
        action = rng.random()
        if action < 0.5:  # a job on a GPU with room for its share
            share = rng.choice(SHARES)
            room = [g for g in range(state.cluster.num_gpus) if state.free_share[g] >= share - 1e-9
                    and g not in state.closed]
            if room:
                j = start_run(state, model, started, (rng.choice(room),), share)
                jobs[j.id] = j
        elif action < 0.8 and jobs:  # one leaves
            j = jobs.pop(rng.choice(list(jobs)))
            state.release(j.id)
            model.remove(j.id)
        else:  # GPUs closed (a reservation's hold) and reopened
            state.set_closed({g: "held" for g in rng.sample(range(state.cluster.num_gpus), rng.randrange(3))})
        assert view.max_free_share == float(state.free_share.max())
        plan = Planner(view)
        assert plan.max_free_share == float(state.free_share.max())
        if jobs:  # a plan that gave GPUs back reads its own
            plan = Planner(view)
            plan.give_back(jobs[rng.choice(list(jobs))])
            assert plan.max_free_share == float(plan.free_share.max())
        # A plan made before the cluster changed keeps its copy's max, not the cluster's.
        assert old_plan.max_free_share == float(old_plan.free_share.max())
        old_plan = Planner(view) if rng.random() < 0.3 else old_plan
