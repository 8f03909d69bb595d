"""`corral serve`: the live service's composition root. It wires the store, the Ray backend, the controller with a
policy from the registry, and the Flask app, then serves HTTP until interrupted. Like `scheduler/cli/commands.py`, it is the
only kind of module in `scheduler/` allowed to reach up into `policies` and `web`, and it does so lazily.
"""

from __future__ import annotations

import errno
import logging
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from scheduler.cli.api_workers import ApiWorkers, WakePipe, WorkerSettings
from scheduler.core.elastic import RESIZE_INTERVAL_S
from scheduler.core.fabric import FABRICS
from scheduler.core.heap import freeze_heap
from scheduler.core.model import Cluster, SpecError
from scheduler.core.outages import OnFault
from scheduler.core.reservations import ReservationRule
from scheduler.live import job_accounts
from scheduler.live.cluster import (
    ModelNode,
    check_fabric,
    fabric_in_store,
    model_cluster,
    node_labels,
    node_preset,
    node_rack,
    node_type,
    presets_text,
)
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.runs import DEFAULT_LOG_LIMIT_BYTES, START_STRIKES, START_TIMEOUT_S
from scheduler.live.webhooks import AllowList, own_ports

if TYPE_CHECKING:
    from scheduler.live.controller import Controller
    from scheduler.live.leader import Leadership, StoreLock
    from scheduler.live.ray_backend import RayBackend
    from scheduler.live.runs import NodeInfo
    from scheduler.live.store import Store

log = logging.getLogger("corral")


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    nodes: int = 4
    gpus_per_node: int = 8
    preset: str = "dgx-a100"
    fabric: str | None = None  # a fabric preset, or "none"; None: keep the store's (none on a new store)
    ray_address: str | None = None
    policy: str | None = None  # None: keep the store's active policy (rl:default on a new store)
    tick_s: float = 0.5
    threads: int = 16  # the HTTP front's (web.front.FrontLimits): worker threads,
    idle_timeout_s: float = 10.0  # how long a connection may send nothing,
    request_timeout_s: float = 15.0  # how long one request may take to arrive,
    max_connections: int = 4096  # connections in all,
    max_per_address: int = 64  # and from one address (0: no cap);
    max_in_flight: int = 8  # requests one user may have in progress at once (web.fair_use)
    api_workers: int = 1  # processes answering the API: 1, the controller's own; more, of their own (api_workers)
    job_user: str | None = None  # one OS user every command job runs as (scheduler.live.job_accounts)
    job_user_pattern: str | None = None  # or one OS account per Corral user, e.g. "corral-{user}"
    job_user_map: Path | None = None  # or a YAML file mapping Corral users to OS accounts
    command_jobs: str = "isolated"  # who may submit command jobs: isolated, admins or everyone (job_accounts)
    show_others_jobs: bool = False  # GET /cluster names other users' jobs and users to every user, not only admins
    log_limit_mb: float = DEFAULT_LOG_LIMIT_BYTES / 2**20  # what one rank of a command job may log per run
    allow_unauthenticated_ray: bool = False  # join a --ray-address cluster that takes no token
    half_life_s: float = 7 * 24 * 3600.0  # of the teams' fair-share usage (scheduler.core.tenancy)
    drain_timeout_s: float = 0.0  # at SIGTERM: how long running jobs may take to end before they are checkpointed
    on_gpu_fault: str = "requeue"  # what the runs on a GPU its agent reports faulty do (scheduler.core.outages)
    webhook_allow: tuple[str, ...] = ()  # where webhooks may call (scheduler.live.webhooks); none: webhooks are off
    reserve_after_s: float | None = None  # reservations (scheduler.core.reservations): by waiting, by size; both
    reserve_share: float | None = None  # None: none
    start_timeout_s: float = START_TIMEOUT_S  # a placed run whose workers are not up by then is requeued
    drain_after: int = START_STRIKES  # a node where that many jobs' workers did not start in an hour is drained
    resize_interval_s: float = RESIZE_INTERVAL_S  # the least time between two resizes of an elastic job
    lease_s: float = 4.0  # the controller lease's term on PostgreSQL (scheduler.live.leader.timings)
    lease_renew_s: float | None = None  # and how often the leader renews it; None: a quarter of the term


