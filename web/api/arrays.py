"""Job arrays: show one, and cancel, hold or release its tasks together (an array is submitted as a job with `array`,
web/api/jobs.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask_smorest import Blueprint
from sqlalchemy.orm import Session

from scheduler.live.store import JobState
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job
from web.api.context import notify, store, write_session
from web.api.job_json import array_json, array_or_404
from web.auth import caller, protect
from web.schemas.arrays import ArraySchema

blp = protect(Blueprint("arrays", __name__, description="Show, cancel, hold and release job arrays"))


def _array_control(array_id: int, act: Callable[[Session, Job], Job],
                   refused: type[Exception] | tuple[type[Exception], ...]) -> dict[str, Any]:
    """Apply a job control to each task of an array the caller may see (404 or 403 otherwise), leaving as they are
    the tasks it is `refused` for (a hold of a running task, a release of an admin's hold or of a task not held), and
    answer with the array."""
    with write_session() as s:
        array = array_or_404(s, array_id)
        for task in q.array_tasks(s, array.id):
            try:  # noqa: SIM105 (suppress() is typed for one class or several, not a class-or-tuple variable)
                act(s, task)
            except refused:
                pass
        body = array_json(s, array, q.user_names(s, [array.user_id])[array.user_id])
    notify()
    return body


@blp.route("/arrays/<int:array_id>", methods=["GET"])
@blp.response(200, ArraySchema)
def show_array(array_id: int) -> Any:
    """Show a job array

    Its size, how many tasks may run at once, and each task's state. Its owner's and admins' to see.
    """
    with store().session() as s:
        array = array_or_404(s, array_id)
        return array_json(s, array, q.user_names(s, [array.user_id])[array.user_id])


@blp.route("/arrays/<int:array_id>/cancel", methods=["POST"])
@blp.response(200, ArraySchema, description="the array after the cancel")
def cancel_array(array_id: int) -> Any:
    """Cancel a job array

    Every task not finished: pending ones at once, running ones flagged (the controller stops their workers).
    """
    with write_session() as s:
        array = array_or_404(s, array_id)
        live = [t for t in q.array_tasks(s, array.id) if not JobState(t.state).terminal]
        for task in live:
            q.cancel(s, task)
        body = array_json(s, array, q.user_names(s, [array.user_id])[array.user_id])
    if live:
        notify()
    return body


@blp.route("/arrays/<int:array_id>/hold", methods=["POST"])
@blp.response(200, ArraySchema, description="the array after the hold")
def hold_array(array_id: int) -> Any:
    """Hold a job array's pending tasks

    Each pending task not held yet is held (as `POST /jobs/ID/hold`); running and finished tasks are left as they
    are.
    """
    by = caller().name
    return _array_control(array_id, lambda s, task: q.hold(s, task, by), q.NotChangeable)


@blp.route("/arrays/<int:array_id>/release", methods=["POST"])
@blp.response(200, ArraySchema, description="the array after the release")
def release_array(array_id: int) -> Any:
    """Release a job array's held tasks

    Each held task the caller may release (as `POST /jobs/ID/release`: a user their own holds, an admin any) is
    released; tasks an admin holds stay held for a user, as `held` and each task's `held_by` show.
    """
    who = caller()
    return _array_control(array_id, lambda s, task: q.release(s, task, who.name, admin=who.admin),
                          (PermissionError, q.NotChangeable))
