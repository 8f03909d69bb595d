"""The GPU benchmarks' code paths on the CPU (CI has no GPU): the workloads train, the co-location benchmark measures
and writes what it says, the resize benchmark times each pause of a job moved between MPS shares, and the node check
runs a real PyTorch job through Corral's worker with an MPS lease, a SIGTERM preemption and a resume, against
stand-ins for NVML and the MPS control program. The real runs, on an H200,
are in docs/node-agent.md and scheduler/core/data/hopper_colocation.csv."""

from __future__ import annotations

import csv
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # the benchmarks train and measure real workloads: seconds each

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _load(name: str) -> ModuleType:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"benchmarks.{name}")  # benchmarks/ is a namespace package beside the others


@pytest.fixture(scope="module")
def workloads() -> ModuleType:
    return _load("gpu_workloads")


@pytest.mark.parametrize("name", ["resnet50", "bert-base", "gpt2-small", "vit-b16", "lstm-lm", "dlrm"])
def test_each_training_workload_learns(workloads: ModuleType, name: str) -> None:
    wl = workloads.build(name, "cpu", "tiny", seed=1)
    assert wl.kind == "training" and wl.optimizer is not None and wl.params > 0
    before = [p.detach().clone() for p in wl.model.parameters()]
    first = float(wl.step())
    losses = [float(wl.step()) for _ in range(15)]
    assert all(torch.isfinite(torch.tensor([first, *losses])))
    assert any(not torch.equal(a, b) for a, b in zip(before, wl.model.parameters(), strict=True))
    assert min(losses) < first  # the same synthetic batch, fifteen steps: the loss must fall


@pytest.mark.parametrize("name", ["resnet50-infer", "bert-infer"])
def test_inference_services_do_not_train(workloads: ModuleType, name: str) -> None:
    wl = workloads.build(name, "cpu", "tiny")
    before = [p.detach().clone() for p in wl.model.parameters()]
    assert wl.kind == "inference" and wl.optimizer is None and wl.step() is None
    assert all(torch.equal(a, b) for a, b in zip(before, wl.model.parameters(), strict=True))


def test_an_unknown_workload_is_named(workloads: ModuleType) -> None:
    with pytest.raises(ValueError, match="workload 'mobilenet'"):
        workloads.build("mobilenet", "cpu", "tiny")


def test_llm_profiles_benchmark_trains_and_records_each_model_on_cpu(tmp_path: Path) -> None:
    bench = _load("gpu_llm_profiles")
    out = tmp_path / "llm"
    assert bench.main(["--out", str(out), "--device", "cpu", "--size", "tiny", "--warmup", "1", "--steps", "3"]) == 0
    data = json.loads((out / "llm_profiles.json").read_text())
    assert data["size"] == "tiny" and data["steps"] == 3 and "torch" in data["environment"]
    assert [m["name"] for m in data["models"]] == list(bench.CONFIGS["tiny"])
    for m in data["models"]:
        c = bench.CONFIGS["tiny"][m["name"]]
        assert m["params"] == bench.param_count(c)  # the model built is the one the shapes describe
        assert m["grad_mb_fp32"] == pytest.approx(m["params"] * 4 / 1e6)
        assert m["tokens_per_step"] == c.batch * c.seq and m["halved"] == 0
        assert m["step_ms"] > 0 and m["forward_ms"] > 0 and m["backward_ms"] > 0 and m["optimizer_ms"] > 0
        assert m["gpu_busy"] is None  # no NVML on a CPU run: nothing is made up


def test_llm_models_learn_and_the_decoder_is_causal() -> None:
    bench = _load("gpu_llm_profiles")
    c = bench.CONFIGS["tiny"]["gpt-1.3b"]
    torch.manual_seed(0)
    model = bench.LanguageModel(c)
    ids = torch.randint(0, c.vocab, (1, c.seq))
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % c.vocab
    with torch.no_grad():  # a causal decoder's outputs before the last token cannot see it
        assert torch.allclose(model(ids)[0, :-1], model(changed)[0, :-1], atol=1e-6)
    m = bench.measure("gpt-1.3b", c, torch.device("cpu"), warmup=0, steps=1)
    assert m.step_ms > 0
    with pytest.raises(SystemExit):
        bench.main(["--out", "/tmp/unused", "--models", "gpt-175b", "--device", "cpu", "--size", "tiny"])


