"""The start estimate's fields (`scheduler.live.estimates`), as a job and its explanation both show them: defined
once, each schema declaring them where its JSON has them."""

from __future__ import annotations

from marshmallow import fields


def start_estimate_fields(who: str = "") -> dict[str, fields.Field]:
    """The fields by name; `who` starts each description (a job's: "pending jobs: ")."""
    return {
        "start_estimate_s": fields.Float(allow_none=True, metadata={
            "description": f"{who}about how many seconds until it starts, by a replay of the present under the "
                           "active policy (assuming the last hour's submissions arrive again over the next hour); "
                           "null when it never starts under the current rules, is not started within the replay's "
                           "bounds (`start_estimate_outlook`), or has no estimate (held)"}),
        "start_estimate_outlook": fields.String(allow_none=True, metadata={
            "description": f"{who}`starts` (in start_estimate_s), `never` (the rules never start it: "
                           "start_estimate_code says why), `beyond` (not within the replay's bounds); null: no "
                           "estimate"}),
        "start_estimate_code": fields.String(allow_none=True, metadata={
            "description": "`never`: why, as data (`scheduler.core.reasons.Code`); null otherwise or if the policy "
                           "gave no reason"}),
        "start_estimate_params": fields.Dict(allow_none=True, metadata={
            "description": "`never`: the figures of the reason, by its code"}),
        "start_estimate_text": fields.String(allow_none=True, metadata={
            "description": f"{who}the estimate in words (\"starts in about 12 min\", \"never starts under the "
                           "current rules and cluster (...)\")"}),
        "start_estimate_basis": fields.String(allow_none=True, metadata={
            "description": f"{who}how the start estimate was made, in words: what the replay carried and not"}),
    }
