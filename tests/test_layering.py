"""The layers of ../shared/DESIGN.md, as the folders show them, and no import circles.

Every import arrow points down: `scheduler.cli` -> `scheduler.live` -> `scheduler.core`; `web` -> `scheduler.live`,
`scheduler.core`, `policies`; `policies` -> `scheduler.core`; `agents` -> `policies`, `scheduler.core`. Only the
composition roots (`scheduler/cli/commands.py`, the `corral` command, and `scheduler/cli/serve.py`, `corral serve`),
which live together in one place, reach up, and only inside functions (lazily). Function-level imports count
everywhere else, and for circles.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scheduler", "policies", "agents", "web")

# layer -> the layers it may import (itself included)
ALLOWED = {
    "scheduler.core": {"scheduler.core"},
    "scheduler.live": {"scheduler.core", "scheduler.live"},
    "scheduler.cli": {"scheduler.core", "scheduler.live", "scheduler.cli", "corral"},  # the commands: on the client
    "policies": {"scheduler.core", "policies"},
    "agents": {"scheduler.core", "policies", "agents"},
    "web": {"scheduler.core", "scheduler.live", "policies", "web"},
    # The typed client, `import corral` (scheduler/sdk/corral: the top level is fixed), which the `corral` command is
    # built on: it knows nothing of the service but its API (and, below, which job states are final).
    "corral": {"corral"},
}
SDK = Path("scheduler/sdk")  # where the package `corral` lives (pyproject.toml's find `where`)
# Files that may also import these layers, lazily (inside functions) only.
COMPOSITION_ROOTS = {
    "scheduler/cli/learning_commands.py": {"agents"},  # corral train, evaluate, tune
    "scheduler/cli/policy_options.py": {"policies"},  # --policy, resolved through the registry
    "scheduler/cli/serve.py": {"policies", "web"},
    "scheduler/cli/api_workers.py": {"web"},  # `corral serve --api-workers`: the API processes
}
ROOTS_PLACE = "scheduler/cli/"  # the one place a module may reach up from
# `corral train --from-history` trains on the live store's record of jobs: it reads the store, at module level.
EXCEPTIONS = {"agents/finetune.py": {"scheduler.live"},
              # `follow_logs` stops at a final state: the one list of them (scheduler.live.job_states, no SQLAlchemy).
              "scheduler/sdk/corral/client.py": {"scheduler.live"}}
# The modules that may import ray: the live service's backend, and the sweeps that run simulations as Ray tasks
# (`corral evaluate --ray-address`; inside its functions, so that nothing else of agents/ needs Ray to import).
RAY_MODULES = {"scheduler/live/ray_backend.py", "agents/sweep.py"}
FLASK_LAYER = "web"  # the only layer that may import flask


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    rel = rel.relative_to(SDK) if rel.is_relative_to(SDK) else rel
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str | None:
    matches = [name for name in ALLOWED if module == name or module.startswith(name + ".")]
    return max(matches, key=len) if matches else None


def is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    base = ROOT / SDK if name.split(".")[0] == "corral" else ROOT
    return (base / rel).with_suffix(".py").is_file() or (base / rel / "__init__.py").is_file()


def imports(path: Path) -> Iterator[tuple[str, bool]]:
    """(imported module, whether the import is at module level) for every import in the file."""
    tree = ast.parse(path.read_text())
    top = set(map(id, tree.body))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        level = id(node) in top
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, level
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, level
            for alias in node.names:  # `from package import module` imports the module
                if is_module(f"{base}.{alias.name}"):
                    yield f"{base}.{alias.name}", level


FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "migrations" not in p.parts)


def test_the_composition_roots_live_in_one_place() -> None:
    """`corral` and `corral serve` sit together: no other folder holds a module allowed to import upward."""
    assert all(rel.startswith(ROOTS_PLACE) and (ROOT / rel).is_file() for rel in COMPOSITION_ROOTS)
    assert not (ROOT / "scheduler/live/serve.py").exists()


def test_every_package_module_has_a_layer() -> None:
    assert all(layer_of(module_name(p)) for p in FILES if module_name(p) != "scheduler")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    mine = layer_of(module_name(path))
    if mine is None:
        return  # scheduler/__init__.py: the namespace of the three layers, importing nothing
    lazy_ok = COMPOSITION_ROOTS.get(rel, set())
    bad = []
    for target, top_level in imports(path):
        top = target.split(".")[0]
        if top == "ray" and (rel not in RAY_MODULES or (top_level and rel != "scheduler/live/ray_backend.py")):
            bad.append(f"{target} (only {', '.join(sorted(RAY_MODULES))} import ray, agents/sweep.py lazily)")
        if top in ("flask", "werkzeug") and mine != FLASK_LAYER:
            bad.append(f"{target} (only web/ imports Flask)")
        theirs = layer_of(target)
        if theirs is None or theirs in ALLOWED[mine] | EXCEPTIONS.get(rel, set()):
            continue
        if theirs in lazy_ok and not top_level:
            continue
        bad.append(f"{target} ({mine} may not import {theirs}" + (", except lazily" if theirs in lazy_ok else "") + ")")
    assert not bad, f"{rel} imports " + "; ".join(bad)


def test_no_import_circles() -> None:
    graph: dict[str, set[str]] = {module_name(p): set() for p in FILES}
    for p in FILES:
        graph[module_name(p)] |= {t for t, _ in imports(p) if t in graph and t != module_name(p)}
    # Tarjan's strongly connected components: a component of more than one module is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


# ---- rules a reviewer should not have to remember -------------------------------------------------------------------

LIFECYCLE = "scheduler/live/lifecycle.py"  # the one module that changes a live job's state
STATE_NAMES = {"S", "JobState"}  # how the code names the live job states (`scheduler.live.job_states.JobState`)


def _names_a_job_state(node: ast.AST) -> bool:
    """Whether an expression mentions a live job state (`S.RUNNING`, `JobState.PENDING`) or a `state` variable."""
    return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in STATE_NAMES
               or isinstance(n, ast.Name) and n.id == "state" for n in ast.walk(node))


def state_writes(path: Path) -> Iterator[int]:
    """Lines that set a job's `state`: an assignment to `<x>.state` of a job state (alone or in a tuple), or
    `state=` given to an UPDATE's `.values(...)`. A new job's row is created pending (an INSERT), which is no move."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets
                       for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
            if any(isinstance(t, ast.Attribute) and t.attr == "state" for t in targets) and \
                    _names_a_job_state(node.value):
                yield node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "values" \
                and any(k.arg == "state" for k in node.keywords):
            yield node.lineno


