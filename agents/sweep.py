"""Sweeps on a Ray cluster: independent simulations (one policy on one case each) as Ray tasks on its CPUs.

`corral evaluate --ray-address ADDR` and `benchmarks/decision_quality.py --ray-address ADDR` hand their runs to a
`RayPool` instead of running them in this process (or its local process pool): one task per (case, policy), one CPU
each, spread over the cluster's nodes (Ray's `SPREAD` strategy: a simulation is CPU-bound, so no node should take the
queue while another idles). ADDR is what `ray.init` takes: `auto` on a node of the cluster, or `HOST:PORT` of its
head. Joining takes the cluster's token from `RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH` or `CORRAL_HOME/ray-token`, as
`corral serve --ray-address` does (the callers set it up; see `scheduler.live.ray_auth`).

**How the cluster's workers get the code: Ray's `runtime_env` `py_modules`.** Each task carries the project's three
packages a simulation imports (`scheduler`, `policies`, `agents`, about 6 MB with the zoo's agents), taken from this
checkout, as the sweep's job-level runtime_env (`ray.init`; Ray uploads local folders only for a whole job): Ray
uploads them once per sweep (content-hashed: unchanged code is not sent again) and each node unpacks
them into the workers' import path. So the nodes run exactly the code of the machine that started the sweep, edits
included, whether or not they share its filesystem (docker-compose's Ray workers do not mount the source; a laptop
driving a cluster holds edits the cluster lacks). Relying on a shared filesystem (PYTHONPATH on every node) would
silently run whichever copy each node has. The third-party libraries (numpy, scipy; torch and stable-baselines3 for
`rl:` policies) must be installed on the nodes: Corral's image has them, and `pip` in a `runtime_env` would reinstall
them for every sweep.

**Same results as a local run.** A simulation is deterministic given its case and policy: each task builds a fresh
policy seeded with the case's seed (as `agents.evaluate.run_case` does locally) with one torch thread, and results
are put back in the order of the cases, not of completion. Each result's node is kept (`RayPool.nodes`), so a
caller can say where its cases ran.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scheduler", "policies", "agents")  # what a simulation imports from this project
NAMESPACE = "corral-sweep"


def one_thread() -> None:
    """One torch thread per task (the tasks fill the cores), if a learned policy has brought torch in."""
    import sys

    os.environ["OMP_NUM_THREADS"] = "1"  # read by torch when a learned policy first imports it
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _call(fn: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    """In the Ray task: `fn(*args)` and the node it ran on."""
    import ray

    one_thread()
    result = fn(*args)
    one_thread()  # the policy may have imported torch just now: the next task on this worker gets one thread
    return result, ray.get_runtime_context().get_node_id()


def runtime_env() -> dict[str, Any]:
    """This checkout's packages for the cluster's workers (see the module's docstring), without byte code."""
    return {"py_modules": [str(ROOT / p) for p in PACKAGES], "excludes": ["__pycache__", "*.pyc"],
            "env_vars": {"OMP_NUM_THREADS": "1"}}


class RayPool:
    """The `concurrent.futures` executor interface over Ray tasks: `submit(fn, *args)` runs `fn(*args)` on some
    node's CPU and returns a `Future` of its result; `nodes[future]` is then the Ray node id it ran on. `fn` must be
    importable (a module-level function of the project's packages), so that it travels by name. Joins the cluster at
    `address`, shipping the code, unless this process is already connected to one: then that connection's own
    runtime_env (or the nodes' filesystem) must provide the code, and it is left connected at the end."""

    def __init__(self, address: str) -> None:
        import ray

        self._joined = not ray.is_initialized()
        if self._joined:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            # Ray uploads local folders only for a whole job (ray.init), not per task.
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING,
                     runtime_env=runtime_env())
        self._task = ray.remote(_call).options(num_cpus=1, scheduling_strategy="SPREAD", max_retries=0)
        self._refs: list[Any] = []
        self.nodes: dict[Future, str] = {}

    @staticmethod
    def cpus() -> int:
        """The cluster's CPUs: how many tasks run at once."""
        import ray

        return int(ray.cluster_resources().get("CPU", 0))

    def put(self, value: Any) -> Any:
        """`value` in the cluster's object store, once: pass the reference to many tasks instead of the value."""
        import ray

        return ray.put(value)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        from ray.exceptions import RayTaskError

        ref = self._task.remote(fn, *args)
        self._refs.append(ref)
        out: Future = Future()

        def done(f: Future) -> None:
            try:
                result, node = f.result()
            except RayTaskError as exc:  # the task's own exception, as the caller would see it locally
                out.set_exception(exc.as_instanceof_cause())
                return
            except BaseException as exc:  # noqa: BLE001  (a lost worker or node: the caller's future says so)
                out.set_exception(exc)
                return
            self.nodes[out] = node
            out.set_result(result)

        ref.future().add_done_callback(done)
        return out

    def map(self, fn: Callable[..., Any], args: list[tuple[Any, ...]]) -> list[Future]:
        return [self.submit(fn, *a) for a in args]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown(wait=exc[0] is None)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        import ray

        if cancel_futures or not wait:
            for ref in self._refs:
                with contextlib.suppress(Exception):  # already finished, or the cluster is gone
                    ray.cancel(ref, force=True)
        self._refs.clear()
        if self._joined:
            ray.shutdown()


def simulate(case: Any, policy: str, contention: bool = True, keep: tuple[str, ...] = (),
             threads_once: bool = False) -> dict[str, Any]:
    """`agents.evaluate.run_case` for a sweep that reports a failure instead of raising: the metrics (only `keep`,
    as floats, when given), or {"error": text} when the policy fails to build or crashes on the case.
    `threads_once`: one torch thread from the moment the policy is built (a worker process among many)."""
    from policies import make_policy
    from scheduler.core.simulator import Simulator

    try:
        built = make_policy(policy, seed=case.seed)  # a fresh policy per case, seeded with the case
        if threads_once:
            one_thread()
        metrics = Simulator(case.cluster, case.jobs, built, contention=contention).run().metrics
    except Exception as exc:  # noqa: BLE001  (a policy that crashes on a case is dropped with the reason)
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {k: float(metrics.get(k, 0.0)) for k in keep} if keep else dict(metrics)
