"""LLM-scale training steps measured on one GPU: the numbers a catalog profile of a large data-parallel job needs.

    python benchmarks/gpu_llm_profiles.py --out DIR [--models gpt-1.3b,gpt-2.7b,bert-large] [--steps 20]

Issue 30 left the catalog without a language model of today's size: its language models are V100-era (Gavel's
Transformer, DeepShare's Transformer-XL), which move their gradients under their compute, so a fabric model fed with
them sees almost no network contention where Crux measured 11%. This script measures what such a profile needs, on a
real GPU, with plain PyTorch on synthetic tokens (nothing downloaded):

| name | what | per-GPU batch |
|---|---|---|
| gpt-1.3b | GPT-3 XL decoder (24 x 2,048, 16 heads, 50,257 tokens; Brown et al., 2020) | 8 x 2,048 tokens |
| gpt-2.7b | GPT-3 2.7B decoder (32 x 2,560, 32 heads) | 4 x 2,048 tokens |
| bert-large | BERT-large encoder (24 x 1,024, 16 heads, 30,522 tokens) with an MLM head | 32 x 512 tokens |

Each model trains as a data-parallel worker would: bf16 autocast, fp32 weights, fused AdamW, flash attention through
`scaled_dot_product_attention`. Where a batch does not fit the GPU's memory it is halved until it does (recorded).
After `--warmup` steps, `--steps` steps are timed with CUDA events around the forward pass, the backward pass and the
optimizer step; NVML samples the GPU's busy and memory-busy fractions meanwhile. Per model it records the step time
and its three parts, tokens/s, the model FLOP/s (6 x parameters x tokens, plus attention), the peak memory, the
parameter count and the gradient bytes a PyTorch DDP all-reduce moves per step (fp32 gradients: 4 bytes a
parameter). Writes `DIR/llm_profiles.json` (with the GPU, driver and software) and prints a table.

`--device cpu --size tiny` runs the same code on a CPU in seconds (the test does).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import torch
from torch import nn
from torch.nn import functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script from anywhere: the repo's packages


@dataclass(frozen=True)
class LlmConfig:
    vocab: int
    dim: int
    layers: int
    heads: int
    seq: int
    batch: int
    causal: bool  # decoder (next-token loss) or encoder (masked-token loss)


CONFIGS: dict[str, dict[str, LlmConfig]] = {
    "full": {
        "gpt-1.3b": LlmConfig(50257, 2048, 24, 16, 2048, 8, causal=True),
        "gpt-2.7b": LlmConfig(50257, 2560, 32, 32, 2048, 4, causal=True),
        "bert-large": LlmConfig(30522, 1024, 24, 16, 512, 32, causal=False),
    },
    "tiny": {
        "gpt-1.3b": LlmConfig(97, 32, 2, 2, 16, 2, causal=True),
        "gpt-2.7b": LlmConfig(97, 48, 3, 4, 16, 2, causal=True),
        "bert-large": LlmConfig(61, 32, 2, 2, 8, 4, causal=False),
    },
}
MASKED = 0.15  # BERT's share of tokens predicted


class Block(nn.Module):
    """A pre-norm transformer block: fused QKV projection, attention by `scaled_dot_product_attention` (flash on a
    Hopper GPU), a 4x GELU MLP."""

    def __init__(self, dim: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(att.transpose(1, 2).reshape(b, n, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class LanguageModel(nn.Module):
    """Token and learned position embeddings, `layers` blocks, a final norm and an output projection tied to the
    token embedding (GPT-2/3 and BERT both tie it)."""

    def __init__(self, c: LlmConfig) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(c.vocab, c.dim), nn.Embedding(c.seq, c.dim)
        self.blocks = nn.ModuleList(Block(c.dim, c.heads, c.causal) for _ in range(c.layers))
        self.norm = nn.LayerNorm(c.dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.tok.weight.T


def param_count(c: LlmConfig) -> int:
    """The parameters `LanguageModel(c)` has, from its shapes (the test checks the model against it)."""
    per_block = 4 * c.dim + (3 * c.dim * c.dim + 3 * c.dim) + (c.dim * c.dim + c.dim) + (8 * c.dim * c.dim + 5 * c.dim)
    return c.vocab * c.dim + c.seq * c.dim + c.layers * per_block + 2 * c.dim


def step_flops(c: LlmConfig, params: int) -> float:
    """Model FLOPs of one training step: 6 per parameter per token (forward 2, backward 4) plus attention's score and
    value products (12 x layers x seq x dim per token; half of it under a causal mask, which flash skips)."""
    tokens = c.batch * c.seq
    attention = 12 * c.layers * c.seq * c.dim * tokens * (0.5 if c.causal else 1.0)
    return 6.0 * params * tokens + attention


@dataclass
class Measured:
    name: str
    params: int
    batch: int
    seq: int
    tokens_per_step: int
    step_ms: float  # median over the timed steps
    step_ms_p90: float
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    tokens_per_s: float
    model_tflops: float
    peak_mem_gib: float
    grad_mb_fp32: float  # bytes a PyTorch DDP all-reduce moves per step (fp32 gradients), MB
    gpu_busy: float | None  # NVML utilization.gpu, mean over the timed steps (fraction)
    mem_busy: float | None  # NVML utilization.memory (fraction of time device memory was read or written)
    halved: int  # how many times the batch was halved to fit


class NvmlSampler:
    """NVML's utilisation of GPU 0, sampled every 50 ms on a thread while timed steps run."""

    def __init__(self) -> None:
        self.gpu: list[int] = []
        self.mem: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml as nv

            nv.nvmlInit()
            self._nv, self._h = nv, nv.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - no NVML (a CPU run): no utilisation recorded
            self._nv = None

    def __enter__(self) -> Self:
        if self._nv is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            u = self._nv.nvmlDeviceGetUtilizationRates(self._h)
            self.gpu.append(u.gpu)
            self.mem.append(u.memory)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def means(self) -> tuple[float | None, float | None]:
        if not self.gpu:
            return None, None
        return statistics.fmean(self.gpu) / 100.0, statistics.fmean(self.mem) / 100.0