def test_only_the_life_cycle_changes_a_jobs_state() -> None:
    live = [p for p in FILES if str(p.relative_to(ROOT)).startswith(("scheduler/live/", "scheduler/cli/", "web/"))]
    found = {str(p.relative_to(ROOT)): list(state_writes(p)) for p in live}
    outside = {path: lines for path, lines in found.items() if lines and path != LIFECYCLE}
    assert not outside, f"a job's state set outside {LIFECYCLE}: {outside}"
    assert found[LIFECYCLE], "the check found no state write even in the life cycle: it no longer sees them"


# Files hold one idea: none over this many lines. A few older files are larger; each may only shrink (its ceiling is
# its size when the rule came in) until it is split.
MAX_LINES = 600
LARGER = {
    "policies/rl_encoding.py": 900,  # the RL encoding: issue 48 rewrites it for speed
    "agents/train.py": 605,
}
SOURCES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "migrations" not in p.parts) + \
    sorted((ROOT / "web" / "static" / "js").glob("*.js"))


# Generated from a document, not written: its size is the document's (here, the API's schemas).
GENERATED = {"scheduler/sdk/corral/models.py"}


def test_no_file_is_over_the_size_limit() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in SOURCES
             if str(p.relative_to(ROOT)) not in GENERATED}
    over = {path: n for path, n in sizes.items() if n > LARGER.get(path, MAX_LINES)}
    assert not over, f"files over {MAX_LINES} lines (or over their recorded ceiling): split them: {over}"
    assert all(path in sizes for path in LARGER), "a file in LARGER is gone: drop it from the list"


# ---- reasons are read by their codes, never by their words ---------------------------------------------------------

# What holds a reason's words (`scheduler.core.reasons`): a job's `pending_reason` and `error` (attribute, JSON key or
# variable), and the simulator's `pending_reasons`. Deciding on them breaks when the words change (the start estimate
# once found the reservation's holder by the prefix "holds a reservation"); read `pending_code` / `end_code`.
REASON_WORDS = {"pending_reason", "pending_reasons", "error"}
TEXT_MATCHES = {"startswith", "endswith", "find", "rfind", "index", "rindex", "count", "split", "partition",
                "match", "search", "fullmatch", "findall"}
MATCHING_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
DECIDING = sorted(p for pkg in ("scheduler", "web") for p in (ROOT / pkg).rglob("*.py") if "migrations" not in p.parts)


def names_reason_words(node: ast.AST) -> bool:
    """Whether the expression reads a reason's words: `x.pending_reason`, `x["error"]`, `pending_reason`, ..."""
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in REASON_WORDS:
            return True
        if isinstance(n, ast.Name) and n.id in REASON_WORDS:
            return True
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value in REASON_WORDS:
            return True
    return False


def reason_matches(path: Path) -> Iterator[str]:
    """Each place in the file that compares or searches a reason's words."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and any(isinstance(op, MATCHING_OPS) for op in node.ops):
            if any(isinstance(o, ast.Constant) and o.value is None for o in node.comparators):
                continue  # `== None`: whether there is a reason, not what it says
            if names_reason_words(node.left) or any(names_reason_words(c) for c in node.comparators):
                yield f"line {node.lineno}: {ast.unparse(node)}"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TEXT_MATCHES
              and (names_reason_words(node.func.value) or any(names_reason_words(a) for a in node.args))):
            yield f"line {node.lineno}: {ast.unparse(node)}"


@pytest.mark.parametrize("path", DECIDING, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reason_is_matched_by_its_words(path: Path) -> None:
    found = list(reason_matches(path))
    assert not found, f"{path.relative_to(ROOT)} matches a reason's words (read its code): " + "; ".join(found)


def test_the_reason_scan_finds_what_it_forbids(tmp_path: Path) -> None:
    """The scan catches the prefix match the start estimate once made, and the other ways of matching words."""
    sample = tmp_path / "sample.py"
    sample.write_text("a = (job.pending_reason or '').startswith(HOLDS)\nb = 'lost' in row.error\n"
                      "c = body['pending_reason'] == 'x'\nd = re.match('x', job.error)\ne = job.error is None\n"
                      "f = job.pending_code == 'reservation'\ng = job.pending_reason == None\n")
    assert [f.split(":")[0] for f in reason_matches(sample)] == ["line 1", "line 2", "line 3", "line 4"]

