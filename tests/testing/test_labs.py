from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from nnix.testing.labs import claim_bridge_slot, free_port

PREFIX = "nnixlt"  # bridges of this test only (the labs use nnixbr/nnixrb)
LOCK = Path("/tmp/nnix-labstest.lock")


def test_free_port_can_be_bound_at_once() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free: nothing holds it


def _bridges() -> str:
    return subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True,
                          check=True, timeout=60).stdout


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="bridges need root and `ip`")
def test_two_claims_take_two_slots_each_marked_by_its_bridge() -> None:
    seen: list[str] = []
    claimed: list[int] = []
    try:
        claimed.append(claim_bridge_slot(LOCK, PREFIX, "test", before=lambda: seen.append(_bridges())))
        claimed.append(claim_bridge_slot(LOCK, PREFIX, "test"))
        assert claimed[0] != claimed[1]
        assert all(f"{PREFIX}{k}:" in _bridges() for k in claimed)
        assert len(seen) == 1 and f"{PREFIX}{claimed[0]}:" not in seen[0]  # `before` ran first, under the lock
    finally:
        for k in claimed:
            subprocess.run(["ip", "link", "del", f"{PREFIX}{k}"], capture_output=True, check=False, timeout=60)
    assert not any(f"{PREFIX}{k}:" in _bridges() for k in claimed)
