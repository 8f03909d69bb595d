"""`corral priority-class create | list | delete`: named priorities jobs can take (admins define them)."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from scheduler.cli.client_io import api_errors, client, connection, console, print_json
from scheduler.cli.params import Number


@click.group("priority-class")
def priority_class() -> None:
    """Priority classes: named priorities jobs can take (admins define them)."""


@priority_class.command("create")
@click.argument("name")
@click.option("--value", type=Number("int"), required=True, help="The priority its jobs get (higher first).")
@click.option("--preemptible", type=click.BOOL, default=True, show_default=True,
              help="false: its jobs are never preempted (with teams, they then run only within their quota).")
@click.option("--description", help="What the class is for.")
@connection
def priority_class_create(name: str, value: int, preemptible: bool, description: str | None, url: str,
                          token: str | None) -> None:
    """Create priority class NAME."""
    with api_errors():
        c = client(url, token).create_priority_class(name, value, preemptible=preemptible, description=description)
    click.echo(f"created priority class {c.name}: value {c.value}, "
               f"{'preemptible' if c.preemptible else 'not preemptible'}")


@priority_class.command("list")
@click.option("--json", "as_json", is_flag=True)
@connection
def priority_class_list(as_json: bool, url: str, token: str | None) -> None:
    """Every priority class, highest value first."""
    with api_errors():
        classes = client(url, token).priority_classes()
    if as_json:
        print_json(classes)
        return
    if not classes:
        click.echo("no priority classes (an admin adds one with `corral priority-class create`)")
        return
    table = Table(box=None, header_style="bold")
    for col in ("name", "value", "preemptible", "description"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for c in classes:
        table.add_row(escape(c.name or ""), str(c.value), "yes" if c.preemptible else "no",
                      escape(c.description or ""))
    console().print(table)


@priority_class.command("delete")
@click.argument("name")
@connection
def priority_class_delete(name: str, url: str, token: str | None) -> None:
    """Delete priority class NAME (jobs that named it keep its figures)."""
    with api_errors():
        c = client(url, token).delete_priority_class(name)
    click.echo(f"deleted priority class {c.name}")

PRIORITY_CLASS_COMMANDS = [priority_class]