FIRST_NODE_WAIT_S = 60.0  # joining a Ray cluster whose worker nodes are still starting (compose starts them together)


def discover(backend: RayBackend, cfg: ServeConfig, known: Sequence[ModelNode] = (),
             fabric: str | None = None) -> tuple[list[ModelNode], Cluster]:
    """The cluster model's nodes, in order: the nodes of an earlier run in the store's order (`known`: name, GPU
    count and preset; allocations record GPUs by their index in that order, so it must not change), whether Ray has
    them now or not, then the others Ray reports, by name, each with the preset it advertises (`cfg.preset` for one
    that advertises none) and in the rack it names, on the fabric preset `fabric` (None: none). Nodes joining later
    are appended by the controller."""
    alive = {n.name: n for n in backend.nodes() if n.alive}
    deadline = time.monotonic() + (FIRST_NODE_WAIT_S if cfg.ray_address else 0.0)
    while not alive and not known and time.monotonic() < deadline:
        log.info("waiting for a Ray node with Corral's resources to join")
        time.sleep(2.0)
        alive = {n.name: n for n in backend.nodes() if n.alive}
    if not alive and not known:
        raise SpecError(
            f"--ray-address {cfg.ray_address}: no Ray node carries Corral's resources after {FIRST_NODE_WAIT_S:g} s; "
            "start each worker node with `corral node start --address ADDR` or `ray start --address ADDR --resources "
            "\"$(corral node-resources --name NAME --gpus 8 --preset dgx-a100)\"`"
        )
    order = [stored(node, alive.get(node.name), cfg.preset) for node in known]
    names = {node.name for node in known}
    for name in sorted(alive.keys() - names):
        preset, why = node_preset(alive[name].preset, cfg.preset, alive[name].gpus)
        if why:
            log.warning("node %s: %s", name, why)
        order.append(ModelNode(name, alive[name].gpus, preset, advertised_rack(alive[name]),
                               node_labels(alive[name].labels)))
    return order, model_cluster(order, fabric)


def stored_fabric(store: Store) -> str | None:
    """The fabric preset the store records (`corral serve --fabric`), None: none. One this version does not know (a
    newer server's) is modelled as none, said so, rather than failing the start."""
    with store.session() as s:
        fabric, why = fabric_in_store(s)
    if why:
        log.warning("%s", why)
    return fabric


def advertised_rack(node: NodeInfo) -> str | None:
    """The rack `node` is modelled in by what it advertises (a marker that is no rack name: none, said so)."""
    rack, why = node_rack(node.rack)
    if why:
        log.warning("node %s: %s", node.name, why)
    return rack


def stored(node: ModelNode, now: NodeInfo | None, fallback: str) -> ModelNode:
    """A node the store knows, as the store has it: the GPUs after it would be renumbered if its count changed, and
    its GPU rows and the placements on them were modelled as its recorded preset. Says so when Ray reports it
    otherwise now. Its rack is the one it names now if Ray has it (a rack moves no GPU numbering), else the
    store's."""
    if now is not None and now.gpus != node.gpus:
        log.warning("node %s reports %d GPUs, the store %d: restart it with %d, or remove it from the store",
                    node.name, now.gpus, node.gpus, node.gpus)
    if now is not None and now.preset not in (None, node.preset):
        log.warning("node %s advertises preset %s, the store records %s: it stays %s (give it a new name to model "
                    "it as the new preset)", node.name, now.preset, node.preset, node.preset)
    preset, why = node_preset(node.preset, fallback, node.gpus)
    if why:
        log.warning("node %s: %s", node.name, why)
    rack = advertised_rack(now) if now is not None else node_rack(node.rack)[0]
    labels = node_labels(now.labels) if now is not None else node.labels
    return node._replace(preset=preset, rack=rack, labels=labels)


class ServeError(Exception):
    """`corral serve` cannot start as asked, for a reason outside its flags (the port is taken, another server holds
    the store): one line, no traceback."""


