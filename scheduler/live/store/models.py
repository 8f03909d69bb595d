"""The tables: SQLAlchemy 2.0 typed mappings. Times are Unix seconds (floats): the controller, the policies and the
simulator all count time that way, and it stores identically on SQLite and PostgreSQL.

The controller is the only writer of placements (`Allocation`, a job's `running` state) and of `Decision`s; the API
writes users, tokens, submitted jobs and cancel requests. Migrations (`scheduler/live/store/migrations`) create these
tables; `tests/test_store.py` checks the two agree.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, false, true
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from scheduler.core.model import DEFAULT_TEAM
from scheduler.live.job_states import JobState, JobType, RestartPolicy  # noqa: F401 (re-exported: the store's vocabulary)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON, float: Float(precision=53)}


class _CeilingColumns:
    """Who may rank how high (`scheduler.live.priority_ceilings`), as a team and a user's overrides both hold it
    (null: not set here, so the team's or the built-in setting applies)."""

    max_priority: Mapped[int | None] = mapped_column(Integer)  # the highest priority a job may give
    allow_nonpreemptible: Mapped[bool | None] = mapped_column(Boolean)  # may a job say preemptible: false
    priority_classes: Mapped[list[Any] | None] = mapped_column(JSON)  # the class names a job may name


class Team(_CeilingColumns, Base):
    """A tenant of the cluster (`scheduler.core.tenancy`): the GPUs it is guaranteed, and how far beyond them it may
    borrow idle ones; and the priority ceiling of its members. The `default` team (quota 0: it only borrows) exists
    from the first migration on, so users and jobs from before teams keep working."""

    __tablename__ = "teams"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    quota_gpus: Mapped[float] = mapped_column(default=0.0)
    borrow_limit_gpus: Mapped[float | None]  # None: no limit but the cluster
    created_at: Mapped[float]
    updated_at: Mapped[float]


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float]
    # By name, so the API and the controller read it without a join; ON UPDATE CASCADE would allow renames, which
    # the API does not offer (a team's name is in its jobs' history).
    team: Mapped[str] = mapped_column(String(64), ForeignKey("teams.name"), default=DEFAULT_TEAM,
                                      server_default=DEFAULT_TEAM, index=True)

    tokens: Mapped[list[ApiToken]] = relationship(back_populates="user", cascade="all, delete-orphan")


