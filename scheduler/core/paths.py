"""Where Corral's files go under `CORRAL_HOME` (default `~/.corral`; a shared volume when Ray workers run on other
machines): the home itself, agents trained on this machine, and the traces what-if may replay. The live service's
own files (jobs' logs and checkpoints, the store's permissions) are in `scheduler.live.job_files`."""

from __future__ import annotations

import os
from pathlib import Path


def corral_home() -> Path:
    return Path(os.environ.get("CORRAL_HOME") or Path.home() / ".corral").expanduser()


def agents_dir() -> Path:
    """Where `corral train` saves agents unless told otherwise, and where the server looks for `rl:NAME` after the
    shipped agents/zoo (both writable by admins only)."""
    return corral_home() / "agents"


def traces_dir() -> Path:
    """Trace files the what-if API may replay, by name (an admin puts them here; the API never takes a path)."""
    return corral_home() / "traces"