def leadership_for(store: Store, cfg: ServeConfig, lock: StoreLock | None = None) -> Leadership:
    """A lease on a shared database (PostgreSQL: replicas may stand by for each other); on SQLite this process alone
    leads, holding the store's lock file (`lock`, taken before Ray started). Standing by needs the replicas to share
    one Ray cluster (`--ray-address`): a replica that started its own would find none of the other's workers to
    adopt."""
    from scheduler.live.leader import Lease, SoleLeader, timings

    if store.engine.dialect.name == "sqlite":
        log.info("SQLite store: this process is its only controller (it holds the store's lock; a standby replica "
                 "needs PostgreSQL)")
        return SoleLeader(lock=lock)
    if not cfg.ray_address:
        log.warning("no --ray-address: this replica runs its own Ray cluster, so it can lead but a standby could not "
                    "adopt its workers; for two replicas start both with the same --ray-address")
    t = timings(cfg.lease_s, cfg.lease_renew_s)
    return Lease(store, ttl_s=t["ttl_s"], renew_s=t["renew_s"], poll_s=t["poll_s"], margin_s=t["margin_s"])


def build_controller(store: Store, backend: RayBackend, cfg: ServeConfig,
                     accounts: JobAccounts | None = None, lock: StoreLock | None = None) -> Controller:
    from policies import make_policy
    from scheduler.live.controller import Controller
    from scheduler.live.store import queries

    known: list[ModelNode] = []
    if cfg.ray_address:  # a cluster that outlives this process: keep the numbering its allocations were written in
        with store.session() as s:
            known = [ModelNode(n.name, len(n.gpus), n.preset, n.rack, node_labels(n.labels))
                     for n in queries.nodes_with_gpus(s)]
    fabric = stored_fabric(store)
    nodes, cluster = discover(backend, cfg, known, fabric)
    if fabric is not None:
        log.info("the cluster is modelled on the %s fabric (%s)", fabric, FABRICS[fabric].about)
    return Controller(store, backend, cluster, [n.name for n in nodes], make_policy,
                      default_policy=cfg.policy or "rl:default", tick_s=cfg.tick_s, preset=cfg.preset,
                      node_presets=[n.preset for n in nodes], accounts=accounts or JobAccounts(shared=cfg.job_user),
                      log_limit_bytes=int(cfg.log_limit_mb * 2**20), half_life_s=cfg.half_life_s,
                      leadership=leadership_for(store, cfg, lock), nodes_from_store=bool(cfg.ray_address),
                      on_fault=OnFault(cfg.on_gpu_fault), reservations=reservation_rule(cfg), fabric=fabric,
                      start_timeout_s=cfg.start_timeout_s, drain_after=cfg.drain_after,
                      resize_interval_s=cfg.resize_interval_s)


def reservation_rule(cfg: ServeConfig) -> ReservationRule | None:
    """`--reserve-after` and `--reserve-share` as the core's rule; None when neither is given."""
    if cfg.reserve_after_s is None and cfg.reserve_share is None:
        return None
    return ReservationRule(cfg.reserve_after_s, cfg.reserve_share)


def job_accounts_for(cfg: ServeConfig, home: Path) -> JobAccounts:
    """The OS accounts command jobs run as, from the flags, refused at start if they cannot work: the server must be
    root to switch users, and each account must be able to reach its checkpoint folder under CORRAL_HOME (every
    folder above it passable by others)."""
    accounts = job_accounts.load(cfg.job_user, cfg.job_user_pattern, cfg.job_user_map)
    job_accounts.check_server(accounts, cfg.command_jobs)
    if accounts.isolated:
        for folder in home.parents:  # (CORRAL_HOME itself is opened to passing by `secure_home`)
            if folder.exists() and not folder.stat().st_mode & 0o001:
                raise SpecError(f"{folder} is closed to other users, so the jobs' OS accounts cannot reach their "
                                f"checkpoint folders under CORRAL_HOME={home}; put CORRAL_HOME under a passable path "
                                "such as /var/lib/corral")
    for name in job_accounts.missing(accounts):
        log.warning("--job-user-map: no OS account %r on this machine: jobs mapped to it fail on a node without it",
                    name)
    return accounts


def pwd_name() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def corral_command() -> str:
    """How to run `corral` from the user's shell: plain `corral` if that is on PATH and is this installation, else
    the absolute path of this installation's script (a venv's bin is usually not on PATH)."""
    here = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    if here is None or here.name != "corral":
        here = Path(sys.executable).with_name("corral")
    on_path = shutil.which("corral")
    if on_path and here.exists() and Path(on_path).resolve() == here:
        return "corral"
    return shlex.quote(str(here))


