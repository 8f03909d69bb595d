"""Reading the end of a worker's log without loading it: workers write what they like, and a job that printed 300 MB
without a newline once made `?tail=1` answer 300 MB (four such requests took the server to 3 GB).

The tail is read backwards from the end in blocks, and stops at `lines` lines or at `max_bytes`, whichever comes
first: memory and the answer are bounded by `max_bytes` whatever the file holds. A line longer than that is cut to
its last bytes, behind a marker saying so."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

TAIL_BLOCK = 64 * 1024


def truncation_marker(max_bytes: int) -> str:
    return f"[corral: truncated: at most {max_bytes} bytes of this log are shown, and the first line below is cut]\n"


def tail_lines(path: Path, lines: int, max_bytes: int) -> str:
    """The last `lines` lines of the file at `path` ("" when there is none), at most `max_bytes` of them."""
    try:
        with path.open("rb") as f:
            end = pos = f.seek(0, os.SEEK_END)
            chunks: list[bytes] = []
            newlines = read = 0
            # One newline more than wanted: the first line kept is then whole.
            while pos > 0 and newlines <= lines and read < max_bytes:
                step = min(TAIL_BLOCK, pos, max_bytes - read)
                pos -= step
                f.seek(pos)
                chunks.append(f.read(step))
                read += len(chunks[-1])
                newlines += chunks[-1].count(b"\n")
            kept = b"".join(reversed(chunks)).splitlines(keepends=True)[-lines:]
            text = b"".join(kept)
            start = end - len(text)  # where the text begins in the file
            cut = start > 0 and _byte_at(f, start - 1) != b"\n"
    except FileNotFoundError:
        return ""
    except OSError as exc:  # unreadable (permissions, a folder): say so, without the path
        return f"[corral: the log cannot be read: {exc.strerror or type(exc).__name__}]\n"
    body = text.decode("utf-8", errors="replace")
    return truncation_marker(max_bytes) + body if cut else body


def _byte_at(f: BinaryIO, offset: int) -> bytes:
    f.seek(offset)
    return f.read(1)


def read_from(path: Path, offset: int, max_bytes: int) -> tuple[str, int]:
    """What the file at `path` holds from byte `offset` (at most `max_bytes`, cut after its last newline when there is
    more: the next read starts on a whole line), and the offset just past it. A file shorter than `offset` (none yet,
    or replaced) reads from its start."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < offset:
                offset = 0
            f.seek(offset)
            data = f.read(min(max_bytes, size - offset))
    except FileNotFoundError:
        return "", 0
    except OSError as exc:  # unreadable (permissions, a folder): say so, without the path, and stay where we were
        return f"[corral: the log cannot be read: {exc.strerror or type(exc).__name__}]\n", offset
    if offset + len(data) < size and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]
    return data.decode("utf-8", errors="replace"), offset + len(data)


def file_size(path: Path) -> int:
    """The size of the file at `path` now (0 when there is none): where a follower of its tail starts."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
