"""Running jobs' workers on Ray: the only module that imports ray.

A Corral node is a Ray node that carries the custom resources `corral_node_<name>` and one `corral_gpu_<name>_<i>` per
GPU (capacity 1), `corral_preset_<preset>` when it says which server model it is and `corral_rack_<rack>` when it says
which rack it sits in. A worker asks for exactly the GPUs and share the policy chose as those resources, so Ray itself
refuses to over-commit a GPU even if the controller were wrong, and the worker lands on its node. Ray's own GPU
resource is left alone: Ray would pick GPU ids itself, and here the policy picks them.

Each worker (one per node of a placement: it drives that node's GPUs, like a torchrun launcher) is a *detached*
named actor, `corral-<job>-<attempt>-<rank>`, so it outlives a controller that dies: a restarted controller finds it
by name and keeps it. The controller never blocks on a worker: `launch` creates the actors, `poll` starts a gang once
every member is up (so its members start together) and reports what happened since.

By default `RayBackend.local` starts a local Ray cluster of virtual nodes with virtual GPUs (Ray's resources are
logical, so this runs on a machine with no GPU); `RayBackend.connect` joins an existing one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray
from ray._private import ray_constants
from ray._private.runtime_env import packaging
from ray._private.runtime_env.plugin import RuntimeEnvPlugin
from ray.exceptions import GetTimeoutError, RayActorError, RuntimeEnvSetupError

from scheduler.core.generic import MeasuredUsage, merged
from scheduler.core.paths import corral_home
from scheduler.live import environments, ray_auth, ray_leftovers, sockets
from scheduler.live.node import environments as node_environments
from scheduler.live.runs import (
    LABEL_PREFIX,
    NAMESPACE,
    PRESET_PREFIX,
    RACK_PREFIX,
    VENV_PREFIX,
    JobStatus,
    Launch,
    NodeInfo,
    actor_name,
    job_actors,
    node_resources,
    rank_env,
)
from scheduler.live.worker import STOP_GRACE_S, Worker

log = logging.getLogger(__name__)

_NODE_RES = re.compile(r"^corral_node_(.+)$")
# How often a running run's progress is asked for. Each ask is one call per worker (about 1 ms each to send), so asking
# every run at every poll made the Ray calls most of a controller pass with 32 runs; ends are known at once anyway.
PROGRESS_EVERY_S = 2.0
STATUS_CALLS_PER_POLL = 8  # progress questions to running workers per poll (each is an actor call)
_RES_PRECISION = 10_000  # Ray accounts fractional resources in 1/10,000ths
LOOPBACK = "127.0.0.1"
_ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER  # as Ray set it at import, for `connect`


def _reload_auth() -> None:
    """Make this process's Ray read the authentication variables again: Ray caches its configuration and the token
    when first used, and a server (or a test) may start or join a second cluster with another token. Ray's own test
    helpers do the same (ray._private.authentication_test_utils.reset_auth_token_state)."""
    from ray._raylet import (  # type: ignore[attr-defined]  # ray's _raylet.pyi stub omits these Cython classes
        AuthenticationTokenLoader,
        Config,
    )

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _marker(resources: dict[str, Any], prefix: str) -> str | None:
    """What a node's one marker resource of `prefix` names; None without one, or with several (a node started by hand
    with two markers is ambiguous)."""
    named = [key[len(prefix):] for key in resources if key.startswith(prefix)]
    return named[0] if len(named) == 1 else None


def advertised_preset(resources: dict[str, Any]) -> str | None:
    """The preset a node's marker resource names (None: the controller models it as `corral serve --preset`)."""
    return _marker(resources, PRESET_PREFIX)


def advertised_rack(resources: dict[str, Any]) -> str | None:
    """The rack a node's marker resource names, unchecked (None: the node is in no named rack)."""
    return _marker(resources, RACK_PREFIX)


