"""The client's errors, one class per kind of refusal, so a script catches what it can handle (`except NotFound`)
rather than comparing status codes. Each is a `scheduler.cli.client.ClientError` too (the CLI's error), carrying the
server's message, status and per-field errors."""

from __future__ import annotations

from scheduler.cli.client import ClientError


class CorralError(ClientError):
    """Any failed call."""


class Unreachable(CorralError):
    """No answer: the server is down, or the URL is wrong (the message says which URL was tried)."""


class Unauthorized(CorralError):
    """401: no token, or one the server does not know (revoked, expired)."""


class Forbidden(CorralError):
    """403: the token's user may not do this (another user's job, an admin's action, a quota)."""


class NotFound(CorralError):
    """404: no such job, node, team or resource (or not one this user may see)."""


class Conflict(CorralError):
    """409: the resource is not in a state that allows it (cancelling a finished job, a name taken)."""


class InvalidRequest(CorralError):
    """400 or 422: a field the server refused; `errors` maps each field to its messages."""


class RateLimited(CorralError):
    """429: past the fair-use limits an admin set (`corral limits`)."""


class ServerError(CorralError):
    """5xx: the server failed; the message is its own."""


_BY_STATUS: dict[int, type[CorralError]] = {400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound,
                                            409: Conflict, 413: InvalidRequest, 422: InvalidRequest, 429: RateLimited}


def typed(exc: ClientError) -> CorralError:
    """`exc` as the class of its kind (same message, status and field errors)."""
    status = exc.status
    kind = Unreachable if status is None else _BY_STATUS.get(status, ServerError if status >= 500 else CorralError)
    out = kind(exc.message, status=status, errors=exc.errors, url=exc.url)
    out.__cause__ = exc
    return out
