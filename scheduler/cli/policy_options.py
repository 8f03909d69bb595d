"""`--policy` as the offline commands take it: names checked, then each policy built once through the registry (a
composition root's job: it imports `policies`, lazily)."""

from __future__ import annotations

from typing import Any

import click

from scheduler.core.errors import SpecError


def parse_policies(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    from policies import available

    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise click.BadParameter(f"give at least one policy; choose from {', '.join(available())}", ctx, param)
    if len(set(names)) != len(names):
        raise click.BadParameter("a policy is listed twice", ctx, param)
    return names


def build_policies(names: list[str], seed: int) -> dict[str, Any]:
    """Each policy built once, before any work starts (an `rl:` agent loads a model), bad names refused as flags."""
    from policies import make_policy

    built = {}
    for name in names:
        try:
            built[name] = make_policy(name, seed=seed)
        except SpecError as exc:
            raise click.BadParameter(str(exc), param_hint="'--policy'") from None
    return built


def guarded_policies(policies: list[str], guard: str, seed: int) -> dict[str, Any]:
    """Each policy under the guard, with the fallbacks `guard` names ("auto": the default candidates)."""
    from policies.guarded import DEFAULT_CANDIDATES, Guarded
    from policies.registry import UnknownPolicyError

    candidates = DEFAULT_CANDIDATES if guard.strip() == "auto" else tuple(
        c.strip() for c in guard.split(",") if c.strip())
    if not candidates:
        raise click.BadParameter("name fallback policies, or auto", param_hint="'--guard'")
    try:
        return {name: Guarded(name, seed=seed, candidates=candidates) for name in policies}
    except (UnknownPolicyError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="'--guard'") from None