def advertised_labels(resources: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The labels a node's marker resources name (`corral_label_KEY=VALUE`), unchecked, sorted."""
    pairs = (key[len(LABEL_PREFIX):].partition("=") for key in resources if key.startswith(LABEL_PREFIX))
    return tuple(sorted((k, v) for k, eq, v in pairs if eq))


def advertised_venvs(resources: dict[str, Any]) -> tuple[str, ...]:
    """The virtual environments a node's marker resources say its operator declared (`corral_venv_NAME`), sorted."""
    return tuple(sorted(key[len(VENV_PREFIX):] for key in resources if key.startswith(VENV_PREFIX)))


def _share_resource(share: float) -> float:
    # Round down to Ray's granularity: three tenants of 1/3 must fit in a capacity of 1.
    return max(1, int(share * _RES_PRECISION)) / _RES_PRECISION


class RayWorker(Worker):
    """A rank as a Ray actor: the node's address is the one Ray knows it by."""

    def node_address(self) -> str:
        return str(ray.util.get_node_ip_address())


# ray.remote's overloads type only task options; max_concurrency is an actor option, which Ray accepts here.
RemoteWorker = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=8)(RayWorker)  # type: ignore[call-overload]


PREPARE_FAILED = 127  # a run whose environment could not be prepared exits as a command that could not start


_RAISED = "RuntimeError: corral: "  # how the plugin's error reads in Ray's text


def _unprepared(exc: Exception) -> str:
    """Why a run's environment could not be prepared, from Ray's error, or "" if that was not what failed (a worker
    lost on its way up). Ray says it inside the actor's death (its creation never ran) or as its own error."""
    text = str(exc)
    marker = "Failed to set up runtime environment"
    if not isinstance(exc, RuntimeEnvSetupError) and marker not in text and "corral: " not in text:
        return ""
    # The plugin's own message (`CorralEnvPlugin.create`), to the end: pip's last lines. Ray's text quotes the
    # plugin's traceback first, whose source line holds "corral: " too: the raised error's line is the one.
    raised = text.rfind(_RAISED)
    at, skip = (raised, len(_RAISED)) if raised >= 0 else (text.find("corral: "), len("corral: "))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    detail = text[at + skip:].strip() if at >= 0 else lines[-1] if lines else marker
    return f"preparing its environment: {detail}"[:2000]


class CorralEnvPlugin(RuntimeEnvPlugin):
    """Ray's runtime-environment plugin for a job's environment (`runtime_env={"corral_env": {...}}`): Ray's agent on
    the worker's node calls `create` before it starts the worker (the job's "preparing" phase) and gives the worker's
    process the variables of `modify_context`. Loaded by every node's agent from `RAY_RUNTIME_ENV_PLUGINS`
    (`environments.plugin_env`). The building is `scheduler.live.node.environments`', which holds no Ray."""

    name = environments.PLUGIN_FIELD

    def get_uris(self, runtime_env: Any) -> list[str]:
        """The built environment's URI: Ray's agent caches it, counts the workers using it, and deletes the least
        recently used one no worker uses once the cache is over its size (`node_environments.remove`). Ray asks every
        plugin of every runtime environment, this plugin's or not."""
        config = runtime_env.get(self.name)
        uri = node_environments.env_uri(config) if config else None
        return [uri] if uri is not None else []

    async def create(self, uri: str | None, runtime_env: Any, context: Any, logger: logging.Logger) -> float:
        config = runtime_env[self.name]
        logger.info("corral: preparing %s", config)
        loop = asyncio.get_running_loop()
        try:  # off the agent's event loop: a pip install takes seconds to minutes
            await loop.run_in_executor(None, node_environments.prepare, config)
        except (node_environments.PrepareError, OSError) as exc:  # (the job's reason: Ray's traceback says no more)
            raise RuntimeError(f"corral: {exc}") from None
        if uri is None:
            return 0
        return float(await loop.run_in_executor(None, node_environments.folder_bytes,
                                                node_environments.env_dir(config)))

    def delete_uri(self, uri: str, logger: logging.Logger) -> float:
        freed = node_environments.remove(uri)
        logger.info("corral: deleted environment %s (%d bytes)", uri, freed)
        return float(freed)

    def modify_context(self, uris: list[str], runtime_env: Any, context: Any, logger: logging.Logger) -> None:
        context.env_vars.update(node_environments.context_vars(runtime_env[self.name]))


