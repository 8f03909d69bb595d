"""The workloads `gpu_colocation.py` runs on a GPU: six training jobs and two inference services of the catalog's kinds,
at small sizes, on synthetic data (nothing is downloaded), written with plain PyTorch so the benchmark runs wherever
`torch` does (no torchvision, no transformers).

Each `Workload` builds a model and one step: a training step (forward, backward, optimizer) or one inference request
(a forward pass under `inference_mode`). The architectures follow the published ones at their usual sizes
(`size="full"`); `size="tiny"` shrinks every dimension so the CPU test runs each in milliseconds.

| name | kind | what | full size |
|---|---|---|---|
| resnet50 | training | ResNet-50 (bottleneck blocks 3-4-6-3), SGD | batch 32, 224x224 |
| bert-base | training | BERT-base encoder (12 x 768, 12 heads) with an MLM head, AdamW | batch 32, 128 tokens |
| gpt2-small | training | GPT-2 small decoder (12 x 768, 50,257 tokens), AdamW | batch 8, 512 tokens |
| vit-b16 | training | ViT-B/16 (12 x 768, 16x16 patches), AdamW | batch 32, 224x224 |
| lstm-lm | training | 2-layer LSTM language model (1,024 hidden, 33,278 tokens), SGD | batch 64, 35 tokens |
| dlrm | training | DLRM-style recommender (8 tables x 1M x 64, MLPs 13-512-256-64 / 512-256-1), SGD | batch 2,048 |
| resnet50-infer | inference | ResNet-50 forward | batch 4, 224x224 |
| bert-infer | inference | BERT-base encoder forward | batch 1, 128 tokens |

Mixed precision: bf16 autocast on CUDA (what an H100 job runs), fp32 on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

TRAINING = ("resnet50", "bert-base", "gpt2-small", "vit-b16", "lstm-lm", "dlrm")
INFERENCE = ("resnet50-infer", "bert-infer")
NAMES = TRAINING + INFERENCE


# ---- models ------------------------------------------------------------------------------------------------------


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )
        self.skip = (nn.Identity() if stride == 1 and cin == cout else
                     nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


class ResNet(nn.Module):
    """ResNet-50 with `blocks=(3, 4, 6, 3)` and `base=64` (He et al., 2016)."""

    def __init__(self, blocks: tuple[int, ...] = (3, 4, 6, 3), base: int = 64, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, base, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(base),
                                   nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1)]
        cin = base
        for i, n in enumerate(blocks):
            width = base * 2 ** i
            for j in range(n):
                layers.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
                cin = width * Bottleneck.expansion
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def _encoder(dim: int, layers: int, heads: int) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu", batch_first=True,
                                       norm_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class TokenTransformer(nn.Module):
    """BERT-base (bidirectional) or GPT-2 small (`causal=True`): token and position embeddings, pre-norm encoder
    layers, a tied output projection."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, max_len: int, causal: bool) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.body = _encoder(dim, layers, heads)
        self.norm = nn.LayerNorm(dim)
        self.causal = causal

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(n, device=ids.device))
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=ids.device) if self.causal else None
        h = self.norm(self.body(x, mask=mask, is_causal=self.causal))
        return h @ self.tok.weight.T


class ViT(nn.Module):
    """ViT-B/16 (Dosovitskiy et al., 2021): patch embedding, a class token, pre-norm encoder layers."""

    def __init__(self, image: int, patch: int, dim: int, layers: int, heads: int, classes: int = 1000) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.body = _encoder(dim, layers, heads)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.body(x)[:, 0])


