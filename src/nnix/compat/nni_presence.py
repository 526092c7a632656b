"""Is a real NNI installed where nnix runs? nnix never shadows one (its ``import nni`` fallback is asked last,
see ``src/_nnix_nni.py``), so where one is installed, ``import nni`` and ``from nni.experiment import
Experiment`` in that Python are NNI's own, and a later ``pip install nni`` also replaces the ``nnictl``
command. The CLI says so (``nnix --version``, ``nnix create``, ``nnictl``) instead of letting it pass silently.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class RealNni:
    location: str
    """The directory of the ``nni`` package that ``import nni`` imports here."""
    version: str | None


def real_nni() -> RealNni | None:
    """The NNI installation ``import nni`` would import in this Python, or None when that is nnix's shim
    (or no ``nni`` at all). Nothing is imported."""
    try:
        spec = importlib.util.find_spec("nni")
    except (ImportError, ValueError):  # a broken or half-imported nni
        return None
    if spec is None:
        return None
    locations = [Path(p) for p in (spec.submodule_search_locations or [])]
    if not locations and spec.origin:
        locations = [Path(spec.origin).parent]
    if not locations:
        return None
    shim = (Path(__file__).resolve().parents[1] / "trial" / "_shim").resolve()
    where = locations[0].resolve()
    if where == shim / "nni" or shim in where.parents:
        return None
    try:
        version: str | None = metadata.version("nni")
    except metadata.PackageNotFoundError:
        version = None
    return RealNni(str(where), version)


def real_nni_note(found: RealNni | None = None) -> str | None:
    """One paragraph for the user when a real NNI is installed here, else None."""
    found = found or real_nni()
    if found is None:
        return None
    name = f"NNI {found.version}" if found.version else "NNI"
    return (
        f"{name} is installed in this Python ({found.location}): here `import nni` and "
        "`from nni.experiment import Experiment` are NNI's own, not nnix's, and `nnictl` is whichever package "
        "was installed last. nnix's NNI launcher API: `from nnix.compat.nni_experiment import Experiment` "
        "(or `pip uninstall nni`); nnix's CLI: `nnix ...`. Trials that nnix runs still get nnix's `nni`."
    )
