"""The typed client, `import corral` (issue 51 item 4): its classes are the API's OpenAPI document's, regenerated
here and compared, so the two cannot drift; against the real app served over HTTP, its answers are those classes and
its failures typed errors; docs/client.md's example runs as written."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
import typing
from pathlib import Path
from types import ModuleType

import pytest
from conftest import new_store, served

import corral
import corral.models as m
from corral import Client, Forbidden, InvalidRequest, NotFound, Unauthorized, Unreachable
from corral.model_base import Answer
from scheduler.live.store import Store, database_url
from scheduler.live.store.queries import create_token
from web import create_app

ROOT = Path(__file__).resolve().parents[1]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sdk_models", ROOT / "docs" / "tools" / "sdk_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_models_are_the_api_documents() -> None:
    gen = generator()
    spec = gen.openapi()
    assert gen.render(spec) == Path(m.__file__).read_text(), "run `python docs/tools/sdk_models.py`"
    schemas = spec["components"]["schemas"]
    classes = {name: cls for name, cls in vars(m).items() if isinstance(cls, type) and issubclass(cls, Answer)
               and cls is not Answer}
    assert set(gen.roots(spec)) <= set(classes)
    answers = {op["responses"][code]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
               for ops in spec["paths"].values() for op in ops.values() if isinstance(op, dict)
               for code in op.get("responses", {}) if code.startswith("2")
               and "$ref" in op["responses"][code].get("content", {}).get("application/json", {}).get("schema", {})}
    assert answers == set(gen.roots(spec)) and {"WebhookList", "Limits", "NodeDrain"} <= answers  # every endpoint's
    for name, cls in classes.items():  # every field of every answer, named as the document names it
        assert [f.name.rstrip("_") for f in dataclasses.fields(cls)] == list(schemas[name].get("properties", {}))
    hints = typing.get_type_hints(m.JobList, vars(m))
    assert hints["jobs"] == list[m.JobSummary] | None and typing.get_type_hints(m.Job, vars(m))["id"] == int | None


def test_answers_parse_by_their_types_and_ignore_fields_they_do_not_know() -> None:
    page = m.JobList.from_json({"jobs": [{"id": 3, "name": "a", "num_gpus": 2, "allocation": [{"gpu": 1}]}],
                                "total": 1, "added_by_a_newer_server": True})
    assert page.total == 1 and page.jobs is not None
    job = page.jobs[0]
    assert isinstance(job, m.JobSummary) and job.id == 3 and job.num_gpus == 2.0 and isinstance(job.num_gpus, float)
    # As JSON again: what the server sent, unknown fields included (`corral jobs --json` prints it); one built in
    # code: its fields that are set.
    assert page.to_json()["added_by_a_newer_server"] is True and job.to_json()["num_gpus"] == 2
    assert m.JobSummary(id=4, num_gpus=1.0).to_json() == {"id": 4, "num_gpus": 1.0}
    with pytest.raises(TypeError, match="JobList"):
        m.JobList.from_json(["not", "an", "object"])


@pytest.fixture
def url_and_tokens(corral_home: Path, migrated_sqlite: Path) -> typing.Iterator[tuple[str, str, str]]:
    store: Store = new_store(database_url(), migrated_sqlite)
    with store.session() as s:
        alice, bob = create_token(s, "alice"), create_token(s, "bob")
    with served(create_app(store, config={"CORRAL_COMMAND_JOBS": "everyone"})) as url:
        yield url, alice, bob
    store.close()


def test_the_client_gives_typed_answers_and_typed_errors(url_and_tokens: tuple[str, str, str]) -> None:
    url, alice_token, bob_token = url_and_tokens
    alice = Client(url, alice_token)
    job = alice.submit(name="train", kind="command", num_gpus=1, entrypoint="python train.py")
    assert isinstance(job, m.Job) and job.state == "pending" and job.model == "generic" and job.user == "alice"
    shown = alice.job(job.id or 0)
    assert isinstance(shown, m.JobDetail) and shown.id == job.id and shown.entrypoint == "python train.py"
    listed = alice.jobs()
    assert listed.total == 1 and listed.jobs is not None and isinstance(listed.jobs[0], m.JobSummary)
    why = alice.explain(job.id or 0)
    assert isinstance(why, m.Explain) and why.profile is not None and why.profile.refined is False
    assert any(p.name == "ResNet-50-bs64" and isinstance(p, m.Model) for p in alice.models())
    assert alice.cancel(job.id or 0).state == "cancelled"

    with pytest.raises(InvalidRequest) as bad:
        alice.submit(name="x", kind="emulated", num_gpus=1, duration_s=60)  # emulated jobs name a model
    assert set(bad.value.errors) == {"model"} and bad.value.status == 422
    with pytest.raises(Forbidden):
        Client(url, bob_token).job(job.id or 0)  # another user's job is not bob's to see
    with pytest.raises(NotFound):
        alice.job(10**6)
    with pytest.raises(Unauthorized):
        Client(url, "not-a-token").jobs()
    with pytest.raises(Unreachable) as down:
        Client("http://127.0.0.1:9", alice_token).health()
    assert isinstance(down.value, corral.CorralError) and down.value.status is None  # the CLI's handlers catch it


def test_the_docs_example_runs_as_written(url_and_tokens: tuple[str, str, str]) -> None:
    url, token, _ = url_and_tokens
    text = (ROOT / "docs" / "client.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    example = next(b for b in blocks if "from corral import" in b)
    run = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "CORRAL_URL": url, "CORRAL_TOKEN": token})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert re.fullmatch(r"\d+ pending generic", lines[0]) and "refused: {'model'" in run.stdout, run.stdout
