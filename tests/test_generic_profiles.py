"""Jobs that name no model (issue 51 item 6): a generic profile, stated as such, refined from what NVML measured of the
job's own runs and of jobs alike. NVML is a stand-in here (CI has no GPU); the processes it reports are real, so the
sampler's rule (only the job's process group counts) is checked against the OS, not against the stand-in."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import InMemoryBackend, wait_until

from policies import make_policy
from scheduler.cli.job_commands import model_text
from scheduler.core.generic import (
    GENERIC_MODEL,
    MIN_UTIL_SAMPLES,
    MeasuredUsage,
    ProfileBook,
    generic_profile,
    known_profiles,
    merged,
    refined_profile,
)
from scheduler.core.model import JobKind, JobSpec, parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.workloads import catalog
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.node import usage as usage_mod
from scheduler.live.node.nvml import Nvml
from scheduler.live.node.usage import UsageSampler
from scheduler.live.rows import job_spec
from scheduler.live.runs import JobStatus, Launch, RankSpec
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job
from scheduler.live.worker import Worker
from tests.test_api import make_env
from tests.test_node_agent import fake_pynvml

MIB = 1024 * 1024

# ---- the core: the generic profile and its refinement ---------------------------------------------------------------


def test_the_generic_profile_is_a_typical_training_job_of_the_catalog() -> None:
    gen = generic_profile()
    train = [p for p in catalog().values() if p.kind is JobKind.TRAINING]
    assert gen.kind is JobKind.TRAINING and gen.name == GENERIC_MODEL and "no model named" in gen.source
    for field in ("compute_ms", "sm", "membw", "grad_mb", "overlap"):  # typical: at most half above, half below
        above = sum(getattr(p, field) > getattr(gen, field) for p in train)
        below = sum(getattr(p, field) < getattr(gen, field) for p in train)
        assert max(above, below) <= len(train) / 2, field
    assert gen.mem_gb >= statistics.median(p.mem_gb for p in train)  # memory errs high: a share that fits
    assert known_profiles()[GENERIC_MODEL] == gen and set(catalog()) < set(known_profiles())
    assert GENERIC_MODEL not in catalog()  # traces and the catalog's listing never draw it as a model


def test_refinement_takes_the_measured_figures_and_keeps_the_unmeasurable_ones() -> None:
    gen = generic_profile()
    assert refined_profile(None) == gen
    used = MeasuredUsage(samples=12, util_samples=10, sm=0.62, membw=0.31, mem_gb=11.2, runs=2)
    got = refined_profile(used, "2 earlier jobs")
    assert (got.sm, got.membw) == (0.62, 0.31) and 11.2 < got.mem_gb <= 11.2 * 1.25
    assert (got.compute_ms, got.grad_mb, got.overlap) == (gen.compute_ms, gen.grad_mb, gen.overlap)
    assert got.name.startswith(GENERIC_MODEL + "~") and "2 earlier jobs" in got.source and "12 NVML" in got.source
    # Too few utilisation samples (a run on a share: NVML gives none for an MPS client): memory only.
    shared = refined_profile(MeasuredUsage(samples=4, util_samples=MIN_UTIL_SAMPLES - 1, sm=0.9, membw=0.9,
                                           mem_gb=3.0, runs=1))
    assert (shared.sm, shared.membw) == (gen.sm, gen.membw) and shared.mem_gb != gen.mem_gb
    # Jobs measured alike share a profile: the name states the rounded figures.
    assert refined_profile(MeasuredUsage(12, 10, 0.621, 0.309, 11.21, 1)).name == got.name


def test_measurements_merge_by_their_samples_and_a_malformed_one_is_ignored() -> None:
    a, b = MeasuredUsage(10, 10, 0.8, 0.2, 4.0, 1), MeasuredUsage(30, 30, 0.4, 0.6, 9.0, 2)
    m = merged([a, None, b])
    assert m is not None and (m.samples, m.runs, m.mem_gb) == (40, 3, 9.0)
    assert m.sm == pytest.approx(0.5) and m.membw == pytest.approx(0.5)
    assert merged([None]) is None
    assert MeasuredUsage.from_dict(a.as_dict()) == a
    for bad in ({"samples": 1}, a.as_dict() | {"sm": 3.0}, a.as_dict() | {"util_samples": 99},
                a.as_dict() | {"mem_gb": "x"}, None, {}):
        assert MeasuredUsage.from_dict(bad) is None, bad


def test_the_simulator_runs_jobs_that_name_no_model() -> None:
    jobs = [JobSpec(name=f"j{i}", submit_s=float(i), num_gpus=2, duration_s=100.0, model=GENERIC_MODEL)
            for i in range(4)]
    result = Simulator(parse_cluster("dgx-a100:1"), jobs, make_policy("fifo")).run()
    assert len(result.jct()) == 4 and min(result.jct()) >= 100.0  # all ran, none faster than alone


# ---- the node: what NVML attributes to the job's process group ------------------------------------------------------


def nvml_with_processes(pids: list[int], mib: float = 3072.0, sm: float = 55.0, mem: float = 25.0) -> Any:
    """The stand-in pynvml, whose GPU 0 lists `pids` (a callable may give them: `pids()`), each holding `mib` and
    busy at `sm` / `mem` percent, with a new utilisation sample at each call."""
    nv = fake_pynvml([("NVIDIA H100 80GB HBM3", 81559)])
    clock = [0]

    def listed() -> list[int]:
        return pids() if callable(pids) else pids

    def procs(h: SimpleNamespace) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=int(mib * MIB)) for p in listed()] if h.index == 0 else []

    def util(h: SimpleNamespace, since: int) -> list[SimpleNamespace]:
        clock[0] += 1000
        if h.index != 0:
            raise nv.NVMLError("Not Found")
        return [SimpleNamespace(pid=p, timeStamp=clock[0], smUtil=sm, memUtil=mem) for p in listed()]

    nv.nvmlDeviceGetComputeRunningProcesses = procs
    nv.nvmlDeviceGetProcessUtilization = util
    return nv


def test_the_sampler_counts_only_the_jobs_process_group() -> None:
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        other = os.getpid()  # another job's process on the same GPU: a different process group
        sampler = UsageSampler(Nvml(nvml_with_processes([job.pid, other]), xid_events=False), [0], job.pid)
        for _ in range(4):
            sampler.sample()
        got = sampler.usage()
        assert got is not None and (got.samples, got.util_samples) == (4, 4)
        assert got.mem_gb == pytest.approx(3.0) and got.sm == pytest.approx(0.55) and got.membw == pytest.approx(0.25)
        nobody = UsageSampler(Nvml(nvml_with_processes([other]), xid_events=False), [0], job.pid)
        nobody.sample()
        assert nobody.usage() is None  # nothing of the job's on its GPUs: no sample
    finally:
        job.kill()
        job.wait()


def test_a_command_rank_reports_what_nvml_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def group_members() -> list[int]:  # every process NVML could list; the sampler keeps the job's group
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]

    monkeypatch.setattr(usage_mod, "NVML_MODULE", nvml_with_processes(group_members, mib=1024.0, sm=30.0))
    monkeypatch.setattr(usage_mod, "SAMPLE_S", 0.05)
    launch = Launch(job_id=7, attempt=1, kind="command", ranks=(RankSpec(0, "n0", (0,), 1.0, 80.0),), work_s=10.0,
                    rate=1.0, log_dir=str(tmp_path / "logs"), checkpoint_dir=str(tmp_path / "ckpt"),
                    entrypoint=f"exec {sys.executable} -c 'import time; time.sleep(0.6)'")  # one process
    w = Worker(launch, 0)
    w.start({"CUDA_VISIBLE_DEVICES": "0"})
    wait_until("the command exits", lambda: w.status()["phase"] == "exited", timeout=30)
    st = w.status()
    assert st["exit_code"] == 0, st
    got = MeasuredUsage.from_dict(st["usage"])
    assert got is not None and got.samples >= MIN_UTIL_SAMPLES and got.runs == 1
    assert got.mem_gb == pytest.approx(1.0) and got.sm == pytest.approx(0.30)  # its one process, no other


# ---- the service: measured runs stored, jobs alike refined, the profile said ----------------------------------------

NAMES, GPUS = ["n0", "n1"], 4


class MeasuredBackend(InMemoryBackend):
    """Each run ends at the next poll, having been measured as `usage` says."""

    def __init__(self, usage: MeasuredUsage) -> None:
        super().__init__(NAMES, GPUS)
        self.usage = usage

    def poll(self) -> list[JobStatus]:
        return [JobStatus(job_id=j, attempt=launch.attempt, phase="succeeded", started_at=[1.0] * len(launch.ranks),
                          ended_at=[2.0] * len(launch.ranks), exit_codes=[0] * len(launch.ranks), done_s=0.0,
                          usage=self.usage.as_dict())
                for j, launch in list(self.launches.items())]


def test_a_measured_run_refines_the_profile_of_the_next_job_alike(store: Store, corral_home: Path) -> None:
    env = make_env(store, CORRAL_COMMAND_JOBS="everyone")
    measured = MeasuredUsage(samples=20, util_samples=20, sm=0.7, membw=0.4, mem_gb=20.0, runs=1)
    ctl = Controller(store, MeasuredBackend(measured), build_live_cluster("dgx-a100", [GPUS] * len(NAMES)), NAMES,
                     make_policy, default_policy="fifo", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    body = {"name": "my-script", "kind": "command", "num_gpus": 1, "entrypoint": "python train.py"}
    first = env.post("/jobs", body).json
    assert first["model"] == GENERIC_MODEL and first["profile_usage"] is None  # nothing measured yet
    explained = env.get(f"/jobs/{first['id']}/explain").json
    assert explained["profile"]["refined"] is False and "no model named" in explained["summary"]
    deadline = time.monotonic() + 30
    while env.get(f"/jobs/{first['id']}").json["state"] != "succeeded" and time.monotonic() < deadline:
        ctl.step()
    done = env.get(f"/jobs/{first['id']}").json
    assert done["state"] == "succeeded" and MeasuredUsage.from_dict(done["measured_usage"]) == measured

    alike = env.post("/jobs", body).json
    other_name = env.post("/jobs", body | {"name": "another-script"}).json
    assert other_name["profile_usage"] is None  # alike means the same user and name
    assert alike["profile_usage"]["jobs"] == [first["id"]]
    assert MeasuredUsage.from_dict(alike["profile_usage"]["usage"]) == measured
    bob = env.post("/jobs", body, "bob").json  # another user's job of that name learns nothing from alice's
    assert bob["profile_usage"] is None
    profile = env.get(f"/jobs/{alike['id']}/explain").json["profile"]
    assert profile["refined"] is True and profile["name"] != GENERIC_MODEL and "sm 0.7" in profile["source"]

    book = ProfileBook(known_profiles())
    with store.session() as s:
        row = s.get(Job, alike["id"])
        assert row is not None
        spec = job_spec(row, book)  # what the controller schedules it with
        assert spec.model == profile["name"] and book[spec.model].sm == 0.7 and book[spec.model].mem_gb > 20.0
        plain = s.get(Job, other_name["id"])
        assert plain is not None and job_spec(plain, book).model == GENERIC_MODEL


def test_emulated_jobs_still_name_a_model_and_arrays_of_generic_jobs_are_refined(store: Store,
                                                                                 corral_home: Path) -> None:
    env = make_env(store, CORRAL_COMMAND_JOBS="everyone")
    with store.session() as s:
        alice = q.ensure_user(s, "alice")
        earlier, _ = q.submit(s, alice, {"name": "sweep", "kind": "command", "model": GENERIC_MODEL, "num_gpus": 1,
                                         "duration_s": 60.0, "entrypoint": "true"})
        earlier.measured_usage = MeasuredUsage(5, 5, 0.3, 0.2, 6.0, 1).as_dict()
    got = env.post("/jobs", {"name": "sweep", "kind": "command", "num_gpus": 1, "entrypoint": "true",
                             "array": {"count": 3}})
    assert got.status_code == 201, got.json
    tasks = [env.get(f"/jobs/{t['id']}").json for t in got.json["array"]["tasks"]]
    assert len(tasks) == 3 and all(t["profile_usage"]["jobs"] == [earlier.id] for t in tasks)


def test_corral_show_says_what_refined_a_jobs_profile() -> None:
    from corral.models import JobDetail

    job = {"id": 5, "model": GENERIC_MODEL, "profile_usage": None, "measured_usage": None}
    assert model_text(JobDetail.from_json(job)) == GENERIC_MODEL
    alike = {"usage": MeasuredUsage(9, 9, 0.5, 0.5, 4.0, 3).as_dict(), "jobs": [1, 2, 3], "whose": "3 jobs"}
    own = MeasuredUsage(2, 2, 0.5, 0.5, 4.0, 1).as_dict()
    refined = JobDetail.from_json(job | {"profile_usage": alike, "measured_usage": own})
    assert "refined from 4 measured runs" in model_text(refined)
    assert model_text(JobDetail(id=6, model="BERT-large")) == "BERT-large"



def test_jobs_alike_are_found_past_thousands_of_other_jobs_of_the_user(store: Store) -> None:
    """The lookup walks the (user, name) index: a measured job stays found behind more of the user's other jobs than
    the search reads (it read the user's latest `SCANNED_JOBS` jobs of any name, and missed it), and a name with no
    measured job finds nothing."""
    from sqlalchemy import insert

    from scheduler.live.generic_profiles import SCANNED_JOBS, alike_usage

    measured = MeasuredUsage(samples=4, util_samples=4, sm=0.6, membw=0.3, mem_gb=9.0, runs=1)
    with store.session(write=True) as s:
        alice = q.ensure_user(s, "alice")
        spec = {"kind": "command", "model": GENERIC_MODEL, "num_gpus": 1, "duration_s": 60.0, "entrypoint": "true"}
        first, _ = q.submit(s, alice, spec | {"name": "train"})
        first.measured_usage = measured.as_dict()
        s.flush()
        row = {c: getattr(first, c) for c in ("user_id", "team", "kind", "model", "num_gpus", "duration_s",
                                               "state", "submitted_at", "queued_since")}
        s.execute(insert(Job), [row | {"name": f"other-{i}"} for i in range(SCANNED_JOBS + 100)])
        uid, first_id = alice.id, first.id
    with store.session() as s:
        found = alike_usage(s, uid, "train")
        assert found is not None and found["jobs"] == [first_id]
        assert MeasuredUsage.from_dict(found["usage"]) == measured
        assert alike_usage(s, uid, "other-7") is None
