"""Which TCP addresses a process and everything under it listen on, read from /proc (Linux).

`corral serve` checks its local Ray cluster with it (every Ray process must listen on loopback only: whoever reaches a
Ray port can try to drive Ray), and the security test and probe measure the same thing the same way.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

_SOCKET = re.compile(r"socket:\[(\d+)\]")
_LISTEN = "0A"  # the TCP state column of /proc/net/tcp


def descendants(root: int) -> set[int]:
    """`root` and every process under it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def listening(root: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state held by `root` or a process under it. An IPv4 address seen
    through an IPv6 socket (::ffff:127.0.0.1) is given as the IPv4 one."""
    inodes: set[str] = set()
    for pid in descendants(root):
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                m = _SOCKET.fullmatch(os.readlink(fd))
                if m:
                    inodes.add(m.group(1))
        except OSError:
            continue  # gone, or not ours to read
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == _LISTEN and cols[9] in inodes:
                hex_ip, hex_port = cols[1].split(":")
                found.append((_address(hex_ip), int(hex_port, 16)))
    return found


def exposed(root: int) -> list[tuple[str, int]]:
    """The listening addresses under `root` that are not loopback."""
    return [(ip, port) for ip, port in listening(root) if not ipaddress.ip_address(ip).is_loopback]


def _address(hex_ip: str) -> str:
    raw = bytes.fromhex(hex_ip)
    # /proc prints each 32-bit word of the address in the host's (little-endian) order.
    ip = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)
