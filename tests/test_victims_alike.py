"""The least-cost cover of `scheduler.core.victims` passes over offers alike to ones that changed nothing; it must find
the very set (the same victims, in the same order) that weighing every offer finds."""

from __future__ import annotations

import random

import pytest

from scheduler.core import victims
from scheduler.core.victims import EPS, Offer, _pareto, _unchain, _victims


def _cheapest_weighing_every_offer(offers, lacking, bound, fits, merges):  # type: ignore[no-untyped-def]
    """`victims._cheapest` as it was before it passed over offers alike (the reference); counts its frontier merges
    in `merges[0]`."""
    fronts: dict = {}
    best = None
    for offer in offers:
        freed = offer.freed
        if freed >= bound - EPS:
            continue
        for bucket, gain in offer.gains.items():
            need = lacking.get(bucket)
            if need is None or gain <= 0.0:
                continue
            front = fronts.get(bucket) or [(-0.0, 0.0, None)]
            grown = [(-min(need, gain - mg), c + freed, (offer, chain)) for mg, c, chain in front
                     if c + freed < bound - EPS]
            merges[0] += bool(grown)
            front = fronts[bucket] = _pareto(front + grown) if grown else front
            minus_top_gain, top_cost, top = front[0]
            if -minus_top_gain >= need - EPS and top_cost < bound - EPS:
                found = _unchain(top)
                if fits is None or fits(_victims(found)):
                    bound, best = top_cost, found
                else:
                    del front[0]
    return best


def _case(rng: random.Random) -> tuple[list[Offer[int, int]], dict[int, float], float]:
    """Many offers alike (a few sizes on a few buckets), some sharing GPUs (fractional gains)."""
    buckets = rng.randint(1, 3)
    sizes = [rng.choice([0.5, 1.0, 1.0, 2.0, 4.0, 8.0]) for _ in range(rng.randint(1, 4))]
    offers = []
    for v in range(rng.randint(5, 120)):
        size = rng.choice(sizes)
        gains = {b: size * rng.choice([1.0, 1.0, 0.5]) for b in rng.sample(range(buckets), rng.randint(1, buckets))}
        offers.append(Offer(v, dict(sorted(gains.items())), size))
    lacking = {b: float(rng.randint(1, 12)) for b in range(buckets)}
    return offers, lacking, float(rng.randint(4, 40))


@pytest.mark.parametrize("refusing", [False, True])
def test_passing_over_offers_alike_finds_the_set_weighing_each_finds(refusing: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(48)
    differing_sets = 0
    merges = [0]

    def counted(entries):  # type: ignore[no-untyped-def]
        merges[0] += 1
        return _pareto(entries)

    monkeypatch.setattr(victims, "_pareto", counted)
    merges_each = [0]
    for _ in range(400):
        offers, lacking, bound = _case(rng)
        # A `fits` that refuses some sets (by their victims), as the exact test of a placement does.
        refused = {v for v in range(len(offers)) if refusing and rng.random() < 0.2}
        fits = (lambda vs: not refused.intersection(vs)) if refusing else None  # noqa: B023
        got = victims._cheapest(iter(offers), lacking, bound, fits)
        want = _cheapest_weighing_every_offer(iter(offers), lacking, bound, fits, merges_each)
        assert (None if got is None else [o.victim for o in got]) == \
            (None if want is None else [o.victim for o in want])
        differing_sets += want is not None and len(want) > 1
    assert differing_sets > 50  # the cases make the search build sets, not only take single victims
    assert merges[0] < 0.8 * merges_each[0]  # and offers alike were passed over

