"""Several real network hosts on one machine, for the multi-host tests: a Linux network namespace per host, each with
its own address on a bridge in the root namespace (through which the tests, and nothing else, reach them).

Everything is created with a random tag in its name and removed by `close()`, processes first (a process left in a
namespace keeps it, and its veth pair, alive). Traffic goes only between these namespaces and the root one's bridge
address. Needs root and iproute2; `hosts_or_skip()` says why not where they are missing.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def hosts_or_skip() -> None:
    if shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` is not installed: the multi-host tests need network namespaces")
    if os.geteuid() != 0:
        pytest.skip("the multi-host tests create network namespaces, which needs root (CI runs as root)")
    probe = f"crlp{secrets.token_hex(3)}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {made.stderr.strip()}")
    _ip("netns", "del", probe, check=False)


@dataclass
class Host:
    name: str
    netns: str
    address: str
    veth: str  # its end in the root namespace: taking it down partitions the host
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)


class Hosts:
    """Hosts on a private /24 (10.231.X.0): the bridge is .254, hosts .1, .2, ... in the order they are added."""

    def __init__(self, logs: Path) -> None:
        self.tag = secrets.token_hex(2)
        self.logs = logs
        self.bridge = f"crl{self.tag}br"
        used = _ip("-4", "addr").stdout
        self.subnet = next(f"10.231.{x}" for x in range(1 + int(self.tag, 16) % 200, 256)
                           if f"10.231.{x}." not in used)
        self.hosts: dict[str, Host] = {}
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    @property
    def gateway(self) -> str:
        return f"{self.subnet}.254"

    def add(self, name: str) -> Host:
        n = len(self.hosts) + 1
        host = Host(name, f"crl{self.tag}{name}", f"{self.subnet}.{n}", f"crl{self.tag}v{n}")
        _ip("netns", "add", host.netns)
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        _ip("link", "set", host.veth, "master", self.bridge, "up")
        for cmd in (["addr", "add", f"{host.address}/24", "dev", "eth0"], ["link", "set", "eth0", "up"],
                    ["link", "set", "lo", "up"]):
            _ip("-n", host.netns, *cmd)
        self.hosts[name] = host
        return host

    def popen(self, host: Host, argv: list[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
        """`argv` on `host`, in a process group of its own (so `close` can stop all of it), output in logs/LOG."""
        out = (self.logs / log).open("ab")
        proc = subprocess.Popen(["ip", "netns", "exec", host.netns, *argv], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        host.procs.append(proc)
        return proc

    def link(self, host: Host, up: bool) -> None:
        """Partition `host` from every other (down), or join it again (up)."""
        _ip("link", "set", host.veth, "up" if up else "down")

    @staticmethod
    def stop(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass

    def kill_all(self, host: Host) -> None:
        """Every process in the host's namespace, whoever started it (Ray's daemons leave their process group)."""
        for proc in host.procs:
            self.stop(proc, timeout=5.0)
        for _ in range(5):
            pids = [int(p) for p in _ip("netns", "pids", host.netns, check=False).stdout.split()]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)

    def close(self) -> None:
        for host in self.hosts.values():
            self.kill_all(host)
            _ip("netns", "del", host.netns, check=False)
            _ip("link", "del", host.veth, check=False)
        _ip("link", "del", self.bridge, check=False)