def measure(name: str, c: LlmConfig, device: torch.device, warmup: int, steps: int, halved: int = 0) -> Measured:
    """Train `name` for `warmup + steps` steps on random tokens; the timed steps' medians."""
    cuda = device.type == "cuda"
    gen = torch.Generator(device="cpu").manual_seed(0)
    with device:
        model = LanguageModel(c)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    ids = torch.randint(0, c.vocab, (c.batch, c.seq + 1), generator=gen).to(device)
    masked = torch.rand(c.batch, c.seq, generator=gen).to(device) < MASKED

    def loss() -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            if c.causal:
                return F.cross_entropy(model(ids[:, :-1]).flatten(0, 1).float(), ids[:, 1:].flatten())
            logits = model(ids[:, :-1])
            return F.cross_entropy(logits[masked].float(), ids[:, :-1][masked])

    def clock() -> Any:
        if cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) if cuda else (b - a) * 1000.0

    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    marks: list[tuple[Any, Any, Any, Any]] = []
    sampler = NvmlSampler() if cuda else None
    for i in range(warmup + steps):
        if i == warmup and sampler is not None:
            sampler.__enter__()
        opt.zero_grad(set_to_none=True)
        t0 = clock()
        value = loss()
        t1 = clock()
        value.backward()
        t2 = clock()
        opt.step()
        t3 = clock()
        if i >= warmup:
            marks.append((t0, t1, t2, t3))
    if cuda:
        torch.cuda.synchronize(device)
    if sampler is not None:
        sampler.__exit__()
    if not torch.isfinite(value.detach()):
        raise RuntimeError(f"{name}: the loss is not finite ({float(value)})")
    fwd = [ms(a, b) for a, b, _, _ in marks]
    bwd = [ms(b, c_) for _, b, c_, _ in marks]
    opt_ms = [ms(c_, d) for _, _, c_, d in marks]
    total = [ms(a, d) for a, _, _, d in marks]
    params = sum(p.numel() for p in model.parameters())
    step = statistics.median(total)
    tokens = c.batch * c.seq
    busy, mem = sampler.means() if sampler is not None else (None, None)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else 0.0
    return Measured(
        name=name, params=params, batch=c.batch, seq=c.seq, tokens_per_step=tokens, step_ms=step,
        step_ms_p90=float(sorted(total)[int(0.9 * (len(total) - 1))]), forward_ms=statistics.median(fwd),
        backward_ms=statistics.median(bwd), optimizer_ms=statistics.median(opt_ms),
        tokens_per_s=tokens / (step / 1000.0), model_tflops=step_flops(c, params) / (step / 1000.0) / 1e12,
        peak_mem_gib=peak, grad_mb_fp32=params * 4 / 1e6, gpu_busy=busy, mem_busy=mem, halved=halved)