class ApiToken(Base):
    """A bearer token, stored as its SHA-256 (tokens are 256 random bits: a fast hash is enough, unlike passwords)."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # the first characters, to tell tokens apart in listings
    created_at: Mapped[float]
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    revoked_at: Mapped[float | None]
    expires_at: Mapped[float | None]  # None: never expires

    user: Mapped[User] = relationship(back_populates="tokens")


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("user_id", "client_token", name="uq_jobs_user_client_token"),
        Index("ix_jobs_state_id", "state", "id"),
        Index("ix_jobs_team_state", "team", "state"),
        # The controller reads the held pending jobs at every pass: both columns in one index, or the state's alone
        # would be scanned over the whole queue (~0.2 ms a pass with 1,000 queued, on SQLite).
        Index("ix_jobs_state_held", "state", "held_at"),
        Index("ix_jobs_changed_at", "changed_at"),  # and the jobs changed since its last pass
        # A submission that names no model looks up the user's latest jobs of its name (`generic_profiles`): an
        # index walk over those alone, not over every job of the user (2.6 ms a submission for 3,000 of them).
        Index("ix_jobs_user_name", "user_id", "name", "id"),
        # The start estimates repeat the last hour's submissions (`scheduler.core.estimates.expected_arrivals`).
        Index("ix_jobs_submitted_at", "submitted_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    # The submitter's team when it was submitted: its quota the job runs under. A copy, not a key, so finished jobs
    # keep their history; a user cannot change team while they have jobs pending or running.
    team: Mapped[str] = mapped_column(String(64), default=DEFAULT_TEAM, server_default=DEFAULT_TEAM)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))  # JobType
    model: Mapped[str] = mapped_column(String(100))
    num_gpus: Mapped[float]  # an elastic job's: the size its duration is measured at
    # Elastic (`scheduler.core.elastic`): runs on any whole number of GPUs from min_gpus to max_gpus (only the sizes
    # listed, when a list is given), and a resize pauses it for resize_pause_s (None: the model's default). None and
    # None: a job of one size.
    min_gpus: Mapped[int | None] = mapped_column(Integer)
    max_gpus: Mapped[int | None] = mapped_column(Integer)
    sizes: Mapped[list[int] | None] = mapped_column(JSON, default=None)
    resize_pause_s: Mapped[float | None]
    # An elastic job admission brought down (the cluster cannot hold the size it was submitted at,
    # `scheduler.core.admission.Fit`): the size it asked for; num_gpus and duration_s are the size it was stored at
    # and its work there. None: stored as submitted.
    requested_gpus: Mapped[int | None] = mapped_column(Integer)
    duration_s: Mapped[float]  # emulated: isolated run time; command: the user's estimate (only oracle policies read it)
    # A command job that gave no duration: what its duration_s was estimated from (`scheduler.live.durations`: the
    # figures, with their words); None when the user gave it.
    duration_estimate: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    # A job that named no model (`scheduler.core.generic`): what NVML measured of its own runs, and of the jobs alike
    # its generic profile is refined from (`scheduler.live.generic_profiles`).
    measured_usage: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    profile_usage: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    entrypoint: Mapped[str | None] = mapped_column(Text)
    workdir: Mapped[str | None] = mapped_column(Text)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # pip packages, a node's venv, an image, a working dir's archive (`scheduler.live.environments`); None: the node's.
    # Deferred: an archive may be hundreds of KB, read only where a run is launched or the job shown, never by the
    # controller's passes over the queue.
    environment: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), deferred=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    # Never preempted when false (`scheduler.core.priorities`); set by the job or by the priority class it named (a
    # copy of the class's figures when submitted: changing a class changes only later jobs).
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    priority_class: Mapped[str | None] = mapped_column(String(64))
    time_limit_s: Mapped[float | None]  # wall seconds a run may take before it is stopped (`timed_out`); None: none
    # Run only once these hold: [{"job": id, "condition": "afterok" | "afterany" | "afternotok"}]
    # (`scheduler.core.dependencies`); None: none.
    depends_on: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    # Where it may run (`scheduler.core.constraints`: {"gpu_type", "labels", "nodes", "exclude"}, each optional);
    # None: anywhere.
    constraints: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    array_id: Mapped[int | None] = mapped_column(ForeignKey("job_arrays.id"), index=True)  # its array, if a task
    array_index: Mapped[int | None]  # its index in the array (CORRAL_ARRAY_INDEX)
    array_max_running: Mapped[int | None]  # its array's (a copy: the controller reads it with the job)
    slo_ms: Mapped[float | None]
    client_token: Mapped[str | None] = mapped_column(String(200))
    restart_policy: Mapped[str] = mapped_column(String(16), default=RestartPolicy.REQUEUE)
    max_restarts: Mapped[int] = mapped_column(Integer, default=3)
    # A run that exits non-zero runs again, up to max_retries times, when its exit code is one retry_on names (None:
    # any), after retry_backoff_s doubled for each retry used before (`scheduler.live.retries`).
    max_retries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    retry_on: Mapped[list[int] | None] = mapped_column(JSON, default=None)
    retry_backoff_s: Mapped[float] = mapped_column(default=30.0, server_default="30")

    state: Mapped[str] = mapped_column(String(16), default=JobState.PENDING)  # JobState
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    submitted_at: Mapped[float]
    queued_since: Mapped[float]  # submission, or the last requeue
    started_at: Mapped[float | None]  # start of the current run (workers up)
    first_started_at: Mapped[float | None]
    finished_at: Mapped[float | None]
    attempt: Mapped[int] = mapped_column(Integer, default=0)  # runs launched so far; the current run's number
    restarts: Mapped[int] = mapped_column(Integer, default=0)  # runs lost (node or controller gone)
    retries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # failed runs run again
    not_before: Mapped[float | None]  # a retry's backoff: the job is not placed before this time
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    attained_gpu_s: Mapped[float] = mapped_column(default=0.0)  # GPU-seconds of service in finished runs and resized sizes
    work_done_s: Mapped[float] = mapped_column(default=0.0)  # emulated: isolated seconds done in finished runs
    progress: Mapped[float] = mapped_column(default=0.0)  # fraction done, as the workers last reported
    predicted_slowdown: Mapped[float | None]
    run_s: Mapped[float] = mapped_column(default=0.0, server_default="0")  # wall seconds its workers ran, over all finished runs
    # Time-weighted mean of the predicted slowdown over its runs (what the contention model expected) and, once it
    # succeeds, run_s / duration_s (what happened): `corral calibrate` compares the two.
    predicted_slowdown_avg: Mapped[float | None]
    observed_slowdown: Mapped[float | None]
    pending_reason: Mapped[str | None] = mapped_column(Text)
    # The pending reason as data (`scheduler.core.reasons`): its code and parameters, written with its words
    # (`reason_columns.set_pending`); what readers that decide something read (the start estimate's reservation holder).
    # None: no reason, or one written before reasons had codes.
    pending_code: Mapped[str | None] = mapped_column(String(32))
    pending_params: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    # The latest time the policy keeps the job waiting for its pending reason (a `Wait`'s `until`: `topology` holding
    # it for compact room); None: no such bound. Written and cleared with the reason; the start estimate reads it.
    pending_until: Mapped[float | None]
    # A pending job its owner or an admin holds (`corral hold`, Slurm's `scontrol hold`): it does not start until
    # released. Who (a user's name) and since when; None: not held.
    held_at: Mapped[float | None]
    held_by: Mapped[str | None] = mapped_column(String(64))
    # When the API last changed a live job after its submission (`PATCH /jobs/ID`: its time limit; a requeue
    # request): the controller takes the change in at its next pass. None: never changed.
    changed_at: Mapped[float | None]
    # Who asked that this running job be checkpointed and put back in the queue (`corral requeue`); cleared when the
    # controller has done it.
    requeue_by: Mapped[str | None] = mapped_column(String(64))
    exit_code: Mapped[int | None]
    error: Mapped[str | None] = mapped_column(Text)
    # Why it ended, as data (`error` in words; `reason_columns.set_end`). None: it succeeded, or it ended before reasons had
    # codes.
    end_code: Mapped[str | None] = mapped_column(String(32))
    end_params: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))

    user: Mapped[User] = relationship()
    allocations: Mapped[list[Allocation]] = relationship(
        back_populates="job", order_by="Allocation.id", cascade="all, delete-orphan"
    )
    events: Mapped[list[JobEvent]] = relationship(
        back_populates="job", order_by="JobEvent.id", cascade="all, delete-orphan"
    )


class JobArray(Base):
    """The parent of an array's tasks (Slurm's `--array`): how many there are and how many may run at once. Each task
    is a job with `array_id` and `array_index`; cancelling the array cancels the tasks."""

    __tablename__ = "job_arrays"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    name: Mapped[str] = mapped_column(String(200))
    count: Mapped[int] = mapped_column(Integer)
    max_running: Mapped[int | None] = mapped_column(Integer)  # None: no bound
    submitted_at: Mapped[float]


class JobEvent(Base):
    """Every state change of a job, in order: the timeline the API and dashboard show."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[float]
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)

    job: Mapped[Job] = relationship(back_populates="events")


