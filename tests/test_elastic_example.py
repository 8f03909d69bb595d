"""docs/elastic.md's PyTorch example resumes at any size: run under torchrun on the CPU (gloo) at 2 processes,
stopped with SIGTERM as Corral stops a run it resizes, then at 1 and at 3, each run resuming from the checkpoint the
last one wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "elastic_train.py"


def torchrun(procs: int, steps: int, ckpt: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "CORRAL_CHECKPOINT_DIR": str(ckpt), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             f"--nproc-per-node={procs}", str(EXAMPLE), "--steps", str(steps), "--batch", "8"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def saved(ckpt: Path) -> dict[str, object]:
    state: dict[str, object] = torch.load(ckpt / "elastic_train.pt")
    return state


def test_the_example_stops_on_sigterm_and_resumes_at_other_sizes(tmp_path: Path) -> None:
    run = torchrun(2, 10**7, tmp_path)
    assert run.stdout is not None
    watchdog = threading.Timer(120, run.kill)  # (a run that never prints is killed, and the loop below ends)
    watchdog.start()
    for line in run.stdout:  # wait until it trains (rank 0 prints every 10 steps)
        if line.startswith("step 20 "):
            break
    watchdog.cancel()
    run.send_signal(signal.SIGTERM)  # torchrun passes it on to its processes, as Corral's stop does to the job's
    out, _ = run.communicate(timeout=120)
    assert "saved step" in out and "(stopped)" in out, out
    first = saved(tmp_path)
    assert first["sizes"] == [2] and 20 <= int(first["step"]) < 10**7  # type: ignore[call-overload]

    goal = int(first["step"]) + 30  # type: ignore[call-overload]
    one = torchrun(1, goal, tmp_path)
    out, _ = one.communicate(timeout=120)
    assert one.returncode == 0 and f"resumed at step {first['step']}" in out, out
    second = saved(tmp_path)
    assert second["sizes"] == [2, 1] and second["step"] == goal

    three = torchrun(3, goal + 30, tmp_path)
    out, _ = three.communicate(timeout=180)
    assert three.returncode == 0 and f"resumed at step {goal}" in out, out
    assert saved(tmp_path)["sizes"] == [2, 1, 3] and saved(tmp_path)["step"] == goal + 30