def test_window_rates_count_steps_between_ends() -> None:
    coloc = _load("gpu_colocation")
    ends = [0.05, 0.15, 0.25, 0.35, 0.45, 1.05, 1.25, 1.45]
    # Window 1: four intervals of 0.1 s; window 2: two of 0.2 s; window 3: no step ends, no rate.
    assert coloc.window_rates(ends, 0.0, 1.0, 3) == pytest.approx([10.0, 5.0])
    assert coloc.percentile([5.0, 1.0, 3.0], 50) == 3.0 and coloc.percentile([1.0, 2.0], 99) == 2.0


def test_colocation_benchmark_measures_alone_and_pairs_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "coloc"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "gpu_colocation.py"), "--device", "cpu", "--size", "tiny", "--out", str(out),
         "--workloads", "lstm-lm,dlrm,bert-infer", "--mps-control", "none", "--warmup-s", "0.2", "--window-s", "0.6",
         "--windows", "2"], check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = list(csv.DictReader((out / "colocation.csv").open()))
    assert all(not r["error"] for r in rows), [r["error"] for r in rows if r["error"]]
    alone = {r["job"]: r for r in rows if r["mode"] == "isolated"}
    assert set(alone) == {"lstm-lm", "dlrm", "bert-infer"}
    assert float(alone["lstm-lm"]["steps_per_s"]) > 0 and float(alone["dlrm"]["items_per_s"]) > 0
    # The service: its capacity alone first, then requests offered at --load (0.5) of it, with latencies.
    capacity = next(r for r in rows if r["mode"] == "capacity")
    assert float(alone["bert-infer"]["offered_rps"]) == pytest.approx(0.5 * float(capacity["steps_per_s"]), rel=0.01)
    assert 0 < float(alone["bert-infer"]["p50_ms"]) <= float(alone["bert-infer"]["p99_ms"])
    pairs = {(r["job"], r["partner"]) for r in rows if r["mode"] == "pair"}
    assert pairs == {(a, b) for a in alone for b in alone if a != b}  # every pair, both sides recorded
    meta = json.loads((out / "meta.json").read_text())
    assert meta["mps"].startswith("not run") and meta["configs_measured"] == 3 + 1 + 3
    assert "Slowdown in a pair" in proc.stdout


def _stand_ins(folder: Path) -> tuple[dict[str, str], Path]:
    """A pynvml module seeing one H200, and an MPS control program that records its calls; the environment that
    puts both first."""
    (folder / "pynvml.py").write_text('''
class NVMLError(Exception):
    pass
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
nvmlEventTypeXidCriticalError = 8
class _Memory:
    total = 143771 * 2 ** 20
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetName(h): return "NVIDIA H200"
def nvmlDeviceGetUUID(h): return "GPU-stand-in"
def nvmlDeviceGetMemoryInfo(h): return _Memory()
def nvmlDeviceGetTemperature(h, sensor): return 31
def nvmlDeviceGetTotalEccErrors(h, kind, counter): return 0
''')
    record = folder / "mps-calls.txt"
    control = folder / "nvidia-cuda-mps-control"
    control.write_text(f"#!/bin/sh\n[ $# -gt 0 ] && echo \"$*\" >> {record} || echo \"stdin:$(cat)\" >> {record}\n")
    control.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": f"{folder}:{ROOT}", "PATH": f"{folder}:{os.environ.get('PATH', '')}"}
    return env, record


