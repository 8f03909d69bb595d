"""`corral webhook ...`: a user's webhooks (signed requests on their jobs' state changes) and their deliveries, over the
REST API. A job's own webhook is given at submission: `corral submit --webhook URL`. docs/webhooks.md."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

import corral.models as m
from scheduler.cli.client_io import api_errors, client, connection, console, print_json
from scheduler.cli.client_text import when
from scheduler.cli.params import JOB_ID, NATURAL, Number

WEBHOOK_ID = Number("int", 1)
STATUSES = ("pending", "delivered", "failed")


@click.group()
def webhook() -> None:
    """Webhooks: URLs called (signed POSTs) on your jobs' state changes, and their deliveries."""


@webhook.command("add")
@click.argument("hook_url", metavar="URL")
@click.option("--description", default="", help="What it is for (shown in `corral webhook list`).")
@click.option("--json", "as_json", is_flag=True)
@connection
def webhook_add(hook_url: str, description: str, as_json: bool, url: str, token: str | None) -> None:
    """Call URL on every state change of your jobs from now on; prints its secret, once."""
    with api_errors():
        hook = client(url, token).add_webhook(hook_url, description)
    if as_json:
        print_json(hook)
        return
    click.echo(f"webhook {hook.id} -> {hook.url}")
    click.echo(f"secret: {hook.secret}")
    click.echo("(shown only now: keep it to verify the requests' X-Corral-Signature; `corral webhook rotate "
               f"{hook.id}` makes a new one)")


@webhook.command("list")
@click.option("--user", help="Another user's webhooks (admins; default for admins: everyone's).")
@click.option("--job", "job_id", type=JOB_ID, help="Only this job's own webhook.")
@click.option("--json", "as_json", is_flag=True)
@connection
def webhook_list(user: str | None, job_id: int | None, as_json: bool, url: str, token: str | None) -> None:
    """List your webhooks (yours and your jobs'), newest first."""
    with api_errors():
        res = client(url, token).webhooks(user=user, job=job_id)
    if as_json:
        print_json(res)
        return
    if not res.webhooks:
        click.echo("no webhooks")
        return
    table = Table(box=None, header_style="bold")
    for col in ("id", "user", "for", "url", "description", "created"):
        table.add_column(col, justify="right" if col == "id" else "left", overflow="fold")
    for h in res.webhooks:
        table.add_row(str(h.id), escape(h.user or ""), f"job {h.job_id}" if h.job_id else "all jobs",
                      escape(h.url or ""), escape(h.description or ""), when(h.created_at))
    console().print(table)


@webhook.command("rm")
@click.argument("webhook_id", type=WEBHOOK_ID)
@connection
def webhook_rm(webhook_id: int, url: str, token: str | None) -> None:
    """Delete webhook ID: nothing more is sent to it (its pending deliveries fail)."""
    with api_errors():
        hook = client(url, token).delete_webhook(webhook_id)
    click.echo(f"deleted webhook {hook.id} ({hook.url})")


@webhook.command("rotate")
@click.argument("webhook_id", type=WEBHOOK_ID)
@connection
def webhook_rotate(webhook_id: int, url: str, token: str | None) -> None:
    """Give webhook ID a new secret (prints it, once); the old one signs nothing from now on."""
    with api_errors():
        hook = client(url, token).rotate_webhook_secret(webhook_id)
    click.echo(f"webhook {hook.id}: new secret {hook.secret} (shown only now)")


def outcome_text(d: m.Delivery) -> str:
    if d.status == "delivered":
        return f"HTTP {d.last_status_code}"
    if d.status == "pending" and d.attempts:
        return f"{d.last_error}; next try {when(d.next_attempt_at)}"
    return d.last_error or ""


@webhook.command("deliveries")
@click.option("--webhook", "webhook_id", type=WEBHOOK_ID, help="Only this webhook's.")
@click.option("--job", "job_id", type=JOB_ID, help="Only this job's events.")
@click.option("--status", type=click.Choice(STATUSES))
@click.option("--user", help="Another user's (admins).")
@click.option("--limit", type=Number("int", 1, 1000), default=50, show_default=True)
@click.option("--offset", type=NATURAL, default=0)
@click.option("--json", "as_json", is_flag=True)
@connection
def webhook_deliveries(webhook_id: int | None, job_id: int | None, status: str | None, user: str | None, limit: int,
                       offset: int, as_json: bool, url: str, token: str | None) -> None:
    """Recent deliveries to your webhooks, newest first: pending, delivered or failed, and why."""
    with api_errors():
        res = client(url, token).webhook_deliveries(webhook=webhook_id, job=job_id, status=status, user=user,
                                                            limit=limit, offset=offset)
    if as_json:
        print_json(res)
        return
    deliveries = res.deliveries or []
    if not deliveries:
        click.echo("no deliveries")
        return
    table = Table(box=None, header_style="bold")
    for col in ("id", "webhook", "job", "event", "status", "tries", "last try", "outcome"):
        table.add_column(col, justify="right" if col in ("id", "webhook", "job", "tries") else "left",
                         overflow="fold")
    for d in deliveries:
        table.add_row(str(d.id), str(d.webhook_id), str(d.job_id), d.event or "", d.status or "",
                      str(d.attempts), when(d.last_attempt_at), escape(outcome_text(d)))
    console().print(table)
    if (res.total or 0) > offset + len(deliveries):
        click.echo(f"({res.total} in all: --offset {offset + len(deliveries)} for more)")


@webhook.command("delivery")
@click.argument("delivery_id", type=WEBHOOK_ID)
@click.option("--json", "as_json", is_flag=True)
@connection
def webhook_delivery(delivery_id: int, as_json: bool, url: str, token: str | None) -> None:
    """One delivery: the body sent and every attempt."""
    with api_errors():
        d = client(url, token).webhook_delivery(delivery_id)
    if as_json:
        print_json(d)
        return
    click.echo(f"delivery {d.id} to webhook {d.webhook_id}: job {d.job_id} {d.event} (event "
               f"{d.event_id}), {d.status} after {d.attempts} attempt(s)")
    for a in d.attempt_log or []:
        what = f"HTTP {a.status_code}" if a.status_code is not None and not a.error else a.error
        click.echo(f"  {a.number}. {when(a.at)} ({a.duration_ms or 0:.0f} ms): {what}")
    if d.status == "failed" and d.last_error:
        click.echo(f"  gave up: {d.last_error}")
    click.echo(d.body)
