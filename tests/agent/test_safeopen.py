"""The one way a trial-written file is opened: never blocking (a FIFO), never through a link, regular files only."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nnix.agent.safeopen import NotRegularFile, open_regular, read_at_most, read_tail


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()`` in a daemon thread; fails (instead of hanging the test run) when it does not return in time."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # handed to the test
            box["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(seconds)
    assert not th.is_alive(), f"still blocked after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_a_regular_file_is_opened_and_read(tmp_path: Path) -> None:
    f = tmp_path / "metrics.jsonl"
    f.write_bytes(b"0123456789")
    fd = open_regular(f)
    try:
        assert os.read(fd, 4) == b"0123" and os.get_blocking(fd)
    finally:
        os.close(fd)
    assert read_at_most(f, 4, offset=2) == b"2345"
    assert read_tail(f, 3) == (b"789", 7) and read_tail(f, 100) == (b"0123456789", 0)


def test_a_fifo_is_refused_at_once_even_without_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile) as e:
        _within(10, lambda: open_regular(fifo))  # a plain open() would wait for a writer forever
    assert e.value.kind == "a FIFO" and "metrics.jsonl is a FIFO, not a regular file" in str(e.value)
    with pytest.raises(NotRegularFile):
        _within(10, lambda: read_tail(fifo, 100))


@pytest.mark.parametrize("target", ["/dev/zero", "fifo", "file"])
def test_a_symbolic_link_is_never_followed(tmp_path: Path, target: str) -> None:
    """To /dev/zero (an endless read), to a FIFO (a hang in disguise), even to a regular file (what it points at can
    change between a check and the read)."""
    if target == "fifo":
        os.mkfifo(tmp_path / "fifo")
    elif target == "file":
        (tmp_path / "file").write_text("x")
    link = tmp_path / "trial.stderr"
    link.symlink_to(target if target.startswith("/") else tmp_path / target)
    with pytest.raises(NotRegularFile) as e:
        _within(10, lambda: open_regular(link))
    assert e.value.kind == "a symbolic link"


def test_directories_sockets_and_hard_links(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    with pytest.raises(NotRegularFile) as e:
        open_regular(tmp_path / "adir")
    assert e.value.kind == "a directory"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(tmp_path / "s"))
        with pytest.raises(NotRegularFile) as e:
            open_regular(tmp_path / "s")
        assert e.value.kind == "a socket"
    finally:
        sock.close()
    (tmp_path / "a").write_text("x")
    os.link(tmp_path / "a", tmp_path / "b")
    os.close(open_regular(tmp_path / "b"))  # a hard link is a regular file...
    with pytest.raises(NotRegularFile) as e:
        open_regular(tmp_path / "b", single_link=True)  # ...refused where a file is served
    assert "2 hard links" in e.value.kind


def test_relative_to_a_directory_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "trial.log").write_text("hello")
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = open_regular("trial.log", dir_fd=dfd)
        os.close(fd)
        os.mkfifo(tmp_path / "fifo")
        with pytest.raises(NotRegularFile):
            _within(10, lambda: open_regular("fifo", dir_fd=dfd))
    finally:
        os.close(dfd)
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "nothing")
    assert issubclass(NotRegularFile, OSError)  # callers that treat OSError as "nothing to read" stay safe
