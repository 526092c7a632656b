"""The agent's end of the trial file channel: atomic parameter files and the metric tail reader."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from nnix.agent.channel import CHANNEL_ENV, MetricReader, metrics_path, parameter_path, write_parameter


def _line(seq: int, value: float) -> bytes:
    return (json.dumps({"type": "PERIODICAL", "sequence": seq, "value": value, "ts": 1.0}) + "\n").encode()


def test_constants() -> None:
    assert CHANNEL_ENV == "NNIX_TRIAL_CHANNEL"
    assert parameter_path(Path("/c")) == Path("/c/parameter.json")
    assert metrics_path(Path("/c")) == Path("/c/metrics.jsonl")


def test_write_parameter_is_atomic_and_replaces(tmp_path: Path) -> None:
    channel = tmp_path / "ch"
    record = {"parameter_id": 0, "parameter_source": "algorithm", "parameters": {"a": 1}, "parameter_index": 0}
    write_parameter(channel, record)
    assert json.loads((channel / "parameter.json").read_text()) == record
    write_parameter(channel, {**record, "parameters": {"a": 2}})
    assert json.loads((channel / "parameter.json").read_text())["parameters"] == {"a": 2}
    assert [p.name for p in channel.iterdir()] == ["parameter.json"]  # no temporary left behind


def test_missing_file_reads_nothing(tmp_path: Path) -> None:
    reader = MetricReader(tmp_path / "metrics.jsonl")
    assert reader.read_new() == []
    assert (reader.offset, reader.line_index) == (0, 0)


def test_partial_lines_wait_for_their_newline(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reader = MetricReader(path)
    first, second = _line(0, 0.5), _line(1, 0.75)
    path.write_bytes(first + second[:10])
    got = reader.read_new()
    assert got == [(0, json.loads(first))]
    assert reader.offset == len(first) and reader.line_index == 1
    assert reader.read_new() == []
    with path.open("ab") as f:
        f.write(second[10:-1])
    assert reader.read_new() == []
    with path.open("ab") as f:
        f.write(b"\n")
    assert reader.read_new() == [(1, json.loads(second))]
    assert reader.offset == len(first) + len(second) and reader.line_index == 2


def test_resume_by_offset(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [_line(i, i / 10) for i in range(5)]
    path.write_bytes(b"".join(lines[:3]))
    reader = MetricReader(path)
    assert [i for i, _ in reader.read_new()] == [0, 1, 2]
    saved = (reader.offset, reader.line_index)
    with path.open("ab") as f:  # the trial goes on while no manager reads
        f.write(b"".join(lines[3:]))
    resumed = MetricReader(path, offset=saved[0], line_index=saved[1])
    got = resumed.read_new()
    assert [(i, r["sequence"]) for i, r in got] == [(3, 3), (4, 4)]
    assert resumed.offset == path.stat().st_size


def test_corrupt_and_blank_lines_are_skipped_but_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(_line(0, 0.1) + b"{not json\n" + b"\n" + b"[1, 2]\n" + _line(1, 0.2))
    with caplog.at_level(logging.WARNING, logger="nnix.agent.channel"):
        got = MetricReader(path).read_new()
    assert [(i, r["sequence"]) for i, r in got] == [(0, 0), (4, 1)]
    assert "line 1 is not valid JSON" in caplog.text
    assert "line 3 is not a JSON object" in caplog.text


def test_nan_literals_are_read(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"type": "FINAL", "sequence": 0, "value": NaN, "ts": 1.0}\n')
    [(_, record)] = MetricReader(path).read_new()
    assert record["value"] != record["value"]


def test_truncated_file_is_reported_not_misread(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(_line(0, 0.1))
    reader = MetricReader(path, offset=1000, line_index=9)
    with caplog.at_level(logging.WARNING, logger="nnix.agent.channel"):
        assert reader.read_new() == []
    assert "shorter" in caplog.text
    assert (reader.offset, reader.line_index) == (1000, 9)


def test_negative_position_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        MetricReader(tmp_path / "m", offset=-1)


def test_read_new_in_slices(tmp_path: Path) -> None:
    """A bounded read takes whole lines within the bound and says there is more; a line longer than the
    bound is still read whole."""
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"type": "PERIODICAL", "sequence": i, "value": i}) for i in range(100)]
    path.write_text("\n".join(lines) + "\n" + json.dumps({"v": "x" * 5000}) + "\n")
    reader = MetricReader(path)
    got: list[int] = []
    calls = 0
    while True:
        batch = reader.read_new(max_bytes=300)
        calls += 1
        got += [i for i, _ in batch]
        if not reader.more:
            break
    assert got == list(range(101)) and calls > 5
    assert reader.read_new(max_bytes=300) == [] and not reader.more
