"""Which OS account a command job runs as, and who may submit command jobs at all.

A command job runs code on the cluster's machines. Run as the server's own OS user, it could read the job store (token
hashes, every user's jobs) and the server's environment, and make its submitter an admin. So Corral runs each
command job as an account of its own, chosen by the operator at `corral serve`:

- `--job-user-pattern corral-{user}`: one OS account per Corral user (`{user}` is the user's name, `{id}` its number),
  made on the node the first time one of the user's jobs lands there (`useradd --system`, no login shell). Like Slurm,
  one user's jobs cannot read another's environment, files or checkpoints, nor signal their processes.
- `--job-user-map FILE`: a YAML mapping from Corral user names to existing OS accounts (e.g. the users' own).
- `--job-user USER`: one unprivileged account for every job (isolates the server, not users from each other).

With none of these, command jobs would run as the server's user: then only admins may submit them, unless the
operator says every user is trusted with the server's account (`--command-jobs everyone`, refused for a root server).
The web layer asks `refusal` at submission; the controller asks `account` when it launches.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from scheduler.core.errors import SpecError

# Who may submit command jobs: `isolated` (the default): admins, and other users whose jobs run as an account that is
# not the server's; `admins`: admins only; `everyone`: every user, even as the server's own account.
COMMAND_JOBS = ("isolated", "admins", "everyone")
# What `useradd` takes on Debian and most distributions (NAME_REGEX), at most 32 characters.
OS_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,30}[a-z0-9_$-]?")


class AccountError(Exception):
    """This user's command jobs have no OS account to run as; the message says why and what an admin can do."""


@dataclass(frozen=True)
class JobAccounts:
    """The operator's choice of accounts. At most one of `shared`, `pattern` and `mapping` is set; none: the
    server's own user."""

    shared: str | None = None
    pattern: str | None = None
    mapping: Mapping[str, str] = field(default_factory=dict)
    mapping_file: str | None = None

    @property
    def isolated(self) -> bool:
        """Whether command jobs run as some account other than the server's."""
        return bool(self.shared or self.pattern or self.mapping_file)

    @property
    def per_user(self) -> bool:
        """Whether different users' command jobs may run as different OS accounts (a pattern or a map; one shared
        account does not): CUDA MPS then serves one node's shares to one user at a time (`scheduler.core.colocation`)."""
        return bool(self.pattern or self.mapping_file)

    @property
    def creates(self) -> bool:
        """Whether a missing account is made on the node (pattern accounts are Corral's own; mapped ones are not)."""
        return self.pattern is not None

    def account(self, user: str, user_id: int, *, admin: bool = False) -> str | None:
        """The OS account `user`'s command jobs run as; None: the server's own user (only for admins absent from a
        map, or when nothing isolates jobs). AccountError when a non-admin's jobs have none."""
        if self.shared:
            return self.shared
        if self.pattern:
            name = self.pattern.format(user=user, id=user_id)
            if not OS_NAME.fullmatch(name):
                raise AccountError(
                    f"--job-user-pattern {self.pattern!r} makes {name!r} for user {user!r}, which is not a valid OS "
                    "account name (lower-case letters, digits, '_' or '-', at most 32): an admin can use {id} in the "
                    "pattern, or a --job-user-map")
            return name
        if self.mapping_file:
            mapped = self.mapping.get(user)
            if mapped is None and not admin:
                raise AccountError(f"user {user!r} has no OS account in the job-user map ({self.mapping_file}): an "
                                   "admin adds one and restarts the server")
            return mapped
        return None


def refusal(accounts: JobAccounts, who: str, user: str, user_id: int, admin: bool) -> str | None:
    """Why `user` may not submit a command job here (the 403's message), or None. Admins always may."""
    if admin:
        return None
    if who == "admins":
        return "command jobs are for admins on this server (corral serve --command-jobs admins); submit kind emulated"
    if not accounts.isolated and who != "everyone":
        return ("command jobs of non-admins are off: this server would run them as its own OS user, which can read "
                "the job store. An admin enables them by starting the server (as root) with --job-user-pattern "
                "'corral-{user}', --job-user-map FILE or --job-user USER (docs/security.md)")
    try:
        accounts.account(user, user_id, admin=admin)
    except AccountError as exc:
        return str(exc)
    return None


