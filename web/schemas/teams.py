"""Teams: creating and changing one (its quota, borrowing limit and priority ceiling), and a team as listed."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields

import web.limits as lim
from scheduler.core.tenancy import TeamError, make_team
from web.schemas.base import RequestSchema, name_rule
from web.schemas.ceilings import CeilingArgs, CeilingSchema


class TeamGpus(fields.Field):
    """GPUs as a team's quota or borrowing limit: a finite number >= 0, fractions allowed (MPS shares). The rule is
    scheduler.core.tenancy's (`make_team`), so the API refuses what a simulator's teams.yaml refuses, in its words."""

    def __init__(self, description: str, *, borrow_limit: bool = False, **kwargs: Any) -> None:
        super().__init__(metadata={"type": "number", "minimum": 0, "maximum": lim.MAX_TEAM_GPUS,
                                   "description": description}, **kwargs)
        self.borrow_limit = borrow_limit

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        try:
            team = make_team("", 0.0, value, "") if self.borrow_limit else make_team("", value, None, "")
        except TeamError as exc:  # "<where>.<field>: <why>": the field is this one, the reason is what to say
            raise ValidationError(str(exc).partition(": ")[2]) from None
        except OverflowError:  # an integer literal too large for a float (math.isfinite cannot even look at it)
            raise ValidationError("a finite number is required, got an integer too large for a float") from None
        gpus = team.borrow_limit_gpus if self.borrow_limit else team.quota_gpus
        assert gpus is not None  # None (no limit) never reaches _deserialize: allow_none handles it
        if gpus > lim.MAX_TEAM_GPUS:
            raise ValidationError(f"must be at most {lim.MAX_TEAM_GPUS} GPUs, got {gpus:g}")
        return gpus


QUOTA_HELP = ("GPUs the team may always use (fractions allowed); all teams' quotas add up to at most the cluster's "
              "GPUs")


BORROW_HELP = "GPUs it may borrow beyond its quota while others leave them idle; null: no limit but the cluster"


class TeamCreateArgs(RequestSchema):
    name = fields.String(required=True, validate=name_rule, metadata={
        "description": "1 to 64 letters, digits, '.', '_' or '-', not starting with '-'"})
    quota_gpus = TeamGpus(QUOTA_HELP, required=True)
    borrow_limit_gpus = TeamGpus(BORROW_HELP, borrow_limit=True, load_default=None, allow_none=True)


class TeamPatchArgs(CeilingArgs, RequestSchema):
    """Only the fields given change. A team is not renamed: its name is in its jobs' history."""

    quota_gpus = TeamGpus(QUOTA_HELP)
    borrow_limit_gpus = TeamGpus(BORROW_HELP, borrow_limit=True, allow_none=True)


class TeamSchema(Schema):
    name = fields.String()
    quota_gpus = fields.Float()
    borrow_limit_gpus = fields.Float(allow_none=True, metadata={"description": "null: no limit but the cluster"})
    created_at = fields.Float()
    updated_at = fields.Float()
    in_use_gpus = fields.Float(metadata={"description": "GPUs its running jobs hold (shares as fractions)"})
    borrowed_gpus = fields.Float(metadata={"description": "of those, GPUs beyond its quota"})
    lent_gpus = fields.Float(metadata={
        "description": "its idle quota that borrowers hold (borrowers first take GPUs in no team's quota; the rest is "
                       "lent by the teams under their quota, in proportion to their idle quota)"})
    pending_jobs = fields.Integer()
    running_jobs = fields.Integer()
    priority_ceiling = fields.Nested(CeilingSchema, metadata={
        "description": "what its members' jobs may ask for where they have no setting of their own"})
    ceiling_sources = fields.Dict(keys=fields.String(), values=fields.String(), metadata={
        "description": "where each ceiling setting comes from: team or built-in"})


class TeamListSchema(Schema):
    teams = fields.List(fields.Nested(TeamSchema))
    total = fields.Integer(metadata={"description": "how many there are, all pages"})
    cluster_gpus = fields.Integer(metadata={"description": "GPUs the controller registered (0 before its first start)"})


class TeamDeletedSchema(Schema):
    name = fields.String()
    moved_users = fields.List(fields.String(), metadata={"description": "its members, now in the default team"})
    message = fields.String()
