"""What one trial's metrics may cost the manager: the per-trial cap on the results kept.

A trial can write millions of metric lines (a loop reporting at every step). Each kept line is an event in the
store and a record in memory, so one trial must not grow without bound. The first :data:`METRIC_CAP` results of a
type (intermediate, final) are all kept; beyond the cap they are *thinned out*: one line in every 2 is kept for the
next ``cap`` lines, then one in 4, one in 8, ... (each stretch of ``cap`` lines keeps half as many as the one
before), until one in more than ``cap`` lines: a trial keeps at most ``2 * cap`` results plus one per ``cap`` lines
beyond those, whatever it writes (10^6 lines at the default cap: ~200,000 kept), the first ``cap`` whole. Reaching
the cap is said on the trial (a warning, see the manager).

The rule is a pure function of what is recorded (how many results of the type are kept, the channel line of the
last one kept) and the line's own index, so a resumed manager that reads a channel again after the last recorded
line makes the same choices.

(``scalar_value`` moved to :mod:`nnix.model.metrics`; it is re-exported here for old imports.)
"""

from __future__ import annotations

from nnix.model.metrics import scalar_value as scalar_value

METRIC_CAP = 100_000  # results of one type (intermediate / final) a trial keeps whole (far above real use)


def keep_stride(kept: int, cap: int) -> int:
    """How many channel lines apart two kept results are once ``kept`` results of a type are recorded: 1 below
    ``cap``; then 2 while fewer than ``cap + cap/2`` are kept, 4 below ``cap + 3cap/4``, ... (a power of two: the
    stride doubles each time half of what is left of a second ``cap`` has been kept)."""
    if cap <= 0:
        raise ValueError(f"the metric cap must be positive, not {cap}")
    if kept < cap:
        return 1
    room = max(1, 2 * cap - kept)  # what is left of the second cap
    return 1 << (cap // room).bit_length()


def keep_line(index: int, last_kept: int, kept: int, cap: int) -> bool:
    """Whether the result on channel line ``index`` is kept, the last result of its type kept being on line
    ``last_kept`` (-1: none) and ``kept`` of them recorded (see :func:`keep_stride`)."""
    return kept < cap or index - last_kept >= keep_stride(kept, cap)


def cap_message(kind: str, cap: int) -> str:
    """The warning a trial gets when it reaches the cap (``kind``: "intermediate" or "final")."""
    return (f"{cap:,} {kind} results recorded (the cap of one trial): later ones are thinned out, one in 2 kept, "
            f"then one in 4, 8, ... (about {2 * cap:,} at most)")
