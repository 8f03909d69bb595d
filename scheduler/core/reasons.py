"""Why a job waits, or why it ended, as data: a code and its figures (`Reason`), with the words people read rendered
from them by one table (`TEMPLATES`).

The store keeps the three together (`pending_reason`, `pending_code`, `pending_params`; `error`, `end_code`,
`end_params`); every reader that decides something (the start estimate finds the holder of a reservation by its
code) reads the code and its figures, never the words, so the words can change without changing what anything does.
A policy's own words (a `Wait`) are the code `policy` with the text as its one parameter: policies say why in their
own terms, and nothing decides on them.

This module sits below every other in the core (it imports none of them): the reasons' producers (`dependencies`,
`outages`, `reservations`, the live controller) build `Reason`s from their figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple


class Code(StrEnum):
    """What a reason is about. Stored as its value: rename a member's words freely, never its value."""

    # Why a pending job waits.
    POLICY = "policy"  # the policy's own words: {"text"}
    RESERVATION = "reservation"  # it holds a reservation: {"gpus", "nodes", "free_now", "waiting_on", "more",
    # "starts_in_s" (None: it waits on a run without a time limit)}
    RESERVED_GPUS = "reserved_gpus"  # the free GPUs it fits on are held for another job's reservation: {"holder"}
    CAPACITY = "capacity"  # too few whole free GPUs: {"gpus", "free"}
    SHARE_CAPACITY = "share_capacity"  # no GPU with its share free: {"share", "mem_gb", "lack": one of SHARE_LACKS}
    # Its constraints (`scheduler.core.constraints`) leave too little free now: {"constraints" (their words), "nodes"
    # (how many nodes they allow), "gpus" (whole GPUs it needs; None for a share), "share" (None for whole GPUs),
    # "free" (whole GPUs free on those nodes, or GPUs there with the share and memory free), "elsewhere" (whether it
    # would fit now without them)}
    CONSTRAINED = "constrained"
    FITS_NOW = "fits_now"  # it fits, and the policy chose to wait: {"policy"}
    FITS_SPREAD = "fits_spread"  # it fits only over more nodes than it needs: {"policy", "gpus", "nodes", "room"}
    HELD = "held"  # its owner or an admin holds it: {"by", "job_id"}
    DEPENDENCY = "dependency"  # a dependency does not hold yet: {"on", "condition", "more"}
    RETRY_BACKOFF = "retry_backoff"  # a retry waits out its backoff: {"exit_code", "retry", "max_retries", "delay_s"}
    ARRAY_LIMIT = "array_limit"  # its array runs as many tasks as it may: {"array", "max_running"}
    EVICTED = "evicted"  # a drain or a faulty GPU took its run: {"node", "gpu" (None: a drain), "detail", "requeued"}
    NOT_STARTED = "not_started"  # its workers were not up in time: {"timeout_s", "nodes"}
    CHECKPOINTED = "checkpointed"  # the controller stopped (a shutdown): {"detail"}
    REQUEUED = "requeued"  # a user asked: {"by"}
    # A resize of a running elastic job its policy decided and the rules refused (`scheduler.core.resizing`): the
    # pending reason of the job a refused shrink made room for. {"job", "to", "rule": one of RESIZE_RULES, and the
    # rule's figures: "ago_s", "interval_s" (interval); "gain_s", "pause_s" (gain)}
    RESIZE_REFUSED = "resize_refused"
    # What admission did to a job (`scheduler.core.admission.Fit`): an elastic job whose submitted size the cluster can
    # never hold, submitted at the largest size it accepts that it can. {"from", "to" (GPUs), "why" (the refusal of
    # its submitted size, in words)}
    SIZED_DOWN = "sized_down"
    # Why a job ended (other than by succeeding).
    REJECTED = "rejected"  # the cluster can never run it: {"text"}
    EXIT_CODE = "exit_code"  # its run exited non-zero: {"exit_code", "error" (the worker's words, or None), "retries"}
    TIME_LIMIT = "time_limit"  # stopped at its time limit: {"limit_s", "ran_s", "grace_s"}
    LOST = "lost"  # its workers were lost and it is not restarted: {"detail"}
    DEPENDENCY_NEVER = "dependency_never"  # a dependency can never hold: {"on", "condition", "succeeded"}


SHARE_LACKS = ("mps_user", "mps_memory", "room")
RESIZE_RULES = ("interval", "gain", "no_start")

