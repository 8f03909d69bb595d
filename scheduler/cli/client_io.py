"""What every command that talks to a running server shares: the --url/--token options, the typed client they make
(`corral.Client`: the commands read its answers' fields), its errors as click's one-line error, and the console and
JSON it prints to.

CORRAL_URL (default http://127.0.0.1:8080) and CORRAL_TOKEN say where and who. A failure prints one line on stderr
and exits 1 (2 for usage errors, as click does).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.console import Console

from corral import Client, CorralError
from corral.model_base import Answer
from corral.transport import DEFAULT_URL

F = TypeVar("F", bound=Callable[..., Any])


def console() -> Console:
    # Piped output (scripts, tests) gets wide tables instead of rich's 80-column default.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def connection(f: F) -> F:
    f = click.option("--token", envvar="CORRAL_TOKEN", metavar="TOKEN", show_envvar=True,
                     help="API token (`corral token create`).")(f)
    f = click.option("--url", envvar="CORRAL_URL", default=DEFAULT_URL, show_default=True, show_envvar=True,
                     help="The Corral server.")(f)
    return f


def client(url: str, token: str | None) -> Client:
    if not token:
        raise click.ClickException("no API token: set CORRAL_TOKEN (or --token); an admin creates one with "
                                   "`corral token create --user NAME`")
    try:
        return Client(url, token)
    except CorralError as exc:
        raise click.ClickException(str(exc)) from None


@contextmanager
def api_errors() -> Iterator[None]:
    """A failed call as click's one-line error and exit status 1."""
    try:
        yield
    except CorralError as exc:
        raise click.ClickException(str(exc)) from None


def print_json(data: Any) -> None:
    """`data` as the server sent it (an answer: its JSON, fields this client does not know included)."""
    if isinstance(data, Answer):
        data = data.to_json()
    elif isinstance(data, list):
        data = [d.to_json() if isinstance(d, Answer) else d for d in data]
    click.echo(json.dumps(data, indent=2))
