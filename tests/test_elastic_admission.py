"""Admission of elastic jobs (issue 49; `scheduler.core.admission.elastic_admission`): an elastic job is admitted
when any size it accepts can run on the cluster, and one whose submitted size cannot is submitted at the largest size
that can (`scheduler.core.elastic.brought_down`: the same work, in that size's seconds), so that every policy, those
that start a job at its submitted size included, runs it. The simulator on arrival, start estimates, what-if and
`POST /jobs` take the same decision; a job whose smallest size cannot run is refused naming the field, and a rigid
job larger than the cluster is refused as before."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import StartingBackend, small_cluster
from sqlalchemy import delete, select
from test_api import EMULATED, Env, field_errors, make_env
from test_whatif import Env as WhatIfEnv

from policies import make_policy
from scheduler.core.admission import ADMITTED_FIELDS, Fit, Refusal, admitted_spec, elastic_admission, spec_admission
from scheduler.core.constraints import Constraints
from scheduler.core.contention import ContentionModel
from scheduler.core.elastic import brought_down, speedup
from scheduler.core.estimates import Bounds, Outlook, estimate
from scheduler.core.model import JobPhase, JobSpec, Placement, parse_cluster
from scheduler.core.reasons import Code
from scheduler.core.replay import Present, Waiting
from scheduler.core.simulator import Placed, Simulator
from scheduler.core.workloads import catalog
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.rows import admission_of
from scheduler.live.store import Store
from scheduler.live.store.models import Allocation, Gpu, Node
from scheduler.live.store.models import Job as JobRow

MODEL = "ResNet-50-bs64"
CLUSTER = small_cluster(nodes=2, gpus=4)  # 8 GPUs


def spec(gpus: int, lo: int | None = None, hi: int | None = None, sizes: tuple[int, ...] = (), seconds: float = 600.0,
         name: str = "wide", **more: object) -> JobSpec:
    return JobSpec(name=name, submit_s=0.0, num_gpus=float(gpus), duration_s=seconds, model=MODEL, min_gpus=lo,
                   max_gpus=hi, sizes=sizes, **more)  # type: ignore[arg-type]


def verdict(s: JobSpec) -> Refusal | Fit | None:
    return spec_admission(CLUSTER, s, catalog())


# ---- the rule ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("job", "size"), [
    (spec(16, 2, 16), 8),  # any size from 2 to 16: the whole cluster
    (spec(16, 2, 16, sizes=(2, 4, 16)), 4),  # only the sizes it lists
    (spec(12, 1, 12, sizes=(1, 3, 6, 7, 12)), 7),
    (spec(16, 2, 16, constraints=Constraints(nodes=("node0",))), 4),  # the GPUs its constraints allow
])
def test_an_elastic_job_larger_than_the_cluster_is_admitted_at_the_largest_size_that_fits(job: JobSpec,
                                                                                         size: int) -> None:
    fit = verdict(job)
    assert isinstance(fit, Fit) and (fit.num_gpus, fit.size) == (job.workers, size)
    assert fit.refusal.field.startswith(("num_gpus", "constraints"))
    assert fit.reason.code is Code.SIZED_DOWN and f"brought down from {job.workers} to {size} GPUs" in fit.reason.text


def test_the_largest_size_is_the_largest_the_caller_s_rule_admits_at_every_capacity() -> None:
    job = spec(64, 1, 64, sizes=(1, 2, 3, 5, 8, 13, 21, 34, 55, 64))
    for capacity in range(1, 64):
        asked: list[float] = []

        def at(k: float, capacity: int = capacity, asked: list[float] = asked) -> Refusal | None:
            asked.append(k)
            return None if k <= capacity else Refusal("num_gpus", f"needs {k:g} GPUs, the cluster has {capacity}",
                                                      "gang")
        fit = elastic_admission(job, at)
        assert isinstance(fit, Fit) and fit.size == max(s for s in job.sizes if s <= capacity), capacity
        assert len(asked) <= 6  # by bisection, not size by size


def test_a_job_whose_smallest_size_cannot_fit_is_refused_naming_that_size_and_the_cluster() -> None:
    refusal = verdict(spec(16, 12, 16))
    assert isinstance(refusal, Refusal) and refusal.field == "min_gpus"
    assert refusal.why == ("the smallest size it accepts, 12 GPUs, can never run here: needs 12 GPUs, the cluster "
                           "has 8")
    listed = verdict(spec(16, 2, 16, sizes=(12, 16)))  # its smallest size is its sizes' first
    assert isinstance(listed, Refusal) and listed.field == "sizes" and "12 GPUs" in listed.why
    least = verdict(spec(12, 12, 16))  # submitted at its smallest: the submitted size's own refusal
    assert isinstance(least, Refusal) and (least.field, least.why) == ("num_gpus", "needs 12 GPUs, the cluster has 8")


def test_a_refusal_no_size_escapes_is_the_submitted_size_s() -> None:
    big = max(catalog().values(), key=lambda m: m.mem_gb)
    tiny = small_cluster(nodes=2, gpus=4, gpu="T4")
    assert big.mem_gb > 16
    refusal = spec_admission(tiny, replace(spec(16, 1, 16), model=big.name), catalog())
    assert isinstance(refusal, Refusal) and refusal.field == "model" and "per GPU" in refusal.why
    unknown = verdict(spec(16, 1, 16, constraints=Constraints(nodes=("nowhere",))))
    assert isinstance(unknown, Refusal) and unknown.field == "constraints.nodes" and "nowhere" in unknown.why


def test_rigid_jobs_and_jobs_that_fit_are_decided_as_before() -> None:
    rigid = verdict(spec(16))
    assert isinstance(rigid, Refusal) and (rigid.field, rigid.why) == ("num_gpus", "needs 16 GPUs, the cluster has 8")
    assert verdict(spec(4, 2, 16)) is None  # its submitted size fits: it is not touched
    assert verdict(spec(8, 8, 8)) is None


def test_brought_down_keeps_the_work_in_the_new_size_s_seconds() -> None:
    model = ContentionModel(CLUSTER, catalog())
    wide = spec(16, 2, 16, seconds=600.0)
    at8 = brought_down(model, wide, 8)
    assert (at8.num_gpus, at8.min_gpus, at8.max_gpus, at8.sizes) == (8.0, 2, 16, ())
    assert at8.duration_s == pytest.approx(600.0 / speedup(model, wide, 8))
    assert at8.duration_s >= 600.0 * 16 / 8  # half the GPUs: at least twice as long (never superlinear)


# ---- the simulator and start estimates -----------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill", "sjf", "tiresias", "gittins", "topology", "gandiva",
                                    "marginal-gain", "largest:fifo", "rl:default"])
def test_every_policy_runs_it_to_completion_at_a_size_that_fits(policy: str) -> None:
    wide, rigid, small = spec(16, 2, 16, seconds=600.0), spec(16, name="rigid"), spec(2, name="small", seconds=60.0)
    sim = Simulator(CLUSTER, [wide, rigid, small], make_policy(policy))
    result = sim.run()
    by = {j.spec.name: j for j in result.jobs}
    assert by["rigid"].state is JobPhase.REJECTED and by["rigid"].reject_reason == "needs 16 GPUs, the cluster has 8"
    assert by["wide"].state is JobPhase.DONE and by["small"].state is JobPhase.DONE
    assert by["wide"].spec.num_gpus <= 8 and by["wide"].spec.min_gpus == 2


def test_under_fifo_it_runs_at_the_cluster_s_size_for_its_work_there() -> None:
    wide = spec(16, 2, 16, seconds=600.0)
    sim = Simulator(CLUSTER, [wide], make_policy("fifo"), contention=False)
    (job,) = sim.run().jobs
    at8 = brought_down(sim.contention, wide, 8)
    assert job.state is JobPhase.DONE and job.spec == at8 and job.resizes == 0
    assert job.end_s is not None and job.end_s == pytest.approx(at8.duration_s) and job.end_s >= 1200.0  # 16's work, on 8


def test_a_job_whose_minimum_cannot_fit_is_rejected_on_arrival() -> None:
    (job,) = Simulator(CLUSTER, [spec(16, 12, 16)], make_policy("fifo")).run().jobs
    assert job.state is JobPhase.REJECTED and job.reject_reason.startswith("the smallest size it accepts, 12 GPUs")


def test_a_start_estimate_reads_the_size_it_is_brought_down_to() -> None:
    node = parse_cluster("dgx-a100:1")  # 8 GPUs
    busy = Placed(spec(8, name="busy", seconds=1000.0), Placement(tuple(range(8))), 1000.0)
    present = Present(node, [busy], [Waiting("wide", spec(16, 2, 16)), Waiting("never", spec(16, 12, 16))],
                      contention=False)
    est = estimate(present, make_policy("fifo"), Bounds())
    assert est.by_key["wide"].outlook is Outlook.STARTS and est.by_key["wide"].start_s == pytest.approx(1000.0)
    never = est.by_key["never"]
    assert never.outlook is Outlook.NEVER and never.why is not None and never.why.code is Code.REJECTED
    assert "the smallest size it accepts, 12 GPUs" in never.text


# ---- what-if -------------------------------------------------------------------------------------------------------


@pytest.fixture
def whatif_env(store: Store, corral_home: Path) -> WhatIfEnv:
    e = WhatIfEnv(store)
    e.register_nodes()  # two dgx-a100 nodes: 16 GPUs
    return e


def test_what_if_runs_a_hypothetical_elastic_job_at_the_size_it_is_brought_down_to(whatif_env: WhatIfEnv) -> None:
    wide = {"name": "wide", "model": MODEL, "num_gpus": 32, "duration_s": 600, "min_gpus": 2, "max_gpus": 32}
    out = whatif_env.ok({"seeds": 2, "policy": "fifo", "jobs": [wide]})
    [h] = out["hypothetical"]
    assert h["num_gpus"] == 16 and h["duration_s"] >= 1200 and h["completed_in"] == 2
    assert any(n.startswith("jobs.0 (wide): brought down from 32 to 16 GPUs") for n in out["notes"]), out["notes"]
    bad = whatif_env.post({"jobs": [{**wide, "min_gpus": 24}]})
    assert bad.status_code == 422
    assert "the smallest size it accepts, 24 GPUs" in bad.json["errors"]["json"]["jobs.0.min_gpus"][0], bad.json
    rigid = whatif_env.post({"jobs": [{k: v for k, v in wide.items() if k not in ("min_gpus", "max_gpus")}]})
    assert rigid.status_code == 422 and "jobs.0.num_gpus" in rigid.json["errors"]["json"], rigid.json


# ---- POST /jobs ----------------------------------------------------------------------------------------------------


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    e = make_env(store)
    with store.session() as s:  # as the controller records 3 nodes x 4 GPUs, one of them down (test_api's refusals)
        for n, alive in enumerate([True, True, False]):
            node = Node(name=f"node{n}", index=n, preset="dgx-a100", alive=alive, updated_at=time.time())
            node.gpus = [Gpu(index=4 * n + i, local_index=i, gpu_type="A100-80GB", mem_gb=80.0) for i in range(4)]
            s.add(node)
    return e


def events(store: Store, job_id: int) -> list[tuple[str, str]]:
    with store.session() as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        return [(e.kind, e.message) for e in row.events]


def test_the_api_stores_it_at_the_size_it_is_brought_down_to_and_says_why(env: Env) -> None:
    resp = env.post("/jobs", EMULATED | {"num_gpus": 16, "min_gpus": 2, "max_gpus": 16, "duration_s": 120})
    assert resp.status_code == 201, resp.json
    job = resp.json
    # The recorded nodes' 12 GPUs: the down node's too, as the controller models it (it waits for it to come back).
    assert (job["num_gpus"], job["min_gpus"], job["max_gpus"], job["requested_gpus"]) == (12, 2, 16, 16)
    assert job["duration_s"] >= 160  # its 16 GPUs' work, on 12
    assert env.get(f"/jobs/{job['id']}").json["requested_gpus"] == 16  # kept: GET answers it too
    [(kind, message)] = events(env.store, job["id"])
    assert kind == "submitted" and "brought down from 16 to 12 GPUs" in message
    assert "needs 16 GPUs, the cluster has 12" in message
    # A resubmission submits it as stored: the same work at 12 GPUs, which fits, so nothing is brought down again.
    again = env.post(f"/jobs/{job['id']}/resubmit", {})
    assert again.status_code == 201, again.json
    assert (again.json["num_gpus"], again.json["duration_s"], again.json["requested_gpus"]) == (
        12, job["duration_s"], None)
    assert (again.json["min_gpus"], again.json["max_gpus"]) == (2, 16)
    listed = env.post("/jobs", EMULATED | {"num_gpus": 16, "min_gpus": 2, "max_gpus": 16, "sizes": [2, 6, 16]})
    assert listed.status_code == 201 and listed.json["num_gpus"] == 6
    pinned = env.post("/jobs", EMULATED | {"num_gpus": 8, "min_gpus": 2, "max_gpus": 8,
                                           "constraints": {"nodes": ["node1"]}})
    assert pinned.status_code == 201 and pinned.json["num_gpus"] == 4  # the GPUs its constraints allow
    fits = env.post("/jobs", EMULATED | {"num_gpus": 4, "min_gpus": 2, "max_gpus": 16})
    assert fits.status_code == 201 and fits.json["num_gpus"] == 4 and fits.json["duration_s"] == 120
    assert fits.json["requested_gpus"] is None
    assert "brought down" not in events(env.store, fits.json["id"])[0][1]


def test_the_api_and_the_controller_admit_the_job_they_read_alike(env: Env) -> None:
    """One reading of a job for admission (`admitted_spec`): of the submission's fields in the API, of the stored row
    in the controller's intake. A job stored as submitted is admitted alike by both: the same verdict on one cluster."""
    fields = {"name": "wide", "model": EMULATED["model"], "num_gpus": 4, "duration_s": 300.0, "min_gpus": 2,
              "max_gpus": 16, "sizes": [2, 4, 16], "constraints": {"nodes": ["node0", "node1"]}}
    resp = env.post("/jobs", EMULATED | fields)
    assert resp.status_code == 201, resp.json
    with env.store.session() as s:
        row = s.get(JobRow, resp.json["id"])
        assert row is not None
        stored = {name: getattr(row, name) for name in ADMITTED_FIELDS}
    assert admitted_spec(stored) == admitted_spec(fields)
    cluster = small_cluster(2)  # 8 GPUs on node0, node1: at 16 it fits nowhere, at 4 it does
    row.num_gpus = 16
    verdict = admission_of(row, cluster, catalog())
    assert verdict == spec_admission(cluster, admitted_spec({**fields, "num_gpus": 16}), catalog(), unknown=False)
    assert isinstance(verdict, Fit) and verdict.size == 4


