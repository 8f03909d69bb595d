"""Test tiers, derived from the fixtures a test uses (a pytest plugin; tests/conftest.py registers it).

A fixture that starts something beyond Python (a Ray cluster, `corral serve`, a browser, network namespaces, a
PostgreSQL schema) says so with `@tiered(...)`, placed below `@pytest.fixture`. A test gets the tier of every such
fixture in its fixture closure (what it asks for, and what those ask for), plus any tier marker it, its class or its
module carries itself (`pytestmark = pytest.mark.slow` for a module of long runs); a test with none is `unit`, the
tier `make test-fast` runs. After each `unit` test, a guard fails it if Ray or `corral serve` runs that did not
before its fixtures were set up, so a fixture that starts one without saying so is found the first time it runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

TIERS = ("ray", "browser", "postgres", "netns", "slow")
ANY_PARAM = object()  # `tiered(..., param=...)` left out: the tier holds for every param of the fixture
_ATTR = "__corral_tiers__"

Fixture = TypeVar("Fixture", bound=Callable[..., Any])


def tiered(tier: str, param: object = ANY_PARAM) -> Callable[[Fixture], Fixture]:
    """Declare that a fixture starts what `tier` needs; with `param`, only where the fixture's param is that value
    (the "postgresql" half of a fixture parametrized over stores). Stackable; goes below `@pytest.fixture`."""
    if tier not in TIERS:
        raise ValueError(f"tier {tier!r} is not one of {', '.join(TIERS)}")

    def declare(fixture: Fixture) -> Fixture:
        if hasattr(fixture, "_fixture_function_marker"):
            raise TypeError(f"@tiered({tier!r}) on {fixture.__name__}: put it below @pytest.fixture, on the function")
        setattr(fixture, _ATTR, (*getattr(fixture, _ATTR, ()), (tier, param)))
        return fixture

    return declare


def _used_definitions(definitions: Sequence[Any], name: str) -> Iterator[Any]:
    """The definitions of fixture `name` a test runs: the closest one, and the one it overrides while it asks for
    its own name (and so on outward)."""
    for definition in reversed(definitions):
        yield definition
        if name not in definition.argnames:
            return


def tiers_of(item: pytest.Item) -> set[str]:
    """The tiers a collected test belongs to, `unit` where nothing else applies."""
    found = {tier for tier in TIERS if item.get_closest_marker(tier) is not None}
    info = getattr(item, "_fixtureinfo", None)
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    if info is not None:
        for name in item.fixturenames:
            for definition in _used_definitions(info.name2fixturedefs.get(name, ()), name):
                for tier, when in getattr(definition.func, _ATTR, ()):
                    if when is ANY_PARAM or params.get(name, ANY_PARAM) == when:
                        found.add(tier)
    return found or {"unit"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for tier in sorted(tiers_of(item)):
            if item.get_closest_marker(tier) is None:
                item.add_marker(getattr(pytest.mark, tier))


# ---- the guard: a unit test that starts Ray or `corral serve` fails ----------------------------------------------

RAY_PROCESSES = {"gcs_server", "raylet"}  # what every Ray node runs, whoever started it


def _descendants(pid: int) -> Iterator[int]:
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            yield child
            yield from _descendants(child)


def _started(pid: int) -> str | None:
    """What process `pid` is, where it is Ray or `corral serve`."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    if comm in RAY_PROCESSES:
        return f"Ray's {comm} (pid {pid})"
    for i, arg in enumerate(argv[:-1]):
        if Path(arg).name == "corral" and argv[i + 1] == "serve":
            return f"`corral serve` (pid {pid})"
    return None


def beyond_python(pid: int) -> set[str]:
    """What this process runs that the unit tier must not: a Ray connection, Ray's processes or `corral serve`
    among its descendants."""
    running = {what for child in _descendants(pid) if (what := _started(child)) is not None}
    ray = sys.modules.get("ray")
    is_initialized = getattr(ray, "is_initialized", None)
    if is_initialized is not None and is_initialized():
        running.add("a Ray connection (ray.is_initialized())")
    return running


# What ran before a unit test's fixtures were set up: a module-scoped fixture another test of its module declared
# (and started) may still be up, and is not this test's doing.
_BEFORE = pytest.StashKey[set[str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    if item.get_closest_marker("unit") is not None:
        item.stash[_BEFORE] = beyond_python(os.getpid())
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    result = yield
    if item.get_closest_marker("unit") is not None:
        started = sorted(beyond_python(os.getpid()) - item.stash.get(_BEFORE, set()))
        if started:
            pytest.fail(f"{item.nodeid} is in the unit tier but runs {', '.join(started)}: the fixture that starts "
                        f"it must say so with @tiered(...) (tests/tiers.py), so that `make test-fast` leaves it out",
                        pytrace=False)
    return result
