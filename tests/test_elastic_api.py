"""Elastic jobs (issue 49) as users give them: `POST /jobs` takes min_gpus, max_gpus, sizes and resize_pause_s
(each bad one a 422 naming it, nothing stored), shows them in a job and the list and documents them; the store keeps
them (migration 0022, both ways); the controller's row -> JobSpec conversion and what-if carry them, so the policy
sees an elastic job; `corral submit --gpus MIN-MAX` and its options, and `corral jobs` / `corral show` say so."""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from click.testing import CliRunner
from conftest import StartingBackend
from test_api import EMULATED, Env, field_errors, make_env
from test_client_cli import Server, corral, failure, ok, server  # noqa: F401 (server: the fixture)

import corral.models as m
from corral import Client, Submitted
from policies.heuristics import Fifo
from scheduler.cli.client_text import job_gpus_text, show_gpus_text
from scheduler.cli.commands import main
from scheduler.core.decisions import Decision
from scheduler.core.model import Job, JobSpec
from scheduler.core.workloads import catalog
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.rows import job_of
from scheduler.live.store import Store
from scheduler.live.store.db import alembic_config, make_engine
from scheduler.live.store.models import Gpu, Node
from scheduler.live.store.models import Job as JobRow
from scheduler.live.whatif import _spec, snapshot
from web import limits

ELASTIC = {"num_gpus": 2, "min_gpus": 2, "max_gpus": 8, "sizes": [2, 4, 8], "resize_pause_s": 45.0}
ELASTIC_FIELDS = ("min_gpus", "max_gpus", "sizes", "resize_pause_s")


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    return make_env(store)


def row(store: Store, job_id: int) -> JobRow:
    with store.session() as s:
        found = s.get(JobRow, job_id)
        assert found is not None
        s.expunge(found)
        return found


def spec_of(store: Store, job_id: int) -> JobSpec:
    """The job as the controller hands it to the policy (`rows.job_of`, which it calls for every job it reads)."""
    with store.session() as s:
        found = s.get(JobRow, job_id)
        assert found is not None
        return job_of(found, catalog()).spec


# ---- the API -----------------------------------------------------------------------------------------------------


def test_an_elastic_job_is_taken_stored_and_shown_in_the_job_and_the_list(env: Env) -> None:
    job = env.submit(**ELASTIC)
    assert {k: job[k] for k in ELASTIC} == ELASTIC
    assert {k: env.get(f"/jobs/{job['id']}").json[k] for k in ELASTIC} == ELASTIC
    listed = env.get("/jobs").json["jobs"]
    assert [{k: j[k] for k in ELASTIC} for j in listed] == [ELASTIC]
    stored = row(env.store, job["id"])
    assert (stored.min_gpus, stored.max_gpus, stored.sizes, stored.resize_pause_s) == (2, 8, [2, 4, 8], 45.0)


def test_a_job_of_one_size_shows_null_bounds_and_an_empty_sizes_list_means_any_size(env: Env) -> None:
    rigid = env.submit()
    assert {k: rigid[k] for k in ELASTIC_FIELDS} == dict.fromkeys(ELASTIC_FIELDS)
    any_size = env.submit(num_gpus=4, min_gpus=1, max_gpus=8, sizes=[])
    assert (any_size["sizes"], any_size["resize_pause_s"]) == (None, None)
    assert row(env.store, any_size["id"]).sizes is None


def test_the_bounds_are_taken_at_their_limits(env: Env) -> None:
    top = limits.MAX_JOB_GPUS
    sizes = list(range(1, limits.MAX_ELASTIC_SIZES + 1))
    for body in ({"num_gpus": 1, "min_gpus": 1, "max_gpus": top}, {"num_gpus": 4, "min_gpus": 4, "max_gpus": 4},
                 {"num_gpus": 1, "min_gpus": 1, "max_gpus": 64, "sizes": sizes},
                 {"num_gpus": 2, "min_gpus": 1, "max_gpus": 4, "resize_pause_s": 0},
                 {"num_gpus": 2, "min_gpus": 1, "max_gpus": 4, "resize_pause_s": limits.MAX_RESIZE_PAUSE_S}):
        resp = env.post("/jobs", EMULATED | body)
        assert resp.status_code == 201, (body, resp.json)


