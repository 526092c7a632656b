"""Ctrl-C held back over a step that must not be cut in two (:func:`nnix.host.interrupts.sigint_held`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from nnix.host.interrupts import sigint_held


@pytest.fixture(autouse=True)
def python_ctrl_c() -> Iterator[None]:
    """Python's own Ctrl-C handler, whatever this process inherited (a suite run with ``&`` has SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_inside_is_raised_when_the_step_ends() -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt), sigint_held():
        signal.raise_signal(signal.SIGINT)
        steps.append("after the signal")  # not cut here
    assert steps == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_ctrl_c_nothing_is_raised_and_nested_steps_hold_with_the_outer_one() -> None:
    with sigint_held():
        pass
    steps = []
    with pytest.raises(KeyboardInterrupt), sigint_held():
        with sigint_held():
            signal.raise_signal(signal.SIGINT)
        steps.append("the inner step ended")
    assert steps == ["the inner step ended"]


def test_the_steps_own_error_goes_on() -> None:
    with pytest.raises(ValueError), sigint_held():
        signal.raise_signal(signal.SIGINT)
        raise ValueError("the step failed")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_programs_own_handler_is_left_alone() -> None:
    got: list[int] = []

    def mine(signum: int, frame: object) -> None:
        got.append(signum)

    signal.signal(signal.SIGINT, mine)
    with sigint_held():
        assert signal.getsignal(signal.SIGINT) is mine
        signal.raise_signal(signal.SIGINT)
    assert got == [signal.SIGINT] and signal.getsignal(signal.SIGINT) is mine


def test_off_the_main_thread_it_holds_nothing_and_fails_nothing() -> None:
    errors: list[BaseException] = []

    def step() -> None:
        try:
            with sigint_held():
                pass
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=step)
    t.start()
    t.join(60)
    assert not t.is_alive() and errors == []
