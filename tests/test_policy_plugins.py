"""Policies from other packages (the `corral.policies` entry point group): an installed package's policy appears in
`available()`, `corral simulate --policy` and the live API, and one that is broken, not a policy or takes a name in
use is left out with the reason while Corral's own policies stay as they are.

"Installed" here is what pip leaves on `sys.path`: a `.dist-info` folder whose `entry_points.txt` names the class,
written per test into a temporary folder, beside the example package `tests/plugins/corral_lifo`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import job, small_cluster

from policies import registry
from policies.heuristics import Fifo
from policies.registry import UnknownPolicyError, available, load_plugins, make_policy
from scheduler.core.model import JobPhase
from scheduler.core.simulator import Simulator

EXAMPLE = Path(__file__).resolve().parent / "plugins" / "corral_lifo"


def install(site: Path, dist: str, entries: dict[str, str]) -> None:
    """What `pip install` leaves for a package `dist` with these `corral.policies` entry points."""
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[corral.policies]\n{lines}")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A site folder on sys.path (with the example package importable), and the registry as it was afterwards."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = [(table, table.copy()) for table in (registry._CLASSES, registry._LEFT_OUT, registry._FROM_PACKAGES)]
    yield tmp_path
    for table, copy in saved:
        table.clear()
        table.update(copy)  # type: ignore[attr-defined]
    sys.modules.pop("corral_lifo", None)


def test_an_installed_packages_policy_is_listed_built_and_simulated(site: Path) -> None:
    assert "lifo" not in available()
    install(site, "corral-lifo", {"lifo": "corral_lifo:Lifo"})
    assert load_plugins(again=True) == {}
    assert "lifo" in available()
    # 2 GPUs: a holds both until 100; b, c and d queue. Last in, first out: d (1 GPU) and c (1 GPU) at 100, b at 110.
    trace = [job("a", 0, 2, 100), job("b", 1, 2, 10), job("c", 2, 1, 10), job("d", 3, 1, 10)]
    result = Simulator(small_cluster(nodes=1, gpus=2), trace, make_policy("lifo"), contention=False).run()
    start = {j.spec.name: j.first_start_s for j in result.jobs if j.state is JobPhase.DONE}
    assert start == {"a": 0.0, "d": 100.0, "c": 100.0, "b": 110.0}
    fifo = Simulator(small_cluster(nodes=1, gpus=2), trace, make_policy("fifo"), contention=False).run()
    assert {j.spec.name: j.first_start_s for j in fifo.jobs}["b"] == 100.0  # the difference is the plugin's rule


@pytest.mark.slow
def test_corral_simulate_takes_the_installed_policy_by_name(site: Path, tmp_path: Path) -> None:
    install(site, "corral-lifo", {"lifo": "corral_lifo:Lifo"})
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLE), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", "from scheduler.cli.commands import main; main()", "simulate",
                          "--trace", "synthetic:60",
                          "--cluster", "dgx-a100:1", "--policy", "lifo,fifo", "--json", str(tmp_path / "out.json")],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "lifo" in run.stdout and "fifo" in run.stdout
    assert '"lifo"' in (tmp_path / "out.json").read_text()


def test_the_live_api_lists_and_activates_it(site: Path, tmp_path: Path, corral_home: Path) -> None:
    from scheduler.live.store import Store, queries
    from web import create_app

    install(site, "corral-lifo", {"lifo": "corral_lifo:Lifo"})
    load_plugins(again=True)
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    with store.session(write=True) as s:
        token = queries.create_token(s, "root", admin=True)
    client = create_app(store).test_client()
    auth = {"Authorization": f"Bearer {token}"}
    assert "lifo" in client.get("/api/v1/policies", headers=auth).json["available"]
    assert client.put("/api/v1/policies/active", json={"name": "lifo"}, headers=auth).json == {"active": "lifo"}
    store.close()


def test_a_broken_or_foreign_entry_point_is_left_out_with_why_and_corral_keeps_its_own(site: Path) -> None:
    (site / "broken_policy.py").write_text("raise ImportError('needs a GPU library this machine lacks')\n")
    (site / "not_a_policy.py").write_text("def lifo_function():\n    return []\n\nclass Named:\n    name = 'other'\n")
    install(site, "corral-odd", {"broken": "broken_policy:Policy", "notclass": "not_a_policy:lifo_function",
                                 "misnamed": "not_a_policy:Named", "fifo": "corral_lifo:Lifo", "rl": "corral_lifo:Lifo",
                                 "Bad Name": "corral_lifo:Lifo"})
    left_out = load_plugins(again=True)
    assert "failed to load: ImportError: needs a GPU library this machine lacks" in left_out["broken"]
    assert "not a policy class" in left_out["notclass"]
    assert "has name 'other', not 'misnamed'" in left_out["misnamed"]
    assert "already policies.heuristics.Fifo's" in left_out["fifo"]
    assert "prefix of Corral's rl:NAME policies" in left_out["rl"]
    assert "lowercase letters" in left_out["Bad Name"]
    assert isinstance(make_policy("fifo"), Fifo)  # the built-in, not the package's
    assert not {"broken", "notclass", "misnamed"} & set(available())
    with pytest.raises(UnknownPolicyError, match="policy 'broken' from an installed package was left out: it failed"):
        make_policy("broken")
