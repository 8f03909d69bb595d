"""A submission over HTTP: the live layer's rules and writes (scheduler.live.submissions) inside fair use and one
transaction, the job as the answer, and the one mapping of a refused submission to its HTTP status."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flask import current_app
from flask_smorest import abort

from scheduler.live import submissions
from scheduler.live.store.models import User
from scheduler.live.submissions import AtLimit, InvalidField, NotAllowed, Rules
from web.api.context import notify, write_session
from web.api.job_json import array_json, full_json, job_json
from web.api.webhooks import allow_list
from web.auth import caller
from web.fair_use import submission as fair_use


@contextmanager
def refusals() -> Iterator[None]:
    """A refused submission as the API answers it: 422 naming the field, shaped as the schemas' own errors; 403 for
    what the submitter may not ask for; 409 for a limit they have reached."""
    try:
        yield
    except InvalidField as exc:
        abort(422, message=str(exc), errors={"json": {exc.field: [exc.why]}})
    except NotAllowed as exc:
        abort(403, message=str(exc))
    except AtLimit as exc:
        abort(409, message=str(exc))


def rules() -> Rules:
    """This server's rules for submissions (`corral serve`'s flags, in the app's config)."""
    return Rules(command_jobs=current_app.config["CORRAL_COMMAND_JOBS"],
                 accounts=current_app.config["CORRAL_JOB_ACCOUNTS"], webhook_allow=allow_list())


def submit_job(fields: dict[str, Any], note: str | None = None) -> tuple[dict[str, Any], int]:
    """Store a validated submission as the caller's, all or nothing: (the job, 201), or (the first job, 200) for a
    known client token. 429 past fair use; a refusal as `refusals` says."""
    who = caller()
    # A detached stand-in for the caller's row (a submission reads only its id, name and admin flag): loading the row
    # would cost a query per submission, which the token cache exists to avoid.
    user = User(id=who.id, name=who.name, admin=who.admin)
    with refusals():
        checked = submissions.check(fields, user, rules())  # before fair use: a refusal here costs no submission
        with fair_use(who, checked.job.get("client_token")) as gate, write_session() as s:
            done = submissions.submit(s, user, checked, max_pending=gate.max_pending, note=note)
            body = job_json(done.job, user.name) if done.created else full_json(s, done.job)
            if done.array is not None:
                body["array"] = array_json(s, done.array, user.name)
            if done.webhook is not None:
                body["webhook"] = {"id": done.webhook.id, "url": done.webhook.url, "secret": done.webhook.secret}
            gate.created = done.created
    if done.created:
        notify()
    return body, 201 if done.created else 200
