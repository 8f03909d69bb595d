"""One rank of a run, on its node: the process a job's rank runs in, its log, its checkpoint and its MPS lease.

`Worker` holds no Ray: `scheduler.live.ray_backend` wraps it as a detached Ray actor (`RemoteWorker`), and anything
that must run a rank exactly as the service does without a Ray cluster (the GPU checks in
`benchmarks/gpu_node_check.py`, the tests) makes one directly. Only the node's address for the rendezvous comes from
Ray, through `node_address`, which the Ray backend overrides.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scheduler.live.job_accounts import AccountError, ensure_os_account
from scheduler.live.node import environments as node_environments
from scheduler.live.node.mps import MpsError, MpsManager
from scheduler.live.node.usage import UsageSampler
from scheduler.live.runs import Launch, actor_name

log = logging.getLogger(__name__)

EMULATE_WAKE_S = 0.5  # an emulated worker's progress is at most this old (it is asked for every PROGRESS_EVERY_S)
FINISHED_WAIT_S = 60.0  # how long one `Worker.finished` call waits before it answers "not yet"
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this: time for a preempted job to write its checkpoint

# What a command job inherits from the worker's environment: what a shell needs, nothing of the server's own
# configuration (DATABASE_URL may carry a password; CORRAL_HOME, tokens and cloud credentials are none of its business).
INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")


def command_env(job_env: dict[str, str], user: str | None, workdir: str) -> dict[str, str]:
    """A command job's environment: a few inherited variables, its user and home, then the job's own (rank, GPUs,
    MPS limits, CORRAL_* and what the submitter set)."""
    base = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    base.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    who = user or pwd.getpwuid(os.getuid()).pw_name
    return {**base, "HOME": workdir, "USER": who, "LOGNAME": who, **job_env}


class ProgressLog:
    """When an emulated worker's log gets a progress line: when its rate changes (a neighbour came or went) and every
    `step` of progress, not on every tick (a 200-line log of "progress 24.7%" says nothing a few lines would not)."""

    def __init__(self, step: float = 0.05) -> None:
        self.step = step
        self._logged_at = -1.0
        self._logged_rate: float | None = None

    def line(self, frac: float, rate: float) -> str | None:
        changed = self._logged_rate is None or abs(rate - self._logged_rate) > 1e-3
        if not changed and frac < self._logged_at + self.step:
            return None
        why = "" if self._logged_rate is None or not changed else f" (rate was {self._logged_rate:.3f})"
        self._logged_at, self._logged_rate = frac, rate
        return f"progress {frac:6.1%} rate {rate:.3f}{why}"


class Worker:
    """One rank of a run. Its methods return at once; the work happens in a thread (emulated) or a child process
    group (command), so `status` and `stop` answer while it runs."""

    def __init__(self, launch: Launch, rank: int) -> None:
        self.launch = launch
        self.rank = rank
        self.phase = "ready"
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.exit_code: int | None = None
        self.rate = launch.rate
        self.done_s = 0.0
        self.error = ""
        self.usage: dict[str, Any] | None = None  # what NVML measured of a command's use of its GPUs (`node.usage`)
        self._stop = threading.Event()
        self._grace_s = 0.0  # the grace of the stop under way: how long its log is still read after the shell ends
        self._ended = threading.Event()
        self._poke = threading.Event()  # wakes the emulation at once: a stop or a new rate
        self._new_rate: float | None = None
        self._fenced = False  # a later attempt's checkpoint was found: this run is stale
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._mps: MpsManager | None = None  # the node's MPS daemon, while this rank holds a lease on it
        self._log_path = Path(launch.log_dir) / f"rank-{rank}.log"
        # Ray started this worker in the job's working directory, unpacked from the archive it was uploaded with.
        self._env_cwd = os.getcwd() if launch.runtime_env and "working_dir" in launch.runtime_env else None
        Path(launch.log_dir).mkdir(parents=True, exist_ok=True)
        Path(launch.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        # A run that cannot start here (no account for its user, one that cannot be made) is not a lost worker to
        # retry elsewhere: `start` fails the job with the reason, and its GPUs are freed.
        self._setup_error = launch.account_error
        self._account: pwd.struct_passwd | None = None
        if launch.run_as is not None and not self._setup_error:
            try:
                self._account = (ensure_os_account(launch.run_as) if launch.create_account
                                 else pwd.getpwnam(launch.run_as))
                # The job's own folder: its account's alone (logs stay the server's).
                os.chown(launch.checkpoint_dir, self._account.pw_uid, self._account.pw_gid)
                os.chmod(launch.checkpoint_dir, 0o700)
                if self._env_cwd is not None:
                    self._env_cwd = _own_copy(Path(self._env_cwd), Path(launch.checkpoint_dir), self._account)
            except KeyError:
                self._setup_error = f"no OS account {launch.run_as!r} on this node"
            except (AccountError, OSError) as exc:
                self._setup_error = f"preparing the job's OS account {launch.run_as!r}: {exc}"

    def ready(self) -> tuple[str, int]:
        """This worker's address and a free port on it (rank 0's become MASTER_ADDR and MASTER_PORT)."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return self.node_address(), port

    def node_address(self) -> str:
        """The address other ranks reach this node at. Without Ray: loopback (every rank on this machine); the Ray
        backend's worker answers with the address Ray knows the node by."""
        return "127.0.0.1"

    def start(self, env: dict[str, str]) -> float:
        with self._lock:
            if self.phase != "ready":  # a restarted controller may say go twice
                return self.started_at or 0.0
            if self._setup_error:
                self.started_at = time.time()
                self._fail_to_start(self._setup_error)
                return self.started_at
            try:
                env = {**env, **self._acquire_mps()}
            except MpsError as exc:  # a share MPS cannot enforce is not the share asked for: fail, do not run uncapped
                self.started_at = time.time()
                self._finish(1, f"MPS: {exc}")
                return self.started_at
            # started_at before phase: `status` may run on another thread, and "running" must come with its time
            self.started_at = time.time()
            self.phase = "running"
        target = self._emulate if self.launch.kind == "emulated" else self._command
        threading.Thread(target=target, args=(env,), daemon=True, name=f"corral-rank-{self.rank}").start()
        return self.started_at

    def set_rate(self, rate: float) -> None:
        """The emulation counts the time so far at the old rate, then runs at this one (at once: it is poked)."""
        if self.launch.kind == "emulated" and self.phase == "running":
            self._new_rate = rate
            self._poke.set()
        else:
            self.rate = rate

    def status(self) -> dict[str, Any]:
        return {"phase": self.phase, "started_at": self.started_at, "ended_at": self.ended_at,
                "exit_code": self.exit_code, "done_s": self.done_s, "error": self.error, "usage": self.usage}

    def finished(self, timeout_s: float = FINISHED_WAIT_S) -> dict[str, Any]:
        """Return once this rank's work has ended, with its final status, or after `timeout_s` with its status then
        (phase not "exited": the caller asks again). The backend keeps one call outstanding per rank, so it learns
        of the end (or, as an error on this call, of the worker's loss) from a local check rather than from a round
        trip to every worker at every poll. The timeout bounds the threads held by calls nobody will read (a
        controller that restarted or rebuilt its state asks anew): the actor has only `max_concurrency` of them."""
        self._ended.wait(timeout_s)
        return self.status()

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """Stop the work: emulated ranks write their checkpoint; a command gets SIGTERM, then SIGKILL."""
        self._grace_s = grace_s
        self._stop.set()
        self._poke.set()
        proc = self._proc
        if proc is not None:
            _stop_group(proc, grace_s)
        deadline = time.time() + grace_s
        while self.phase == "running" and time.time() < deadline:
            time.sleep(0.01)
        return self.exit_code

    def _drain_s(self) -> float:
        """How long the log is read after the job's shell ends: a stop's grace more while one is under way."""
        return DRAIN_AFTER_EXIT_S + (self._grace_s if self._stop.is_set() else 0.0)

    # -- kinds --

    def _acquire_mps(self) -> dict[str, str]:
        """A fractional rank on a node whose agent runs MPS (scheduler.live.node.mps) takes a lease on the node's
        daemon, started if it is the first, and gets its pipe folder; elsewhere (no agent, virtual GPUs), nothing."""
        if next(s for s in self.launch.ranks if s.rank == self.rank).share >= 1.0:
            return {}
        mps = MpsManager.for_this_node()
        if mps is None:
            return {}
        env = mps.acquire(actor_name(self.launch.job_id, self.launch.attempt, self.rank))
        self._mps = mps
        return env

    def _finish(self, code: int, error: str = "") -> None:
        mps, self._mps = self._mps, None
        if mps is not None:  # the last fractional rank out stops the daemon
            try:
                mps.release(actor_name(self.launch.job_id, self.launch.attempt, self.rank))
            except MpsError as exc:
                log.warning("releasing MPS: %s", exc)
        self.exit_code = code
        self.error = error
        self.ended_at = time.time()
        self.phase = "exited"
        self._ended.set()

    def _checkpoint_file(self) -> Path:
        return Path(self.launch.checkpoint_dir) / "emulated.json"

    def _emulate(self, env: dict[str, str]) -> None:
        """Run for the time the contention model predicts: `work_s` isolated seconds at the rate the controller
        keeps current. Progress is checkpointed, so a preempted or requeued run resumes where it stopped."""
        ckpt = self._checkpoint_file()
        try:
            self.done_s = float(json.loads(ckpt.read_text())["done_s"]) if ckpt.exists() else 0.0
        except (ValueError, KeyError, OSError):
            self.done_s = 0.0
        work = self.launch.work_s
        with self._log_path.open("a") as out:
            out.write(f"[corral] emulated {self.launch.job_id} rank {self.rank} attempt {self.launch.attempt}: "
                      f"{work - self.done_s:.1f} s of isolated work left\n")
            for k in sorted(k for k in env if k.startswith(("CUDA_", "MASTER_", "WORLD_", "RANK", "LOCAL_"))):
                out.write(f"[corral] {k}={env[k]}\n")
            out.flush()
            last = time.time()
            last_checkpoint = last
            progress = ProgressLog()
            while self.done_s < work and not self._stop.is_set():
                # Asleep until the work is done, a stop or a new rate pokes it, or EMULATE_WAKE_S passed (progress
                # for `status`): dozens of emulated workers share a test machine's cores with the controller.
                self._poke.wait(min(EMULATE_WAKE_S, max(0.0, (work - self.done_s) / max(self.rate, 1e-9))))
                self._poke.clear()
                now = time.time()
                self.done_s = min(work, self.done_s + (now - last) * self.rate)
                last = now
                if self._new_rate is not None:
                    self.rate, self._new_rate = self._new_rate, None
                line = progress.line(self.done_s / work, self.rate)
                if line:
                    out.write(line + "\n")
                    out.flush()
                if now - last_checkpoint >= 1.0:
                    last_checkpoint = now
                    self._write_checkpoint()
            self._write_checkpoint()
            stopped = self._stop.is_set() and self.done_s < work
            out.write(f"[corral] {'stopped' if stopped else 'done'} at {self.done_s / work:.1%}\n")
        self._finish(143 if stopped else 0)

    def _write_checkpoint(self) -> None:
        """Rank 0 writes the run's progress, fenced by its attempt: a stale worker (on a host cut off from the
        cluster, its run already requeued) never overwrites what a later attempt wrote."""
        if self.rank != 0:
            return
        path = self._checkpoint_file()
        try:
            if int(json.loads(path.read_text()).get("attempt", 0)) > self.launch.attempt:
                if not self._fenced:
                    self._fenced = True
                    with self._log_path.open("a") as out:
                        out.write(f"[corral] attempt {self.launch.attempt} is stale (a later attempt checkpointed):"
                                  " not writing its checkpoint\n")
                return
        except (OSError, ValueError, AttributeError):
            pass  # none yet, or unreadable: this one replaces it
        tmp = path.with_suffix(f".{self.launch.attempt}.tmp")
        tmp.write_text(json.dumps({"done_s": self.done_s, "attempt": self.launch.attempt}))
        tmp.replace(path)  # atomic: a crash never leaves half a checkpoint

    def _fail_to_start(self, why: str) -> None:
        with self._log_path.open("a") as out:
            out.write(f"[corral] could not start: {why}\n")
        self._finish(127, f"could not start: {why}")

    def _log_preparation(self) -> None:
        """Rank 0's log begins with its environment's preparation: what was built, when, and pip's output."""
        text = node_environments.preparation_log() if self.rank == 0 else ""
        if text:
            with self._log_path.open("a") as out:
                out.write(text)

    def _command(self, env: dict[str, str]) -> None:
        """Run the entrypoint as the job's account, its output through a pipe into the rank's log (capped: see
        `copy_capped`). Whatever stops it from starting (a missing folder, an environment the OS refuses) ends the
        run as failed with the reason; the thread never dies leaving the job running."""
        workdir = self._env_cwd or self.launch.workdir or self.launch.checkpoint_dir
        as_user: dict[str, Any] = {}
        if self._account is not None:  # drop to the job's account: no store, no other job's files or processes
            as_user = {"user": self._account.pw_uid, "group": self._account.pw_gid, "extra_groups": []}
        try:
            full_env = node_environments.job_vars(command_env(env, self.launch.run_as, workdir))
            argv = ["/bin/sh", "-c", self.launch.entrypoint or "true"]
            runtime, image = os.environ.get(node_environments.RUNTIME_VAR), os.environ.get(node_environments.IMAGE_VAR)
            if runtime and image:  # the job's command inside its image
                argv = node_environments.container_argv(runtime, image, argv[2], workdir, sorted(full_env))
            self._log_preparation()
            self._proc = subprocess.Popen(
                argv, cwd=workdir, env=full_env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() signals the whole tree
                **as_user,
            )
        except (OSError, ValueError, UnicodeError, subprocess.SubprocessError) as exc:
            self._fail_to_start(str(exc))
            return
        gpus = [int(g) for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.isdigit()]
        sampler = UsageSampler.start_for(gpus, self._proc.pid) if gpus else None  # its own session: pgid = pid
        try:
            with self._log_path.open("ab") as out:
                copy_capped(self._proc, out, self.launch.log_limit_bytes, self._drain_s)
        except OSError as exc:  # the log's disk is full or gone: the job goes on, its output is lost
            log.warning("job %s rank %s: writing its log: %s", self.launch.job_id, self.rank, exc)
            copy_capped(self._proc, None, 0)
        code = self._proc.wait()
        measured = sampler.stop() if sampler is not None else None
        self.usage = measured.as_dict() if measured is not None else None
        # A signal shows as a negative return code; report it the way a shell would.
        self._finish(code if code >= 0 else 128 - code)


