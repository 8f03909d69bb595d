"""The import rule of ../shared/DESIGN.md: the core imports none of policies/agents/web, nor Ray or Flask; only the
composition root (scheduler/cli.py) reaches upward, and only lazily."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UPWARD = {"policies", "agents", "web", "ray", "flask"}


def imported_top_modules(path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


COMPOSITION_ROOTS = {"cli.py", "serve.py"}  # they wire the layers together, importing upward lazily
RAY_MODULE = ROOT / "scheduler" / "ray_backend.py"  # the one module that may import ray


@pytest.mark.parametrize("path", sorted((ROOT / "scheduler").rglob("*.py")), ids=lambda p: p.name)
def test_core_does_not_import_upward(path: Path) -> None:
    is_root = path.name in COMPOSITION_ROOTS
    allowed = {"ray"} if path == RAY_MODULE else set()
    bad = (imported_top_modules(path, top_level_only=is_root) & UPWARD) - allowed
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


ALL_MODULES = sorted(p for d in ("scheduler", "policies", "agents", "web") for p in (ROOT / d).rglob("*.py"))


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_ray_backend_imports_ray(path: Path) -> None:
    if path != RAY_MODULE:
        assert "ray" not in imported_top_modules(path, top_level_only=False), f"{path.relative_to(ROOT)} imports ray"


@pytest.mark.parametrize("path", sorted((ROOT / "policies").rglob("*.py")), ids=lambda p: p.name)
def test_policies_use_only_the_core(path: Path) -> None:
    bad = imported_top_modules(path, top_level_only=False) & {"agents", "web", "ray", "flask"}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
