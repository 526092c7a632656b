"""Trial output streaming: the runner's Output chunks and the manager's copy (OutputMirror)."""

from __future__ import annotations

import asyncio
import base64
import sys
from pathlib import Path

import pytest

from nnix.agent import runner as runner_mod
from nnix.agent.runner import TrialRunner
from nnix.home import trial_files_dir
from nnix.model.runs import Exited, Output, RunnerEvent, TrialSpec
from nnix.services.mirror import OutputMirror, mirror_dir
from nnix.testing import wait_until_async


def _chunk(tid: str, stream: str, offset: int, data: bytes) -> Output:
    return Output(tid, stream, offset, base64.b64encode(data).decode())


def test_chunks_land_at_their_offsets_and_repeats_change_nothing(tmp_path: Path) -> None:
    m = OutputMirror(tmp_path)
    m.write(_chunk("t1", "stdout", 0, b"hello "))
    m.write(_chunk("t1", "stdout", 6, b"world\n"))
    m.write(_chunk("t1", "stdout", 0, b"hello "))  # sent again after a reconnect
    m.write(_chunk("t1", "stderr", 0, b"warn\n"))
    assert (mirror_dir(tmp_path, "t1") / "trial.stdout").read_bytes() == b"hello world\n"
    assert (mirror_dir(tmp_path, "t1") / "trial.stderr").read_bytes() == b"warn\n"


def test_a_skipped_middle_is_noted_and_the_tail_kept(tmp_path: Path) -> None:
    m = OutputMirror(tmp_path)
    m.write(_chunk("t1", "stdout", 0, b"head\n"))
    m.write(_chunk("t1", "stdout", 1000, b"tail\n"))
    m.write(_chunk("t1", "stdout", 1000, b"tail\n"))
    text = (mirror_dir(tmp_path, "t1") / "trial.stdout").read_text()
    assert text.startswith("head\n") and text.endswith("tail\n") and text.count("tail") == 1
    assert "995 bytes of stdout skipped" in text


def test_malformed_chunks_are_ignored(tmp_path: Path) -> None:
    m = OutputMirror(tmp_path)
    m.write(_chunk("../evil", "stdout", 0, b"x"))
    m.write(_chunk("t1", "passwd", 0, b"x"))
    m.write(Output("t1", "stdout", 0, "not base64!"))
    assert not (tmp_path / "trials").exists() or not any((tmp_path / "trials").rglob("*.std*"))


def test_trial_files_dir_is_the_trial_directory_here_or_the_copy(tmp_path: Path) -> None:
    assert trial_files_dir(tmp_path, "t1", None) is None
    assert trial_files_dir(tmp_path, "t1", "/data/t1") == Path("/data/t1")
    assert trial_files_dir(tmp_path, "t1", "10.0.0.1:/home/u/t1") == mirror_dir(tmp_path, "t1")


def _run(tmp_path: Path, script: str) -> list[RunnerEvent]:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "trial.py").write_text(script)
    events: list[RunnerEvent] = []

    async def main() -> None:
        r = TrialRunner(events.append, poll_interval=0.02, stream_output=True)
        await r.start(TrialSpec("t1", f"{sys.executable} trial.py", code, tmp_path / "out", {}))
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in events), 60, "the trial's exit")

    asyncio.run(main())
    return events


def _rebuild(events: list[RunnerEvent], tmp_path: Path) -> tuple[bytes, bytes]:
    m = OutputMirror(tmp_path / "exp")
    for e in events:
        if isinstance(e, Output):
            m.write(e)
    d = mirror_dir(tmp_path / "exp", "t1")
    err = d / "trial.stderr"
    return (d / "trial.stdout").read_bytes(), err.read_bytes() if err.exists() else b""


def test_the_runner_streams_stdout_and_stderr_while_the_trial_runs(tmp_path: Path) -> None:
    script = ("import sys, time\nfor i in range(20):\n    print('line', i, flush=True)\n    time.sleep(0.02)\n"
              "sys.stderr.write('oops\\n')\nsys.stdout.write('x' * 200000)\n")
    events = _run(tmp_path, script)
    outputs = [e for e in events if isinstance(e, Output)]
    exit_at = next(i for i, e in enumerate(events) if isinstance(e, Exited))
    assert outputs and all(events.index(o) < exit_at for o in outputs)  # every chunk before the exit
    assert len([o for o in outputs if o.stream == "stdout"]) > 2  # streamed in pieces, not at the end only
    out, err = _rebuild(events, tmp_path)
    assert out == (tmp_path / "out" / "trial.stdout").read_bytes()
    assert err == b"oops\n"
    assert max(len(base64.b64decode(o.data)) for o in outputs) <= runner_mod.OUTPUT_CHUNK


def test_output_past_the_cap_keeps_head_and_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_mod, "OUTPUT_CAP", 1000)
    monkeypatch.setattr(runner_mod, "OUTPUT_CHUNK", 300)
    events = _run(tmp_path, "import sys\nsys.stdout.write('a' * 5000 + 'THE END')\n")
    out, _ = _rebuild(events, tmp_path)
    text = out.decode()
    assert text.startswith("a" * 1000) and text.endswith("THE END")
    assert "skipped" in text and len(text) < 1500


def test_without_streaming_the_runner_sends_no_output(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    events: list[RunnerEvent] = []

    async def main() -> None:
        r = TrialRunner(events.append, poll_interval=0.02)
        await r.start(TrialSpec("t1", "echo hi", code, tmp_path / "out", {}))
        await wait_until_async(lambda: any(isinstance(e, Exited) for e in events), 60, "the trial's exit")

    asyncio.run(main())
    assert not any(isinstance(e, Output) for e in events)
