"""One ask-apply loop (`scheduler.core.runner`): its round limit is the same in the simulator and the controller, a
deliberating policy's questions are answered by its own agent or by whoever drives the loop, and the RL environments,
which drive it one step at a time, make exactly the decisions of the `rl:` policy they train."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import StartingBackend, job

from agents.env import PlacementEnv
from policies import make_policy
from scheduler.core import runner
from scheduler.core.decisions import Decision, Deliberating, Deliberation, Place, Preempt
from scheduler.core.model import Job, Placement
from scheduler.core.runner import RoundLimitError, answered, rounds, settle
from scheduler.core.simulator import SimulationError, Simulator
from scheduler.core.state import ClusterView
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job as JobRow


class Flapper:
    """Starts the first pending job on GPU 0, then preempts it, then starts one again, forever: always acting (while a
    second job keeps the queue from emptying)."""

    name = "flapper"
    oracle = False

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        if view.running:
            return [Preempt(next(iter(view.running)), "flap")]
        return [Place(next(iter(queue)).id, Placement((0,)), "flop")]


class Picker:
    """A deliberating policy: asks its agent which pending job to start (by name) and starts it on the first free
    GPU; its own agent picks the first name it is offered."""

    name = "picker"
    oracle = False

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        return answered(self.deliberate(view, queue, now), self.answer)

    def answer(self, question: list[str]) -> str:
        return question[0]

    def deliberate(self, view: ClusterView, queue: Collection[Job], now: float) -> Deliberation:
        free = [g for g in range(view.cluster.num_gpus) if view.free_share[g] >= 1.0]
        if not free:
            return []
        names = [j.spec.name for j in queue]
        self.asked.append(names)
        name = yield names
        chosen = next(j for j in queue if j.spec.name == name)
        return [Place(chosen.id, Placement((free[0],)), f"picked {name}")]


def test_a_policy_that_never_stops_acting_is_stopped_by_one_limit_in_the_simulator(monkeypatch, tiny_cluster) -> None:
    monkeypatch.setattr(runner, "MAX_ROUNDS", 40)
    sim = Simulator(tiny_cluster, [job("a", 0, 1, 10), job("b", 0, 1, 10)], Flapper(), contention=False)
    with pytest.raises(SimulationError, match=r"^flapper kept acting at t=0 for 40 rounds$"):
        sim.run()


def test_and_in_the_controller_whose_pass_then_changes_nothing(monkeypatch, store: Store, corral_home: Path) -> None:
    monkeypatch.setattr(runner, "MAX_ROUNDS", 40)
    names = ["n0"]
    ctl = Controller(store, StartingBackend(names, 2), build_live_cluster("dgx-a100", [2]), names,
                     lambda name: Flapper(), default_policy="flapper", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    with store.session(write=True) as s:
        user = q.ensure_user(s, "ann")
        ids = [q.submit(s, user, {"name": f"j{i}", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1,
                                  "duration_s": 60.0})[0].id for i in range(2)]
    with pytest.raises(RoundLimitError, match=r"^flapper kept acting at t=\S+ for 40 rounds$"):
        ctl.step()
    with store.session() as s:  # the pass's transaction was rolled back: the jobs are pending, never placed
        rows = [s.get(JobRow, i) for i in ids]
        assert [(r.state, r.attempt) for r in rows if r is not None] == [("pending", 0), ("pending", 0)]


def test_rounds_yields_the_agents_questions_and_settle_lets_the_policy_answer_them(tiny_cluster) -> None:
    specs = [job("a", 0, 1, 10), job("b", 0, 1, 10), job("c", 0, 1, 10)]
    policy = Picker()
    assert isinstance(policy, Deliberating)
    sim = Simulator(tiny_cluster, specs, policy, contention=False)
    sim.advance()
    loop = rounds(policy, sim.view, lambda: sim.pending.values(), sim.now, lambda d, _s: sim.apply(d))
    assert next(loop) == ["a", "b", "c"]  # the driver answers in the agent's place: the last one each time
    assert loop.send("c") == ["a", "b"]
    assert loop.send("b") == ["a"]
    with pytest.raises(StopIteration) as done:
        loop.send("a")
    assert done.value.value == 3  # rounds: the third start empties the queue
    assert [j.spec.name for j in sorted(sim.running.values(), key=lambda j: j.placement.gpus)] == ["c", "b", "a"]

    mine = Simulator(tiny_cluster, specs, Picker(), contention=False)
    mine.advance()
    assert settle(mine.policy, mine.view, lambda: mine.pending.values(), mine.now,
                  lambda d, _s: mine.apply(d)) == 3
    assert [j.spec.name for j in sorted(mine.running.values(), key=lambda j: j.placement.gpus)] == ["a", "b", "c"]


@pytest.mark.slow  # an agent's or a trainer's run: seconds
@pytest.mark.parametrize("teams", [0.0, 1.0], ids=["alone", "in-the-tenancy-frame"])
def test_the_environment_answered_by_rl_default_makes_rl_defaults_decisions(teams: float) -> None:
    """The environment steps the simulator's own loop: answered by the shipped agent, an episode ends with the
    metrics `corral simulate --policy rl:default` gives on the same window (inside the frame too)."""
    agent: Any = make_policy("rl:default")
    env = PlacementEnv(window=120, team_share=teams)
    obs, info = env.reset(seed=4)
    assert env.scenario is not None and (env.frame is not None) == bool(teams)
    while True:
        obs, _, done, truncated, info = env.step(agent.act(obs, env.action_masks()))
        assert not truncated
        if done:
            break
    cluster, jobs = env.scenario.build()
    tenancy = env.scenario.tenancy(cluster)
    alone = Simulator(cluster, jobs, make_policy("rl:default"), teams=tenancy)
    while alone.advance():  # the run without `run()`'s isolated replays (the environment has none)
        alone.schedule()
    expected = alone.metrics()
    assert {k: v for k, v in info["metrics"].items() if k != "truncated"} == pytest.approx(expected, rel=0, abs=0)
    assert expected["jobs_completed"] == 120 and np.isfinite(expected["avg_jct_s"])