def _ray_runtime_env(runtime_env: dict[str, Any]) -> dict[str, Any]:
    """A launch's runtime_env as Ray takes it for an actor: its working directory's archive uploaded to Ray's GCS
    under its content's hash (once: Ray names it by that), as Ray's job submission does with a local folder."""
    out = dict(runtime_env)
    if "working_dir" in out:
        path = Path(out["working_dir"])
        uri = packaging.get_uri_for_file(str(path))
        if not packaging.package_exists(uri):
            packaging.upload_package_to_gcs(uri, path.read_bytes())
        out["working_dir"] = uri
    return out


# ---- the controller's side ---------------------------------------------------------------------------------------


@dataclass
class _Run:
    launch: Launch
    actors: list[Any]
    ready: list[Any] | None  # refs of `ready()` until the gang has started
    up: tuple[bool, ...] = ()  # until then, which ranks' `ready()` has returned: their workers are up
    started: bool = False
    status: JobStatus | None = None
    ends: list[Any] | None = None  # refs of each rank's `finished()`, outstanding for the whole run
    asked: list[Any] | None = None  # refs of each rank's `status()`, asked at one poll and read at a later one
    asked_at: float = 0.0
    launched_at: float = 0.0
    prepared_s: float | None = None  # a run with an environment: from its launch until its workers were all up
    unprepared: str = ""  # why its environment could not be prepared: the run fails with this


