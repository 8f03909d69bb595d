"""Property-based tests of the whole REST API from its own OpenAPI document (schemathesis), on SQLite and PostgreSQL
(issue 10, security 3): for every operation, generated requests, valid and invalid alike, never get a server error,
and every response has a documented status code, content type and body schema.

The run is bounded (`MAX_EXAMPLES` per operation, valid and invalid cases, derandomised so CI sees the same cases), as an admin so the
admin-only operations are exercised too, except what-if, which runs as a user so the jobs x seeds budget keeps each
simulation small. A few requests that once answered 500 are pinned as plain regression tests below the fuzzing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from scheduler.live.store import Store
from scheduler.live.store.models import Gpu, Node
from scheduler.live.store.queries import create_token
from web import create_app
from web.limits import DB_INT_MAX

pytestmark = pytest.mark.slow  # fuzzing every operation: about a minute

API = "/api/v1"
MAX_EXAMPLES = 60  # per operation and mode: about a minute for the four runs (2 databases x positive/negative)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


class Api:
    def __init__(self, store: Store) -> None:
        with store.session() as s:
            node = Node(name="node0", index=0, preset="dgx-a100", alive=True, updated_at=0.0)
            node.gpus = [Gpu(index=i, local_index=i, gpu_type="A100-80GB", mem_gb=80.0) for i in range(8)]
            s.add(node)
            self.admin = create_token(s, "root", admin=True)
            self.user = create_token(s, "alice")
        self.app = create_app(store, config={"CORRAL_WHATIF_BUDGET": 200})
        self.schema = schemathesis.openapi.from_wsgi(f"{API}/openapi.json", self.app)

    def headers(self, path: str) -> dict[str, str]:
        token = self.user if path.endswith("/whatif") else self.admin
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture(autouse=True)
def hypothesis_home(tmp_path: Path) -> Iterator[None]:
    """Hypothesis keeps caches (constants, unicode data) under ./.hypothesis even with no example database: here
    they go to tmp_path, like every other artefact of the tests."""
    set_hypothesis_home_dir(tmp_path / "hypothesis")
    yield
    set_hypothesis_home_dir(None)


@pytest.fixture
def api(store: Store, corral_home: Path) -> Iterator[Api]:
    yield Api(store)


def _fuzz(api: Api, operation: Any, mode: GenerationMode) -> None:
    """Hypothesis over one operation's generated cases. (schemathesis' own pytest parametrisation does not run under
    this pytest: it rewrites a private node attribute pytest no longer has, so the cases are drawn from its strategy.)"""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case: Any) -> None:
        case.call_and_validate(headers=api.headers(case.path), checks=CHECKS)

    check()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_operation_answers_as_documented(api: Api, mode: GenerationMode) -> None:
    operations = [result.ok() for result in api.schema.get_all_operations()]
    assert len(operations) > 10  # the spec really lists the API (a broken spec would make this test vacuous)
    checked = 0
    for operation in operations:
        try:
            _fuzz(api, operation, mode)
            checked += 1
        except Unsatisfiable:
            # Only in negative mode, for an operation with nothing to get wrong (no parameter, no body: /health).
            assert mode == GenerationMode.NEGATIVE, operation.path
        except Exception as exc:
            raise AssertionError(f"{operation.method.upper()} {operation.path} ({mode}): {exc}") from exc
    assert checked >= len(operations) // 2, checked


# ---- requests that once answered 500, each now a 4xx naming its field ---------------------------------------------

HUGE = 2**64 + 1  # beyond any 64-bit integer column
BEYOND_PG = 2**31  # beyond PostgreSQL's 32-bit Integer columns, though SQLite would hold it


@pytest.mark.parametrize(("method", "path", "field"), [
    ("GET", f"/jobs/{HUGE}", "job_id"),
    ("GET", f"/jobs/{BEYOND_PG}", "job_id"),
    ("GET", f"/jobs/{HUGE}/explain", "job_id"),
    ("GET", f"/jobs/{HUGE}/logs", "job_id"),
    ("POST", f"/jobs/{HUGE}/cancel", "job_id"),
    ("DELETE", f"/tokens/{HUGE}", "token_id"),
    ("GET", f"/jobs?offset={HUGE}", "offset"),
    ("GET", f"/jobs?offset={BEYOND_PG}", "offset"),
    ("GET", f"/jobs/1/logs?attempt={HUGE}", "attempt"),
    ("GET", f"/jobs/1/logs?rank={HUGE}", "rank"),
    ("GET", "/stats?bucket_s=1.0", "bucket_s"),
])
def test_out_of_range_numbers_are_a_4xx_naming_the_field(api: Api, method: str, path: str, field: str) -> None:
    client = api.app.test_client()
    resp = client.open(API + path, method=method, headers=api.headers(path))
    assert 400 <= resp.status_code < 500, (path, resp.status_code, resp.get_data(as_text=True)[:300])
    assert field in resp.get_data(as_text=True)


@pytest.mark.parametrize("priority", [HUGE, -HUGE, BEYOND_PG])
def test_a_priority_beyond_the_column_is_a_422(api: Api, priority: int) -> None:
    body = {"name": "x", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 10,
            "priority": priority}
    resp = api.app.test_client().post(f"{API}/jobs", json=body, headers=api.headers("/jobs"))
    assert resp.status_code == 422 and "priority" in resp.json["errors"]["json"], resp.json


def test_a_zero_gpu_command_job_is_a_422(api: Api) -> None:
    body = {"name": "x", "kind": "command", "model": "ResNet-50-bs64", "num_gpus": 0.0, "entrypoint": "true"}
    resp = api.app.test_client().post(f"{API}/jobs", json=body, headers=api.headers("/jobs"))
    assert resp.status_code == 422 and "num_gpus" in resp.json["errors"]["json"]


def test_the_spec_states_the_integer_bounds_and_the_refusal_says_them(api: Api) -> None:
    """Clients (and the fuzzer's valid cases) learn the bound from the spec; a request past it is told the bound."""
    spec = api.app.test_client().get(f"{API}/openapi.json").json
    job_id = next(p for p in spec["paths"]["/api/v1/jobs/{job_id}"]["parameters"] if p["name"] == "job_id")
    assert job_id["schema"]["maximum"] == DB_INT_MAX
    offset = next(p for p in spec["paths"]["/api/v1/jobs"]["get"]["parameters"] if p["name"] == "offset")
    assert offset["schema"]["maximum"] == DB_INT_MAX
    resp = api.app.test_client().get(f"{API}/jobs/{HUGE}", headers=api.headers("/jobs"))
    assert resp.status_code == 422
    assert resp.json["message"] == f"job_id: must be at most {DB_INT_MAX}."


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/whatif", {"jobs": [{"model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 1e300}]}, "duration_s"),
    ("/whatif", {"jobs": [{"model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 60, "submit_in_s": 1e300}]},
     "submit_in_s"),
    ("/jobs", {"name": "x", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 1e300},
     "duration_s"),
])
def test_seconds_near_the_float_limit_are_a_422(api: Api, path: str, body: dict[str, Any], field: str) -> None:
    """The fuzzer's find: a what-if job of 1e300 s overflowed the simulation into NaN, answered as null metrics."""
    resp = api.app.test_client().post(API + path, json=body, headers=api.headers(path))
    assert resp.status_code == 422, resp.get_data(as_text=True)[:300]
    assert field in resp.get_data(as_text=True)


@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("GET", "/jobs?user=%00", None, "user"),
    ("GET", "/jobs?state=failed&user=a%00b", None, "user"),
    ("POST", "/jobs", {"name": "a\x00b", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1,
                       "duration_s": 10}, "name"),
    ("POST", "/jobs", {"name": "a", "kind": "command", "model": "ResNet-50-bs64", "num_gpus": 1,
                       "entrypoint": "true", "env": {"K\x00": "v"}}, "env"),
    ("PUT", "/policies/active", {"name": "tiresias\x00"}, "name"),
])
def test_a_nul_byte_in_any_string_is_a_422_naming_the_field(api: Api, method: str, path: str, body: Any,
                                                             field: str) -> None:
    """Found by the fuzzer on PostgreSQL (text cannot hold NUL): GET /jobs?user=%00 was a 500."""
    resp = api.app.test_client().open(API + path, method=method, json=body, headers=api.headers(path))
    assert resp.status_code == 422, resp.get_data(as_text=True)[:300]
    location = "query" if "?" in path else "json"
    assert field in resp.json["errors"][location]