class LstmLM(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.lstm = nn.LSTM(hidden, hidden, layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(self.emb(ids))[0])


class Dlrm(nn.Module):
    """DLRM-style (Naumov et al., 2019): dense features through a bottom MLP, one pooled embedding per sparse feature,
    their pairwise dot products, a top MLP to a click probability."""

    def __init__(self, tables: int, rows: int, dim: int, dense: int = 13) -> None:
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                    nn.Linear(256, dim), nn.ReLU())
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        pairs = (tables + 1) * tables // 2
        self.top = nn.Sequential(nn.Linear(dim + pairs, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                 nn.Linear(256, 1))

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        z = self.bottom(dense)
        feats = torch.stack([z] + [t(sparse[:, i]) for i, t in enumerate(self.tables)], dim=1)
        dots = feats @ feats.transpose(1, 2)
        i, j = torch.triu_indices(feats.shape[1], feats.shape[1], offset=1, device=dense.device)
        return self.top(torch.cat([z, dots[:, i, j]], dim=1)).squeeze(1)


# ---- steps -------------------------------------------------------------------------------------------------------


@dataclass
class Workload:
    """A built workload: `step()` runs one training step (returning its loss, still on the device) or serves one
    request (returning None); `items` is the samples one step handles."""

    name: str
    kind: str  # "training" | "inference"
    step: Callable[[], torch.Tensor | None]
    items: int
    params: int
    model: nn.Module
    optimizer: torch.optim.Optimizer | None = None


# Dimensions per size: full follows the published models, tiny keeps the shapes and shrinks every number.
_DIMS: dict[str, dict[str, Any]] = {
    "full": {"img": 224, "cnn_batch": 32, "cnn_base": 64, "blocks": (3, 4, 6, 3), "vocab": 30522, "gpt_vocab": 50257,
             "dim": 768, "layers": 12, "heads": 12, "seq": 128, "bert_batch": 32, "gpt_seq": 512, "gpt_batch": 8,
             "patch": 16, "lstm_vocab": 33278, "lstm_hidden": 1024, "lstm_seq": 35, "lstm_batch": 64, "tables": 8,
             "rows": 1_000_000, "emb": 64, "dlrm_batch": 2048, "infer_img_batch": 4},
    "tiny": {"img": 32, "cnn_batch": 2, "cnn_base": 8, "blocks": (1, 1, 1, 1), "vocab": 100, "gpt_vocab": 100,
             "dim": 32, "layers": 2, "heads": 2, "seq": 16, "bert_batch": 2, "gpt_seq": 16, "gpt_batch": 2,
             "patch": 8, "lstm_vocab": 100, "lstm_hidden": 32, "lstm_seq": 8, "lstm_batch": 2, "tables": 2,
             "rows": 100, "emb": 8, "dlrm_batch": 16, "infer_img_batch": 1},
}


def build(name: str, device: str = "cuda", size: str = "full", seed: int = 0) -> Workload:
    """Build workload `name` on `device`; every input is made once, on the device (a data loader is not what this
    measures)."""
    if name not in NAMES:
        raise ValueError(f"workload {name!r}: expected one of {', '.join(NAMES)}")
    d = _DIMS[size]
    dev = torch.device(device)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def autocast() -> torch.autocast:
        return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dev)

    def ints(high: int, *shape: int) -> torch.Tensor:
        return torch.randint(0, high, shape, generator=gen).to(dev)

    def trainer(model: nn.Module, loss_of: Callable[[], torch.Tensor], adam: bool, items: int) -> Workload:
        model.to(dev).train()
        opt: torch.optim.Optimizer = (torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda) if adam else
                                      torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))

        def step() -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_of()
            loss.backward()
            opt.step()
            return loss.detach()

        return Workload(name, "training", step, items, sum(p.numel() for p in model.parameters()), model, opt)

    def server(model: nn.Module, forward: Callable[[], torch.Tensor], items: int) -> Workload:
        model.to(dev).eval()

        def step() -> None:
            with torch.inference_mode(), autocast():
                forward()

        return Workload(name, "inference", step, items, sum(p.numel() for p in model.parameters()), model)

    if name in ("resnet50", "resnet50-infer"):
        net = ResNet(d["blocks"], d["cnn_base"])
        if name == "resnet50":
            x, y = rand(d["cnn_batch"], 3, d["img"], d["img"]), ints(1000, d["cnn_batch"])
            return trainer(net, lambda: F.cross_entropy(net(x), y), False, d["cnn_batch"])
        xi = rand(d["infer_img_batch"], 3, d["img"], d["img"])
        return server(net, lambda: net(xi), d["infer_img_batch"])
    if name in ("bert-base", "bert-infer"):
        bert = TokenTransformer(d["vocab"], d["dim"], d["layers"], d["heads"], d["seq"], causal=False)
        if name == "bert-base":
            ids = ints(d["vocab"], d["bert_batch"], d["seq"])
            return trainer(bert, lambda: F.cross_entropy(bert(ids).flatten(0, 1), ids.flatten()), True,
                           d["bert_batch"])
        one = ints(d["vocab"], 1, d["seq"])
        return server(bert, lambda: bert(one), 1)
    if name == "gpt2-small":
        gpt = TokenTransformer(d["gpt_vocab"], d["dim"], d["layers"], d["heads"], d["gpt_seq"], causal=True)
        ids = ints(d["gpt_vocab"], d["gpt_batch"], d["gpt_seq"] + 1)
        return trainer(gpt, lambda: F.cross_entropy(gpt(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()), True,
                       d["gpt_batch"])
    if name == "vit-b16":
        vit = ViT(d["img"], d["patch"], d["dim"], d["layers"], d["heads"])
        x, y = rand(d["cnn_batch"], 3, d["img"], d["img"]), ints(1000, d["cnn_batch"])
        return trainer(vit, lambda: F.cross_entropy(vit(x), y), True, d["cnn_batch"])
    if name == "lstm-lm":
        lm = LstmLM(d["lstm_vocab"], d["lstm_hidden"], 2)
        ids = ints(d["lstm_vocab"], d["lstm_batch"], d["lstm_seq"] + 1)
        return trainer(lm, lambda: F.cross_entropy(lm(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()), False,
                       d["lstm_batch"])
    # dlrm
    rec = Dlrm(d["tables"], d["rows"], d["emb"])
    dense, sparse = rand(d["dlrm_batch"], 13), ints(d["rows"], d["dlrm_batch"], d["tables"], 1)
    clicks = (torch.rand(d["dlrm_batch"], generator=gen) < 0.25).float().to(dev)
    return trainer(rec, lambda: F.binary_cross_entropy_with_logits(rec(dense, sparse), clicks), False,
                   d["dlrm_batch"])
