from __future__ import annotations

from pathlib import Path

import pytest

from nnix.agent.protocol import (
    Hello,
    Kill,
    ProtocolError,
    Run,
    Shutdown,
    decode,
    encode,
    versions_compatible,
)
from nnix.model.runs import Exited, Metrics, Started, TrialSpec


@pytest.mark.parametrize(
    "message",
    [
        Hello("env-1", "0.1.0", {"cpus": 4, "gpus": []}, ["t1"]),
        Started("t1", 123, "4567", "/w/t1", (0, 1), "env-1"),
        Metrics("t1", [(0, {"type": "PERIODICAL", "sequence": 0, "value": 1.5})]),
        Metrics("t1", [], notice="metrics.jsonl is a FIFO, not a regular file: its metrics are not read"),
        Exited("t1", 0, None, ""),
        Run(
            TrialSpec(
                "t1", "python t.py", Path("/c"), Path("/o"), {"parameter_id": 1, "parameters": {"x": 1}}, {"A": "b"}
            )
        ),
        Kill("t1"),
        Shutdown("bye"),
    ],
)
def test_round_trip(message: object) -> None:
    import json

    seq, back = decode(json.loads(json.dumps(encode(message, 7))))  # type: ignore[arg-type]
    assert seq == 7 and back == message


def test_bad_messages_are_refused_clearly() -> None:
    with pytest.raises(ProtocolError, match="protocol version"):
        decode({"v": 99, "seq": 1, "type": "kill", "body": {"trial_id": "x"}})
    with pytest.raises(ProtocolError, match="unknown message type"):
        decode({"v": 1, "seq": 1, "type": "nope", "body": {}})
    with pytest.raises(ProtocolError, match="bad kill"):
        decode({"v": 1, "seq": 1, "type": "kill", "body": {}})
    with pytest.raises(ProtocolError):
        decode([1, 2])


@pytest.mark.parametrize(
    ("a", "b", "ok"),
    [
        ("0.1.0", "0.1.5", True),
        ("1.2", "1.2.0", True),
        ("0.1.0", "0.10.0", False),
        ("2.10", "2.1", False),
        ("1.0", "2.0", False),
        ("x", "x", False),
    ],
)
def test_version_rule_compares_integers(a: str, b: str, ok: bool) -> None:
    assert versions_compatible(a, b) is ok


def test_metrics_rejections_travel_and_bad_numbers_are_refused() -> None:
    from nnix.agent.protocol import ProtocolError, decode, encode
    from nnix.model.runs import Exited, Metrics

    m = Metrics("t1", [(0, {"type": "FINAL", "value": 1})], [(1, "not valid JSON")], 3, 4)
    assert decode(encode(m, 1)) == (1, m)
    long = decode({"v": 1, "seq": 1, "type": "metrics", "body": {"trial_id": "t1", "items": [], "notice": "x" * 999}})
    assert isinstance(long[1], Metrics) and long[1].notice == "x" * 300  # (untrusted: bounded)
    assert m.last_line == 4
    assert decode(encode(Exited("t1", 0, leftovers=2), 2))[1] == Exited("t1", 0, leftovers=2)
    for body in (
        {"trial_id": "t1", "items": [[1e999, {}]]},
        {"trial_id": "t1", "items": [[True, {}]]},
        {"trial_id": "t1", "items": [], "rejected_count": -1},
        {"trial_id": "t1", "items": [], "rejected_last": 2**60},
        {"trial_id": "t1", "items": "ab"},
    ):
        with pytest.raises(ProtocolError):
            decode({"v": 1, "seq": 1, "type": "metrics", "body": body})
    with pytest.raises(ProtocolError):
        decode({"v": 1, "seq": 1, "type": "exited", "body": {"trial_id": "t1", "exit_code": 0, "leftovers": 1e999}})