class Allocation(Base):
    """One GPU (or share of one) held by one run of a job. Open while `released_at` is null."""

    __tablename__ = "allocations"
    __table_args__ = (Index("ix_allocations_open", "released_at", "gpu"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int]
    rank: Mapped[int]  # the worker (one per node of the placement) that drives this GPU
    node: Mapped[str] = mapped_column(String(64))
    gpu: Mapped[int]  # cluster-wide GPU index (the cluster model's numbering)
    local_gpu: Mapped[int]  # index on its node: what CUDA_VISIBLE_DEVICES names
    share: Mapped[float]
    allocated_at: Mapped[float]
    released_at: Mapped[float | None]
    # The leader's lease epoch the placement was committed under (None: SQLite, one process, no lease). The fence
    # (`scheduler.live.leader`) refuses a pass whose epoch is no longer the lease's, so no two epochs' open
    # allocations ever overlap in time for one job.
    epoch: Mapped[int | None]

    job: Mapped[Job] = relationship(back_populates="allocations")


class Decision(Base):
    """A policy decision with the candidates it weighed and their predicted slowdowns (for explanations and for
    retraining from history)."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[float]
    policy: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(16))  # place | preempt | wait
    reason: Mapped[str] = mapped_column(Text, default="")
    gpus: Mapped[list[Any]] = mapped_column(default=list)
    share: Mapped[float | None]
    predicted_slowdown: Mapped[float | None]
    candidates: Mapped[list[Any]] = mapped_column(default=list)  # [{gpus, share, slowdown, others_added}]
    latency_ms: Mapped[float] = mapped_column(default=0.0)  # the policy call that produced it


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    index: Mapped[int]  # position in the cluster model
    preset: Mapped[str] = mapped_column(String(64))
    # The rack the node is modelled in, as it names it (`corral node start --rack`); None: it names none, and fills
    # racks in order. The controller writes it at every registration: a node that moved says so when it comes back.
    rack: Mapped[str | None] = mapped_column(String(64))
    # The labels its operator gave it (`corral node start --label k=v`; None: none), as the model has them: jobs'
    # constraints select nodes by them and by its hardware's (`scheduler.core.constraints`). Written with the rack.
    labels: Mapped[dict[str, str] | None] = mapped_column(JSON(none_as_null=True), default=None)
    # The virtual environments its operator declared (`CORRAL_VENVS`), by name, sorted (None: none), as its agent
    # advertises them: a submission naming one no alive node declares is refused (`live.nodes.venv_refusal`).
    venvs: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True), default=None)
    alive: Mapped[bool] = mapped_column(Boolean, default=True)
    ray_node_id: Mapped[str | None] = mapped_column(String(64))
    address: Mapped[str | None] = mapped_column(String(64))
    updated_at: Mapped[float]  # when `alive` last changed, or the node was first seen ("since" in the API)
    # The GPUs' health as the node's agent last pushed it (`PUT /nodes/<name>/health`; None: never), and when the
    # API received it, on the API's clock (not the node's: a node's skewed clock cannot make its report look fresh).
    # The API writes these two; the controller never does.
    health: Mapped[dict[str, Any] | None]
    health_at: Mapped[float | None]
    # An admin's drain (`corral node drain`; None: not drained): no new placement on the node until it is resumed,
    # and with `drain_evict` (`--now`) its runs are checkpointed and requeued (scheduler.core.outages).
    drained_at: Mapped[float | None]
    drained_by: Mapped[str | None] = mapped_column(String(64))
    drain_reason: Mapped[str | None] = mapped_column(Text)
    drain_evict: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    gpus: Mapped[list[Gpu]] = relationship(back_populates="node", order_by="Gpu.index", cascade="all, delete-orphan")


class Gpu(Base):
    __tablename__ = "gpus"

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(unique=True)  # cluster-wide
    local_index: Mapped[int]
    gpu_type: Mapped[str] = mapped_column(String(64))
    mem_gb: Mapped[float]

    node: Mapped[Node] = relationship(back_populates="gpus")


class PolicyVersion(Base):
    """A policy the controller can run (`tiresias`, `rl:default`, a trained agent's path). One is active."""

    __tablename__ = "policy_versions"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(300), unique=True)
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float]
    activated_at: Mapped[float | None]
    activated_by: Mapped[str | None] = mapped_column(String(64))
    info: Mapped[dict[str, Any]] = mapped_column(default=dict)  # e.g. a trained agent's sidecar metadata


