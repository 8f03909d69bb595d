"""A training job that keeps Corral's checkpoint contract, for running a real PyTorch job the way Corral launches one.

    python benchmarks/gpu_train_job.py --steps 300 [--workload resnet50] [--every 50] [--device cuda] [--size full]

It trains one of `gpu_workloads.py`'s workloads on the GPU it is given (`CUDA_VISIBLE_DEVICES`), and keeps its state
(model, optimizer, step, the last loss) in `CORRAL_CHECKPOINT_DIR/train.pt`: every `--every` steps, and on SIGTERM, which
is how Corral preempts a job (SIGTERM, a grace period, then SIGKILL). Started again with the same checkpoint folder,
it resumes from the step it saved. It prints the Corral and CUDA MPS variables it was started with, so a log shows
what the worker gave it. Exit status: 0 when all steps are done, 143 when it stopped on SIGTERM after saving.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHOWN_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
             "CUDA_MPS_PIPE_DIRECTORY", "CORRAL_JOB_ID", "CORRAL_ATTEMPT", "CORRAL_CHECKPOINT_DIR", "RANK",
             "WORLD_SIZE")


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.gpu_workloads import NAMES, build

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50, help="checkpoint every this many steps (and on SIGTERM)")
    p.add_argument("--workload", choices=NAMES, default="resnet50")
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", choices=("full", "tiny"), default="full")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads for torch (0: its default, one per core); on a shared machine, 1 keeps a CPU run "
                        "from spinning threads that wait for cores others hold")
    args = p.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    folder = os.environ.get("CORRAL_CHECKPOINT_DIR")
    if not folder:
        p.error("CORRAL_CHECKPOINT_DIR is not set: Corral's worker sets it (run this as a Corral job)")
    for key in SHOWN_ENV:
        print(f"env {key}={os.environ.get(key, '')}", flush=True)
    stop = {"asked": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(asked=True))  # finish the step, save, leave
    ckpt = Path(folder) / "train.pt"

    wl = build(args.workload, args.device, args.size)
    if wl.optimizer is None:
        p.error(f"--workload {args.workload}: an inference service has nothing to train")
    if args.device.startswith("cuda"):
        print(f"device {torch.cuda.get_device_name()} (torch {torch.__version__}, CUDA {torch.version.cuda})",
              flush=True)
    step = 0
    if ckpt.exists():
        saved = torch.load(ckpt, map_location=args.device, weights_only=True)
        wl.model.load_state_dict(saved["model"])
        wl.optimizer.load_state_dict(saved["optimizer"])
        step = int(saved["step"])
        print(f"resumed from step {step} (checkpoint {ckpt.name}, loss then {float(saved['loss']):.4f})", flush=True)

    def save(loss: float) -> None:
        tmp = ckpt.with_suffix(".tmp")
        assert wl.optimizer is not None
        torch.save({"model": wl.model.state_dict(), "optimizer": wl.optimizer.state_dict(), "step": step,
                    "loss": loss}, tmp)
        tmp.replace(ckpt)  # atomic: a SIGKILL mid-write leaves the previous checkpoint whole

    began, loss = time.monotonic(), float("nan")
    while step < args.steps:
        out = wl.step()
        assert out is not None  # a training step returns its loss
        loss = float(out)  # .item(): one sync a step, as a training loop that logs its loss has
        step += 1
        if step % 10 == 0:
            print(f"step {step} loss {loss:.4f} ({(time.monotonic() - began) / step:.3f} s/step so far)", flush=True)
        if stop["asked"]:
            save(loss)
            print(f"SIGTERM: saved step {step}; exiting", flush=True)
            return 143
        if step % args.every == 0:
            save(loss)
    save(loss)
    print(f"done: {step} steps, final loss {loss:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