def measure_fitting(name: str, c: LlmConfig, device: torch.device, warmup: int, steps: int) -> Measured:
    """`measure`, halving the batch while the GPU runs out of memory (down to 1)."""
    halved = 0
    while True:
        try:
            return measure(name, c, device, warmup, steps, halved)
        except torch.OutOfMemoryError:
            if c.batch == 1:
                raise
            c = LlmConfig(c.vocab, c.dim, c.layers, c.heads, c.seq, c.batch // 2, c.causal)
            halved += 1
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()


def environment(device: torch.device) -> dict[str, Any]:
    facts: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                             "date": datetime.now(UTC).isoformat(timespec="seconds"), "command": sys.argv}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts |= {"gpu": props.name, "gpu_memory_gib": round(props.total_memory / 2**30, 1),
                  "multiprocessors": props.multi_processor_count, "cuda": torch.version.cuda}
        try:
            import pynvml as nv

            nv.nvmlInit()
            h = nv.nvmlDeviceGetHandleByIndex(0)
            facts |= {"driver": nv.nvmlSystemGetDriverVersion(),
                      "sm_clock_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
                      "power_limit_w": nv.nvmlDeviceGetPowerManagementLimit(h) / 1000}
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            facts["nvml"] = f"unavailable: {exc}"
    return facts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for llm_profiles.json")
    ap.add_argument("--models", default=",".join(CONFIGS["full"]), help="comma-separated: " + ", ".join(CONFIGS["full"]))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", choices=sorted(CONFIGS), default="full")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS[args.size]]
    if unknown:
        ap.error(f"--models: unknown {', '.join(unknown)}; expected some of {', '.join(CONFIGS[args.size])}")
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be at least 1 and --warmup at least 0")
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            ap.error("--device cuda: no CUDA GPU is visible (use --device cpu --size tiny for the code path)")
        torch.backends.cuda.matmul.allow_tf32 = True
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"environment": environment(device), "size": args.size, "warmup": args.warmup,
                              "steps": args.steps, "models": []}
    path = args.out / "llm_profiles.json"
    for name in names:
        started = time.monotonic()
        m = measure_fitting(name, CONFIGS[args.size][name], device, args.warmup, args.steps)
        result["models"].append(asdict(m))
        path.write_text(json.dumps(result, indent=1))  # after every model: a run cut short keeps what it measured
        print(f"{m.name:11} {m.params / 1e9:6.3f}B params  batch {m.batch:3} x {m.seq:5}  step {m.step_ms:8.1f} ms "
              f"(fwd {m.forward_ms:.1f}, bwd {m.backward_ms:.1f}, opt {m.optimizer_ms:.1f})  "
              f"{m.model_tflops:6.1f} TFLOP/s  peak {m.peak_mem_gib:5.1f} GiB  grad {m.grad_mb_fp32:8.0f} MB  "
              f"busy {m.gpu_busy}  mem-busy {m.mem_busy}  halved {m.halved}  ({time.monotonic() - started:.0f} s)",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
