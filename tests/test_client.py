"""nnix.client: what `nnix stop` reads without importing the Ray head's module is that module's record."""

from __future__ import annotations

from nnix import client
from nnix.services import rayhead


def test_the_ray_head_record_checked_before_importing_rayhead_is_rayheads() -> None:
    assert client.RAY_HEAD_RECORD == rayhead.RECORD
