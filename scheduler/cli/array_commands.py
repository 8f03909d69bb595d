"""`corral array show | cancel | hold | release`: a job array as a whole."""

from __future__ import annotations

import click
from rich.markup import escape

from scheduler.cli.client_io import api_errors, client, connection, console, print_json
from scheduler.cli.client_text import array_states_text, state_text
from scheduler.cli.params import JOB_ID


@click.group("array")
def array_group() -> None:
    """Job arrays: show one, or cancel, hold or release every task of one."""


@array_group.command("show")
@click.argument("array_id", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True)
@connection
def array_show(array_id: int, as_json: bool, url: str, token: str | None) -> None:
    """An array's tasks and their states."""
    with api_errors():
        a = client(url, token).array(array_id)
    if as_json:
        print_json(a)
        return
    out = console()
    out.print(f"[bold]array {a.id}[/] {escape(a.name or '')}: {array_states_text(a)}")
    for t in a.tasks or []:
        held = f" (held by {escape(t.held_by)})" if t.held_by else ""
        out.print(f"  task {t.index!s:<5} job {t.id!s:<8} {state_text(t.state)}{held}")


@array_group.command("cancel")
@click.argument("array_id", type=JOB_ID)
@connection
def array_cancel(array_id: int, url: str, token: str | None) -> None:
    """Cancel every task of the array not yet finished."""
    with api_errors():
        a = client(url, token).cancel_array(array_id)
    click.echo(f"array {a.id}: {array_states_text(a)}")


@array_group.command("hold")
@click.argument("array_id", type=JOB_ID)
@connection
def array_hold(array_id: int, url: str, token: str | None) -> None:
    """Hold every pending task of the array: they keep their places but do not start until released."""
    with api_errors():
        a = client(url, token).hold_array(array_id)
    click.echo(f"array {a.id}: {array_states_text(a)}")


@array_group.command("release")
@click.argument("array_id", type=JOB_ID)
@connection
def array_release(array_id: int, url: str, token: str | None) -> None:
    """Release every held task of the array you may release (an admin's holds only an admin releases)."""
    with api_errors():
        a = client(url, token).release_array(array_id)
    click.echo(f"array {a.id}: {array_states_text(a)}")

ARRAY_COMMANDS = [array_group]
