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
    assert "line 1 skipped: not valid JSON" in caplog.text
    assert "line 3 skipped: not a JSON object" in caplog.text


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


# --- hostile content: one schema, bounded reads, final lines ---------------------------------------------


def test_metric_problem_is_the_one_schema() -> None:
    from nnix.agent.channel import metric_problem

    ok = {"type": "PERIODICAL", "sequence": 3, "value": {"default": 1.5, "extra": [1, "a", None]}, "ts": 1.0}
    assert metric_problem(ok) is None
    assert metric_problem({"type": "FINAL", "value": 2}) is None  # sequence defaults to 0, ts is optional
    nan = {"type": "FINAL", "sequence": 0, "value": float("nan")}
    assert metric_problem(nan, allow_nan=True) is None
    assert "nanPolicy" in (metric_problem(nan, allow_nan=False) or "")
    bad = {
        "sequence": {"type": "FINAL", "sequence": float("inf"), "value": 1},
        "'type'": {"type": "final", "value": 1},
        "finite": {"type": "FINAL", "value": {"default": 1, "x": [float("-inf")]}},
        "'default'": {"type": "FINAL", "value": {"default": True}},
        "too large": {"type": "FINAL", "value": 10**400},
        "deeper": {"type": "FINAL", "value": {"default": 1, "x": json.loads("[" * 40 + "]" * 40)}},
        "'ts'": {"type": "FINAL", "value": 1, "ts": "now"},
        "no 'value'": {"type": "FINAL"},
        "JSON object": [1, 2],
    }
    for word, record in bad.items():
        problem = metric_problem(record, allow_nan=False)
        assert problem is not None and word in problem, (word, problem)


def test_a_huge_line_is_not_read_again_on_every_call(tmp_path: Path) -> None:
    from nnix.agent.channel import MAX_LINE_BYTES, READ_CHUNK

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(_line(0, 0.1) + b'{"type": "FINAL", "value": "' + b"x" * (5 * 1024 * 1024))
    reader = MetricReader(path)
    offsets: list[int] = []
    got = []
    while not reader.at_eof or not offsets:
        got += reader.read_new()
        offsets.append(reader.offset)
    assert [i for i, _ in got] == [0]
    assert all(b - a <= READ_CHUNK for a, b in zip([0, *offsets], offsets, strict=False))  # bounded per call
    assert reader.offset == path.stat().st_size  # consumed, never re-read
    sample, count, last = reader.take_rejected()
    assert count == 1 and last == 1 and f"longer than {MAX_LINE_BYTES:,} bytes" in sample[0][1]
    with path.open("ab") as f:  # the rest of that line, then a good one
        f.write(b"y" * 1000 + b'"}\n' + _line(1, 0.2))
    assert [(i, r["sequence"]) for i, r in reader.read_new()] == [(2, 1)]
    assert reader.take_rejected()[1] == 0


def test_many_lines_are_read_in_bounded_chunks(tmp_path: Path) -> None:
    from nnix.agent.channel import READ_CHUNK

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"".join(_line(i, 0.5) for i in range(60_000)))  # ~4 MB
    reader = MetricReader(path)
    first = reader.read_new()
    assert 0 < reader.offset <= READ_CHUNK and not reader.at_eof
    rest = []
    while not reader.at_eof:
        rest += reader.read_new()
    assert [i for i, _ in first + rest] == list(range(60_000))


def test_a_last_line_without_newline_is_read_once_the_trial_is_over(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(_line(0, 0.1) + _line(1, 0.2)[:-1])
    reader = MetricReader(path)
    assert [i for i, _ in reader.read_new()] == [0]
    assert reader.read_new() == []  # still being written, as far as a live trial goes
    assert [(i, r["value"]) for i, r in reader.read_new(final=True)] == [(1, 0.2)]
    assert reader.read_new(final=True) == [] and reader.offset == path.stat().st_size
    path.write_bytes(_line(0, 0.1) + b'{"type": "FINAL", "val')  # cut mid-write: rejected, not raised
    cut = MetricReader(path)
    assert [i for i, _ in cut.read_new(final=True)] == [0]
    assert cut.take_rejected()[1] == 1


def test_read_new_in_slices(tmp_path: Path) -> None:
    """A small bounded read takes whole lines within the bound and says it is not at the end; a line longer
    than the bound is still read whole."""
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"type": "PERIODICAL", "sequence": i, "value": i}) for i in range(100)]
    long = json.dumps({"type": "PERIODICAL", "sequence": 100, "value": {"default": 1, "pad": "x" * 5000}})
    path.write_text("\n".join(lines) + "\n" + long + "\n")
    reader = MetricReader(path)
    got: list[int] = []
    calls = 0
    while True:
        batch = reader.read_new(limit=300)
        calls += 1
        got += [i for i, _ in batch]
        if reader.at_eof:
            break
    assert got == list(range(101)) and calls > 5
    assert reader.read_new(limit=300) == [] and reader.at_eof


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "link to a fifo", "directory"])
def test_a_channel_file_that_is_not_a_regular_file_is_never_read(tmp_path: Path, kind: str) -> None:
    """A trial that replaces its channel with a FIFO (open() would wait for a writer forever), a link (to an endless
    /dev/zero, or a FIFO in disguise) or a directory: nothing is read, at once, and said once."""
    import os
    import threading

    path = tmp_path / "metrics.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        if kind == "link to a fifo":
            os.mkfifo(tmp_path / "pipe")
        path.symlink_to("/dev/zero" if "zero" in kind else tmp_path / "pipe")
    reader = MetricReader(path)
    got: list[object] = []
    th = threading.Thread(target=lambda: got.append(reader.read_new(final=True)), daemon=True)
    th.start()
    th.join(10)
    assert not th.is_alive(), "the reader blocked on the trial's channel file"
    assert got == [[]] and reader.at_eof and reader.offset == 0
    notice = reader.take_notice()
    assert "metrics.jsonl is " in notice and "not a regular file" in notice and "not read" in notice
    assert not reader.has_news()  # the same refused file: not opened again by the poller
    assert reader.read_new() == [] and reader.take_notice() == ""  # said once
    # the trial puts a real channel back: it is read from where the reader was
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink()
    path.write_bytes(_line(0, 0.5))
    assert reader.has_news()
    assert [m["value"] for _, m in reader.read_new()] == [0.5]