def token_command(corral: str, db_url: str) -> str:
    """`corral token create ...` as it must be run from another shell: against this server's store (its CORRAL_HOME
    for SQLite; its DATABASE_URL otherwise, not printed: it may hold a password), or the server answers 401."""
    from sqlalchemy.engine import make_url

    command = f"{corral} token create --user \"$(whoami)\" --admin"
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return f"CORRAL_HOME={shlex.quote(str(Path(url.database).parent))} {command}"
    return f"{command}  (with this server's DATABASE_URL)"


def listening_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """The API's socket, bound before anything else starts: a port in use (or a host this machine does not have)
    fails `corral serve` in a second with one line, not after Ray and the controller came up. With `reuse_port`
    (`--api-workers`), the API processes bind sockets of their own on its address beside it (SO_REUSEPORT: only
    processes of this OS user may), and it holds the port while they come and go."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise ServeError(f"--host {host}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as waitress does: a restart need not wait TIME_WAIT
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        # Bound, not yet listening: a client meanwhile is refused at once rather than left waiting for the server to
        # come up. (With SO_REUSEADDR a port is refused here only once another socket listens on it; two servers
        # starting in the same second both bind, and the second's `listen` then fails, in `serve`.)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        why = f"--port {port} on {host}: {exc.strerror}"
        if exc.errno == errno.EADDRINUSE:
            why += (f"; another process listens there (`ss -ltnp 'sport = :{port}'` says which): choose another "
                    "port with --port, or `make run PORT=...`")
        raise ServeError(why) from None
    return sock


def gpus_text(cluster: Cluster) -> str:
    """'4 nodes x 8 GPUs (32 GPUs)', or the per-node counts of a mixed cluster."""
    per_node = [int((cluster.gpu_node == n).sum()) for n in range(cluster.num_nodes)]
    if len(set(per_node)) == 1:
        return f"{cluster.num_nodes} nodes x {per_node[0]} GPUs ({cluster.num_gpus} GPUs)"
    return f"{cluster.num_nodes} nodes with {'+'.join(map(str, per_node))} GPUs ({cluster.num_gpus} GPUs)"


def banner(cluster: Cluster, cfg: ServeConfig, policy: str, where: str, db_url: str, ray_address: str,
           role: dict[str, object] | None = None, presets: Sequence[str] = ()) -> str:
    """What `corral serve` prints once it is up: where everything is, and the exact next commands."""
    from scheduler.live.history import redact

    corral = corral_command()
    # Only with a lease (PostgreSQL): which replica this is and whether it leads or stands by.
    replica = (f"  replica:   {role['replica']}, controller {role['controller']} (lease epoch {role['epoch']})\n"
               if role and role.get("epoch") is not None else "")
    return (
        f"\nCorral is serving {gpus_text(cluster)} ({presets_text(presets) or cfg.preset}) with policy {policy}\n"
        f"  dashboard: {where}/\n"
        f"  API:       {where}/api/v1  (OpenAPI {where}/api/v1/openapi.json, Swagger UI {where}/api/docs)\n"
        f"  database:  {redact(db_url)}\n  Ray:       {ray_address}\n"
        f"{replica}"
        f"  a token:   {token_command(corral, db_url)}\n"
        f"  then:      export CORRAL_URL={where} CORRAL_TOKEN=<the token>; {corral} submit --name demo "
        "--model ResNet-50-bs64 --gpus 1 --duration 60\n"
    )


def serve(cfg: ServeConfig) -> None:
    """Run the service until SIGTERM or SIGINT, then stop as `stop_service` says. What can refuse to start (the
    flags, the store's lock, the port) is checked before Ray starts."""
    from policies import make_policy
    from scheduler.core.paths import corral_home
    from scheduler.live import doorbell
    from scheduler.live.job_files import secure_home, secure_store_files
    from scheduler.live.leader import StoreBusy, StoreLock
    from scheduler.live.ray_backend import RayBackend
    from scheduler.live.store import Store, database_url, queries
    from scheduler.live.webhook_dispatch import Dispatcher
    from web import create_app
    from web.front import SWITCH_INTERVAL_S, FrontLimits, connections_for_fd_limit, make_server

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    node_type(cfg.preset, cfg.gpus_per_node)  # refuse bad flags before anything starts
    front = FrontLimits(threads=cfg.threads, idle_timeout_s=cfg.idle_timeout_s,
                        request_timeout_s=cfg.request_timeout_s, max_connections=cfg.max_connections,
                        max_per_address=cfg.max_per_address)
    if front.problems():
        raise SpecError("; ".join(front.problems()))
    front = connections_for_fd_limit(front)  # the open-file limit raised to fit, or the connections lowered to it
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # small requests beside large ones (web.front)
    fabric = check_fabric(cfg.fabric)
    try:
        allow = AllowList.parse(cfg.webhook_allow)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    if cfg.policy is not None:
        make_policy(cfg.policy)  # an unknown name or a broken agent fails here, not in the controller thread
    home = corral_home()
    accounts = job_accounts_for(cfg, home)
    os.umask(0o077)  # the store, logs and agents the server writes are its own user's alone
    secure_home(home)
    if not accounts.isolated:
        log.warning("command jobs run as this server's OS user (%s) and can read what it can, so %s; see "
                    "docs/security.md (--job-user-pattern, --job-user-map, --job-user)", pwd_name(),
                    "EVERY user's can (--command-jobs everyone)" if cfg.command_jobs == "everyone" else
                    "only admins may submit them")
    url = database_url()
    sock = listening_socket(cfg.host, cfg.port, reuse_port=cfg.api_workers > 1)
    where = f"http://{cfg.host}:{sock.getsockname()[1]}"
    lock = StoreLock.for_url(url)
    if lock is not None:  # SQLite: this process must be the store's only controller, before it touches anything
        try:
            lock.acquire({"url": where, "port": sock.getsockname()[1]})
        except StoreBusy as exc:
            sock.close()
            raise ServeError(str(exc)) from None
    store = Store.open(url)
    secure_home(home)  # again: the database file exists now
    with store.session() as s:  # the jobs' files of this store, under its id (the first start claims older ones)
        secure_store_files(store.id, legacy=queries.has_legacy_files(s), home=home)
    if cfg.policy is not None:
        with store.session(write=True) as s:
            queries.activate_policy(s, cfg.policy, by="corral serve --policy")
    if cfg.fabric is not None:
        with store.session(write=True) as s:
            queries.set_fabric(s, fabric)
    if cfg.ray_address:
        log.info("joining the Ray cluster at %s", cfg.ray_address)
        backend = RayBackend.connect(cfg.ray_address, allow_unauthenticated=cfg.allow_unauthenticated_ray)
    else:
        log.info("starting a local Ray cluster: %d virtual nodes x %d virtual GPUs", cfg.nodes, cfg.gpus_per_node)
        backend = RayBackend.local(cfg.nodes, cfg.gpus_per_node)
    allow = webhook_allow_list(allow, sock.getsockname()[1], url, backend.address, local=not cfg.ray_address,
                               ray_ports=backend.service_ports())
    controller = build_controller(store, backend, cfg, accounts, lock)
    # Other replicas' APIs wake this controller through the doorbell, and this one's wakes theirs (PostgreSQL only).
    listener = doorbell.Listener(store, controller.wake).start() if doorbell.shared(store) else None
    again = threading.Event()  # a signal during the shutdown: stop waiting for running jobs to end

    ringer = doorbell.Ringer(store) if doorbell.shared(store) else None  # NOTIFYs off the requests' path

    def notify() -> None:
        controller.wake()
        if ringer is not None:
            ringer.ring()

    def _terminate(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    server = None
    workers: ApiWorkers | None = None
    wake_pipe: WakePipe | None = None
    # Webhooks, sent by a thread of their own while this replica's controller leads (never from its passes). With
    # webhooks off it runs all the same, only keeping its place in the events: turned on later, nothing piles up.
    dispatcher = Dispatcher(store, allow, leading=lambda: controller.leading and controller.leadership.leading)
    try:
        controller.start()
        freeze_heap()  # its modules, Ray's client, torch, the policy and the controller's state are there to stay
        dispatcher.start()
        app_config = {"CORRAL_COMMAND_JOBS": cfg.command_jobs, "CORRAL_JOB_ACCOUNTS": accounts,
                      "CORRAL_SHOW_OTHERS_JOBS": cfg.show_others_jobs, "FAIR_SHARE_HALF_LIFE_S": cfg.half_life_s,
                      "CORRAL_WEBHOOK_ALLOW": allow, "CORRAL_RESERVATIONS": reservation_rule(cfg),
                      "CORRAL_MAX_IN_FLIGHT": cfg.max_in_flight}
        if cfg.api_workers > 1:  # the API in processes of its own, on this socket (scheduler.cli.api_workers)
            wake_pipe = WakePipe(controller.wake)
            workers = ApiWorkers(cfg.api_workers, sock, WorkerSettings(
                db_url=url, fd=sock.fileno(), wake_fd=wake_pipe.write_fd, front=front, app_config=app_config,
                status=controller.status(), switch_interval_s=SWITCH_INTERVAL_S))
            workers.start()
        else:
            app = create_app(store, notify=notify, config=app_config, controller_status=controller.status)
            try:
                server = make_server(app, sock, front)  # it listens from here
            except OSError as exc:
                raise ServeError(f"--port {cfg.port} on {cfg.host}: {exc.strerror}") from None
        # Both, explicitly: a server started in the background of a script inherits an ignored SIGINT, and Python
        # then never turns Ctrl-C (or `kill -INT`) into KeyboardInterrupt.
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGINT, _terminate)
        print(banner(controller.cluster, cfg, controller.policy_name or "(the leader's)", where, url, backend.address,
                     controller.status(), controller.node_presets), file=sys.stderr, flush=True)
        if workers is not None:
            workers.watch()
        elif server is not None:
            server.run()
    except KeyboardInterrupt:
        log.info("shutting down")
    finally:
        signal.signal(signal.SIGINT, lambda *_: again.set())  # a second ^C cuts the drain short, nothing more
        signal.signal(signal.SIGTERM, lambda *_: again.set())
        if workers is not None:
            workers.stop()  # they finish their requests in flight; then no new work
        if server is not None:
            server.close()  # no new work from here on
        else:
            sock.close()
        if wake_pipe is not None:
            wake_pipe.close()
        if ringer is not None:
            ringer.stop()
        if listener is not None:
            listener.stop()
        dispatcher.stop()  # the requests in flight end within their timeout; the rest wait for the next start
        stop_service(controller, cfg, local=not cfg.ray_address, interrupted=again)
        backend.shutdown()
        store.close()


def webhook_allow_list(allow: AllowList, api_port: int, db_url: str, ray_address: str, *, local: bool,
                       ray_ports: Iterable[int] = ()) -> AllowList:
    """The allow list with this server's own ports refused on every host (`webhooks.own_ports`): its API's, its
    database's, Ray's (`ray_ports`: those Ray's node table names; for a local Ray cluster, also every port its
    processes listen on now)."""
    from scheduler.live import sockets

    ports = list(ray_ports) + ([port for _, port in sockets.listening(os.getpid())] if local else [])
    return allow.forbidding(own_ports(api_port, db_url, ray_address, ports))


def stop_service(controller: Controller, cfg: ServeConfig, *, local: bool, interrupted: threading.Event) -> None:
    """Stop so that a restart costs the jobs nothing. With `--drain-timeout`, running jobs first get that long to end
    on their own while nothing new starts. Then, in local mode, the Ray cluster is about to go with this process: every
    job still running is checkpointed and requeued, spending no restart, and resumes when the server is back. With
    `--ray-address` the workers outlive this process and the next controller adopts them where they are."""
    if cfg.drain_timeout_s > 0 and controller.leading and controller.running:
        controller.stop_placing()
        log.info("draining: %d running job(s) may take up to %g s to end; nothing new starts (signal again to stop "
                 "waiting)", len(controller.running), cfg.drain_timeout_s)
        deadline = time.monotonic() + cfg.drain_timeout_s
        while controller.running and time.monotonic() < deadline and not interrupted.wait(0.5):
            pass
    running = len(controller.running)
    controller.stop(checkpoint="the server shut down" if local else None)
    if not local and running:
        log.info("leaving %d running job(s) to the next controller, which adopts their workers", running)
