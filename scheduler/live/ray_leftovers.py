"""The local Ray cluster's processes, recorded so that a start after `kill -9` of the server ends what it left.

`corral serve` without `--ray-address` starts Ray's processes as its own children (GCS, raylets, and the raylets'
agents: DashboardAgent, RuntimeEnvAgent, some listening on loopback). A server killed with SIGKILL runs no shutdown,
and they outlive it (issue 46: six agents left, three listening). So the server records them when its cluster is up,
one file per server (`CORRAL_HOME/ray/processes-PID.json`, 0600, in Ray's 0700 folder), and removes its file at a
clean shutdown; the next start ends those of every server that is gone.

A pid is reused once its process has gone: a recorded pid is signalled only if the process that has it now started
when the recorded one did (`/proc/PID/stat`'s start time, in clock ticks since boot) and its command line is Ray's,
and only if the server that recorded it is itself gone (two servers may share a home: one's start never touches the
other's cluster). SIGTERM first, SIGKILL to those left after a bounded wait. Reads `/proc` (Linux); elsewhere
nothing is recorded and nothing is ended."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "processes-"
GRACE_S = 5.0  # SIGTERM, then this long for them to end, then SIGKILL
PROC = Path("/proc")


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the third (state, ppid, ...), or None if there is no such process (or no /proc)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()  # the command name (field 2) may hold spaces and parentheses


def started(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, field 22), or None if it is gone (a zombie too: it has
    ended, and only waits for its parent to read its status)."""
    fields = _stat(pid)
    return None if fields is None or fields[0] == "Z" else int(fields[19])


def argv(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def is_rays(args: list[str]) -> bool:
    """Whether a command line is one of Ray's processes: a program or script inside the `ray` package (raylet,
    gcs_server, the agents, default_worker.py), or a worker that renamed itself `ray::...`."""
    return bool(args) and (args[0].startswith("ray::") or any("/ray/" in a for a in args[:4]))


def descendants(root: int) -> list[int]:
    """Every process below `root` now, children first."""
    children: dict[int, list[int]] = {}
    for entry in PROC.glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def record(folder: Path, server: int | None = None) -> Path | None:
    """Write the Ray processes below this server now to its file in `folder` (Ray's private folder); its path, or
    None where there is no /proc."""
    server = server or os.getpid()
    me = started(server)
    if me is None:
        return None
    procs = [{"pid": p, "started": s, "argv": args[:2]} for p in descendants(server)
             if is_rays(args := argv(p)) and (s := started(p)) is not None]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{PREFIX}{server}.json"
    part = path.with_suffix(".part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"server": {"pid": server, "started": me}, "processes": procs}, f)
    os.replace(part, path)
    return path


def forget(folder: Path, server: int | None = None) -> None:
    """A clean shutdown took its cluster down: nothing of it to end at the next start."""
    (folder / f"{PREFIX}{server or os.getpid()}.json").unlink(missing_ok=True)


def end_leftovers(folder: Path, grace_s: float = GRACE_S) -> list[int]:
    """End the Ray processes that servers now gone recorded in `folder`, each only if it is still the recorded
    process and Ray's; remove their files. The pids signalled."""
    ended: list[int] = []
    for path in sorted(folder.glob(f"{PREFIX}*.json")):
        try:
            data = json.loads(path.read_text())
            server = data["server"]
            procs = [(int(p["pid"]), int(p["started"])) for p in data["processes"]]
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("%s is not a record of Ray's processes: removed", path.name)
            path.unlink(missing_ok=True)
            continue
        if started(int(server["pid"])) == int(server["started"]):
            continue  # that server still runs (another sharing this home, or this very one): its cluster is its own
        ours = [pid for pid, when in procs if started(pid) == when and is_rays(argv(pid))]
        for pid in ours:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        left = ours
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [pid for pid, when in procs if pid in left and started(pid) == when]
        for pid in left:
            _signal(pid, signal.SIGKILL)
        if ours:
            log.warning("ended %d Ray process(es) a server that was killed (pid %s) left running%s", len(ours),
                        server["pid"], f", {len(left)} with SIGKILL" if left else "")
        ended += ours
        path.unlink(missing_ok=True)
    return ended


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
