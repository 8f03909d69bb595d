"""Teams and users (admins): `corral team ...`, `corral user ...` and `corral limits`: quotas, borrowing limits,
priority ceilings and fair-use limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

import corral.models as m
from scheduler.cli.client_io import F, api_errors, client, connection, console, print_json
from scheduler.cli.client_text import gpus_text
from scheduler.cli.params import COUNT, NON_NEGATIVE, POSITIVE, Number


def limit_text(limit: float | None) -> str:
    return "none" if limit is None else gpus_text(limit)


# Who may rank how high (scheduler.live.priority_ceilings): a user's or a team's settings.
CEILING_OPTIONS = (("max_priority", "highest priority"), ("allow_nonpreemptible", "non-preemptible"),
                   ("priority_classes", "priority classes"))


def _clear_option(names: tuple[tuple[str, str], ...], where: str) -> Callable[[F], F]:
    return click.option("--clear", "clear", multiple=True, metavar="SETTING",
                        type=click.Choice([n.replace("_", "-") for n, _ in names]),
                        help=f"Remove a setting (back to {where}); repeat for several.")


def ceiling_options(f: F) -> F:
    """--max-priority, --allow-nonpreemptible/--no-allow-nonpreemptible and --priority-classes: a priority ceiling,
    as `user limits` and `team set` take it. The server checks the values and names the field."""
    f = click.option("--priority-classes", metavar="A,B",
                     help="Priority classes its jobs may name whatever their figures, comma-separated ('' for none).")(f)
    f = click.option("--allow-nonpreemptible/--no-allow-nonpreemptible", default=None,
                     help="Whether its jobs may say --not-preemptible themselves.")(f)
    f = click.option("--max-priority", type=Number("int"), metavar="N",
                     help="The highest priority its jobs may give (the built-in ceiling is 0).")(f)
    return f


def ceiling_text(c: m.Ceiling | None) -> str:
    """A ceiling in a few words: `<= 0`, `<= 100; non-preemptible; classes serving, batch`."""
    if c is None:
        return "-"
    parts = [f"<= {c.max_priority}"]
    if c.allow_nonpreemptible:
        parts.append("non-preemptible")
    if c.priority_classes:
        parts.append("classes " + ", ".join(c.priority_classes))
    return "; ".join(parts)


@click.group()
def team() -> None:
    """Teams: quotas, borrowing limits and what each uses now (changes are for admins)."""


@team.command("create")
@click.argument("name")
@click.option("--quota", type=NON_NEGATIVE, required=True, help="GPUs the team may always use.")
@click.option("--borrow-limit", type=NON_NEGATIVE,
              help="GPUs it may borrow beyond its quota while others leave them idle (default: no limit).")
@connection
def team_create(name: str, quota: float, borrow_limit: float | None, url: str, token: str | None) -> None:
    """Create team NAME."""
    with api_errors():
        t = client(url, token).create_team(name, quota, borrow_limit)
    click.echo(f"created team {t.name}: quota {gpus_text(t.quota_gpus or 0)} GPUs, borrow limit "
               f"{limit_text(t.borrow_limit_gpus)}")


@team.command("list")
@click.option("--json", "as_json", is_flag=True)
@connection
def team_list(as_json: bool, url: str, token: str | None) -> None:
    """Every team: quota, borrowing limit, and now the GPUs in use, borrowed and lent, and its jobs."""
    with api_errors():
        res = client(url, token).teams()
    if as_json:
        print_json(res)
        return
    table = Table(box=None, header_style="bold")
    for col in ("name", "quota", "borrow limit", "in use", "borrowed", "lent", "pending", "running",
                "priority ceiling"):
        table.add_column(col, justify="left" if col in ("name", "priority ceiling") else "right")
    teams = res.teams or []
    for t in teams:
        table.add_row(escape(t.name or ""), gpus_text(t.quota_gpus or 0), limit_text(t.borrow_limit_gpus),
                      gpus_text(t.in_use_gpus or 0), gpus_text(t.borrowed_gpus or 0), gpus_text(t.lent_gpus or 0),
                      str(t.pending_jobs), str(t.running_jobs), escape(ceiling_text(t.priority_ceiling)))
    out = console()
    out.print(table)
    quotas = sum(t.quota_gpus or 0 for t in teams)
    cluster = res.cluster_gpus
    out.print(f"quotas add up to {gpus_text(quotas)} of {cluster} GPUs" if cluster else
              f"quotas add up to {gpus_text(quotas)} GPUs; the controller has not registered the cluster yet",
              style="dim")


@team.command("set")
@click.argument("name")
@click.option("--quota", type=NON_NEGATIVE, help="The new quota, in GPUs.")
@click.option("--borrow-limit", type=NON_NEGATIVE, help="The new borrowing limit, in GPUs.")
@click.option("--no-borrow-limit", is_flag=True, help="Remove the borrowing limit.")
@ceiling_options
@_clear_option(CEILING_OPTIONS, "the built-in one")
@connection
def team_set(name: str, quota: float | None, borrow_limit: float | None, no_borrow_limit: bool,
             clear: tuple[str, ...], url: str, token: str | None, **ceiling: Any) -> None:
    """Change team NAME's quota, borrowing limit or priority ceiling; what is not given stays.

    The ceiling applies to the team's members without a setting of their own (`corral user limits`): the highest
    priority their jobs may give, whether they may be non-preemptible, the classes they may name beyond that."""
    if borrow_limit is not None and no_borrow_limit:
        raise click.UsageError("give --borrow-limit or --no-borrow-limit, not both")
    changes: dict[str, Any] = _limit_changes(ceiling, clear)
    if quota is not None:
        changes["quota_gpus"] = quota
    if borrow_limit is not None or no_borrow_limit:
        changes["borrow_limit_gpus"] = borrow_limit  # None with --no-borrow-limit: no limit
    if not changes:
        raise click.UsageError("nothing to change: give --quota, --borrow-limit, --no-borrow-limit, --max-priority, "
                               "--[no-]allow-nonpreemptible, --priority-classes or --clear")
    with api_errors():
        t = client(url, token).update_team(name, changes)
    click.echo(f"team {t.name}: quota {gpus_text(t.quota_gpus or 0)} GPUs, borrow limit "
               f"{limit_text(t.borrow_limit_gpus)}, priority ceiling {ceiling_text(t.priority_ceiling)}")


@team.command("delete")
@click.argument("name")
@connection
def team_delete(name: str, url: str, token: str | None) -> None:
    """Delete team NAME (refused while it has jobs pending or running); its users move to 'default'."""
    with api_errors():
        res = client(url, token).delete_team(name)
    click.echo(res.message)


@click.group()
def user() -> None:
    """Users and their teams (admins). Users are created by `corral token create`."""


@user.command("list")
@click.option("--json", "as_json", is_flag=True)
@connection
def user_list(as_json: bool, url: str, token: str | None) -> None:
    """Every user: team, admin or not, and jobs pending or running."""
    with api_errors():
        users = client(url, token).users()
    if as_json:
        print_json(users)
        return
    table = Table(box=None, header_style="bold")
    for col in ("name", "team", "admin", "active jobs"):
        table.add_column(col, justify="right" if col == "active jobs" else "left")
    for u in users:
        table.add_row(escape(u.name or ""), escape(u.team or ""), "yes" if u.admin else "", str(u.active_jobs))
    console().print(table)


@user.command("set-team")
@click.argument("name")
@click.argument("team_name", metavar="TEAM")
@connection
def user_set_team(name: str, team_name: str, url: str, token: str | None) -> None:
    """Move user NAME to TEAM (refused while they have jobs pending or running)."""
    with api_errors():
        u = client(url, token).set_user_team(name, team_name)
    click.echo(f"user {u.name} is in team {u.team}")


# ---- fair use: per-user limits (admins) ----------------------------------------------------------------------------

LIMIT_OPTIONS = (("max_pending", "max pending"), ("submit_rate", "submissions/s"), ("submit_burst", "burst"),
                 ("whatif_per_min", "what-ifs/min"), ("request_rate", "requests/s"), ("request_burst", "request burst"))


def limit_options(f: F) -> F:
    """--max-pending, --submit-rate, --submit-burst, --whatif-per-min, --request-rate and --request-burst: what
    `user limits` and `limits` share (each adds its --clear). The server checks the values and names the field."""
    f = click.option("--request-burst", type=COUNT, help="API requests at once before the request rate applies.")(f)
    f = click.option("--request-rate", type=POSITIVE, metavar="PER_S",
                     help="API requests of any kind a second after the burst.")(f)
    f = click.option("--whatif-per-min", type=COUNT, help="What-if calls a minute.")(f)
    f = click.option("--submit-burst", type=COUNT, help="Submissions at once before the rate applies.")(f)
    f = click.option("--submit-rate", type=POSITIVE, metavar="PER_S", help="Submissions a second after the burst.")(f)
    f = click.option("--max-pending", type=COUNT, help="Jobs pending at once.")(f)
    return f


def _limit_changes(given: dict[str, Any], clear: tuple[str, ...]) -> dict[str, Any]:
    cleared = {c.replace("-", "_") for c in clear}
    both = sorted(n for n in cleared if given.get(n) is not None)
    if both:
        raise click.UsageError(f"--{both[0].replace('_', '-')} given and cleared: choose one")
    if given.get("priority_classes") is not None:
        given["priority_classes"] = [c.strip() for c in given["priority_classes"].split(",") if c.strip()]
    return {n: v for n, v in given.items() if v is not None} | dict.fromkeys(cleared)


def print_limits(res: m.Limits, as_json: bool) -> None:
    if as_json:
        print_json(res)
        return
    who = f"user {res.user}" if res.user else "cluster-wide defaults"
    if res.exempt:
        who += " (an admin: exempt from every limit)"
    table = Table(box=None, header_style="bold", title=escape(who), title_justify="left")
    for col in ("limit", "value", "from"):
        table.add_column(col, justify="right" if col == "value" else "left")
    sources = res.sources or {}
    for name, label in LIMIT_OPTIONS:
        table.add_row(label, f"{getattr(res, name):g}", sources.get(name, ""))
    if res.max_priority is not None:  # a user's: their priority ceiling
        table.add_row("highest priority", str(res.max_priority), sources.get("max_priority", ""))
        table.add_row("non-preemptible", "allowed" if res.allow_nonpreemptible else "no",
                      sources.get("allow_nonpreemptible", ""))
        table.add_row("priority classes", escape(", ".join(res.priority_classes or []) or "none"),
                      sources.get("priority_classes", ""))
    console().print(table)


@user.command("limits")
@click.argument("name")
@limit_options
@ceiling_options
@_clear_option(LIMIT_OPTIONS + CEILING_OPTIONS, "the cluster's default; a ceiling's, the team's")
@click.option("--json", "as_json", is_flag=True)
@connection
def user_limits(name: str, clear: tuple[str, ...], as_json: bool, url: str, token: str | None,
                **given: Any) -> None:
    """Show user NAME's fair-use limits and priority ceiling, or override them (admins); what is not given stays.

    The ceiling: the highest priority NAME's jobs may give, whether they may be non-preemptible, and the priority
    classes they may name beyond that; each setting NAME's own, else their team's (`corral team set`), else built
    in (0, no, none). Admins are exempt."""
    changes = _limit_changes(given, clear)
    with api_errors():
        c = client(url, token)
        res = c.set_limits(changes, name) if changes else c.limits(name)
    print_limits(res, as_json)


@click.command("limits")
@limit_options
@_clear_option(LIMIT_OPTIONS, "the built-in value")
@click.option("--json", "as_json", is_flag=True)
@connection
def limits(clear: tuple[str, ...], as_json: bool, url: str, token: str | None, **given: Any) -> None:
    """Show the cluster-wide fair-use limits, or change them (admins); users' overrides stay."""
    changes = _limit_changes(given, clear)
    with api_errors():
        c = client(url, token)
        res = c.set_limits(changes) if changes else c.limits()
    print_limits(res, as_json)

TEAM_COMMANDS = [team, user, limits]
