"""The `corral` command's shared option types and its one-line errors.

Every numeric option of every command takes a `Number` and every file a command writes takes an `OutPath`
(tests/test_cli.py walks the command tree and refuses a plain `int`, `float`, `IntRange`, `FloatRange` or writable
`click.Path`), so no command can forget to refuse `nan`, a negative count or an output folder that does not exist,
and each refusal happens while the flags are parsed: before a simulation or a training run, never after it.

`CorralGroup` prints every failure as one line on stderr, `corral: WHAT`: exit status 2 for usage errors (a bad
flag, as click does), 1 for the rest.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import click

from scheduler.core.errors import SpecError

if TYPE_CHECKING:
    from scheduler.core.model import Cluster

PROG = "corral"
QUOTES = "'\""  # click quotes an option's name in its hints: '--gpus'

NumberKind = Literal["int", "float", "number"]


class Number(click.ParamType):
    """A finite number within bounds. kind "int": a whole number, as int; "float": a float; "number": an int when
    whole, else a float (what `submit --gpus` sends: 2 GPUs, or a 0.5 share).

    Python's float() takes "nan" and "inf", and click's FloatRange lets nan through every bound (nan < x is False):
    JSON cannot carry either, and no count or duration means them."""

    def __init__(self, kind: NumberKind = "float", min: float | None = None, max: float | None = None, *,
                 min_open: bool = False) -> None:
        self.kind = kind
        self.min = min
        self.max = max
        self.min_open = min_open
        self.name = "integer" if kind == "int" else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | float:
        if isinstance(value, bool):  # a default of True is a bug, not a count
            self.fail(f"must be a number, got {value!r}", param, ctx)
        if isinstance(value, int | float):
            number: int | float = value
        else:
            number = self._parse(str(value).strip(), param, ctx)
        if isinstance(number, float) and not math.isfinite(number):  # an int is finite (and may not fit a float)
            self.fail(f"must be a finite number, got {value}", param, ctx)
        self._check_bounds(number, value, param, ctx)
        if self.kind == "float":
            return float(number)
        return int(number) if float(number).is_integer() else number

    def _parse(self, text: str, param: click.Parameter | None, ctx: click.Context | None) -> int | float:
        if self.kind == "int":
            try:
                return int(text)
            except ValueError:
                self.fail(f"must be a whole number, got {text!r}", param, ctx)
        try:
            return float(text)
        except ValueError:
            self.fail(f"must be a number, got {text!r}", param, ctx)

    def _check_bounds(self, number: float, given: Any, param: click.Parameter | None,
                      ctx: click.Context | None) -> None:
        if self.min is not None:
            if self.min_open and number <= self.min:
                self.fail(f"must be more than {self.min:g}, got {given}", param, ctx)
            if number < self.min:
                self.fail(f"must be at least {self.min:g}, got {given}", param, ctx)
        if self.max is not None and number > self.max:
            self.fail(f"must be at most {self.max:g}, got {given}", param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str | None:
        if isinstance(param, click.Argument):  # its own name (JOB_ID), in the help and in its errors
            return None
        return "INTEGER" if self.kind == "int" else "NUMBER"

    def __repr__(self) -> str:
        return f"Number({self.kind!r}, {self.min}, {self.max})"


# The common ones, named for what they count.
COUNT = Number("int", 1)  # jobs, rows, seeds, environments: one or more
NATURAL = Number("int", 0)  # zero or more
POSITIVE = Number("float", 0, min_open=True)  # seconds, milliseconds: more than zero
NON_NEGATIVE = Number("float", 0)
SEED = Number("int", 0, 2**32 - 1)  # numpy's seeds
FRACTION = Number("float", 0, 1)
JOB_ID = Number("int", 1)


class OutPath(click.ParamType):
    """A file (or, with folder=True, a folder) the command will write: checked when the flags are parsed, so a run of
    minutes does not end in an error about its output. The folder it goes in must exist and be writable (with
    make_parents=True, as for `train --out`, which makes the missing folders: the nearest one that exists), a file's
    path must not be a folder, and an existing file must be writable. Nothing is created here: a run that fails
    writes nothing."""

    name = "path"

    def __init__(self, *, folder: bool = False, make_parents: bool = False) -> None:
        self.folder = folder
        self.make_parents = make_parents or folder  # a folder is made with its parents (os.makedirs)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = value if isinstance(value, Path) else Path(os.path.expanduser(str(value)))
        problem = out_path_problem(path, folder=self.folder, make_parents=self.make_parents)
        if problem is not None:
            self.fail(f"cannot write {str(path)!r}: {problem}", param, ctx)
        return path

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DIR" if self.folder else "PATH"


def out_path_problem(path: Path, *, folder: bool = False, make_parents: bool = False) -> str | None:
    """Why `path` cannot be written (as a file, or a folder with folder=True), or None when it can."""
    if str(path) in ("", "."):
        return "give a name"
    if folder:
        if path.exists():
            return None if path.is_dir() and os.access(path, os.W_OK | os.X_OK) else (
                "not a writable folder" if path.is_dir() else "it is a file; give a folder")
    elif path.is_dir():
        return "it is a folder; give a file name"
    elif path.exists():
        return None if os.access(path, os.W_OK) else "the file is not writable"
    parent = path.parent
    if make_parents:
        while not parent.exists() and parent != parent.parent:  # the folders the command will make
            parent = parent.parent
    if not parent.exists():
        return f"folder {str(parent)!r} does not exist"
    if not parent.is_dir():
        return f"{str(parent)!r} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"folder {str(parent)!r} is not writable"
    return None


# ---- one-line errors -------------------------------------------------------------------------------------------------


class CliError(click.ClickException):
    """A failure as one line, `corral: MESSAGE`, with the exit status of what it replaces."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(" ".join(message.split()))  # folded: a message with newlines would be several lines
        # click types exit_code as a ClassVar; here each instance carries the status of the error it replaces
        self.exit_code = exit_code  # type: ignore[misc]

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"{PROG}: {self.format_message()}", file=file, err=file is None)


