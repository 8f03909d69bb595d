"""The error every layer raises for input it cannot use. It lives alone so that the command line can catch it without
importing the cluster model (numpy, pydantic): the HTTP client commands stay fast."""

from __future__ import annotations


class SpecError(ValueError):
    """A cluster spec, trace or flag that cannot be used; the message names what and where."""
