"""How large what a client sends (and what a list or a log read answers) may be. Each bound is far beyond real use
and small enough that no one request, nor a queue of them, can fill the store or the server's memory: 100 jobs with
1 MB commands once grew the database by 100 MB and made every queue poll 100 MB. docs/security.md lists them.

Bounds on single fields are marshmallow validators (web/schemas/), so the OpenAPI document states them and a
request past one is a 422 naming the field, with nothing stored."""

from __future__ import annotations

import re
from typing import Any

from marshmallow import ValidationError

# A request's body: the JSON of the largest submission (an array's, a what-if's) is far smaller. Flask refuses past it
# (MAX_CONTENT_LENGTH) and so does the HTTP front (web.front), from the Content-Length before reading the body.
MAX_BODY_BYTES = 1024 * 1024

# The store's Integer columns (ids included) are 32-bit on PostgreSQL, 64-bit on SQLite: a larger number in a request
# would reach the driver and fail there as a 500, so every integer a request carries is bounded to what both hold.
DB_INT_MAX = 2**31 - 1
# Durations, SLOs and horizons are capped far beyond any real job (about 32 years): a number near the float limit
# overflows the simulator's arithmetic into inf/NaN, which the API would then return as null where it documents numbers.
MAX_SECONDS = 1e9

# A job's GPUs: a share of one GPU down to 1% (MPS shares GPUs in whole percent of its threads), or whole GPUs up to
# more than any cluster Corral runs (what-if can add up to 1024 nodes).
MIN_GPU_SHARE = 0.01
MAX_JOB_GPUS = 8192
# A job's isolated run time: at least a second (5e-324 s made its observed slowdown infinite), at most a year.
MIN_JOB_SECONDS = 1.0
MAX_JOB_SECONDS = 365 * 24 * 3600.0
# An inference job's latency SLO: from 0.1 ms (the catalog's fastest model takes 6 ms) to an hour.
MIN_SLO_MS = 0.1
MAX_SLO_MS = 3600 * 1000.0
# An elastic job's sizes (`min_gpus`, `max_gpus`, each of `sizes`) are GPU counts, bounded as num_gpus is; a list of
# sizes has at most this many (each size a policy weighs is a pricing of the job), and a resize's pause is at most a day.
MAX_ELASTIC_SIZES = 64
MAX_RESIZE_PAUSE_S = 86400.0
MAX_PRIORITY = 1_000_000  # either sign
MAX_CEILING_CLASSES = 100  # priority classes one user's or team's ceiling may name

MAX_DEPENDENCIES = 100  # jobs one job may depend on
MAX_ARRAY = 1000  # tasks in one array

MAX_NAME = 200  # a job's name, a client token
MAX_ENTRYPOINT = 16 * 1024  # characters of a command job's shell command
MAX_WORKDIR = 4096  # PATH_MAX
MAX_ENV_VARS = 64
MAX_ENV_NAME = 128
MAX_ENV_VALUE = 4096
MAX_ENV_TOTAL = 32 * 1024  # characters of all names and values together
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # POSIX's portable names: no '=', nothing a shell cannot export

# Lists: the most items one page may hold (GET /jobs, /tokens, /users, /teams, /webhooks), and the defaults for jobs
# and webhook deliveries.
MAX_PAGE = 1000
DEFAULT_JOB_PAGE = 100
DEFAULT_DELIVERY_PAGE = 50

# Logs: the most bytes one GET /jobs/ID/logs answers, shared by its ranks (each gets at least MIN_RANK_LOG_BYTES).
MAX_LOG_RESPONSE_BYTES = 1024 * 1024
MIN_RANK_LOG_BYTES = 4 * 1024
# Retries of failed runs: how many, on how many listed exit codes, and the first backoff.
MAX_RETRIES = 100
MAX_RETRY_CODES = 32
MAX_RETRY_BACKOFF_S = 3600.0

# Following a log (`offset`): the longest an answer may wait for news, and how many requests may wait at once (each
# holds one of the server's request threads; beyond these, an answer with nothing new comes at once).
MAX_LOG_WAIT_S = 20.0
MAX_LOG_WAITERS = 4


# A quota or borrowing limit beyond any cluster: larger numbers would only overflow the usage arithmetic (quotas are
# checked against the cluster's size only once the controller has registered its GPUs).
MAX_TEAM_GPUS = 1_000_000

# Fair use (web.fair_use): bounds far beyond any sensible limit, so a typo cannot store something absurd.
MAX_PENDING_LIMIT = 1_000_000
MAX_SUBMIT_RATE = 10_000.0
MAX_SUBMIT_BURST = 1_000_000
MAX_WHATIF_PER_MIN = 10_000
MAX_REQUEST_RATE = 100_000.0
MAX_REQUEST_BURST = 1_000_000

# What a node agent pushes (`PUT /nodes/<name>/health`): bounds far beyond real readings, which keep a broken or
# hostile client from storing anything huge.
MAX_NODE_GPUS = 64  # as `corral node start --gpus`
MAX_REPORT_INTERVAL_S = 3600.0  # as `corral node start --health-interval`
MIN_REPORT_INTERVAL_S = 0.2

# What-if (POST /whatif): scheduler.live.whatif's limits (tests/test_whatif.py holds them equal; the core validates
# again), so that a request past one is a 422 naming every bad field at once.
WHATIF_MAX_SEEDS = 20
WHATIF_MAX_EXTRA_NODES = 1024
WHATIF_MAX_HYPOTHETICAL = 1000
WHATIF_MAX_JOBS = 20_000

# The dashboard's figures (GET /stats): the longest window, and the most buckets (or points) one answer holds.
STATS_MAX_WINDOW_S = 30 * 86400.0
STATS_MAX_BUCKETS = 2000

# Accounting (GET /accounting): the longest period one answer covers (its cost is the period's allocations and jobs),
# and the latest instant a period may name (2100-01-01: a typo's year 20250, not a date).
ACCOUNTING_MAX_PERIOD_S = 366 * 86400.0
ACCOUNTING_DEFAULT_PERIOD_S = 30 * 86400.0
MAX_UNIX_TIME = 4_102_444_800.0


def check_env(env: Any) -> None:
    """A job's environment: how many variables, their names, and how large (the field's own validator)."""
    if len(env) > MAX_ENV_VARS:
        raise ValidationError(f"At most {MAX_ENV_VARS} variables, got {len(env)}.")
    problems = []
    for name, value in env.items():
        shown = name if len(name) <= 40 else name[:40] + "..."
        if len(name) > MAX_ENV_NAME or not ENV_NAME.fullmatch(name):
            problems.append(f"{shown!r}: a name is 1 to {MAX_ENV_NAME} letters, digits or '_', not starting with a "
                            "digit.")
        elif len(value) > MAX_ENV_VALUE:
            problems.append(f"{shown}: a value is at most {MAX_ENV_VALUE} characters, got {len(value)}.")
    total = sum(len(k) + len(v) for k, v in env.items())
    if total > MAX_ENV_TOTAL:
        problems.append(f"At most {MAX_ENV_TOTAL} characters of names and values in all, got {total}.")
    if problems:
        raise ValidationError(problems)