BAD = [
    ("max_gpus", {"min_gpus": 2}),  # a bound alone: the missing one is named
    ("min_gpus", {"max_gpus": 8}),
    ("min_gpus", {"num_gpus": 0.5, "min_gpus": 1, "max_gpus": 2}),  # a share of a GPU is never elastic
    ("min_gpus", {"num_gpus": 2, "min_gpus": 4, "max_gpus": 8}),  # num_gpus below the minimum
    ("min_gpus", {"num_gpus": 8, "min_gpus": 2, "max_gpus": 4}),  # above the maximum
    ("min_gpus", {"num_gpus": 4, "min_gpus": 8, "max_gpus": 2}),
    ("min_gpus", {"min_gpus": 0, "max_gpus": 2}),
    ("min_gpus", {"min_gpus": 2.5, "max_gpus": 4}),
    ("min_gpus", {"min_gpus": "2", "max_gpus": 4}),
    ("min_gpus", {"min_gpus": True, "max_gpus": 4}),
    ("max_gpus", {"min_gpus": 2, "max_gpus": limits.MAX_JOB_GPUS + 1}),
    ("max_gpus", {"min_gpus": 2, "max_gpus": 10**400}),  # an int no float holds
    ("sizes", {"min_gpus": 2, "max_gpus": 8, "sizes": [8, 2, 4]}),  # not increasing
    ("sizes", {"min_gpus": 2, "max_gpus": 8, "sizes": [2, 2, 4]}),
    ("sizes", {"min_gpus": 2, "max_gpus": 8, "sizes": [4, 8]}),  # without num_gpus
    ("sizes", {"min_gpus": 2, "max_gpus": 8, "sizes": [1, 2, 4]}),  # below the minimum
    ("sizes", {"min_gpus": 2, "max_gpus": 8, "sizes": [2, 16]}),  # above the maximum
    ("sizes", {"min_gpus": 2, "max_gpus": 8, "sizes": [0, 2]}),
    ("sizes", {"min_gpus": 1, "max_gpus": 8, "sizes": "2,4"}),
    ("sizes", {"min_gpus": 1, "max_gpus": 128, "sizes": list(range(2, limits.MAX_ELASTIC_SIZES + 3))}),
    ("resize_pause_s", {"min_gpus": 2, "max_gpus": 8, "resize_pause_s": -1}),
    ("resize_pause_s", {"min_gpus": 2, "max_gpus": 8, "resize_pause_s": limits.MAX_RESIZE_PAUSE_S + 1}),
    ("resize_pause_s", {"min_gpus": 2, "max_gpus": 8, "resize_pause_s": "long"}),
]


@pytest.mark.parametrize(("field", "body"), BAD, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD)])
def test_each_bad_elastic_field_is_refused_by_name_and_nothing_is_stored(env: Env, field: str,
                                                                          body: dict[str, Any]) -> None:
    resp = env.post("/jobs", EMULATED | {"num_gpus": 2} | body)
    assert resp.status_code == 422, resp.json
    assert set(field_errors(resp)) == {field}, field_errors(resp)
    assert resp.json["message"].startswith(f"{field}: ")
    assert env.job_count() == 0 and env.notified == []


@pytest.mark.parametrize("body", [{"sizes": [2, 4]}, {"resize_pause_s": 30.0}])
def test_sizes_or_a_pause_without_bounds_name_both_missing_bounds(env: Env, body: dict[str, Any]) -> None:
    resp = env.post("/jobs", EMULATED | body)
    assert resp.status_code == 422 and set(field_errors(resp)) == {"min_gpus", "max_gpus"}, resp.json
    assert "go together" in field_errors(resp)["min_gpus"][0]
    assert env.job_count() == 0


def test_a_resubmission_copies_the_sizes_and_checks_a_change_by_the_same_rules(env: Env) -> None:
    job = env.submit(**ELASTIC)
    again = env.post(f"/jobs/{job['id']}/resubmit", {"max_gpus": 4, "sizes": [2, 4]})
    assert again.status_code == 201, again.json
    assert {k: again.json[k] for k in ELASTIC} == ELASTIC | {"max_gpus": 4, "sizes": [2, 4]}
    bad = env.post(f"/jobs/{job['id']}/resubmit", {"max_gpus": 4})  # its sizes still name 8
    assert bad.status_code == 422 and set(field_errors(bad)) == {"sizes"}
    assert env.job_count() == 2


