"""Online retraining and calibration from the store's history (`scheduler/live/history.py`, `agents/finetune.py`,
`corral train --from-history`, `corral calibrate`).

The history is written by hand, row by row as the controller writes it (jobs, allocations, events, nodes and GPUs,
the active policy): the end-to-end harness (`tests/test_live.py`) runs a real service whose store is not easily
shared. Pairs of fractional jobs share a GPU; their run times come from a contention model with a *planted*
`mps_interference` (5.0, not the default 8.7), so `corral calibrate` passes only if its refit recovers it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from scheduler.cli.commands import main
from scheduler.core.contention import ContentionModel, ContentionParams
from scheduler.core.model import Placement
from scheduler.live.cluster import build_live_cluster
from scheduler.live.history import MIN_JOBS_CALIBRATE, MIN_JOBS_TRAIN, Segments, read_history
from scheduler.live.store import Store
from scheduler.live.store.models import Allocation, Gpu, Job, JobEvent, Node, PolicyVersion, User

PRESET = "dgx-a100"
GPUS_BY_NODE = [8, 8]
PLANTED = ContentionParams(mps_interference=5.0, ring_straggler=0.0324, mps_overhead=0.0)
PAIRS = [  # (model A, model B): tenants of one GPU at half a share each, different SM / bandwidth mixes
    ("ResNet-50-bs64", "Transformer-bs64"), ("GraphSage", "ResNet-18-bs64"), ("DLRM", "LM-bs20"),
    ("ResNet-50-bs32", "A3C"), ("CycleGAN", "Recommendation-bs1024"), ("ResNet-18-bs256", "LM-bs80"),
    ("Transformer-bs128", "MobileNetV3"), ("ResNet-50-bs16", "ResNet-18-bs32"), ("LM-bs5", "DLRM"),
    ("ResNet-50-bs64", "GraphSage"),
]
SOLOS = [("ResNet-50-bs64", 1, 300.0), ("FSDP", 8, 900.0), ("Transformer-XL", 16, 1200.0), ("MoE", 4, 600.0),
         ("LM-bs40", 2, 450.0), ("MobileNetV3", 1, 200.0)]


class Writer:
    """Writes finished jobs the way the controller records them."""

    def __init__(self, store: Store, active: str = "rl:default") -> None:
        self.store = store
        self.cluster = build_live_cluster(PRESET, GPUS_BY_NODE)
        self.t0 = 1_700_000_000.0
        with store.session() as s:
            self.user = User(name="alice", created_at=self.t0)
            s.add(self.user)
            s.add(PolicyVersion(name=active, active=True, created_at=self.t0, activated_at=self.t0))
            for i, gpus in enumerate(GPUS_BY_NODE):
                node = Node(name=f"node-{i}", index=i, preset=PRESET, updated_at=self.t0)
                s.add(node)
                s.flush()
                first = int(self.cluster.node_first_gpu[i])
                for local in range(gpus):
                    g = first + local
                    s.add(Gpu(node_id=node.id, index=g, local_index=local, gpu_type="A100-40GB",
                              mem_gb=float(self.cluster.gpu_mem[g])))

    def job(self, *, model: str, num_gpus: float, duration: float, submitted: float, start: float, end: float,
            gpus: list[int], share: float, predicted_avg: float, observed_noise: float = 1.0,
            kind: str = "emulated") -> None:
        run_s = (end - start) * observed_noise
        with self.store.session() as s:
            row = Job(user_id=self.user.id, name=f"{model}-{submitted:.0f}", kind=kind, model=model,
                      num_gpus=num_gpus, duration_s=duration, env={}, state="succeeded", submitted_at=submitted,
                      queued_since=submitted, first_started_at=start, finished_at=end, attempt=1,
                      progress=1.0, run_s=run_s, predicted_slowdown=predicted_avg,
                      predicted_slowdown_avg=predicted_avg, observed_slowdown=run_s / duration,
                      entrypoint="python train.py" if kind == "command" else None)
            s.add(row)
            s.flush()
            for _rank, g in enumerate(gpus):
                node = int(self.cluster.gpu_node[g])
                s.add(Allocation(job_id=row.id, attempt=1, rank=node, node=f"node-{node}", gpu=g,
                                 local_gpu=g - int(self.cluster.node_first_gpu[node]), share=share,
                                 allocated_at=start - 0.2, released_at=end))
            for kind_, at, data in (("submitted", submitted, {}), ("placed", start - 0.2, {"attempt": 1}),
                                    ("started", start, {"attempt": 1}), ("succeeded", end, {"attempt": 1})):
                s.add(JobEvent(job_id=row.id, at=at, kind=kind_, message="", data=data))


def pair_slowdowns(cluster, a: str, b: str, gpu: int, params: ContentionParams) -> tuple[float, float]:
    from scheduler.core.model import JobSpec

    model = ContentionModel(cluster, params=params)
    model.add(1, JobSpec("a", 0.0, 0.5, 1.0, a), Placement((gpu,), 0.5))
    model.add(2, JobSpec("b", 0.0, 0.5, 1.0, b), Placement((gpu,), 0.5))
    return model.slowdown(1), model.slowdown(2)


def write_history(store: Store, pairs: int = len(PAIRS), solos: int = len(SOLOS), noise: float = 0.01,
                  active: str = "rl:default") -> Writer:
    """Pairs sharing a GPU (run times from PLANTED), then jobs alone; the recorded predictions use the defaults."""
    w = Writer(store, active)
    rng = np.random.default_rng(7)
    t = w.t0 + 10.0
    for k, (a, b) in enumerate(PAIRS[:pairs]):
        gpu = k % 8
        da, db = 600.0 + 60 * k, 900.0 - 30 * k
        sa, sb = pair_slowdowns(w.cluster, a, b, gpu, PLANTED)
        pa, pb = pair_slowdowns(w.cluster, a, b, gpu, ContentionParams())  # what the controller predicted
        start = t + 5.0
        if da * sa <= db * sb:  # a finishes first, b then runs alone at full speed
            ea = start + da * sa
            eb = ea + (db - (ea - start) / sb)
        else:
            eb = start + db * sb
            ea = eb + (da - (eb - start) / sa)
        together = min(ea, eb) - start
        for model, d, s_end, p in ((a, da, ea, pa), (b, db, eb, pb)):
            pred_avg = (p * together + (s_end - start - together)) / (s_end - start)
            w.job(model=model, num_gpus=0.5, duration=d, submitted=t, start=start, end=s_end, gpus=[gpu], share=0.5,
                  predicted_avg=pred_avg, observed_noise=float(1 + rng.normal(0, noise)))
        t = max(ea, eb) + 30.0
    for model, n, d in SOLOS[:solos]:
        start = t + 3.0
        gpus = list(range(n))
        w.job(model=model, num_gpus=n, duration=d, submitted=t, start=start, end=start + d * 1.002, gpus=gpus,
              share=1.0, predicted_avg=1.0, observed_noise=float(1 + rng.normal(0, noise)), kind="command")
        t = start + d + 20.0
    return w


@pytest.fixture
def history_db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    store = Store.open(url)
    write_history(store)
    store.close()
    return url


# ---- reading the store ----------------------------------------------------------------------------------------------


def test_history_reads_on_sqlite_and_postgresql(store: Store) -> None:
    write_history(store)
    h = read_history(store)
    n = 2 * len(PAIRS) + len(SOLOS)
    assert len(h.trace.jobs) == n and h.finished == n and len(h.records) == n
    assert h.preset == PRESET and h.gpus_by_node == GPUS_BY_NODE and h.cluster is not None
    assert h.active_policy == "rl:default"
    assert h.trace.jobs[0].submit_s == 0.0
    assert [j.submit_s for j in h.trace.jobs] == sorted(j.submit_s for j in h.trace.jobs)
    # emulated jobs keep their submitted duration; command jobs get run time / predicted slowdown
    first = h.trace.jobs[0]
    assert first.num_gpus == 0.5 and first.duration_s == 600.0 and first.model == PAIRS[0][0]
    cmd = h.trace.jobs[-1]
    rec = next(r for r in h.records if r.job_id == h.records[-1].job_id)
    assert cmd.duration_s == pytest.approx(rec.run_s / rec.predicted_slowdown_avg)
    # co-tenants are derived from the allocations: each pair shares its GPU, solos share nothing
    pair = h.records[:2]
    assert pair[0].co_tenants == (pair[1].job_id,) and pair[1].co_tenants == (pair[0].job_id,)
    assert pair[0].gpus == (0,) and pair[0].share == 0.5
    assert all(r.co_tenants == () for r in h.records[2 * len(PAIRS):])
    assert h.span_s > 0 and "password" not in h.url


def test_database_urls_lose_their_password() -> None:
    from scheduler.live.history import redact

    assert redact("postgresql+psycopg://corral:s3cret@db.example/corral") == "postgresql+psycopg://corral:***@db.example/corral"


def test_recomputed_predictions_reproduce_the_planted_slowdowns(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    write_history(store, noise=0.0)
    h = read_history(store)
    store.close()
    pred = Segments(h).predict(PLANTED)
    obs = np.array([r.observed_slowdown for r in h.records])
    assert np.allclose(pred[: 2 * len(PAIRS)], obs[: 2 * len(PAIRS)], rtol=1e-6)
    assert max(obs[: 2 * len(PAIRS)]) > 1.3  # the pairs do contend


# ---- corral calibrate -----------------------------------------------------------------------------------------------


def test_calibrate_prints_the_table_and_recovers_the_planted_interference(history_db: str, tmp_path: Path) -> None:
    out, plot, params = tmp_path / "cal.json", tmp_path / "cal.png", tmp_path / "params.json"
    result = CliRunner().invoke(main, ["calibrate", "--db", history_db, "--json", str(out), "--plot", str(plot),
                                       "--write", str(params)])
    assert result.exit_code == 0, result.output
    for text in ("mean abs error", "correlation", "mps_interference", "ring_straggler", "mps_overhead",
                 "ResNet-50-bs64", "emulated jobs (20 here) run at the rate", "carry the real signal", "no signal"):
        assert text in " ".join(result.output.split()), text
    report = json.loads(out.read_text())
    fit = report["fit"]
    assert fit["old"]["mps_interference"] == 8.7
    assert fit["new"]["mps_interference"] == pytest.approx(PLANTED.mps_interference, rel=0.15)
    assert fit["rmse_log_after"] < fit["rmse_log_before"] / 2
    assert "ring_straggler" in fit["fixed"]  # no job spanned more than two servers: nothing to learn about it
    written = json.loads(params.read_text())
    assert written["mps_interference"] == fit["new"]["mps_interference"]
    assert ContentionParams(**{k: written[k] for k in ("mps_interference", "ring_straggler", "mps_overhead")})
    assert plot.stat().st_size > 10_000
    assert len(report["jobs"]) == 2 * len(PAIRS) + len(SOLOS)
    assert report["summary"]["by_model"]["ResNet-50-bs64"]["count"] == 3


def test_too_few_jobs_are_refused_with_the_count(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'few.db'}"
    store = Store.open(url)
    write_history(store, pairs=1, solos=1)
    store.close()
    result = CliRunner().invoke(main, ["calibrate", "--db", url])
    assert result.exit_code == 1
    assert "holds 3 succeeded jobs" in result.output and f"at least {MIN_JOBS_CALIBRATE}" in result.output
    result = CliRunner().invoke(main, ["train", "--from-history", "--db", url, "--out", str(tmp_path / "a.zip")])
    assert result.exit_code == 1
    assert "holds 3 finished" in result.output and f"at least {MIN_JOBS_TRAIN}" in result.output
    assert not (tmp_path / "a.zip").exists()


def test_from_history_refuses_flags_it_ignores(history_db: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["train", "--from-history", "--db", history_db, "--cluster", "pcie-t4"])
    assert result.exit_code == 2 and "--cluster" in result.output
    result = CliRunner().invoke(main, ["train", "--db", history_db])
    assert result.exit_code == 2 and "--db: only with --from-history" in result.output


# ---- corral train --from-history ------------------------------------------------------------------------------------


@pytest.mark.slow  # an agent's or a trainer's run: seconds
def test_train_from_history_fine_tunes_the_active_agent(history_db: str, tmp_path: Path) -> None:
    from policies import make_policy
    from scheduler.core.simulator import Simulator

    out = tmp_path / "hist.zip"
    result = CliRunner().invoke(main, [
        "train", "--from-history", "--db", history_db, "--out", str(out), "--timesteps", "512", "--n-envs", "1",
        "--window", "10", "--eval-window", "10", "--eval-scenarios", "1", "--eval-freq", "512", "--no-progress",
    ])
    assert result.exit_code == 0, result.output
    assert "warm start: the active agent rl:default" in result.output
    meta = json.loads(out.with_suffix(".json").read_text())
    hist = meta["trained_from_history"]
    assert hist["jobs"] == 2 * len(PAIRS) + len(SOLOS) and hist["span_s"] > 0
    assert hist["db"].startswith("sqlite:///") and hist["cluster"] == {"preset": PRESET, "gpus_by_node": GPUS_BY_NODE,
                                                                  "presets_by_node": [PRESET] * len(GPUS_BY_NODE)}
    assert meta["warm_start"]["from"] == "rl:default"
    # The end says which weights were kept, and whether they are the starting point (the active agent's weights).
    kept = meta["kept"]
    assert f"kept {kept['description']}" in result.output and kept["checkpoint"] == "best"
    assert kept["warm_start"] == (kept["timesteps"] == 0)
    assert not kept["warm_start"] or "weights of the active agent (rl:default)" in kept["description"]
    # PPO runs whole rollouts (n_steps 1024 x 1 env): the run and the sidecar say 1,024 timesteps ran, not 512.
    assert meta["timesteps"] == 1024 and meta["timesteps_asked"] == 512
    assert "--timesteps 512 runs 1,024" in result.output
    for suffix in (".eval.json", ".curve.png", ".history.csv"):
        assert Path(f"{out.with_suffix('')}{suffix}").is_file(), suffix
    report = json.loads(Path(f"{out.with_suffix('')}.eval.json").read_text())
    assert "rl:default" in report["baselines"]  # the deployed policy is compared on the same held-out windows
    # the agent loads and acts
    policy = make_policy(f"rl:{out}")
    h_trace = Path(f"{out.with_suffix('')}.history.csv")
    from scheduler.core.traces import load_trace

    jobs = load_trace(str(h_trace)).jobs
    res = Simulator(build_live_cluster(PRESET, GPUS_BY_NODE), jobs, policy).run()
    assert res.metrics["jobs_completed"] == len(jobs)
    assert math.isfinite(res.metrics["avg_jct_s"])


@pytest.mark.slow  # an agent's or a trainer's run: seconds
def test_a_heuristic_active_policy_is_cloned_before_fine_tuning(tmp_path: Path) -> None:
    from agents.finetune import train_from_history

    url = f"sqlite:///{tmp_path / 'h.db'}"
    store = Store.open(url)
    write_history(store, active="tiresias")
    store.close()
    logs: list[str] = []
    meta = train_from_history(url, tmp_path / "h.zip", progress=False, log=logs.append, timesteps=512, n_envs=1,
                              window=10, eval_window=10, eval_scenarios=1, warm_start_samples=200)
    # The active heuristic teaches itself: the frame represents every choice it makes.
    assert meta["warm_start"]["method"] == "behaviour cloning of tiresias"
    assert meta["warm_start"]["from"] == "tiresias"
    assert meta["warm_start"]["teacher_exact"] == 1.0
    assert not any("has no imitation teacher" in line for line in logs)
