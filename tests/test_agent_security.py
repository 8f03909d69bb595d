"""No request can make the server run code from a file a user wrote (issue 10, security 1).

A stable-baselines3 archive keeps the policy class, spaces and schedules as cloudpickle blobs: loading one the usual
way runs whatever its author pickled. Here a crafted archive (a pickle that creates a marker file when unpickled) is
planted where a user could write it and named every way the API accepts; the marker must never appear, and each
refusal must say why. The offline command line still loads an agent file the user names."""

from __future__ import annotations

import base64
import contextlib
import json
import pickle
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest

from policies import make_policy
from policies.trained import ZOO, AgentLoadError, sha256_of
from scheduler.live.store import Store
from scheduler.live.store.queries import create_token
from web import create_app

API = "/api/v1"


class Trap:
    """Unpickling this creates `path`: the stand-in for arbitrary code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return open, (str(self.path), "w")


def plant(folder: Path, name: str, marker: Path, *, key: str = "observation_space", sidecar_sha: str | None = "own",
          ) -> Path:
    """A copy of the shipped agent whose `data[key]` is a pickle that creates `marker`, with a sidecar recording
    `sidecar_sha` ("own": the planted archive's real SHA-256, as an attacker who can write the sidecar would)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}.zip"
    blob = {":type:": "<class 'object'>", ":serialized:": base64.b64encode(pickle.dumps(Trap(marker))).decode()}
    with zipfile.ZipFile(ZOO / "default.zip") as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            payload = src.read(item.filename)
            if item.filename == "data":
                data = json.loads(payload)
                data[key] = {**data.get(key, {}), **blob}  # the readable description stays; the pickle is the trap
                payload = json.dumps(data).encode()
            dst.writestr(item, payload)
    meta = json.loads((ZOO / "default.json").read_text())
    meta.pop("sha256", None)
    if sidecar_sha == "own":
        meta["sha256"] = sha256_of(out)
    elif sidecar_sha is not None:
        meta["sha256"] = sidecar_sha
    out.with_suffix(".json").write_text(json.dumps(meta))
    return out


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "pwned"


def test_the_trap_works_when_loaded_the_usual_way(tmp_path: Path, marker: Path) -> None:
    """The planted archive is dangerous: plain `MaskablePPO.load` (what Corral did before) unpickles it."""
    from sb3_contrib import MaskablePPO

    path = plant(tmp_path / "user", "evil", marker)
    with contextlib.suppress(Exception):  # the model need not load; the code already ran
        MaskablePPO.load(path, device="cpu")
    assert marker.exists()


def test_the_api_refuses_agent_paths(store: Store, corral_home: Path, tmp_path: Path, marker: Path) -> None:
    evil = plant(tmp_path / "user-writable", "evil", marker)
    with store.session() as s:
        tokens = {"alice": create_token(s, "alice"), "root": create_token(s, "root", admin=True)}
    client = create_app(store).test_client()
    for who in ("alice", "root"):
        auth = {"Authorization": f"Bearer {tokens[who]}"}
        # Through the wrappers too: their argument is a policy's name, an agent's among them.
        for name in (f"rl:{evil}", f"rl:{evil.with_suffix('')}", "rl:../../user-writable/evil", "deepshare:/x.zip",
                     f"largest:rl:{evil}", f"guarded:rl:{evil}", "guarded:largest:deepshare:/x.zip"):
            resp = client.post(f"{API}/whatif", json={"policy": name, "seeds": 1}, headers=auth)
            assert resp.status_code == 422, (who, name, resp.json)
            assert "policy" in resp.json["errors"]["json"] and "never by path" in resp.json["message"]
        for name in (f"rl:{evil}", f"guarded:rl:{evil}"):
            resp = client.put(f"{API}/policies/active", json={"name": name}, headers=auth)
            assert resp.status_code in (403, 422)  # alice is no admin; root gets the refusal by name
            if who == "root":
                assert "never by path" in resp.json["errors"]["json"]["name"][0]
                assert resp.json["message"].startswith("name: ") and not resp.json["message"].startswith("name: name:")
    assert not marker.exists()


def test_a_named_agent_must_match_its_recorded_sha256(corral_home: Path, marker: Path) -> None:
    agents = corral_home / "agents"  # an agent directory the server reads: $CORRAL_HOME/agents
    shipped_sha = json.loads((ZOO / "default.json").read_text())["sha256"]
    plant(agents, "swapped", marker, sidecar_sha=shipped_sha)  # the archive changed after its sidecar was written
    with pytest.raises(AgentLoadError, match="does not have the SHA-256 its sidecar records"):
        make_policy("rl:swapped")
    plant(agents, "unrecorded", marker, sidecar_sha=None)
    with pytest.raises(AgentLoadError, match="records no SHA-256"):
        make_policy("rl:unrecorded")
    assert not marker.exists()


def test_the_api_refuses_a_named_agent_without_its_recorded_sha256(store: Store, corral_home: Path,
                                                                  marker: Path) -> None:
    """A planted archive inside an agent directory, named as the API wants (by name): the sidecar records another
    archive's hash, or none at all. Both the what-if and the policy switch refuse it, naming the field."""
    agents = corral_home / "agents"
    plant(agents, "swapped", marker, sidecar_sha=json.loads((ZOO / "default.json").read_text())["sha256"])
    plant(agents, "unrecorded", marker, sidecar_sha=None)
    with store.session() as s:
        root = create_token(s, "root", admin=True)
    client = create_app(store).test_client()
    auth = {"Authorization": f"Bearer {root}"}
    for name, why in (("rl:swapped", "does not have the SHA-256 its sidecar records"),
                      ("rl:unrecorded", "records no SHA-256")):
        resp = client.post(f"{API}/whatif", json={"policy": name, "seeds": 1}, headers=auth)
        assert resp.status_code == 422 and why in resp.json["errors"]["json"]["policy"][0], resp.json
        resp = client.put(f"{API}/policies/active", json={"name": name}, headers=auth)
        assert resp.status_code == 422 and why in resp.json["errors"]["json"]["name"][0], resp.json
        assert resp.json["message"].startswith("name: ") and not resp.json["message"].startswith("name: name:")
    assert client.get(f"{API}/policies", headers=auth).json["active"] != "rl:swapped"
    assert not marker.exists()


@pytest.mark.parametrize("key", ["observation_space", "policy_class", "lr_schedule"])
def test_loading_never_unpickles_even_a_consistent_archive(corral_home: Path, marker: Path, key: str) -> None:
    """Whoever can write an agent directory can also write a matching sidecar; the pickled entries are still never
    unpickled (each is rebuilt by Corral), so the agent loads and nothing runs."""
    plant(corral_home / "agents", "consistent", marker, key=key)
    policy = make_policy("rl:consistent")
    assert policy.name == "rl:consistent"
    assert not marker.exists()


def test_an_archive_with_other_pickled_entries_is_refused(corral_home: Path, marker: Path) -> None:
    plant(corral_home / "agents", "extra", marker, key="surprise")
    with pytest.raises(AgentLoadError, match="pickled objects Corral does not load \\(surprise\\)"):
        make_policy("rl:extra")
    assert not marker.exists()


def test_the_offline_cli_still_loads_an_agent_file_by_path(tmp_path: Path) -> None:
    mine = tmp_path / "mine.zip"
    shutil.copy(ZOO / "default.zip", mine)
    shutil.copy(ZOO / "default.json", mine.with_suffix(".json"))
    assert make_policy(f"rl:{mine}").name == f"rl:{mine}"
