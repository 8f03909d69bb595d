"""The client's errors, one class per kind of refusal, so that a script catches what it can handle (`except NotFound`)
rather than comparing status codes. Each carries the server's message, the status and the per-field errors; the
`corral` command prints them as its one-line error."""

from __future__ import annotations


class CorralError(Exception):
    """Any failed call: `status` is None when no answer came back; `errors` maps each refused field to its messages."""

    def __init__(self, message: str, *, status: int | None = None, errors: dict[str, list[str]] | None = None,
                 url: str | None = None) -> None:
        self.message = message
        self.status = status
        self.errors = errors or {}
        self.url = url
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.status == 422 and self.errors:  # name every bad field: the point of a validation error
            return f"{self.message}: " + "; ".join(f"{f}: {' '.join(m)}" for f, m in self.errors.items())
        return self.message


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


def kind_of(status: int | None) -> type[CorralError]:
    """The class of a failure with this status (None: no answer)."""
    if status is None:
        return Unreachable
    return _BY_STATUS.get(status, ServerError if status >= 500 else CorralError)
