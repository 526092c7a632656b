"""The Slurm lab for ``bench/cluster_overhead.py``: a real single-node Slurm (munged, slurmctld, slurmd on
127.0.0.1, with a private config and free ports) started as in the tests (:class:`nnix.testing.slurm.SlurmLab`).

``engine()`` yields the ``trainingService`` of an experiment on it (the benchmark adds ``reuseMode``). While it
is open, this process's environment carries the lab's ``SLURM_CONF`` (the Slurm commands the manager runs find
the lab through it; sbatch passes it on to the jobs); it is restored afterwards. Needs root and Slurm installed
(``.ci/engines/slurm.sh``).

Alone: ``python bench/cluster/slurm.py [--trials 20] [--concurrency 2]`` runs the overhead benchmark for Slurm
only (the same as ``bench/cluster_overhead.py --engines slurm``).
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
def engine(cpus: int = 2) -> Iterator[dict[str, Any]]:
    """A Slurm node with ``cpus`` CPUs (one job holds one CPU: that many trials at once)."""
    from nnix.testing.slurm import SlurmLab, unavailable

    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    lab = SlurmLab(cpus=cpus, accounting=False).up()
    saved = {k: os.environ.get(k) for k in lab.env}
    os.environ.update(lab.env)
    try:
        yield {"platform": "slurm", "partition": lab.partition, "cpusPerTrial": 1, "memory": "256M"}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        lab.down()


if __name__ == "__main__":
    sys.argv = [sys.argv[0], "--engines", "slurm", *sys.argv[1:]]
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "cluster_overhead.py"), run_name="__main__")
