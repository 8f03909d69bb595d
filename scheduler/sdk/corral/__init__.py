"""The typed Python client of a Corral server: `from corral import Client`. The `corral` command is built on it.

Answers are classes of `corral.models` (generated from the server's OpenAPI document, so an editor completes their
fields); failures are classes of `corral.errors`. docs/client.md has examples.
"""

from corral.client import Client, LogText, Submitted
from corral.errors import (
    Conflict,
    CorralError,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
    Unreachable,
)

__all__ = ["Client", "Conflict", "CorralError", "Forbidden", "InvalidRequest", "LogText", "NotFound", "RateLimited",
           "ServerError", "Submitted", "Unauthorized", "Unreachable"]
