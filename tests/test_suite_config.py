"""The suite's own guard rails: a hung test fails alone, with a traceback, instead of stalling CI."""

from __future__ import annotations

import pytest


def test_every_test_runs_under_a_timeout(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed (the dev extra has it)"
    assert 0 < float(pytestconfig.getini("timeout")) <= 900
    assert pytestconfig.getini("timeout_method") == "signal"  # fails one test; "thread" would end the session
