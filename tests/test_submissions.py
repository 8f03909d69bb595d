"""A submission's rules without HTTP (scheduler/live/submissions.py): each refusal is a typed error naming the field,
and nothing is stored; a client token makes a retry return the first job. The API's statuses for the same refusals
are tests/test_api.py's and the other API tests'."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from scheduler.live.job_accounts import JobAccounts
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job, User
from scheduler.live.submissions import DEFAULT_COMMAND_DURATION_S, InvalidField, NotAllowed, Rules, check, submit
from scheduler.live.webhooks import AllowList
from web.schemas.jobs import JobSubmitSchema

RULES = Rules(command_jobs="isolated", accounts=JobAccounts(), webhook_allow=AllowList())


def fields(**given: Any) -> dict[str, Any]:
    """A submission as the API validated it."""
    loaded: dict[str, Any] = JobSubmitSchema().load({"name": "j", "model": "ResNet-50-bs64", "num_gpus": 1,
                                                    "duration_s": 60, **given})
    return loaded


def alice_in(store: Store) -> User:
    """Alice, stored, and a detached stand-in for her row as the API passes one (its id, name and admin flag)."""
    with store.session(write=True) as s:
        row = q.ensure_user(s, "alice")
        return User(id=row.id, name=row.name, admin=row.admin)


def test_a_command_job_is_the_servers_to_allow_and_gets_a_run_time_estimate() -> None:
    command = fields(kind="command", entrypoint="true", duration_s=None)
    with pytest.raises(NotAllowed, match="^kind: command jobs of non-admins are off"):
        check(command, User(id=1, name="alice", admin=False), RULES)
    checked = check(command, User(id=2, name="root", admin=True), RULES)
    assert checked.job["duration_s"] == DEFAULT_COMMAND_DURATION_S


def test_a_jobs_webhook_is_refused_with_an_array_and_outside_the_allow_list() -> None:
    alice = User(id=1, name="alice", admin=False)
    with pytest.raises(InvalidField) as refused:
        check(fields(webhook="https://hooks.example/x", array={"count": 2}), alice, RULES)
    assert (refused.value.field, refused.value.why) == ("webhook", "not with array: add a webhook of yours instead")
    assert str(refused.value).startswith("webhook: an array's tasks take no webhook of their own")
    with pytest.raises(InvalidField) as refused:
        check(fields(webhook="https://hooks.example/x"), alice, RULES)  # webhooks are off: no allow list
    assert refused.value.field == "webhook" and str(refused.value) == f"webhook: {refused.value.why}"


def test_a_refusal_in_the_transaction_names_the_field_and_stores_nothing(store: Store) -> None:
    alice = alice_in(store)
    for given, field in [({"priority_class": "urgent"}, "priority_class"),
                         ({"depends_on": [{"job": 99}]}, "depends_on")]:
        with pytest.raises(InvalidField) as refused, store.session(write=True) as s:
            submit(s, alice, check(fields(**given), alice, RULES))
        assert refused.value.field == field
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0


def test_a_known_client_token_returns_the_first_job_and_stores_nothing(store: Store) -> None:
    alice = alice_in(store)
    checked = check(fields(client_token="once"), alice, RULES)
    with store.session(write=True) as s:
        first = submit(s, alice, checked)
        first_id = first.job.id
    with store.session(write=True) as s:
        again = submit(s, alice, checked)
        assert (again.job.id, again.created, first.created) == (first_id, False, True)
        assert s.scalar(select(func.count()).select_from(Job)) == 1