def test_node_check_runs_a_job_through_the_worker_with_mps_preemption_and_resume(tmp_path: Path) -> None:
    env, record = _stand_ins(tmp_path)
    out = tmp_path / "check"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "gpu_node_check.py"), "--out", str(out), "--steps", "300", "--preempt-at", "20",
         "--job-args", "--device cpu --size tiny --threads 1"],  # one thread: no spinning for cores others hold
        check=False, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    report = json.loads((out / "node_check.json").read_text())
    assert proc.returncode == 0, (proc.stdout[-3000:], report.get("exception"))
    steps = report["steps"]
    assert all(s["ok"] for s in steps.values()), steps
    assert steps["discovery"]["hardware"]["preset"] == "hgx-h200"
    # The job got the variables a fractional rank gets, and reached the node's daemon through its pipe folder.
    assert report["job_env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    log1 = steps["preempted with SIGTERM"]["log"]
    assert "env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in log1
    assert any(line.startswith("env CUDA_MPS_PIPE_DIRECTORY=") and line.endswith("/mps/pipe") for line in log1)
    saved = int(log1[-1].split()[3].rstrip(";"))
    assert saved >= 20
    assert steps["resumed from its checkpoint"]["resumed"][0].startswith(f"resumed from step {saved} ")
    assert steps["resumed from its checkpoint"]["log"][-1].startswith("done: 300 steps")
    # The daemon: started for the first lease (attempt 1), quit when a lease's release left none.
    calls = record.read_text().splitlines()
    assert calls[0] == "-d" and "stdin:quit" in calls and calls.count("-d") == 2, calls


def test_resize_plan_is_checked_and_named() -> None:
    bench = _load("gpu_resize")
    assert bench.parse_plan("1x100, 2x50,1x100") == [(1, 100), (2, 50), (1, 100)]
    for bad, says in (("1x100,3x50", "at most 100"), ("1x100,2by50", "RANKSxSHARE"), ("1x100", "two sizes"),
                      ("0x50,1x100", "ranks >= 1")):
        with pytest.raises(SystemExit, match=says) as err:
            bench.parse_plan(bad)
        assert str(err.value).startswith("--plan")


def test_resize_benchmark_times_each_pause_of_a_resize_through_mps_leases_on_cpu(tmp_path: Path) -> None:
    bench = _load("gpu_resize")
    (tmp_path / "stand-ins").mkdir()
    env, record = _stand_ins(tmp_path / "stand-ins")
    env["PYTHONPATH"] = str(ROOT)  # the MPS control stand-in only: NVML is the real one (absent on CI: recorded so)
    out = tmp_path / "resize"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "gpu_resize.py"), "--device", "cpu", "--size", "tiny", "--out", str(out),
         "--workloads", "resnet50", "--plan", "1x100,2x50,1x100", "--min-steps", "5", "--steady-s", "0.3",
         "--job-args", "--threads 1", "--work-dir", str(tmp_path)],
        check=False, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    reader = csv.DictReader((out / "resize.csv").open())
    assert reader.fieldnames == bench.CSV_FIELDS
    rows = list(reader)
    assert [r["change"] for r in rows] == ["start->1x100", "1x100->2x50", "2x50->1x100"]
    assert all(not r["error"] for r in rows), [r["error"] for r in rows]
    start, grow, shrink = rows
    assert not start["resumed_step"] and float(start["mps_s"]) == 0  # a cold start: nothing to resume, no MPS
    assert float(start["pause_s"]) >= float(start["restart_s"]) > 0
    for r in (grow, shrink):
        for col in ("ckpt_mb", "steady_before_ms", "steady_after_ms", "signal_to_saved_s", "save_s", "stop_s",
                    "mps_s", "restart_s", "python_s", "build_s", "first_step_s", "pause_s"):
            assert float(r[col]) > 0, (r["change"], col)
        assert float(r["save_s"]) <= float(r["signal_to_saved_s"]) <= float(r["stop_s"])
        # The old size is gone before the new one starts: the pause holds the stop and the restart in turn.
        assert float(r["pause_s"]) >= float(r["stop_s"]) + float(r["restart_s"])
        parts = sum(float(r[c]) for c in ("python_s", "cuda_init_s", "build_s", "load_s"))
        assert parts == pytest.approx(float(r["restart_s"]), abs=0.005)
        assert int(r["resumed_step"]) == int(r["saved_step"]) > 0  # resumed from the checkpoint the SIGTERM wrote
    # Two ranks at 50%: the job's throughput is both ranks' batches (2 samples each at tiny size) per step.
    assert float(grow["items_per_s_after"]) == pytest.approx(4 / (float(grow["steady_after_ms"]) / 1000), rel=1e-3)
    assert float(shrink["items_per_s_after"]) == pytest.approx(2 / (float(shrink["steady_after_ms"]) / 1000),
                                                               rel=1e-3)
    # The node's daemon: started by the first 50% rank's lease, quit when the last one's was released.
    assert record.read_text().splitlines() == ["-d", "stdin:quit"]
    log = (out / "jobs.log").read_text()
    assert "env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in log and "env WORLD_SIZE=2" in log
    meta = json.loads((out / "meta.json").read_text())
    assert meta["settings"]["plan"] == "1x100,2x50,1x100" and meta["torch"] == torch.__version__
    assert meta["mps"].endswith("started by the first fractional rank's lease")
    assert "Pauses of each resize" in proc.stdout
    # The model's table is made from real runs only: this CPU run is refused, and the same run said to be a GPU's
    # gives one row per resize (the first start left out), each with its workload's measured footprint.
    from scheduler.core.calibrate import resize as calibrate_resize
    from scheduler.core.calibrate.hopper import hopper_profiles
    from scheduler.core.elastic import RESIZE_PAUSES_COLUMNS

    with pytest.raises(ValueError, match="not a real measurement"):
        calibrate_resize.ingest(out)
    meta["settings"].update(size="full", device="cuda")
    (out / "meta.json").write_text(json.dumps(meta))
    text = calibrate_resize.ingest(out)
    assert "do not edit by hand" in text and meta["command"] in text
    table = list(csv.DictReader(ln for ln in text.splitlines() if not ln.startswith("#")))
    assert [r["change"] for r in table] == ["1x100->2x50", "2x50->1x100"]
    assert list(table[0]) == RESIZE_PAUSES_COLUMNS
    assert {float(r["footprint_gb"]) for r in table} == {hopper_profiles()["resnet50"].mem_gb}
    assert [r["pause_s"] for r in table] == [grow["pause_s"], shrink["pause_s"]]