class ControllerLease(Base):
    """The one row (id 1) that says which `corral serve` replica's controller leads, and until when
    (`scheduler.live.leader`). `epoch` grows by one at every change of holder: a pass commits only while its
    leader's epoch is still the row's. Times are the database's clock, not the replicas'."""

    __tablename__ = "controller_lease"

    id: Mapped[int] = mapped_column(primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(200))  # the replica's id (host:pid:random); None: never held
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    acquired_at: Mapped[float | None]
    renewed_at: Mapped[float | None]
    expires_at: Mapped[float] = mapped_column(default=0.0)


class StoreIdentity(Base):
    """The one row (id 1) that names this store: `store_id`, a random UUID made when the store was created (or
    upgraded from before ids, migration 0019), under which its jobs' logs and checkpoints live
    (`scheduler.live.job_files`), so that two stores sharing one CORRAL_HOME never read each other's files.
    `legacy_files`: the store held jobs before it had an id, whose files were then kept directly under CORRAL_HOME;
    only such a store may claim those folders."""

    __tablename__ = "store_identity"

    id: Mapped[int] = mapped_column(primary_key=True)
    store_id: Mapped[str] = mapped_column(String(36))
    created_at: Mapped[float]
    legacy_files: Mapped[bool] = mapped_column(Boolean, default=False)


