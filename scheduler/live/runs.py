"""What the controller asks of a worker backend, and what a run of a job is, with no Ray in sight.

`scheduler.live.ray_backend.RayBackend` is the backend; the controller only knows this protocol, so the import of Ray
stays in one module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.core.constraints import ConstraintError, check_labels
from scheduler.core.errors import SpecError

NAMESPACE = "corral"
# The marker resource that says which server model (preset) a node is: `corral_preset_dgx-a100`. Its amount means
# nothing and no task asks for it; it only travels with the node in Ray's node table, so the controller models each
# node as what it is. The prefix shares nothing with `corral_node_` and `corral_gpu_`, whose parsers it cannot confuse.
PRESET_PREFIX = "corral_preset_"
# The marker resource that says which rack a node sits in, `corral_rack_r12`, carried like the preset's (a Ray label
# would not do: a label value must start and end with a letter or digit and has at most 63 characters, and a rack name
# is any of NodeGroupSpec.rack's). Nodes naming one rack share it in the cluster model; a node naming none fills racks
# in order, as before racks had names.
RACK_PREFIX = "corral_rack_"
# The marker resources that give a node its labels (`corral node start --label zone=a`): `corral_label_zone=a`, one
# per label, carried like the rack's. Jobs' constraints select nodes by them (`scheduler.core.constraints`).
LABEL_PREFIX = "corral_label_"
# The marker resources that say which virtual environments a node's operator declared (`CORRAL_VENVS=torch=/path`,
# `scheduler.live.node.environments`): `corral_venv_torch`, one per name. A submission naming a venv no alive node
# declares is refused (`scheduler.live.nodes.venv_refusal`) rather than failing at its launch.
VENV_PREFIX = "corral_venv_"
# NodeGroupSpec.rack's rule (scheduler.core.model), checked here too so that a bad name is refused where it is given
# (`corral node start --rack`), not when the controller builds its model.
RACK_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def check_rack(rack: str, where: str = "--rack") -> str:
    """`rack` if it is a rack name (letters, digits, '.', '_' and '-', 1 to 64 of them); SpecError naming `where`
    and the name otherwise."""
    if not RACK_RE.match(rack):
        raise SpecError(f"{where} {rack!r}: a rack name is 1 to 64 letters, digits, '.', '_' or '-'")
    return rack


def node_resources(name: str, gpus: int, preset: str | None = None, rack: str | None = None,
                   labels: Mapping[str, str] | None = None, venvs: Iterable[str] = ()) -> dict[str, float]:
    """The custom resources a Ray node must carry to be Corral node `name` with `gpus` GPUs (for `ray start
    --resources`), with its preset's marker when it has one (None: the controller models it as `corral serve
    --preset`), its rack's when it has one (SpecError for a bad rack name; None: in no named rack), one per label
    (SpecError for a bad label) and one per virtual environment its operator declared (names checked by the caller:
    `scheduler.live.environments.check_venv`)."""
    res = {f"corral_node_{name}": 1.0}
    res.update({f"corral_gpu_{name}_{i}": 1.0 for i in range(gpus)})
    if preset is not None:
        res[PRESET_PREFIX + preset] = 1.0
    if rack is not None:
        res[RACK_PREFIX + check_rack(rack)] = 1.0
    for key, value in check_node_labels(labels or {}).items():
        res[f"{LABEL_PREFIX}{key}={value}"] = 1.0
    for venv in venvs:
        res[VENV_PREFIX + venv] = 1.0
    return res


def check_node_labels(labels: Mapping[str, str], where: str = "--label") -> dict[str, str]:
    """A node's labels if they are labels (`scheduler.core.constraints.check_labels`); SpecError naming `where`."""
    try:
        return check_labels(labels, where)
    except ConstraintError as exc:
        raise SpecError(str(exc)) from None


# What one rank of a command job may write to its log in one run: enough for any training log, small enough that a
# job printing without end cannot fill CORRAL_HOME's disk (`corral serve --log-limit-mb`).
DEFAULT_LOG_LIMIT_BYTES = 64 * 1024 * 1024
# A placed run whose workers are not all up this long after it was placed is taken back and its job requeued elsewhere
# (the controller's `_enforce_start_deadline`; Slurm's BatchStartTimeout does this for a batch job that never
# launched). Ray starts a worker in seconds; one that waits longer waits for resources something else holds.
START_TIMEOUT_S = 120.0
# A node where the workers of this many different jobs did not start within START_TIMEOUT_S, all within
# START_STRIKES_WINDOW_S, is drained by the controller (`_strike`): each run placed there costs its job a start
# timeout, and a hold of SUSPECT_S only spaces them out. Slurm drains a node whose job launches fail the same way.
# Only a start counts, not a lost run: a job's own command can make its workers die (memory), never fail to start.
START_STRIKES = 3
START_STRIKES_WINDOW_S = 3600.0


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    gpus: int
    alive: bool
    ray_node_id: str
    address: str
    preset: str | None = None  # the preset the node advertises (None: none, or several markers)
    rack: str | None = None  # the rack the node advertises, unchecked (None: none, or several markers)
    labels: tuple[tuple[str, str], ...] = ()  # the labels it advertises, unchecked
    venvs: tuple[str, ...] = ()  # the virtual environments its operator declared (`CORRAL_VENVS`), sorted


@dataclass(frozen=True, slots=True)
class RankSpec:
    rank: int
    node: str
    local_gpus: tuple[int, ...]
    share: float
    gpu_mem_gb: float  # memory of each of its GPUs: the MPS memory limit is this times the share


@dataclass(frozen=True, slots=True)
class Launch:
    """Everything a run of a job needs. `rate` is the emulated progress rate (1 / predicted slowdown)."""

    job_id: int
    attempt: int
    kind: str  # "emulated" | "command"
    ranks: tuple[RankSpec, ...]
    work_s: float  # emulated: the isolated seconds the whole job needs
    rate: float
    log_dir: str  # folder of rank-<r>.log files for this run
    checkpoint_dir: str
    entrypoint: str | None = None
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    run_as: str | None = None  # command jobs: the OS user their process runs as (None: the worker's own user)
    account_error: str = ""  # why this job has no account to run as: its launch fails with this reason
    create_account: bool = False  # make `run_as` on the node if it has no such account (scheduler.live.job_accounts)
    log_limit_bytes: int = DEFAULT_LOG_LIMIT_BYTES  # a command rank's log stops growing here (the rest is dropped)
    # Ray's runtime_env of its workers (`scheduler.live.environments.runtime_env`): its packages, image, working dir
    runtime_env: dict[str, Any] | None = None


@dataclass(slots=True)
class JobStatus:
    """What `poll` reports for a run. `phase`: starting (workers coming up), running, succeeded, failed, lost."""

    job_id: int
    attempt: int
    phase: str
    started_at: list[float | None]  # per rank, when its process started
    ended_at: list[float | None]
    exit_codes: list[int | None]
    done_s: float  # emulated: isolated seconds of work done
    error: str = ""
    up: tuple[bool, ...] = ()  # starting: whether each rank's worker is up yet (empty: not known)
    prepared_s: float | None = None  # a run with an environment: how long it took to prepare (None: none, or not yet)
    usage: dict[str, Any] | None = None  # an ended command run: what NVML measured of it (`MeasuredUsage.as_dict`)


def rank_env(spec: RankSpec, world: int, master_addr: str, master_port: int, launch: Launch) -> dict[str, str]:
    """The environment a worker's process gets: its GPUs, its MPS share and the distributed rendezvous."""
    env = dict(launch.env)
    env.update({
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in spec.local_gpus),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(world),
        "RANK": str(spec.rank),
        "NODE_RANK": str(spec.rank),
        "LOCAL_WORLD_SIZE": str(len(spec.local_gpus)),
        "CORRAL_JOB_ID": str(launch.job_id),
        "CORRAL_ATTEMPT": str(launch.attempt),
        "CORRAL_NODE": spec.node,
        "CORRAL_CHECKPOINT_DIR": launch.checkpoint_dir,
    })
    if spec.share < 1.0:  # an MPS client: cap its SMs and its memory to its share
        # Here, not at the top: the `corral` client imports this module, and the rule's module imports numpy.
        from scheduler.core.colocation import mem_cap_mb

        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, round(spec.share * 100)))
        limit_mb = mem_cap_mb(spec.share, spec.gpu_mem_gb)  # the cap admission and placements check (one function)
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(f"{i}={limit_mb}M" for i in range(len(spec.local_gpus)))
    return env


def actor_name(job_id: int, attempt: int, rank: int) -> str:
    """Workers are named by job, attempt and rank: a restarted controller finds a run's workers by these names."""
    return f"{job_actors(job_id)}{attempt}-{rank}"


def job_actors(job_id: int) -> str:
    """What the names of a job's workers, of every run, begin with."""
    return f"corral-{job_id}-"


class Backend(Protocol):
    """Runs workers. Every method returns promptly: the controller's loop never waits on a worker."""

    def nodes(self) -> list[NodeInfo]: ...
    def launch(self, launch: Launch) -> None: ...
    def adopt(self, launch: Launch) -> bool: ...
    def reap_orphans(self, keep: set[str]) -> list[str]: ...
    def set_rate(self, job_id: int, rate: float) -> None: ...
    def stop(self, job_id: int) -> None: ...
    def forget(self, job_id: int) -> None: ...
    def disown(self) -> None: ...  # stop tracking every run, ending no worker (this replica stopped leading)
    def poll(self) -> list[JobStatus]: ...
