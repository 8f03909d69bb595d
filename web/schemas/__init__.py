"""Marshmallow schemas: what the API accepts and returns, one module per resource. They validate every request before
anything is stored, and flask-smorest turns them into the OpenAPI document, so the spec and the checks cannot drift
apart. Their bounds are web.limits'. Every schema is also importable from here, as it was before the split."""

from __future__ import annotations

from web.schemas.accounting import AccountingArgs, AccountingRowSchema, AccountingSchema
from web.schemas.arrays import ArraySchema, ArrayTaskSchema
from web.schemas.base import GpuCount, PageArgs, RequestSchema, RetryOn, bad_strings
from web.schemas.catalog import ModelSchema, ModelsSchema
from web.schemas.ceilings import CeilingArgs, CeilingSchema
from web.schemas.cluster import ClusterSchema, GpuSchema, NodeSchema, QueueSchema, TenantSchema, TotalsSchema
from web.schemas.explain import (
    CandidateSchema,
    ExplainDecisionSchema,
    ExplainPlacementSchema,
    ExplainSchema,
    NeighbourSchema,
)
from web.schemas.fair_use import LIMIT_SOURCES, LimitsArgs, LimitsSchema, UserLimitsArgs
from web.schemas.health import HealthSchema
from web.schemas.job_details import (
    DecisionSchema,
    DependencyStateSchema,
    EndedBySchema,
    EventSchema,
    JobDetailSchema,
    LastPlacementSchema,
)
from web.schemas.jobs import (
    AllocationSchema,
    ArrayArgs,
    DependencyArgs,
    JobListArgs,
    JobListSchema,
    JobSchema,
    JobSubmitSchema,
    JobSummarySchema,
    JobUpdateSchema,
    JobWebhookSchema,
    RequeueArgs,
    ResubmitSchema,
)
from web.schemas.logs import LogsArgs, LogsSchema, RankLogSchema
from web.schemas.nodes import (
    GPU_HEALTH_STATUSES,
    DrainSchema,
    GpuHealthArgs,
    GpuHealthSchema,
    MpsHealthArgs,
    MpsHealthSchema,
    NodeDrainArgs,
    NodeDrainSchema,
    NodeHealthArgs,
    NodeHealthSchema,
)
from web.schemas.policies import ActivePolicyArgs, ActivePolicySchema, PoliciesSchema
from web.schemas.priority_classes import PriorityClassCreateArgs, PriorityClassListSchema, PriorityClassSchema
from web.schemas.stats import (
    BucketSchema,
    NetworkSchema,
    NodeNetSchema,
    StatsArgs,
    StatsSchema,
    TeamSeriesSchema,
    TeamStatsArgs,
    TeamStatSchema,
    TeamStatsSchema,
    UplinkSchema,
)
from web.schemas.teams import (
    BORROW_HELP,
    QUOTA_HELP,
    TeamCreateArgs,
    TeamDeletedSchema,
    TeamGpus,
    TeamListSchema,
    TeamPatchArgs,
    TeamSchema,
)
from web.schemas.time_limits import TimeLimitsArgs, TimeLimitsSchema
from web.schemas.tokens import TokenListSchema, TokenSchema
from web.schemas.users import UserListSchema, UserPatchArgs, UserSchema
from web.schemas.webhooks import (
    AttemptSchema,
    DeliveryDetailSchema,
    DeliveryListArgs,
    DeliveryListSchema,
    DeliverySchema,
    WebhookCreateArgs,
    WebhookCreatedSchema,
    WebhookListArgs,
    WebhookListSchema,
    WebhookSchema,
)
from web.schemas.whatif import (
    DistributionSchema,
    WhatIfArgs,
    WhatIfBaselineSchema,
    WhatIfBoundsSchema,
    WhatIfClusterSchema,
    WhatIfJobArgs,
    WhatIfJobCountsSchema,
    WhatIfJobResultSchema,
    WhatIfMetricsSchema,
    WhatIfSchema,
)

__all__ = [
    "AccountingArgs", "AccountingRowSchema", "AccountingSchema",
    "ActivePolicyArgs", "ActivePolicySchema", "AllocationSchema", "ArrayArgs", "ArraySchema", "ArrayTaskSchema",
    "AttemptSchema", "BORROW_HELP", "BucketSchema", "CandidateSchema", "CeilingArgs", "CeilingSchema",
    "ClusterSchema", "DecisionSchema", "DeliveryDetailSchema", "DeliveryListArgs", "DeliveryListSchema",
    "DeliverySchema", "DependencyArgs", "DependencyStateSchema", "DistributionSchema", "DrainSchema",
    "EndedBySchema", "EventSchema", "ExplainDecisionSchema", "ExplainPlacementSchema", "ExplainSchema",
    "GPU_HEALTH_STATUSES", "GpuCount", "GpuHealthArgs", "GpuHealthSchema", "GpuSchema", "HealthSchema",
    "JobDetailSchema", "JobListArgs", "JobListSchema", "JobSchema", "JobSubmitSchema", "JobSummarySchema",
    "JobUpdateSchema", "JobWebhookSchema", "LIMIT_SOURCES", "LastPlacementSchema", "LimitsArgs", "LimitsSchema",
    "LogsArgs", "LogsSchema", "ModelSchema", "ModelsSchema", "MpsHealthArgs", "MpsHealthSchema", "NeighbourSchema",
    "NetworkSchema", "NodeDrainArgs", "NodeDrainSchema", "NodeHealthArgs", "NodeHealthSchema", "NodeNetSchema",
    "NodeSchema", "PageArgs", "PoliciesSchema", "PriorityClassCreateArgs", "PriorityClassListSchema",
    "PriorityClassSchema", "QUOTA_HELP", "QueueSchema", "RankLogSchema", "RequestSchema", "RequeueArgs",
    "ResubmitSchema", "RetryOn", "StatsArgs", "StatsSchema", "TeamCreateArgs", "TeamDeletedSchema", "TeamGpus",
    "TeamListSchema", "TeamPatchArgs", "TeamSchema", "TeamSeriesSchema", "TeamStatSchema", "TeamStatsArgs",
    "TeamStatsSchema", "TenantSchema", "TimeLimitsArgs", "TimeLimitsSchema", "TokenListSchema", "TokenSchema",
    "TotalsSchema", "UplinkSchema", "UserLimitsArgs", "UserListSchema", "UserPatchArgs", "UserSchema",
    "WebhookCreateArgs", "WebhookCreatedSchema", "WebhookListArgs", "WebhookListSchema", "WebhookSchema",
    "WhatIfArgs", "WhatIfBaselineSchema", "WhatIfBoundsSchema", "WhatIfClusterSchema", "WhatIfJobArgs",
    "WhatIfJobCountsSchema", "WhatIfJobResultSchema", "WhatIfMetricsSchema", "WhatIfSchema", "bad_strings",
]
