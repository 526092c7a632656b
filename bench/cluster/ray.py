"""The Ray lab for ``bench/cluster_overhead.py``: a real single-node Ray head on 127.0.0.1, started as a
separate process as in the tests (:class:`nnix.testing.ray.RayLab`).

``engine()`` yields the ``trainingService`` of an experiment on it (the benchmark adds ``reuseMode``). While
it is open, this process's environment carries the head's token (``RAY_AUTH_MODE=token``,
``RAY_AUTH_TOKEN``), as any driver of that cluster needs; both are restored afterwards.

Alone: ``python bench/cluster/ray.py [--trials 20] [--concurrency 2]`` runs the overhead benchmark for Ray
only (the same as ``bench/cluster_overhead.py --engines ray``).
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def engine(num_cpus: int = 2) -> Iterator[dict[str, Any]]:
    """A Ray head with ``num_cpus`` CPUs (one environment holds one CPU: that many trials at once)."""
    from nnix.testing.ray import RayLab, unavailable

    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    lab = RayLab(num_cpus=num_cpus).up()
    saved = {k: os.environ.get(k) for k in (*lab.env, "RAY_USAGE_STATS_ENABLED")}
    os.environ.update(lab.env)
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    try:
        yield {"platform": "ray", "address": lab.address, "numCpus": 1}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        lab.down()


if __name__ == "__main__":
    here = Path(__file__).resolve().parent  # named ray.py: off the path, or `import ray` would find this file
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.argv = [sys.argv[0], "--engines", "ray", *sys.argv[1:]]
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "cluster_overhead.py"), run_name="__main__")
