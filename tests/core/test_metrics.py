"""The per-trial cap on kept results: the first ``cap`` whole, then thinned out, bounded whatever a trial writes."""

from __future__ import annotations

import pytest

from nnix.core.metrics import METRIC_CAP, cap_message, keep_line, keep_stride


def _kept(lines: int, cap: int, start: tuple[list[int], int] | None = None, first: int = 0) -> list[int]:
    """The channel lines kept of ``lines`` results (one per line), deciding as the manager does; ``start``: what a
    manager recorded before (its kept lines), ``first``: the line to read on from (a resumed manager)."""
    kept = list(start[0]) if start else []
    for index in range(first, lines):
        if keep_line(index, kept[-1] if kept else -1, len(kept), cap):
            kept.append(index)
    return kept


def test_the_stride_is_one_below_the_cap_then_doubles() -> None:
    cap = 1000
    assert [keep_stride(k, cap) for k in (0, 1, cap - 1)] == [1, 1, 1]
    strides = [keep_stride(k, cap) for k in range(cap, 3 * cap)]
    assert strides[0] == 2 and strides == sorted(strides)
    assert all(s & (s - 1) == 0 for s in strides)  # powers of two
    assert keep_stride(cap + cap // 2, cap) == 4 and keep_stride(2 * cap, cap) > cap  # then one per > cap lines
    with pytest.raises(ValueError):
        keep_stride(0, 0)


def test_a_flood_keeps_the_first_cap_whole_and_about_twice_the_cap_at_most() -> None:
    cap, lines = 1000, 1_000_000
    kept = _kept(lines, cap)
    assert kept[:cap] == list(range(cap))
    assert 2 * cap - 20 <= len(kept) <= 2 * cap + lines // cap  # bounded: ~2x the cap for 1,000x the cap written
    assert kept[-1] > lines * 9 // 10  # spread to the end of the series
    assert len(_kept(cap, cap)) == cap and len(_kept(10 * cap, cap)) < 2 * cap  # a trial at the cap loses nothing


def test_a_resumed_manager_keeps_the_same_lines() -> None:
    """The rule reads only what is recorded: a manager that re-reads the channel after its last kept line (what a
    resume does) keeps exactly what one manager reading it all keeps."""
    cap, lines = 100, 20_000
    whole = _kept(lines, cap)
    for cut in (cap - 1, cap, cap + 7, 5_000, 12_345):
        before = [i for i in whole if i < cut]
        resumed = _kept(lines, cap, (before, 0), first=(before[-1] + 1))
        assert resumed == whole, cut


def test_the_default_and_the_message() -> None:
    assert METRIC_CAP == 100_000
    text = cap_message("intermediate", 100_000)
    assert text.startswith("100,000 intermediate results recorded (the cap") and "200,000" in text