class _LimitColumns:
    """The fair-use limits, as the cluster's defaults and a user's overrides both hold them (null: not set here)."""

    max_pending: Mapped[int | None]
    submit_rate: Mapped[float | None]
    submit_burst: Mapped[int | None]
    whatif_per_min: Mapped[int | None]
    request_rate: Mapped[float | None]
    request_burst: Mapped[int | None]
    updated_at: Mapped[float]
    updated_by: Mapped[str | None] = mapped_column(String(64))


class LimitDefaults(_LimitColumns, Base):
    """The one row (id 1) of cluster-wide fair-use limits an admin set (`corral limits`, `PUT /limits`). A null column
    means the built-in default (`queries.BUILTIN_LIMITS`); no row at all means every one is built in."""

    __tablename__ = "limit_defaults"

    id: Mapped[int] = mapped_column(primary_key=True)
    # A job's time limit when it gives none, and the most it may give (None: no default, no maximum).
    default_time_limit_s: Mapped[float | None]
    max_time_limit_s: Mapped[float | None]


class PriorityClass(Base):
    """A named priority an admin defined (`corral priority-class create`): a job that names it gets its value and its
    preemptibility, as Kueue's WorkloadPriorityClass."""

    __tablename__ = "priority_classes"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(Integer)
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True)
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float]
    created_by: Mapped[str | None] = mapped_column(String(64))


class UserLimits(_LimitColumns, _CeilingColumns, Base):
    """One user's fair-use limits and priority ceiling where an admin overrode the defaults (`corral user limits
    NAME`); a null column follows the defaults (for the ceiling: the user's team's, then the built-in one)."""

    __tablename__ = "user_limits"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)


class Webhook(Base):
    """A URL called on job state changes (`scheduler.live.webhooks`): a user's, for every one of their jobs (`job_id`
    null), or one job's, given at submission. `secret` signs each request (HMAC-SHA256); it is stored as generated,
    not hashed, because the server needs it to sign. Deleting one sets `deleted_at` (its delivery log stays)."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    secret: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[float]
    deleted_at: Mapped[float | None]
    # Only events after this one are sent: a user's webhook hears what happens from its creation on, not the past.
    after_event_id: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class WebhookDelivery(Base):
    """One job event to send to one webhook, with its body (fixed when queued, so every attempt sends the same bytes)
    and where its sending stands: pending (due at `next_at`), delivered, or failed (given up, `last_error` says why).
    A dispatcher claims a pending one by setting `claim` and `locked_until`; a claim that lapses is taken again."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "event_id", name="uq_webhook_deliveries_webhook_event"),
        Index("ix_webhook_deliveries_due", "status", "next_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    event_id: Mapped[int] = mapped_column(ForeignKey("job_events.id", ondelete="CASCADE"))
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    event: Mapped[str] = mapped_column(String(32))  # the event's kind
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending | delivered | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float]
    next_at: Mapped[float]
    claim: Mapped[str | None] = mapped_column(String(64))
    locked_until: Mapped[float | None]
    last_attempt_at: Mapped[float | None]
    last_status_code: Mapped[int | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    finished_at: Mapped[float | None]

    webhook: Mapped[Webhook] = relationship()
    attempt_log: Mapped[list[WebhookAttempt]] = relationship(
        back_populates="delivery", order_by="WebhookAttempt.id", cascade="all, delete-orphan")


class WebhookAttempt(Base):
    """One try at sending a delivery: the HTTP status the receiver answered, or what went wrong instead."""

    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(primary_key=True)
    delivery_id: Mapped[int] = mapped_column(ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True)
    number: Mapped[int]
    at: Mapped[float]
    status_code: Mapped[int | None]
    error: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[float]

    delivery: Mapped[WebhookDelivery] = relationship(back_populates="attempt_log")


class WebhookCursor(Base):
    """The one row (id 1): the last job event the webhook dispatcher has queued deliveries for, with every event
    before it (`scheduler.live.webhook_dispatch`). In the database, so a restart neither skips nor repeats events."""

    __tablename__ = "webhook_cursor"

    id: Mapped[int] = mapped_column(primary_key=True)
    last_event_id: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[float] = mapped_column(default=0.0)


class ClusterFabric(Base):
    """The one row (id 1): the fabric preset the live cluster model sits on (`corral serve --fabric`; None: none,
    one uplink per rack). In the database, so the controller, what-if, the figures and the history rebuild one model,
    and a restart without the flag keeps it."""

    __tablename__ = "cluster_fabric"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str | None] = mapped_column(String(64))
    set_at: Mapped[float] = mapped_column(default=0.0)