def test_the_api_refuses_one_whose_smallest_size_cannot_fit_and_stores_nothing(env: Env) -> None:
    resp = env.post("/jobs", EMULATED | {"num_gpus": 16, "min_gpus": 14, "max_gpus": 16})
    assert resp.status_code == 422
    assert field_errors(resp) == {"min_gpus": ["the smallest size it accepts, 14 GPUs, can never run here: needs 14 "
                                               "GPUs, the cluster has 12 (3 nodes, 1 of them down)"]}
    assert resp.json["message"].startswith("min_gpus: ")
    listed = env.post("/jobs", EMULATED | {"num_gpus": 16, "min_gpus": 2, "max_gpus": 16, "sizes": [14, 16]})
    assert listed.status_code == 422 and "sizes" in field_errors(listed)
    rigid = env.post("/jobs", EMULATED | {"num_gpus": 16})
    assert rigid.status_code == 422
    assert field_errors(rigid) == {"num_gpus": ["needs 16 GPUs, the cluster has 12 (3 nodes, 1 of them down)"]}
    assert env.job_count() == 0


def test_a_command_job_s_estimated_duration_is_estimated_at_the_size_it_runs_at(store: Store,
                                                                              corral_home: Path) -> None:
    e = make_env(store, CORRAL_COMMAND_JOBS="everyone")
    with store.session() as s:
        node = Node(name="node0", index=0, preset="dgx-a100", alive=True, updated_at=time.time())
        node.gpus = [Gpu(index=i, local_index=i, gpu_type="A100-80GB", mem_gb=80.0) for i in range(4)]
        s.add(node)
    resp = e.post("/jobs", {"name": "train", "kind": "command", "entrypoint": "python train.py", "num_gpus": 8,
                            "min_gpus": 1, "max_gpus": 8})
    assert resp.status_code == 201, resp.json
    assert resp.json["num_gpus"] == 4 and resp.json["duration_s"] == 3600.0  # the default: no work to convert
    assert resp.json["duration_estimate"] is not None


