"""`corral token create | list | revoke`: API tokens. These open the store directly rather than ask the server: a
token is what the other commands need, so creating one cannot require one."""

from __future__ import annotations

import re
import time
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from scheduler.cli.client_io import console, print_json
from scheduler.cli.client_text import when

DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
DURATION_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _expiry(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """`--expires 30d` (s, m, h, d or w) as a wall-clock expiry time."""
    if value is None:
        return None
    match = DURATION.fullmatch(value.strip())
    if match is None or float(match[1]) <= 0:
        raise click.BadParameter(f"{value!r}: give a positive duration such as 12h, 30d or 1w", ctx, param)
    return time.time() + float(match[1]) * DURATION_UNIT_S[match[2]]


def _user_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from scheduler.live.store.queries import check_user_name  # here: only the token commands need the store

    try:
        return check_user_name(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@click.group()
def token() -> None:
    """API tokens (opens the database directly: DATABASE_URL, or SQLite under CORRAL_HOME)."""


@token.command("create")
@click.option("--user", "user_name", required=True, callback=_user_name,
              help="The user (created if new): letters, digits, '.', '_' or '-'.")
@click.option("--admin", is_flag=True, help="Make the user an admin (sees and manages every job).")
@click.option("--expires", "expires_at", callback=_expiry, metavar="DURATION",
              help="Expire the token after this long (e.g. 12h, 30d, 1w); default: never.")
@click.option("--team", help="The user's team: a new user joins it, an existing one moves to it (refused while they "
                             "have jobs pending or running). Default: 'default' for a new user, unchanged otherwise.")
def token_create(user_name: str, admin: bool, expires_at: float | None, team: str | None) -> None:
    """Create a token and print it alone on stdout (store it now: only its hash is kept)."""
    from scheduler.live.store import Store, database_url  # alembic and the migrations: only the token commands
    from scheduler.live.store.db import store_exists
    from scheduler.live.store.queries import TeamConflict, UnknownTeam, create_token, list_teams

    url = database_url()
    new_store = not store_exists(url)
    store = Store.open(url)
    try:
        # A refusal raised inside the session rolls it back: no user, no token, no move.
        with store.session(write=True) as s:
            try:
                tok = create_token(s, user_name, admin=admin, expires_at=expires_at, team=team)
            except UnknownTeam as exc:
                teams = ", ".join(t.name for t in list_teams(s))
                raise click.BadParameter(f"{exc}; the teams are {teams} (`corral team create` adds one)",
                                         param_hint="'--team'") from None
            except TeamConflict as exc:
                raise click.ClickException(f"--team: {exc}") from None
    finally:
        store.close()
    click.echo(tok)
    # On stderr: stdout is the token alone, for `export CORRAL_TOKEN=$(corral token create ...)`.
    click.echo(f"token written to {store_text(url)}", err=True)
    if new_store:
        click.echo("corral: warning: no store was there, so a new, empty one was made: a server started with another "
                   "CORRAL_HOME (or DATABASE_URL) will not know this token", err=True)


def store_text(url: str) -> str:
    """The store `corral token` opened, as a person checks it against the server's: the URL without its password,
    and the setting it came from."""
    import os

    from scheduler.core.paths import corral_home
    from scheduler.live.history import redact

    if os.environ.get("DATABASE_URL"):
        return f"{redact(url)} (DATABASE_URL)"
    home = os.environ.get("CORRAL_HOME")
    return f"{redact(url)} ({f'CORRAL_HOME={home}' if home else f'CORRAL_HOME unset: {corral_home()}'})"


@token.command("list")
@click.option("--json", "as_json", is_flag=True)
def token_list(as_json: bool) -> None:
    """Every token: its id, first characters, user, creation, expiry and revocation (never the token itself)."""
    from scheduler.live.store import Store
    from scheduler.live.store.queries import list_tokens, token_usable

    store = Store.open()
    try:
        with store.session() as s:
            rows: list[dict[str, Any]] = [
                {"id": t.id, "prefix": t.prefix, "user": t.user.name, "admin": t.user.admin,
                 "created_at": t.created_at, "expires_at": t.expires_at, "revoked": t.revoked,
                 "revoked_at": t.revoked_at} for t in list_tokens(s)]
    finally:
        store.close()
    if as_json:
        print_json(rows)
        return
    table = Table(box=None)
    for col in ("id", "prefix", "user", "created", "expires", "status"):
        table.add_column(col)
    for r in rows:
        status = ("revoked " + when(r["revoked_at"])) if r["revoked"] else (
            "active" if token_usable(False, r["expires_at"]) else "expired")
        table.add_row(str(r["id"]), r["prefix"], escape(r["user"]) + (" (admin)" if r["admin"] else ""),
                      when(r["created_at"]), when(r["expires_at"]) if r["expires_at"] else "never", status)
    console().print(table)


@token.command("revoke")
@click.argument("key", metavar="ID|PREFIX")
def token_revoke(key: str) -> None:
    """Revoke a token by its id or prefix (as `corral token list` shows them). It stops working at once."""
    from scheduler.live.store import Store
    from scheduler.live.store.queries import find_tokens, revoke_token

    store = Store.open()
    try:
        with store.session(write=True) as s:
            found = find_tokens(s, key)
            if not found:
                raise click.ClickException(f"no token {key!r}: `corral token list` shows ids and prefixes")
            if len(found) > 1:
                raise click.ClickException(f"{len(found)} tokens start with {key!r}: revoke one by its id")
            tok = revoke_token(s, found[0])
            click.echo(f"revoked token {tok.id} ({tok.prefix}…) of {tok.user.name}")
    finally:
        store.close()

TOKEN_COMMANDS = [token]