class RayBackend:
    # The controller reads `nodes()` off its pass: each read is a round trip to Ray's GCS (`Controller._read_nodes`).
    nodes_in_background = True

    def __init__(self, *, cluster: Any = None, temp_dir: Path | None = None) -> None:
        self._cluster = cluster  # a ray.cluster_utils.Cluster we started, or None when we joined one
        self._temp_dir = temp_dir  # the private folder of its Ray sessions
        self._saved_env: dict[str, str | None] = {}  # what `local` changed in this process's environment
        self._runs: dict[int, _Run] = {}
        self._stopping: list[tuple[str, Any, Any, float]] = []  # (actor's name, actor, ref of stop(), deadline)
        self._records: Path | None = None  # where `local` recorded its cluster's processes (`ray_leftovers`)

    # -- lifecycle --

    @classmethod
    def local(cls, nodes: int, gpus_per_node: int, *, names: list[str] | None = None) -> RayBackend:
        """Start a local Ray cluster of `nodes` virtual nodes with `gpus_per_node` virtual GPUs each, reachable by
        the server's user alone: every Ray process listens on loopback and checks the token of `CORRAL_HOME` (made
        if missing), and Ray's session folders (sockets, logs) sit in a folder only that user may enter."""
        from ray.cluster_utils import Cluster

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        records = corral_home() / "ray"  # Ray's private folder (made 0700 here when Ray's sessions go elsewhere)
        ray_leftovers.end_leftovers(records)  # a server killed with SIGKILL left its cluster running
        saved = ray_auth.saved_env()  # given back at shutdown (a test may start another cluster)
        saved[environments.PLUGINS_VAR] = os.environ.get(environments.PLUGINS_VAR)
        os.environ.update(environments.plugin_env())  # every node's agent loads Corral's plugin (jobs' environments)
        ray_auth.use_token(ray_auth.ensure_token())
        temp = ray_auth.private_temp_dir()
        os.environ["RAY_TMPDIR"] = str(temp)  # Ray's folders go under $RAY_TMPDIR/ray
        _reload_auth()
        # Ray turns a loopback address into the machine's own when a driver connects (it assumes a multi-machine
        # cluster); with every Ray process bound to loopback, the driver must connect to loopback too.
        ray_constants.ENABLE_RAY_CLUSTER = False
        names = names or [f"node{i}" for i in range(nodes)]
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                                 "node_ip_address": LOOPBACK})
        venvs = node_environments.declared_venvs()[0]  # (its nodes' agents read this process's CORRAL_VENVS)
        for name in names:
            cluster.add_node(num_cpus=1, num_gpus=gpus_per_node, resources=node_resources(name, gpus_per_node,
                                                                                         venvs=venvs),
                             node_ip_address=LOOPBACK)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
        for ip, port in sockets.exposed(os.getpid()):  # a Ray release that binds a new port elsewhere: say so
            log.warning("a process of the local Ray cluster listens on %s:%d, not only on loopback", ip, port)
        records.mkdir(mode=0o700, parents=True, exist_ok=True)
        ray_leftovers.record(records)
        backend = cls(cluster=cluster, temp_dir=temp)
        backend._records = records
        backend._saved_env = saved
        return backend

    @classmethod
    def connect(cls, address: str, *, allow_unauthenticated: bool = False) -> RayBackend:
        """Join an existing Ray cluster (its nodes carry `node_resources`) with the token of `RAY_AUTH_TOKEN`,
        `RAY_AUTH_TOKEN_PATH` or `CORRAL_HOME/ray-token`. A cluster that lets anyone in without a token is refused
        unless `allow_unauthenticated`: whoever reaches it runs code as its workers' user (see docs/security.md)."""
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray_constants.ENABLE_RAY_CLUSTER = _ENABLE_RAY_CLUSTER
        ray_auth.check_cluster_auth(address, allow_unauthenticated)
        source = ray_auth.existing_token()
        if source is not None:
            ray_auth.use_token(source)
            _reload_auth()
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
        return cls()

    @property
    def address(self) -> str:
        return str(self._cluster.address) if self._cluster is not None else ray.get_runtime_context().gcs_address

    def shutdown(self) -> None:
        """Leave Ray (and stop the local cluster if we started it: its workers go with it)."""
        ray.shutdown()
        if self._cluster is not None:
            self._cluster.shutdown()
            if self._records is not None:
                ray_leftovers.forget(self._records)
            if self._temp_dir is not None and self._temp_dir.name.startswith("corral-ray-"):
                shutil.rmtree(self._temp_dir, ignore_errors=True)  # the fallback outside CORRAL_HOME
            ray_auth.restore_env(self._saved_env)
            ray_constants.ENABLE_RAY_CLUSTER = _ENABLE_RAY_CLUSTER
            _reload_auth()

    # -- nodes --

    def nodes(self) -> list[NodeInfo]:
        """Corral nodes Ray knows of, alive or dead (a dead node's name stays known until Ray forgets it)."""
        found: dict[str, NodeInfo] = {}
        for n in ray.nodes():
            res = n.get("Resources") or {}
            for key in res:
                m = _NODE_RES.match(key)
                if m is None:
                    continue
                name = m.group(1)
                gpus = sum(1 for k in res if k.startswith(f"corral_gpu_{name}_"))
                info = NodeInfo(name, gpus, bool(n.get("Alive")), n.get("NodeID", ""), n.get("NodeManagerAddress", ""),
                                advertised_preset(res), advertised_rack(res), advertised_labels(res),
                                advertised_venvs(res))
                if info.alive or name not in found:  # a restarted node replaces its dead record
                    found[name] = info
        return list(found.values())

    def service_ports(self) -> set[int]:
        """The ports Ray's node table names for its services on every node (raylet, object manager, metrics export,
        agents): webhooks never call them (`webhooks.own_ports`)."""
        ports: set[int] = set()
        for n in ray.nodes():
            for key, value in n.items():
                if key.endswith("Port") and isinstance(value, int) and 0 < value < 65536:
                    ports.add(value)
        return ports

    # -- runs --

    def launch(self, launch: Launch) -> None:
        """Create the run's workers; the gang starts in a later `poll`, once all of them are up."""
        actors = []
        for spec in launch.ranks:
            resources = {f"corral_gpu_{spec.node}_{g}": _share_resource(spec.share) for g in spec.local_gpus}
            resources[f"corral_node_{spec.node}"] = 0.001  # pins it even if a GPU resource were renamed
            # A job's environment is Ray's runtime_env of its workers: Ray prepares it on the node (and caches it)
            # before the worker starts, so its `ready()` answers once it is built (the job's "preparing" phase).
            env = {"runtime_env": _ray_runtime_env(launch.runtime_env)} if launch.runtime_env else {}
            actors.append(RemoteWorker.options(
                name=actor_name(launch.job_id, launch.attempt, spec.rank), namespace=NAMESPACE, lifetime="detached",
                resources=resources, get_if_exists=True, **env,
            ).remote(launch, spec.rank))
        self._runs[launch.job_id] = _Run(launch, actors, [a.ready.remote() for a in actors], launched_at=time.time())

    def adopt(self, launch: Launch) -> bool:
        """After a controller restart: take over a run's workers if every one is still there."""
        actors = []
        for spec in launch.ranks:
            try:
                actors.append(ray.get_actor(actor_name(launch.job_id, launch.attempt, spec.rank), namespace=NAMESPACE))
            except ValueError:
                for a in actors:
                    self._kill(a)
                return False
        try:
            states: list[dict[str, Any]] = ray.get([a.status.remote() for a in actors], timeout=30)
        except (RayActorError, RuntimeEnvSetupError, GetTimeoutError):
            for a in actors:
                self._kill(a)
            return False
        started = any(s["phase"] != "ready" for s in states)
        self._runs[launch.job_id] = _Run(launch, actors, None if started else [a.ready.remote() for a in actors],
                                         started=started)
        return True

    def reap_orphans(self, keep: set[str]) -> list[str]:
        """Kill Corral workers whose names are not in `keep` (runs a crashed controller launched but never recorded
        as running, or stopped but never reaped), except those this backend is stopping: they checkpoint within
        their grace period, and are killed at its end."""
        killed = []
        keep = keep | {name for name, *_ in self._stopping}
        for actor in ray.util.list_named_actors(all_namespaces=True):  # live named actors (no dashboard needed)
            name = actor["name"]
            if actor["namespace"] == NAMESPACE and name.startswith("corral-") and name not in keep:
                try:
                    self._kill(ray.get_actor(name, namespace=NAMESPACE))
                    killed.append(name)
                except ValueError:
                    pass
        return killed

    def set_rate(self, job_id: int, rate: float) -> None:
        run = self._runs.get(job_id)
        if run is not None:
            for a in run.actors:
                a.set_rate.remote(rate)

    def stop(self, job_id: int) -> None:
        """Stop a run's workers (SIGTERM, a grace period, then kill) and forget it. Ray frees its GPU resources once
        the actors are gone, so a successor's workers cannot start on those GPUs before."""
        run = self._runs.pop(job_id, None)
        if run is None:
            return
        launch = run.launch
        for spec, a in zip(launch.ranks, run.actors, strict=True):
            self._stopping.append((actor_name(launch.job_id, launch.attempt, spec.rank), a, a.stop.remote(),
                                   time.time() + STOP_GRACE_S + 2.0))

    def settle(self, timeout_s: float | None = None) -> None:
        """Wait (up to `timeout_s`, default a stop's grace period and a margin) for the workers being stopped to end
        on their own, having written their checkpoints, then kill what is left: called once, at a shutdown that takes
        the Ray cluster down with it, so the checkpoints are on disk before the processes go."""
        deadline = time.time() + (STOP_GRACE_S + 2.0 if timeout_s is None else timeout_s)
        refs = [ref for _, _, ref, _ in self._stopping]
        while refs and time.time() < deadline:
            _, refs = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.time()))
        for _, actor, _, _ in self._stopping:
            self._kill(actor)
        self._stopping.clear()

    def forget(self, job_id: int) -> None:
        """Drop a finished run: its workers have exited; kill the actors to give back their resources."""
        run = self._runs.pop(job_id, None)
        if run is not None:
            for a in run.actors:
                self._kill(a)

    def disown(self) -> None:
        """Stop tracking every run, ending no worker: this replica's controller no longer leads, and the leader
        adopts the workers by name (or has already). Workers being stopped were stopped by committed decisions: the
        leader's `reap_orphans` ends them."""
        self._runs.clear()
        self._stopping.clear()

    @staticmethod
    def _kill(actor: Any) -> None:
        with contextlib.suppress(RayActorError, ValueError):
            ray.kill(actor, no_restart=True)

    def running_jobs(self) -> list[int]:
        return list(self._runs)

    def poll(self) -> list[JobStatus]:
        """Start gangs whose workers are all up, reap stopped workers, and report every tracked run's status.

        It never waits on a worker: a pass of the controller must not take a round trip to every running worker
        (with 32 running, sending those calls was most of the pass). The end of a rank is known from its outstanding
        `finished()` call as soon as it returns; start times and progress come from `status()` calls asked at one
        poll and read at a later one, every PROGRESS_EVERY_S once the run is known to be running (so progress is up
        to that old). A rank that has not answered yet leaves its run's last status standing, unless another rank's
        end already decides it (a failure, a lost worker)."""
        self._reap_stopped()
        for run in self._runs.values():
            if run.ready is not None:
                self._maybe_start(run)
        runs = [r for r in self._runs.values() if r.started]
        now = time.time()
        budget = STATUS_CALLS_PER_POLL
        for run in sorted(runs, key=lambda r: r.asked_at):  # the longest unasked first
            if run.ends is None:
                run.ends = [a.finished.remote() for a in run.actors]
            if run.asked is not None:
                continue
            # Asked until one answer says running (it carries the start times), then every PROGRESS_EVERY_S, within a
            # budget of calls per poll: runs started together would otherwise all be asked at the same poll.
            known = run.status is not None and run.status.phase != "starting"
            if not known or (now - run.asked_at >= PROGRESS_EVERY_S and budget > 0):
                run.asked = [a.status.remote() for a in run.actors]
                run.asked_at = now
                budget -= len(run.actors) if known else 0
        flat = [ref for r in runs for ref in (*(r.ends or ()), *(r.asked or ()))]
        ready = set(ray.wait(flat, num_returns=len(flat), timeout=0)[0]) if flat else set()
        out = []
        for run in runs:
            assert run.ends is not None
            answered = run.asked is not None and all(ref in ready for ref in run.asked)
            refs = [end if end in ready else asked if answered else None
                    for end, asked in zip(run.ends, run.asked or [None] * len(run.ends), strict=True)]
            # Nothing answered since the last poll: the run's last status stands (the same object, so the controller
            # sees at once that there is nothing new).
            out.append(run.status if run.status is not None and all(r is None for r in refs) else self._status(run, refs))
            if answered:
                run.asked = None
            for i, end in enumerate(run.ends):  # a `finished` call that timed out: ask again
                if end in ready and not self._exited(end):
                    run.ends[i] = run.actors[i].finished.remote()
        for run in self._runs.values():
            if not run.started:
                n = len(run.actors)
                out.append(JobStatus(run.launch.job_id, run.launch.attempt, "starting", [None] * n, [None] * n,
                                     [None] * n, 0.0, up=run.up))
        return out

    @staticmethod
    def _exited(ref: Any) -> bool:
        """Whether a returned `finished` call saw its rank end (a lost worker counts: there is nothing to wait for)."""
        try:
            return bool(ray.get(ref, timeout=0)["phase"] == "exited")
        except (RayActorError, RuntimeEnvSetupError):
            return True

    def _maybe_start(self, run: _Run) -> None:
        assert run.ready is not None
        # An earlier run of this job may still be saving its checkpoint (its workers got SIGTERM and a grace period,
        # `stop`): the gang starts once that run has ended, or it would resume from the checkpoint before. On the
        # same GPUs Ray orders the two (their resources); on others nothing else would.
        job = job_actors(run.launch.job_id)
        if any(name.startswith(job) for name, *_ in self._stopping):
            return
        done, _ = ray.wait(run.ready, num_returns=len(run.ready), timeout=0)
        if len(done) < len(run.ready):
            run.up = tuple(ref in done for ref in run.ready)
            return
        try:
            master_addr, master_port = ray.get(run.ready[0])
            ray.get(run.ready[1:])
        except (RayActorError, RuntimeEnvSetupError) as exc:
            run.ready = None
            run.started = True  # let _status report it lost, or failed if its environment could not be prepared
            run.unprepared = _unprepared(exc) if run.launch.runtime_env else ""
            return
        if run.launch.runtime_env:
            run.prepared_s = time.time() - run.launched_at
        n = len(run.launch.ranks)
        for a, spec in zip(run.actors, run.launch.ranks, strict=True):
            a.start.remote(rank_env(spec, n, master_addr, master_port, run.launch))
        run.ready = None
        run.started = True

    def _status(self, run: _Run, refs: list[Any | None]) -> JobStatus:
        """The run's status from one answer per rank (None: that rank has not answered yet)."""
        launch = run.launch
        n = len(refs)
        started: list[float | None] = [None] * n
        ended: list[float | None] = [None] * n
        codes: list[int | None] = [None] * n
        phases = []
        done_s = 0.0
        error = ""
        if run.unprepared:  # never started: failed, not lost (another node would fail the same way)
            run.status = JobStatus(launch.job_id, launch.attempt, "failed", [None] * n, [None] * n,
                                   [PREPARE_FAILED] * n, 0.0, run.unprepared)
            return run.status
        usages: list[MeasuredUsage | None] = []
        for i, ref in enumerate(refs):
            if ref is None:
                phases.append("unknown")
                continue
            try:
                st = ray.get(ref, timeout=0)
            except GetTimeoutError:
                phases.append("unknown")
                continue
            except RayActorError as exc:
                phases.append("lost")
                error = error or f"rank {i} lost: {type(exc).__name__}"
                continue
            phases.append(st["phase"])
            started[i], ended[i], codes[i] = st["started_at"], st["ended_at"], st["exit_code"]
            error = error or st.get("error", "")
            usages.append(MeasuredUsage.from_dict(st.get("usage")))
            if i == 0:
                done_s = float(st["done_s"])
        if "lost" in phases:
            phase = "lost"
        elif any(c not in (None, 0) for c in codes):
            phase = "failed"
            bad = next(i for i, c in enumerate(codes) if c not in (None, 0))
            error = error or f"rank {bad} exited with code {codes[bad]}"
        elif phases and all(p == "exited" for p in phases):
            phase = "succeeded"
        elif "unknown" in phases:  # some rank did not answer in time: report what we knew, decide nothing yet
            return run.status or JobStatus(launch.job_id, launch.attempt, "starting", [None] * n, [None] * n,
                                           [None] * n, 0.0)
        else:
            phase = "running" if any(p == "running" for p in phases) else "starting"
        usage = merged(usages) if phase in ("succeeded", "failed") else None  # (every rank's, as one run's)
        run.status = JobStatus(launch.job_id, launch.attempt, phase, started, ended, codes, done_s, error,
                               prepared_s=run.prepared_s,
                               usage=replace(usage, runs=1).as_dict() if usage is not None else None)
        return run.status

    def _reap_stopped(self) -> None:
        keep = []
        now = time.time()
        for name, actor, ref, deadline in self._stopping:
            done, _ = ray.wait([ref], timeout=0)
            if done or now >= deadline:
                self._kill(actor)
            else:
                keep.append((name, actor, ref, deadline))
        self._stopping = keep