def test_the_controller_starts_it_under_fifo_at_the_size_it_was_stored_at(store: Store, corral_home: Path) -> None:
    names = ["n0", "n1"]
    ctl = Controller(store, StartingBackend(names, 4), build_live_cluster("dgx-a100", [4, 4]), names,
                     lambda name: make_policy("fifo"), default_policy="fifo", tick_s=0.1, preset="dgx-a100")
    ctl._register_nodes(time.time())  # as its start does: the store records the 8 GPUs
    e = make_env(store)
    job = e.post("/jobs", EMULATED | {"num_gpus": 16, "min_gpus": 2, "max_gpus": 16}).json
    assert job["num_gpus"] == 8
    ctl.recover()
    ctl.step()
    with store.session() as s:
        row = s.get(JobRow, job["id"])
        assert row is not None and row.state == "running"
        held = s.scalars(select(Allocation).where(Allocation.job_id == job["id"])).all()
        assert len(held) == 8


def test_the_controller_brings_down_one_the_api_could_not_check(store: Store, corral_home: Path) -> None:
    """With no node recorded yet the API stores a job as submitted (the controller decides): the controller's intake
    takes the same decision on its model, storing an elastic job at the size it brings it down to."""
    names = ["n0", "n1"]
    ctl = Controller(store, StartingBackend(names, 4), build_live_cluster("dgx-a100", [4, 4]), names,
                     lambda name: make_policy("fifo"), default_policy="fifo", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    with store.session() as s:  # what the API reads: no node recorded (the controller registers them again below)
        s.execute(delete(Gpu))
        s.execute(delete(Node))
    e = make_env(store)
    wide = e.post("/jobs", EMULATED | {"num_gpus": 16, "min_gpus": 2, "max_gpus": 16, "duration_s": 120}).json
    never = e.post("/jobs", EMULATED | {"num_gpus": 16, "min_gpus": 12, "max_gpus": 16}).json
    rigid = e.post("/jobs", EMULATED | {"num_gpus": 16}).json
    assert (wide["num_gpus"], never["num_gpus"], rigid["num_gpus"]) == (16, 16, 16)
    ctl._register_nodes(time.time())
    ctl.step()
    with store.session() as s:
        row = s.get(JobRow, wide["id"])
        assert row is not None and row.state == "running" and row.num_gpus == 8 and row.duration_s >= 240
        assert row.requested_gpus == 16
        [event] = [ev for ev in row.events if ev.kind == "sized_down"]
        assert event.data["from"] == 16 and event.data["to"] == 8 and "brought down from 16 to 8" in event.message
        assert len(s.scalars(select(Allocation).where(Allocation.job_id == wide["id"])).all()) == 8
        refused = s.get(JobRow, never["id"])
        assert refused is not None and refused.state == "failed"
        assert refused.error is not None and "the smallest size it accepts, 12 GPUs" in refused.error
        too_big = s.get(JobRow, rigid["id"])
        assert too_big is not None and too_big.state == "failed" and too_big.error == "needs 16 GPUs, the cluster has 8"
