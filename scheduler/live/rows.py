"""From the store's rows to the core model and back to workers: the jobs the controller schedules, whether it can
take a submission at all, and the `Launch` a placement becomes."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from sqlalchemy.orm import Session

from scheduler.core.admission import ADMITTED_FIELDS, Fit, Refusal, admitted_spec, spec_admission
from scheduler.core.constraints import Constraints
from scheduler.core.contention import ContentionModel
from scheduler.core.dependencies import Condition, Dependency
from scheduler.core.elastic import brought_down
from scheduler.core.model import Cluster, Job, JobSpec, Placement
from scheduler.core.workloads import ModelProfile
from scheduler.live import environments, job_files
from scheduler.live.generic_profiles import model_name
from scheduler.live.job_accounts import AccountError, JobAccounts
from scheduler.live.runs import DEFAULT_LOG_LIMIT_BYTES, Launch, RankSpec
from scheduler.live.store.events import add_event
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import JobType


def job_spec(row: JobRow, profiles: Mapping[str, ModelProfile]) -> JobSpec:
    """The job as submitted, in the core's terms: an elastic one with its sizes and resize pause, so the policy may
    start, grow and shrink it (`scheduler.core.elastic`)."""
    model = model_name(row, profiles)  # (a job that named no model: its generic profile, refined where measured)
    profile = profiles[model]
    return JobSpec(
        name=row.name, submit_s=row.submitted_at, num_gpus=row.num_gpus, duration_s=row.duration_s,
        model=model, kind=profile.kind, user=row.user.name, priority=row.priority, slo_ms=row.slo_ms,
        team=row.team, preemptible=row.preemptible, time_limit_s=row.time_limit_s,
        depends_on=tuple(Dependency(str(d["job"]), Condition(d["condition"])) for d in row.depends_on or ()),
        array=str(row.array_id) if row.array_id is not None else None, array_max_running=row.array_max_running,
        min_gpus=row.min_gpus, max_gpus=row.max_gpus, sizes=tuple(row.sizes or ()), resize_pause_s=row.resize_pause_s,
        constraints=Constraints.from_json(row.constraints),
    )


def job_of(row: JobRow, profiles: Mapping[str, ModelProfile]) -> Job:
    """The job as the policies see it: what is left of its work, and the service it has had (restored from the row,
    so a restarted controller orders the queue as the old one did)."""
    job = Job(row.id, job_spec(row, profiles), max(row.duration_s - row.work_done_s, 0.0))
    job.attained_gpu_s = row.attained_gpu_s
    job.queued_since = row.queued_since
    job.preemptions = row.preemptions
    job.first_start_s = row.first_started_at
    job.last_update = time.time()
    return job


def admission_of(row: JobRow, cluster: Cluster, profiles: Mapping[str, ModelProfile]) -> Refusal | Fit | None:
    """Whether this cluster can ever run the job (a Refusal: it fails at once, saying so), and an elastic one whose
    stored size it cannot hold at which size (a Fit: `sized_down`); None: as stored (`core.admission.spec_admission`,
    with its constraints on the alive nodes the model holds: a node its list names that is down now is no refusal)."""
    return spec_admission(cluster, _admitted_spec(row), profiles, unknown=False)


def _admitted_spec(row: JobRow) -> JobSpec:
    """What admission reads of a row (its model as stored, size, elastic sizes and constraints), as the API read it of
    the submission (`core.admission.admitted_spec`)."""
    return admitted_spec({name: getattr(row, name) for name in ADMITTED_FIELDS})


def sized_down(s: Session, row: JobRow, fit: Fit, contention: ContentionModel, now: float) -> None:
    """An elastic job whose stored size the controller's model cannot hold (no node was recorded alive when the API
    took it, or the cluster shrank while no controller ran), stored at the size admission brought it down to, as the
    API stores one (`live.submissions`): `num_gpus` that size, a given `duration_s` its work in that size's seconds
    (`core.elastic.brought_down`); a `sized_down` event says so. A job recovered pending that ran before keeps the
    share of its work it did (`work_done_s` is in its stored size's seconds too)."""
    spec = brought_down(contention, _admitted_spec(row), fit.size)
    if row.requested_gpus is None:  # (brought down again, after a shrink: what it asked for stays)
        row.requested_gpus = int(row.num_gpus)
    row.num_gpus = spec.num_gpus
    if row.duration_estimate is None:
        if row.work_done_s and row.duration_s:
            row.work_done_s *= spec.duration_s / row.duration_s
        row.duration_s = spec.duration_s
    add_event(s, row.id, "sized_down", fit.reason.text, at=now, **fit.reason.params)


def rank_specs(cluster: Cluster, node_names: Sequence[str], placement: Placement) -> list[RankSpec]:
    """One worker per node of the placement, driving its GPUs there (local indices)."""
    by_node: dict[int, list[int]] = {}
    for g in placement.gpus:
        by_node.setdefault(int(cluster.gpu_node[g]), []).append(g)
    ranks = []
    for rank, (node, gpus) in enumerate(sorted(by_node.items())):
        first = int(cluster.node_first_gpu[node])
        ranks.append(RankSpec(rank, node_names[node], tuple(g - first for g in gpus), placement.share,
                              float(cluster.gpu_mem[gpus[0]])))
    return ranks


def array_env(row: JobRow) -> dict[str, str]:
    """A task of an array learns which (Slurm's SLURM_ARRAY_TASK_ID): its index, its array and how many tasks."""
    if row.array_id is None:
        return {}
    return {"CORRAL_ARRAY_ID": str(row.array_id), "CORRAL_ARRAY_INDEX": str(row.array_index)}


def launch_of(row: JobRow, job: Job, attempt: int, ranks: Sequence[RankSpec], accounts: JobAccounts, store_id: str,
              log_limit_bytes: int = DEFAULT_LOG_LIMIT_BYTES) -> Launch:
    """What the backend needs to start (or, after a restart, find) this run's workers; its files are under its store's
    id (`store_id`). A command job whose user has no account now (the server was restarted with another map since it
    was accepted) fails at launch, saying why."""
    run_as, account_error = None, ""
    if row.kind == JobType.COMMAND:
        try:
            run_as = accounts.account(row.user.name, row.user_id, admin=row.user.admin)
        except AccountError as exc:
            account_error = str(exc)
    return Launch(
        job_id=row.id, attempt=attempt, kind=row.kind, ranks=tuple(ranks),
        work_s=row.duration_s, rate=job.rate, log_dir=str(job_files.log_path(store_id, row.id, attempt, 0).parent),
        checkpoint_dir=str(job_files.checkpoint_dir(store_id, row.id)), entrypoint=row.entrypoint, workdir=row.workdir,
        env={**{str(k): str(v) for k, v in (row.env or {}).items()}, **array_env(row)},
        run_as=run_as, create_account=accounts.creates, account_error=account_error, log_limit_bytes=log_limit_bytes,
        runtime_env=environments.runtime_env(row.environment) if row.kind == JobType.COMMAND else None,
    )