def load(shared: str | None, pattern: str | None, map_file: Path | None) -> JobAccounts:
    """The accounts `corral serve`'s flags ask for, checked: one choice at most, a pattern that can make names, a map
    file that parses into valid OS names."""
    if sum(x is not None for x in (shared, pattern, map_file)) > 1:
        raise SpecError("give at most one of --job-user, --job-user-pattern and --job-user-map")
    if pattern is not None:
        try:
            sample = pattern.format(user="alice", id=7)
        except (KeyError, IndexError, ValueError) as exc:
            raise SpecError(f"--job-user-pattern {pattern!r}: only {{user}} and {{id}} may appear in it ({exc})") \
                from None
        if "{user}" not in pattern and "{id}" not in pattern:
            raise SpecError(f"--job-user-pattern {pattern!r} names one account for everyone: put {{user}} or {{id}} "
                            "in it (or use --job-user)")
        if not OS_NAME.fullmatch(sample):
            raise SpecError(f"--job-user-pattern {pattern!r} makes {sample!r} for a user alice, not a valid OS "
                            "account name")
        return JobAccounts(pattern=pattern)
    if map_file is not None:
        return JobAccounts(mapping=read_map(map_file), mapping_file=str(map_file))
    return JobAccounts(shared=shared)


def read_map(path: Path) -> dict[str, str]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"--job-user-map {path}: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise SpecError(f"--job-user-map {path}: expected lines of `corral-user: os-account`")
    bad = [v for v in data.values() if not OS_NAME.fullmatch(v)]
    if bad:
        raise SpecError(f"--job-user-map {path}: {bad[0]!r} is not a valid OS account name")
    return dict(data)


def check_server(accounts: JobAccounts, who: str) -> None:
    """Refuse, at start, a configuration that cannot work or that hands every user root."""
    root = os.geteuid() == 0
    if accounts.isolated and not root:
        raise SpecError("running command jobs as other OS users (--job-user, --job-user-pattern, --job-user-map) "
                        "needs the server, and the Ray nodes, to run as root")
    if who == "everyone" and root and not accounts.isolated:
        raise SpecError("--command-jobs everyone on a server running as root would run every user's jobs as root: "
                        "give --job-user-pattern, --job-user-map or --job-user")
    if accounts.shared:
        try:
            pwd.getpwnam(accounts.shared)
        except KeyError:
            raise SpecError(f"--job-user: no OS user {accounts.shared!r} on this machine (create it, e.g. `useradd "
                            f"--system --no-create-home {accounts.shared}`)") from None


def missing(accounts: JobAccounts) -> list[str]:
    """Mapped accounts this machine does not have (they may exist on the nodes only: a job whose account its node
    lacks fails, saying so)."""
    out = []
    for name in accounts.mapping.values():
        try:
            pwd.getpwnam(name)
        except KeyError:
            out.append(name)
    return out


def ensure_os_account(name: str) -> pwd.struct_passwd:
    """The OS account `name`, made if missing: a system account with no home and no login shell, whose own group is
    its only group (it shares no group with another job's account)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    shell = "/usr/sbin/nologin" if Path("/usr/sbin/nologin").exists() else "/bin/false"
    why = ""
    for attempt in range(3):  # two workers of one user on a node race to make it: the loser finds it made
        proc = subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--shell", shell, name],
                              capture_output=True, text=True, check=False)
        try:
            return pwd.getpwnam(name)
        except KeyError:
            why = proc.stderr.strip() or f"useradd exited with {proc.returncode}"
            time.sleep(0.2 * (attempt + 1))  # useradd holds /etc/passwd's lock while the other one writes
    raise AccountError(f"could not create the OS account {name!r}: {why}")
