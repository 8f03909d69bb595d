"""Data-parallel PyTorch training that Corral can resize: it resumes at any size from `CORRAL_CHECKPOINT_DIR`.

Corral starts one worker per node of the job's placement, with `WORLD_SIZE` (nodes), `NODE_RANK`, `LOCAL_WORLD_SIZE`
(its GPUs there), `MASTER_ADDR`/`MASTER_PORT` and `CUDA_VISIBLE_DEVICES`; `torchrun` turns that into a process per GPU
(docs/elastic.md has the command). A resize stops every process with SIGTERM; they agree on the step to stop at, rank
0 saves the model, the optimiser and the step, and the next run, at whatever size, loads it and goes on. Each
process keeps its batch (`--batch`), so the global batch grows with the size: the rule Corral's speed model assumes
(`scheduler.core.elastic`). On a machine without CUDA it runs on the CPU with the gloo backend.

    python docs/examples/elastic_train.py --steps 200          # one process, for a try
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

stopping = False


def _on_sigterm(signum: int, frame: object) -> None:
    global stopping
    stopping = True  # finish the step in progress, then save: Corral's grace period is 5 s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000, help="training steps in all, over every size it runs at")
    ap.add_argument("--batch", type=int, default=32, help="samples per process per step")
    ap.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                    help="the process group's: auto is nccl on GPUs, gloo on a CPU; gloo also where several ranks "
                         "share one GPU (MPS shares), which NCCL refuses")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _on_sigterm)

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if world > 1:  # MASTER_ADDR/PORT from torchrun
        dist.init_process_group(args.backend if args.backend != "auto" else "nccl" if cuda else "gloo")
    device = torch.device("cuda", local) if cuda else torch.device("cpu")

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ckpt = Path(os.environ.get("CORRAL_CHECKPOINT_DIR", ".")) / "elastic_train.pt"
    step, sizes = 0, []
    if ckpt.exists():
        state = torch.load(ckpt, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, sizes = state["step"], state["sizes"]
    sizes.append(world)
    print(f"rank {rank}: {'resumed at step ' + str(step) if step else 'started'} on {world} process(es)", flush=True)
    trained = nn.parallel.DistributedDataParallel(model) if world > 1 else model

    data = torch.Generator().manual_seed(1000 * len(sizes) + rank)  # each rank its own samples
    stop = False
    while step < args.steps and not stop:
        x = torch.randn(args.batch, 32, generator=data).to(device)
        loss = nn.functional.mse_loss(trained(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        stop = stopping
        if world > 1:  # every rank stops at the same step, or one would wait for the others' gradients forever
            flag = torch.tensor([1.0 if stopping else 0.0], device=device)
            dist.all_reduce(flag)
            stop = flag.item() > 0
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)

    if rank == 0:  # written whole, then renamed: a run killed mid-save leaves the last checkpoint as it was
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "sizes": sizes}, tmp)
        os.replace(tmp, ckpt)
        print(f"saved step {step} ({'stopped' if stop else 'done'})", flush=True)
    if world > 1:
        dist.barrier()  # every rank leaves once rank 0 has saved
        dist.destroy_process_group()
        # PyTorch's CPU (gloo) build can abort in the interpreter's own teardown after this ("terminate called
        # without an active exception", a few runs in a hundred on a busy machine): the work is saved and the group
        # closed, so leave without that teardown, and torchrun sees the exit code the run earned.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
