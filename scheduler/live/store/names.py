"""The rule for the names users, teams and priority classes take: one a shell cannot mistake for a flag."""

from __future__ import annotations

import re

# Letters, digits, `.`, `_` and `-`, not starting with `-`: a name can never be mistaken for a command-line flag
# (`--user $USER --admin` with USER unset would otherwise create a user called "--admin").
USER_NAME = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}")


def check_user_name(name: str) -> str:
    """`name` if it is a valid user name, else ValueError saying what is wrong with it."""
    if not name:
        raise ValueError("must not be empty")
    if name.startswith("-"):
        raise ValueError(f"{name!r} starts with '-': is a shell variable unset before a flag?")
    if not USER_NAME.fullmatch(name):
        raise ValueError(f"{name!r}: use 1 to 64 letters, digits, '.', '_' or '-'")
    return name