def test_the_openapi_document_states_the_fields_and_their_bounds(env: Env) -> None:
    schemas = env.client.get("/api/v1/openapi.json").json["components"]["schemas"]
    submit = schemas["JobSubmit"]["properties"]
    for name in ("min_gpus", "max_gpus"):
        assert (submit[name]["minimum"], submit[name]["maximum"]) == (1, limits.MAX_JOB_GPUS)
        assert submit[name]["description"]
    assert submit["sizes"]["maxItems"] == limits.MAX_ELASTIC_SIZES
    assert submit["sizes"]["items"]["maximum"] == limits.MAX_JOB_GPUS
    assert (submit["resize_pause_s"]["minimum"], submit["resize_pause_s"]["maximum"]) == (
        0, limits.MAX_RESIZE_PAUSE_S)
    for shown in ("Job", "JobSummary"):
        assert set(ELASTIC_FIELDS) <= set(schemas[shown]["properties"]), shown


# ---- the store ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("before", "added"), [("0021", set(ELASTIC_FIELDS)), ("0029", {"requested_gpus"})],
                         ids=["0022 the elastic columns", "0030 requested_gpus"])
def test_a_migration_adds_its_columns_and_takes_them_away(db_url: str, before: str, added: set[str]) -> None:
    Store.open(db_url).close()
    engine = make_engine(db_url)

    def columns() -> set[str]:
        return {c["name"] for c in sa.inspect(engine).get_columns("jobs")}

    try:
        assert added <= columns()
        command.downgrade(alembic_config(db_url), before)
        assert not added & columns() and "num_gpus" in columns()
        command.upgrade(alembic_config(db_url), "head")
        assert added <= columns()
    finally:
        engine.dispose()


# ---- what the core sees ------------------------------------------------------------------------------------------


def test_a_submitted_elastic_job_becomes_an_elastic_spec(env: Env) -> None:
    job = env.submit(**ELASTIC)
    spec = spec_of(env.store, job["id"])
    assert spec.elastic and (spec.min_gpus, spec.max_gpus, spec.sizes, spec.resize_pause_s) == (2, 8, (2, 4, 8), 45.0)
    assert tuple(spec.size_choices()) == (2, 4, 8) and spec.num_gpus == 2
    ranged = spec_of(env.store, env.submit(num_gpus=3, min_gpus=2, max_gpus=5)["id"])
    assert ranged.elastic and tuple(ranged.size_choices()) == (2, 3, 4, 5) and ranged.resize_pause_s is None
    rigid = spec_of(env.store, env.submit()["id"])
    assert not rigid.elastic and (rigid.min_gpus, rigid.max_gpus, rigid.sizes) == (None, None, ())


class Recording:
    """FIFO that keeps the specs of the queue it is shown."""

    name = "recording"
    oracle = False

    def __init__(self) -> None:
        self.inner = Fifo()
        self.seen: dict[str, JobSpec] = {}

    def schedule(self, view: Any, queue: Collection[Job], now: float) -> list[Decision]:
        self.seen |= {j.spec.name: j.spec for j in queue}
        return self.inner.schedule(view, queue, now)


def test_the_controller_hands_the_policy_an_elastic_job_submitted_through_the_api(env: Env) -> None:
    env.submit(name="grows", **ELASTIC)
    env.submit(name="fixed", num_gpus=1)
    policy = Recording()
    names = ["n0", "n1"]
    ctl = Controller(env.store, StartingBackend(names, 4), build_live_cluster("dgx-a100", [4, 4]), names,
                     lambda name: policy, default_policy="recording", tick_s=0.1, preset="dgx-a100")
    ctl.recover()
    ctl.step()
    assert set(policy.seen) == {"grows", "fixed"}
    grows = policy.seen["grows"]
    assert grows.elastic and tuple(grows.size_choices()) == (2, 4, 8) and grows.resize_pause_s == 45.0
    assert not policy.seen["fixed"].elastic


