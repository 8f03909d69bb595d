"""Test tiers come from the fixtures a test uses (tests/tiers.py), and a unit test that starts Ray or `corral serve`
anyway fails: checked on a small suite of stand-ins run by a pytest of its own (a fake `ray` module whose
`is_initialized` a fixture turns on, and a Python script named `corral` run as `corral serve`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiers import tiered

HERE = Path(__file__).resolve().parent

FAKE_RAY = """
on = False


def is_initialized():
    return on
"""

CONFTEST = """
import json
import subprocess
import time
from pathlib import Path

import pytest
import ray
from tiers import tiered


@pytest.fixture
@tiered("ray")
def declared_ray():
    ray.on = True
    yield
    ray.on = False


@pytest.fixture
def undeclared_ray():
    ray.on = True
    yield
    ray.on = False


@pytest.fixture
def through(declared_ray):
    return "a fixture that asks for a tiered one"


@pytest.fixture
def undeclared_serve():
    proc = subprocess.Popen([str(Path(__file__).with_name("corral")), "serve"])
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    while not cmdline.read_bytes():  # until the exec has laid out its argv, as a real server answers when up
        time.sleep(0.01)
    yield
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
@tiered("ray")
def module_ray():
    ray.on = True
    yield
    ray.on = False


@pytest.fixture(params=["sqlite", "postgresql"])
@tiered("postgres", param="postgresql")
def url(request):
    return request.param


@pytest.fixture
@tiered("browser")
def page():
    return "a browser page"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    tiers = {item.name: sorted(m.name for m in item.iter_markers() if m.name in
                               ("unit", "ray", "browser", "postgres", "netns", "slow")) for item in items}
    Path("tiers.json").write_text(json.dumps(tiers))
"""

TESTS = """
import pytest


def test_plain():
    pass


def test_declared(declared_ray):
    pass


def test_through(through):
    pass


def test_url(url):
    pass


@pytest.mark.slow
def test_marked():
    pass


class TestOverride:
    @pytest.fixture
    def page(self):
        return "a page made without a browser"

    def test_overridden(self, page):
        pass


def test_undeclared_ray(undeclared_ray):
    pass


def test_undeclared_serve(undeclared_serve):
    pass
"""

# Runs after the module above (file order): Ray stays up for the module, as a module-scoped cluster does.
MODULE_TESTS = """
def test_uses_module_ray(module_ray):
    pass


def test_after_module_ray():
    pass
"""


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, list[str]], str]:
    """The stand-in suite's tiers by test name, and pytest's report of its run."""
    folder = tmp_path_factory.mktemp("tiers")
    (folder / "ray.py").write_text(FAKE_RAY)
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_stand_ins.py").write_text(TESTS)
    (folder / "test_stand_ins_module.py").write_text(MODULE_TESTS)
    corral = folder / "corral"
    corral.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")  # runs as `python .../corral serve`
    corral.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(HERE), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # no plugin but tiers
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "tiers", "-p", "no:cacheprovider", "-q", "-rA",
                          "-W", "ignore::pytest.PytestUnknownMarkWarning", str(folder)],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False)
    return json.loads((folder / "tiers.json").read_text()), out.stdout + out.stderr


def test_a_test_gets_the_tiers_of_the_fixtures_it_uses_and_unit_where_none(
        suite: tuple[dict[str, list[str]], str]) -> None:
    tiers, report = suite
    assert tiers == {
        "test_plain": ["unit"],
        "test_declared": ["ray"],
        "test_through": ["ray"],  # the closure: what the fixtures it asks for ask for
        "test_url[sqlite]": ["unit"],
        "test_url[postgresql]": ["postgres"],  # only the param the tier names
        "test_marked": ["slow"],  # a marker on the test itself still counts
        "test_overridden": ["unit"],  # the closest definition of `page` is the one that runs
        "test_undeclared_ray": ["unit"],
        "test_undeclared_serve": ["unit"],
        "test_uses_module_ray": ["ray"],
        "test_after_module_ray": ["unit"],
    }, report


def test_a_unit_test_that_starts_ray_or_corral_serve_fails_saying_so(
        suite: tuple[dict[str, list[str]], str]) -> None:
    _, report = suite
    summary = {line.split(" ", 2)[1].split("::")[-1]: line.split(" ", 1)[0]
               for line in report.splitlines() if line.startswith(("PASSED ", "FAILED "))}
    assert summary == {"test_plain": "PASSED", "test_declared": "PASSED", "test_through": "PASSED",
                       "test_url[sqlite]": "PASSED", "test_url[postgresql]": "PASSED", "test_marked": "PASSED",
                       "test_overridden": "PASSED", "test_undeclared_ray": "FAILED",
                       "test_undeclared_serve": "FAILED", "test_uses_module_ray": "PASSED",
                       # not its doing: Ray was up before its fixtures were set up
                       "test_after_module_ray": "PASSED"}, report
    assert "test_undeclared_ray is in the unit tier but runs a Ray connection (ray.is_initialized())" in report
    assert "test_undeclared_serve is in the unit tier but runs `corral serve` (pid" in report
    assert "must say so with @tiered(...)" in report


def test_tiered_refuses_an_unknown_tier_and_a_place_above_the_fixture_decorator() -> None:
    with pytest.raises(ValueError, match="tier 'gpu' is not one of ray, browser, postgres, netns, slow"):
        tiered("gpu")
    with pytest.raises(TypeError, match="put it below @pytest.fixture"):
        tiered("ray")(pytest.fixture(lambda: None))
