"""Issue 14's node targets on real network hosts (Linux namespaces on one machine; root only):

1. node join to placement-ready (target <= 10 s): a new host's `corral node start` registers its Ray node (the line
   "Ray runtime started" in its log), then the controller takes it in at its next poll; timed from that line to the
   node being alive, with its GPUs, in `GET /cluster`, and to a job waiting for GPUs being placed there. The agent's
   own start (Ray's raylet booting) is printed apart: it is Ray's, and slower on a loaded machine.
2. partitioned host's jobs requeued (target <= 2 x the node-death detection time): the host's link taken down while
   its job runs; timed to the job's `lost` event. Detection is Ray's health check, set here to a check every 1 s,
   1 s timeout, 3 misses (so about 3-4 s; Ray's defaults take about 30 s, and requeue takes as long as they do).

Each repetition brings in a new host while the previous ones are cut off, so the waiting job can only go there.

    sudo .venv/bin/python benchmarks/multihost.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral_hosts import GPUS, HEALTH, corral_on_hosts, nodes_of

DETECTION_S = (int(HEALTH["RAY_health_check_period_ms"]) * int(HEALTH["RAY_health_check_failure_threshold"])
               + int(HEALTH["RAY_health_check_timeout_ms"])) / 1000.0


def first_line_time(path: Path, text: str, timeout: float) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return time.time()
        time.sleep(0.05)
    raise TimeoutError(f"{text!r} never appeared in {path}")


def until(pred, timeout: float, every: float = 0.05) -> float:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return time.time()
        time.sleep(every)
    raise TimeoutError("condition not met")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("benchmarks/multihost.py creates network namespaces: run it as root")
    boot, ready, placed, requeued = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp, corral_on_hosts(Path(tmp), workers=("w0",)) as c:
        c.hosts.link(c.hosts.hosts["w0"], up=False)  # each repetition's job can only go to its own new host
        previous = "w0"
        for r in range(1, args.repeats + 1):
            until(lambda n=previous: not c.nodes()[n]["alive"], 120, every=0.2)
            name = f"w{r}"
            waiting = c.submit(name=f"wait{r}", num_gpus=GPUS, duration_s=600.0)
            launched = time.time()
            host = c.worker(name)
            registered = first_line_time(Path(tmp) / f"{name}.log", "Ray runtime started", 120)
            up = until(lambda n=name: n in c.nodes() and c.nodes()[n]["alive"], 60)
            on = until(lambda j=waiting, n=name: nodes_of(c, j) == {n}, 60)
            until(lambda j=waiting: c.job(j)["started_at"] is not None, 60)
            boot.append(registered - launched)
            ready.append(up - registered)
            placed.append(on - registered)
            cut = time.time()
            c.hosts.link(host, up=False)
            lost = until(lambda j=waiting: any(e["kind"] == "lost" for e in c.events(j)), 120, every=0.2)
            lost_events = [e["at"] for e in c.events(waiting) if e["kind"] == "lost"]
            assert len(lost_events) == 1 and lost_events[0] >= cut, lost_events  # lost there, and only there
            requeued.append(lost_events[0] - cut)
            c.cancel(waiting)
            previous = name
            print(f"repeat {r}: agent start -> Ray node registered {boot[-1]:5.2f} s, -> alive in the API "
                  f"{ready[-1]:5.2f} s, -> waiting job placed there {placed[-1]:5.2f} s; link down -> requeued "
                  f"{requeued[-1]:5.2f} s (seen {lost - cut:.2f} s)", flush=True)

    def fmt(xs: list[float]) -> str:
        a = np.array(xs)
        return f"p50 {np.median(a):5.2f} s  max {a.max():5.2f} s"

    print(f"\n{args.repeats} hosts joined and were partitioned, {GPUS} GPUs each:")
    print(f"  Ray node registered -> alive in GET /cluster   {fmt(ready)}")
    print(f"  Ray node registered -> a waiting job placed    {fmt(placed)}   (target <= 10 s)")
    print(f"  (the agent's start -> Ray node registered      {fmt(boot)}: Ray's raylet booting)")
    print(f"  link down -> job lost and requeued             {fmt(requeued)}   (target <= 2 x detection = "
          f"{2 * DETECTION_S:g} s; Ray's health check as set here detects in about {DETECTION_S:g} s)")


if __name__ == "__main__":
    main()
