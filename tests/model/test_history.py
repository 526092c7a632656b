"""History: what the manager hands a tuner (and an assessor), read-only, a view of its own list or a copy, with the
log of the records replaced in its lineage."""

from __future__ import annotations

import pytest

from nnix.model.history import History, ReplacedLog
from nnix.model.status import TrialStatus
from nnix.model.trials import TrialRecord
from nnix.tuners.dedup import extends_records


def _records(n: int) -> list[TrialRecord]:
    return [TrialRecord(i, {"x": i}, TrialStatus.SUCCEEDED, float(i)) for i in range(n)]


def test_a_view_holds_the_records_it_was_made_with_without_copying_them() -> None:
    records = _records(5)
    lineage = object()
    view = History.view(records, lineage)
    records.append(TrialRecord(5, {"x": 5}, TrialStatus.WAITING))  # the owner appends: the view does not grow
    assert len(view) == 5 and view[-1] is records[4] and view[0] is records[0] and list(view) == records[:5]
    assert view == tuple(records[:5]) and tuple(records[:5]) == view and view != records[:5]
    assert view[1:3] == tuple(records[1:3]) and view[::-1] == tuple(records[4::-1]) and view[:99] == tuple(records[:5])
    assert view == History(records[:5]) and view.lineage is lineage and History(records).lineage is not lineage
    with pytest.raises(IndexError):
        view[5]
    with pytest.raises(IndexError):
        view[-6]
    with pytest.raises(TypeError):
        hash(view)
    assert extends_records(tuple(records[:3]), view) and not extends_records(tuple(records[1:4]), view)


def test_a_copied_history_is_its_own() -> None:
    records = _records(3)
    h = History(records)
    records[0] = TrialRecord(9, {"x": 9}, TrialStatus.FAILED)
    assert h[0].parameter_id == 0 and len(h) == 3 and History() == () and repr(History(records[:1])).startswith("H")


def test_a_view_with_its_owners_log_says_which_records_were_replaced_since_an_earlier_view() -> None:
    records = _records(6)
    lineage = object()
    log: list[int] = []
    first = History.view(records, lineage, log)
    assert first.mark == 0 and first.replaced_since(0) == []
    records[2] = TrialRecord(2, {"x": 2}, TrialStatus.SUCCEEDED, 0.5)
    log.append(2)
    records.append(TrialRecord(6, {"x": 6}, TrialStatus.WAITING))
    records[4] = TrialRecord(4, {"x": 4}, TrialStatus.FAILED)
    log.append(4)
    second = History.view(records, lineage, log)
    log.append(0)  # after the second view: not its business
    assert second.mark == 2 and list(second.replaced_since(first.mark or 0) or ()) == [2, 4]
    assert list(second.replaced_since(1) or ()) == [4] and second.replaced_since(3) is None  # (a later mark)
    assert History.view(records, lineage).mark is None and History(records).replaced_since(0) is None  # no log


def test_a_log_that_dropped_its_oldest_entries_says_so_to_a_view_behind_them() -> None:
    records = _records(3)
    lineage, log = object(), ReplacedLog()
    early = History.view(records, lineage, log)
    for i in (0, 1, 2, 1):
        log.append(i)
    middle = History.view(records, lineage, log)
    log.append(2)
    log.trim(2)  # keeps the entries 3 and 4 (1, 2)
    late = History.view(records, lineage, log)
    assert len(log) == 5 and log.kept() == 2 and middle.mark == 4 and late.mark == 5
    assert late.replaced_since(early.mark or 0) is None  # dropped: read it all
    assert list(late.replaced_since(3) or ()) == [1, 2] and list(late.replaced_since(middle.mark) or ()) == [2]
