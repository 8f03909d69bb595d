"""The app's start estimates: one `scheduler.live.estimates.LiveEstimator` per app, made on first use with the active
policy's registry and the controller's rules as `corral serve` configured them (its reservation rule, its MPS rule,
the teams' fair-share half-life), so that every request shares one replay of the store's present."""

from __future__ import annotations

import threading

from flask import current_app

from scheduler.core.tenancy import DEFAULT_HALF_LIFE_S
from scheduler.live.estimates import DEFAULT_POLICY, REFRESH_S, LiveEstimates, LiveEstimator
from web.api.context import store

ESTIMATOR_KEY = "corral.estimator"
_lock = threading.Lock()


def estimator() -> LiveEstimator:
    """The app's estimator, made on first use (tests set its settings in the app's config first)."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    with _lock:
        if ESTIMATOR_KEY not in app.extensions:
            from policies import make_policy

            app.extensions[ESTIMATOR_KEY] = LiveEstimator(
                store(), make_policy, default_policy=app.config.get("CORRAL_DEFAULT_POLICY", DEFAULT_POLICY),
                reservations=app.config.get("CORRAL_RESERVATIONS"),
                mps_one_user=app.config["CORRAL_JOB_ACCOUNTS"].per_user,
                half_life_s=float(app.config.get("FAIR_SHARE_HALF_LIFE_S", DEFAULT_HALF_LIFE_S)),
                refresh_s=float(app.config.get("CORRAL_ESTIMATE_REFRESH_S", REFRESH_S)))
        found: LiveEstimator = app.extensions[ESTIMATOR_KEY]
        return found


def live_estimates() -> LiveEstimates:
    """The store's start estimates now (a cached replay, see `LiveEstimator`)."""
    return estimator().current()