def usage_line(exc: click.UsageError) -> str:
    """A usage error in one line that names the option: `--gpus: must be a finite number, got nan`."""
    if isinstance(exc, click.BadParameter) and not isinstance(exc, click.MissingParameter):
        hint = exc.param_hint if exc.param_hint is not None else (
            exc.param.get_error_hint(exc.ctx) if exc.param is not None and exc.ctx is not None else None)
        if isinstance(hint, Sequence) and not isinstance(hint, str):
            hint = " / ".join(hint)
        if hint:
            return f"{str(hint).strip(QUOTES)}: {exc.message}"
        return exc.message
    return f"{exc.format_message()} (see `{' '.join([*command_words(exc.ctx), '--help'])}`)"


def command_words(ctx: click.Context | None) -> list[str]:
    """`corral token create` as words. The root's own name is whatever started it (`python -m ...`, a test runner's
    `main`): it is `corral` to the user."""
    words: list[str] = []
    while ctx is not None and ctx.parent is not None:
        words.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    return [PROG, *words]


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Re-raise click's errors (and an OS error from writing a file) as `CliError`s: one line each."""
    try:
        yield
    except CliError:
        raise
    except click.UsageError as exc:
        raise CliError(usage_line(exc), exit_code=exc.exit_code) from None
    except click.ClickException as exc:
        raise CliError(exc.format_message(), exit_code=exc.exit_code) from None
    except OSError as exc:
        if exc.errno == errno.EPIPE:  # click's main quiets a closed pipe (`corral jobs | head`) itself
            raise
        where = f": {exc.filename}" if exc.filename is not None and str(exc.filename) not in str(exc) else ""
        raise CliError(f"{exc}{where}") from None


class CorralGroup(click.Group):
    """The root `corral` group: its own flags and every sub-command's fail in one line (see `one_line_errors`)."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        with one_line_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with one_line_errors():
            return super().invoke(ctx)


# ---- options the offline commands share ---------------------------------------------------------------------------


def parse_cluster_option(ctx: click.Context, param: click.Parameter, value: str) -> Cluster:
    from scheduler.core.model import parse_cluster
    try:
        return parse_cluster(value)
    except SpecError as exc:
        raise click.BadParameter(str(exc).removeprefix("--cluster: "), ctx, param) from None