def test_what_if_simulates_a_pending_elastic_job_as_elastic(env: Env) -> None:
    job = env.submit(**ELASTIC)
    [pending] = snapshot(env.store).pending
    assert pending.id == job["id"]
    spec = _spec(pending.name, pending.model, pending.num_gpus, pending.work_left, catalog(), elastic=pending.elastic)
    assert spec.elastic and tuple(spec.size_choices()) == (2, 4, 8) and spec.resize_pause_s == 45.0


# ---- the CLI -----------------------------------------------------------------------------------------------------


SUBMIT = ["submit", "--name", "x", "--model", "ResNet-50-bs64", "--duration", "60"]


def recorded_submissions(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The bodies `corral submit` sends, kept instead of sent (each answered as a new pending job)."""
    bodies: list[dict[str, Any]] = []

    def submit_once(self: Any, spec: dict[str, Any]) -> Submitted:
        bodies.append(dict(spec))
        return Submitted(m.Job(id=1, state="pending"), True)

    monkeypatch.setattr(Client, "submit_once", submit_once)
    return bodies


@pytest.mark.parametrize(("args", "sent"), [
    (["--gpus", "2-8"], {"num_gpus": 2, "min_gpus": 2, "max_gpus": 8}),
    (["--gpus", "2-8", "--ref-gpus", "4"], {"num_gpus": 4, "min_gpus": 2, "max_gpus": 8}),
    (["--gpus", " 1-4 ", "--sizes", "4,1,2", "--resize-pause", "30"],
     {"num_gpus": 1, "min_gpus": 1, "max_gpus": 4, "sizes": [1, 2, 4], "resize_pause_s": 30.0}),
    (["--gpus", "4"], {"num_gpus": 4}),
    (["--gpus", "0.5"], {"num_gpus": 0.5}),
])
def test_submit_sends_what_gpus_and_the_elastic_options_say(args: list[str], sent: dict[str, Any],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = recorded_submissions(monkeypatch)
    result = CliRunner().invoke(main, [*SUBMIT, *args], env={"CORRAL_URL": "http://127.0.0.1:9", "CORRAL_TOKEN": "t"})
    assert result.exit_code == 0, result.output
    [body] = bodies
    assert {k: body[k] for k in body if "gpus" in k or k in ("sizes", "resize_pause_s")} == sent


@pytest.mark.parametrize(("args", "says"), [
    (["--gpus", "8-2"], "--gpus: the minimum (8) is above the maximum (2)"),
    (["--gpus", "2-"], "--gpus: write MIN-MAX with both ends"),
    (["--gpus", "0.5-2"], "--gpus: an elastic job's bounds are whole GPUs"),
    (["--gpus", "0-2"], "--gpus: the minimum is at least 1 GPU"),
    (["--gpus", "2-x"], "--gpus: an elastic job's bounds are whole GPUs"),
    (["--gpus", "-2"], "--gpus: must be more than 0"),
    (["--gpus", "2-8", "--ref-gpus", "9"], "--ref-gpus: must be within the job's sizes, 2-8, got 9"),
    (["--gpus", "4", "--ref-gpus", "4"], "--ref-gpus: only for an elastic job"),
    (["--gpus", "4", "--sizes", "2,4"], "--sizes: only for an elastic job"),
    (["--gpus", "4", "--resize-pause", "10"], "--resize-pause: only for an elastic job"),
    (["--ref-gpus", "4"], "--ref-gpus: only for an elastic job"),
    (["--gpus", "2-8", "--sizes", "2,x"], "--sizes: give whole GPU counts separated by commas"),
    (["--gpus", "2-8", "--sizes", "0,2"], "--sizes: each size is at least 1 GPU"),
    (["--gpus", "2-8", "--resize-pause", "-1"], "--resize-pause: must be at least 0"),
])
def test_bad_gpu_forms_are_one_line_naming_the_option_before_any_request(args: list[str], says: str) -> None:
    # CORRAL_URL points where nothing listens: a refusal must come before any request.
    result = CliRunner().invoke(main, [*SUBMIT, *args], env={"CORRAL_URL": "http://127.0.0.1:9", "CORRAL_TOKEN": "t"})
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"corral: {says}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_gpus_n_makes_a_file_s_elastic_job_one_size_and_gpus_min_max_overrides_its_bounds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = recorded_submissions(monkeypatch)
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"name": "f", "model": "ResNet-50-bs64", "duration_s": 60} | ELASTIC))
    env = {"CORRAL_URL": "http://127.0.0.1:9", "CORRAL_TOKEN": "t"}
    for args in (["--gpus", "4"], ["--gpus", "1-16"], ["--ref-gpus", "4"]):
        result = CliRunner().invoke(main, ["submit", "--file", str(spec), *args], env=env)
        assert result.exit_code == 0, result.output
    one, wider, measured = bodies
    assert one["num_gpus"] == 4 and not set(ELASTIC_FIELDS) & set(one)
    assert (wider["num_gpus"], wider["min_gpus"], wider["max_gpus"], wider["sizes"]) == (1, 1, 16, [2, 4, 8])
    assert (measured["num_gpus"], measured["min_gpus"], measured["max_gpus"]) == (4, 2, 8)


def test_corral_submit_jobs_and_show_an_elastic_job(server: Server) -> None:  # noqa: F811 (the fixture)
    out = ok(server, *SUBMIT, "--gpus", "2-8", "--sizes", "2,4,8", "--resize-pause", "45")
    job_id = int(out.split()[2])
    ok(server, *SUBMIT, "--gpus", "3")
    jobs = ok(server, "jobs")
    header, *rows = jobs.splitlines()
    column = header.split().index("gpus")
    assert [ln.split()[column] for ln in rows[:2]] == ["3", "2-8"]  # newest first
    shown = ok(server, "show", str(job_id))
    assert "2-8, elastic: sizes 2, 4, 8; duration measured at 2 GPUs; resize pause 45 s" in " ".join(shown.split())
    err = failure(corral(server, *SUBMIT, "--gpus", "2-8", "--sizes", "4,8"))
    assert "HTTP 422" in err and "sizes:" in err  # the server's rule: the sizes include the size it is measured at


def test_corral_submit_says_when_a_job_is_stored_smaller_than_it_asked(server: Server) -> None:  # noqa: F811
    with server.store.session() as s:  # a node of 4 GPUs recorded: a job of 16 is brought down to 4
        node = Node(name="node-a", index=0, preset="dgx-a100", alive=True, updated_at=time.time())
        node.gpus = [Gpu(index=i, local_index=i, gpu_type="A100-80GB", mem_gb=80.0) for i in range(4)]
        s.add(node)
    out = ok(server, *SUBMIT, "--gpus", "2-16", "--ref-gpus", "16")
    assert "stored at 4 GPUs: the cluster can never hold the 16 it asked for" in out, out
    job_id = int(out.split()[2])
    shown = " ".join(ok(server, "show", str(job_id)).split())
    assert "duration measured at 4 GPUs" in shown and "submitted at 16 GPUs, which the cluster can never hold" in shown
    fits = ok(server, *SUBMIT, "--gpus", "2-4")
    assert "stored at" not in fits


def test_the_gpu_words_of_every_kind_of_job() -> None:
    rigid = m.JobDetail(num_gpus=0.5)
    assert (job_gpus_text(rigid), show_gpus_text(rigid)) == ("0.5", "0.5")
    ranged = m.JobDetail(num_gpus=3.0, min_gpus=2, max_gpus=5)
    assert job_gpus_text(ranged) == "2-5"
    assert show_gpus_text(ranged) == ("2-5, elastic: any size between; duration measured at 3 GPUs; resize pause "
                                      "the model's estimate")
    brought = m.JobDetail(num_gpus=12.0, min_gpus=2, max_gpus=16, requested_gpus=16)
    assert show_gpus_text(brought).endswith("duration measured at 12 GPUs; resize pause the model's estimate; "
                                            "submitted at 16 GPUs, which the cluster can never hold")
    one_size = m.JobDetail.from_json({"num_gpus": 4, "min_gpus": 4, "max_gpus": 4, "sizes": None,
                                      "resize_pause_s": None})
    assert job_gpus_text(one_size) == "4"
