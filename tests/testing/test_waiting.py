from __future__ import annotations

import asyncio
import itertools

import pytest

from nnix.testing import wait_until, wait_until_async


def test_returns_the_first_truthy_value() -> None:
    calls = itertools.count()
    assert wait_until(lambda: next(calls) >= 3 and "ready", 10, "three calls", interval=0.001) == "ready"


def test_a_condition_never_met_fails_naming_what_was_awaited() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.05 s waiting for the gate file \(last seen: 7\)"):
        wait_until(lambda: False, 0.05, "the gate file", interval=0.01, show=lambda: 7)


def test_a_failing_description_does_not_hide_the_timeout() -> None:
    with pytest.raises(AssertionError, match=r"waiting for x.*could not describe the state: ZeroDivisionError"):
        wait_until(lambda: 0, 0.01, "x", interval=0.005, show=lambda: 1 / 0)


def test_the_condition_is_checked_at_least_once_even_with_no_time() -> None:
    assert wait_until(lambda: 1, 0) == 1


def test_async_variant_lets_the_loop_run() -> None:
    async def main() -> list[int]:
        seen: list[int] = []
        task = asyncio.get_running_loop().call_later(0.05, seen.append, 1)
        await wait_until_async(lambda: seen, 10, "the callback", interval=0.005)
        task.cancel()
        with pytest.raises(AssertionError, match="waiting for never"):
            await wait_until_async(lambda: False, 0.02, "never", interval=0.005)
        return seen

    assert asyncio.run(main()) == [1]


def test_a_named_condition_names_itself() -> None:
    def gate_file_exists() -> bool:
        return False

    with pytest.raises(AssertionError, match=r"waiting for gate_file_exists$"):
        wait_until(gate_file_exists, 0.01, interval=0.005)
