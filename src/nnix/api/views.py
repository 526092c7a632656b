"""The experiment overview REST and the web UI show (cached per recorded event; the clock fields fresh). The trial
summaries, the trial-list query and the series it reads are the read side's (:mod:`nnix.query`)."""

from __future__ import annotations

from typing import Any

from nnix.api.common import ms
from nnix.core.manager import ExperimentManager
from nnix.model.status import TrialStatus
from nnix.query import Query, TrialViews
from nnix.version import __version__


def _overview_base(manager: ExperimentManager, views: TrialViews, read_only: bool) -> dict[str, Any]:
    """Everything in the overview but the clock; the totals are the state's (no trial summary is read)."""
    st = manager.state
    config = dict(views.config_json(st.config))
    config["searchSpace"] = st.limits["search_space"]
    counts = {s.value: 0 for s in TrialStatus if s is not TrialStatus.UNKNOWN}
    tot = views.totals()  # kept by the fold: no trial is read for them
    for name, n in tot["counts"].items():
        if n:
            counts[name] = n
    b = tot["best"]
    best = None if b is None else {"id": b[0], "seq": b[1], "metric": b[2]}
    metric_keys, param_keys = tot["metricKeys"], tot["paramKeys"]
    limits = st.limits
    return {
        "id": st.experiment_id,
        "name": st.config.get("experiment_name") or "",
        "status": "VIEWED" if read_only else st.status.value,
        "recordedStatus": st.status.value,
        "readOnly": read_only,
        "message": st.message,
        "errors": list(st.errors),
        "startTime": ms(st.created_at),
        "endTime": ms(st.end_time),
        "limits": {
            "trialConcurrency": limits["trial_concurrency"],
            "maxTrialNumber": limits["max_trial_number"],
            "maxExperimentDuration": limits["max_experiment_duration"],
            "maxTrialDuration": st.config.get("max_trial_duration"),
        },
        "counts": counts,
        "total": len(Query(st)),
        "best": best,
        "direction": st.direction,
        "config": config,
        "searchSpace": limits["search_space"],
        "metricKeys": list(metric_keys),
        "paramKeys": list(param_keys),
        "waitingReason": manager.waiting_reason,
        "resuming": manager.resuming,
        "platform": (st.config.get("training_service") or {}).get("platform", ""),
        "trialCommand": st.config.get("trial_command", ""),
        "logDir": str(manager.exp_dir),
        "seq": st.last_seq,
        "version": __version__,
    }


def overview(manager: ExperimentManager, views: TrialViews, read_only: bool) -> dict[str, Any]:
    """The experiment at a glance (cached per recorded event; the clock fields are fresh)."""
    st = manager.state
    key = (st.last_seq, manager.waiting_reason)
    if views.overview_key != key or views.overview_base is None:
        views.overview_base = _overview_base(manager, views, read_only)
        views.overview_key = key
    now = manager.clock()
    elapsed = st.elapsed(now if st.counting and not read_only else None)
    return {**views.overview_base, "now": ms(now), "elapsed": round(elapsed, 3)}