def test_example_resize_benchmark_stops_and_resumes_the_docs_example_as_corral_launches_it_on_cpu(
        tmp_path: Path) -> None:
    (tmp_path / "stand-ins").mkdir()
    env, record = _stand_ins(tmp_path / "stand-ins")
    env["PYTHONPATH"] = str(ROOT)  # the MPS control stand-in only: NVML is the real one (absent on CI: recorded so)
    out = tmp_path / "example"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "gpu_example_resize.py"), "--device", "cpu", "--out", str(out), "--plan",
         "1x100,2x50,1x100", "--min-prints", "3", "--steady-s", "0.3", "--batch", "8", "--work-dir", str(tmp_path)],
        check=False, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    rows = list(csv.DictReader((out / "example_resize.csv").open()))
    assert [r["change"] for r in rows] == ["start->1x100", "1x100->2x50", "2x50->1x100"]
    assert all(not r["error"] for r in rows), [r["error"] for r in rows]
    assert rows[0]["resumed_step"] == "0" and float(rows[0]["pause_s"]) >= float(rows[0]["resumed_s"]) > 0
    for r in rows[1:]:
        # Resumed at the step the SIGTERM saved: the ranks agreed on it, rank 0 wrote it, the next size read it.
        assert int(r["resumed_step"]) == int(r["saved_step"]) > 0
        assert 0 < float(r["signal_to_saved_s"]) <= float(r["stop_s"])
        assert float(r["pause_s"]) >= float(r["stop_s"]) + float(r["resumed_s"])
        assert float(r["steps_per_s_before"]) > 0 and float(r["steps_per_s_after"]) > 0
    log = (out / "workers.log").read_text()
    assert "rank 0: resumed at step" in log and "on 2 process(es)" in log  # one process group of two at 50%
    # The node's daemon: started by the first 50% worker's lease, quit when the last one's was released.
    assert record.read_text().splitlines() == ["-d", "stdin:quit"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["settings"]["plan"] == "1x100,2x50,1x100" and meta["torch"] == torch.__version__