# How a dependency's condition reads: "waiting for job 12 to succeed".
CONDITION_WORDS = {"afterok": "succeed", "afterany": "end", "afternotok": "fail"}


def duration_words(seconds: float) -> str:
    """A wait in a pending reason's words: "45 s", "12 min", "3.5 h"."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def duration_words_floor(seconds: float) -> tuple[str, float]:
    """`duration_words(seconds)`, and the time left above which it reads the same: for every `s` with floor < s <=
    seconds, `duration_words(s)` is those words. A wait quoted at every pass says them again until the time left
    falls to the floor, rather than render them (most of a deep queue's waits change their words every few minutes).
    The bounds sit a microsecond inside the rounding's: a time left that near one is rendered again."""
    words = duration_words(seconds)
    value = float(words.split()[0])
    if seconds < 120:
        floor = value - 0.5 if value > 0 else -math.inf
    elif seconds < 7200:
        floor = max(60.0 * value - 30.0 + 1e-6, 120.0)
    else:
        floor = max(3600.0 * value - 180.0 + 1e-6, 7200.0)
    return words, floor


def _reservation(p: Mapping[str, Any]) -> str:
    text = (f"holds a reservation for {p['gpus']} GPUs on {p['nodes']} node(s) ({p['free_now']} free now, kept for "
            "it as the rest free)")
    whom = ", ".join(p["waiting_on"]) + (f" and {p['more']} more" if p["more"] > 0 else "")
    if p["starts_in_s"] is None:
        return text + (f"; it starts when {whom} end (not all have time limits)" if whom else "")
    return text + f"; it starts within {duration_words(p['starts_in_s'])}, when {whom} reach their time limits"


def _share_capacity(p: Mapping[str, Any]) -> str:
    if p["lack"] == "mps_user":
        return (f"waiting for a {p['share']:g} share on a node running no other user's shares (each node's CUDA MPS "
                "serves one user at a time)")
    if p["lack"] == "mps_memory":
        return (f"waiting for a GPU whose {p['share']:g} share holds {p['mem_gb']:g} GB under MPS (the larger GPUs "
                "are busy)")
    return f"waiting for a GPU with a {p['share']:g} share and {p['mem_gb']:g} GB free"


def _constrained(p: Mapping[str, Any]) -> str:
    where = f"on nodes matching {p['constraints']} ({p['nodes']} node{'s' if p['nodes'] != 1 else ''}"
    if p["share"] is not None:
        text = f"waiting for a GPU with a {p['share']:g} share free {where}; {p['free']} with room there)"
    else:
        text = f"waiting for {p['gpus']} GPUs {where}; {p['free']} free there)"
    return text + (": it would fit now elsewhere" if p["elsewhere"] else "")


def _fits_spread(p: Mapping[str, Any]) -> str:
    if p["nodes"] == 1:
        return (f"fits only spread over nodes (at most {p['room']} free on one): {p['policy']} chose to wait for "
                f"{p['gpus']} on one node")
    return (f"fits only spread over more than {p['nodes']} nodes (the {p['nodes']} with the most room have "
            f"{p['room']} free): {p['policy']} chose to wait for {p['gpus']} on {p['nodes']} nodes")


def _dependency(p: Mapping[str, Any]) -> str:
    more = f" (and {p['more']} more)" if p["more"] else ""
    return f"waiting for {p['on']} to {CONDITION_WORDS[p['condition']]}{more}"


def _evicted(p: Mapping[str, Any]) -> str:
    if p["gpu"] is not None:
        text = f"GPU {p['gpu']} of {p['node']} is faulty ({p['detail']})"
    else:
        text = f"node {p['node']} was drained now" + (f" ({p['detail']})" if p["detail"] else "")
    return text + (": checkpointed and requeued (no restart spent)" if p["requeued"] else "")


def _resize_refused(p: Mapping[str, Any]) -> str:
    text = f"its policy would resize {p['job']} to {p['to']} GPUs"
    if p["rule"] == "interval":
        return (text + f", resized {p['ago_s']:.0f} s ago: a job is resized at most once every "
                f"{p['interval_s']:g} s")
    if p["rule"] == "gain":
        return text + f", which would save {p['gain_s']:.0f} s, no more than its {p['pause_s']:.0f} s pause"
    return text + " to make room for no start"


def _exit_code(p: Mapping[str, Any]) -> str:
    return ((p["error"] or f"exit code {p['exit_code']}")
            + (f" (after {p['retries']} retries)" if p["retries"] else ""))


def _dependency_never(p: Mapping[str, Any]) -> str:
    ended = "succeeded" if p["succeeded"] else "ended without succeeding"
    return f"its dependency can never be met: it runs {p['condition']} {p['on']}, which {ended}"


# The one table of words: each code's text from its parameters.
TEMPLATES: dict[Code, Callable[[Mapping[str, Any]], str]] = {
    Code.POLICY: lambda p: p["text"],
    Code.RESERVATION: _reservation,
    Code.RESERVED_GPUS: lambda p: (f"the free GPUs it fits on are held for {p['holder']}'s reservation; it could use "
                                   "them only if its time limit ended before the reservation starts"),
    Code.CAPACITY: lambda p: f"waiting for {p['gpus']} GPUs ({p['free']} free)",
    Code.SHARE_CAPACITY: _share_capacity,
    Code.CONSTRAINED: _constrained,
    Code.FITS_NOW: lambda p: f"fits now: {p['policy']} chose to wait",
    Code.FITS_SPREAD: _fits_spread,
    Code.HELD: lambda p: f"held by {p['by']}: it starts only once released (`corral release {p['job_id']}`)",
    Code.DEPENDENCY: _dependency,
    Code.RETRY_BACKOFF: lambda p: (f"exit code {p['exit_code']}: retry {p['retry']} of {p['max_retries']} in "
                                   f"{p['delay_s']:g} s"),
    Code.ARRAY_LIMIT: lambda p: f"array {p['array']} runs {p['max_running']} tasks at once, its maximum",
    Code.EVICTED: _evicted,
    Code.NOT_STARTED: lambda p: (f"its workers were not up {p['timeout_s']:g} s after it was placed on {p['nodes']} "
                                 "(Ray did not start them): requeued (no restart spent)"),
    Code.CHECKPOINTED: lambda p: f"{p['detail']}: checkpointed and requeued (no restart spent)",
    Code.REQUEUED: lambda p: f"requeued by {p['by']}: checkpointed, back in the queue (no restart spent)",
    Code.RESIZE_REFUSED: _resize_refused,
    Code.SIZED_DOWN: lambda p: (f"brought down from {p['from']} to {p['to']} GPUs, the most it accepts that the "
                                f"cluster can ever hold (at {p['from']} GPUs it can never run: {p['why']})"),
    Code.REJECTED: lambda p: p["text"],
    Code.EXIT_CODE: _exit_code,
    Code.TIME_LIMIT: lambda p: (f"time limit of {p['limit_s']:g} s reached (its run had lasted {p['ran_s']:.0f} s): "
                                f"stopped with SIGTERM, then SIGKILL after {p['grace_s']:g} s"),
    Code.LOST: lambda p: f"lost: {p['detail']}",
    Code.DEPENDENCY_NEVER: _dependency_never,
}


class Reason(NamedTuple):
    """A reason as data: its `code` and the figures its words need (`params`: JSON values only, so the store keeps
    them as they are; read-only, as the reason is). Equal reasons have equal codes and parameters; `text` is what
    people read. A named tuple: the controller makes one per pending job a pass, and a frozen dataclass costs five
    times as much to make."""

    code: Code
    params: Mapping[str, Any] = MappingProxyType({})

    @property
    def text(self) -> str:
        return TEMPLATES[self.code](self.params)

    def to_json(self) -> dict[str, Any]:
        """{"code", "params"}, as the API and the store hold them."""
        return {"code": self.code.value, "params": dict(self.params)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reason:
        """The reason `to_json` gave; ValueError naming the field for anything else."""
        return cls.stored(data.get("code"), data.get("params"))

    @classmethod
    def stored(cls, code: object, params: object) -> Reason:
        """A reason from its stored code and parameters; ValueError (an unknown code) or TypeError (parameters that are
        not an object) naming the field."""
        try:
            known = Code(code) if isinstance(code, str) else None
        except ValueError:
            known = None
        if known is None:
            raise ValueError(f"code: {code!r} is not a reason code (one of {', '.join(Code)})")
        if params is None:
            params = {}
        if not isinstance(params, Mapping):
            raise TypeError(f"params: {params!r} is not an object")
        return cls(known, params)


def finite_or_none(seconds: float) -> float | None:
    """A time for a reason's parameters: JSON has no infinity, so an unbounded one is None."""
    return None if math.isinf(seconds) else float(seconds)