def _own_copy(working_dir: Path, folder: Path, account: pwd.struct_passwd) -> str:
    """The job's working directory as its account's own, in its own folder: Ray unpacked it in its session folder,
    which only the server's user may enter. Copied again at each run (the job's own files beside it stay)."""
    target = folder / "working_dir"
    shutil.copytree(working_dir, target, symlinks=True, dirs_exist_ok=True)
    for path in (target, *target.rglob("*")):
        os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
    return str(target)


LOG_CHUNK = 64 * 1024
DRAIN_AFTER_EXIT_S = 2.0  # how long output left in the pipe is read after the job's process has exited


def _stop_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM to the job's whole process group, then SIGKILL to whatever of it is left after `grace_s`. The group,
    not the shell: `sh -c` may end at the signal while the program it started is still saving its checkpoint (or
    ignores the signal), and that program must get its grace and no more."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the shell: a zombie still counts as a member of its group
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def copy_capped(proc: subprocess.Popen[bytes], out: Any, limit: int,
                drain_s: Callable[[], float] = lambda: DRAIN_AFTER_EXIT_S) -> None:
    """Copy the process's output into `out` up to `limit` bytes; past it, say so in the log once and drop the rest
    (still read, so the job never blocks on a full pipe). Returns when the output ends, or soon after the process exits
    if something it left running in the background keeps the pipe open: after a pause in its output, or `drain_s()`
    seconds after it exits (longer while a stop's grace runs: the rest of its group may still be writing)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    written, dropped = 0, False
    exited_at: float | None = None
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, LOG_CHUNK)
            if not chunk:
                break
            keep = chunk[: max(0, limit - written)]
            if out is not None and keep:
                out.write(keep)
                out.flush()
            written += len(keep)
            if out is not None and len(keep) < len(chunk) and not dropped:
                dropped = True
                out.write(f"\n[corral] log truncated at {limit} bytes (corral serve --log-limit-mb): the rest of "
                          "this run's output is dropped\n".encode())
                out.flush()
        if proc.poll() is not None:
            exited_at = exited_at or time.monotonic()
            bound = drain_s()
            paused = not ready and bound <= DRAIN_AFTER_EXIT_S  # a stop's grace waits for the pipe, not a pause
            if paused or time.monotonic() - exited_at > bound:
                break
    proc.stdout.close()
