"""``import nni`` for Python scripts run by hand where nnix is installed and NNI is not.

Imported at interpreter start by ``nnix-nni.pth`` (installed next to it in site-packages): it appends a
finder to the *end* of ``sys.meta_path``, so it is asked about ``nni`` only after every other finder, all of
``sys.path`` included, found nothing. A real NNI installation therefore always wins, wherever it is installed;
without one, ``nni`` is nnix's shim (``nnix/trial/_shim/nni``), the same package trials get on their
``PYTHONPATH``. Nothing else is imported at start (the finder does its work on ``import nni`` only), and
``NNIX_NNI_FALLBACK=0`` turns it off.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType


class NnixNniFallback:
    """A meta path finder for the top-level name ``nni`` only."""

    @classmethod
    def find_spec(
        cls, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "nni" or path is not None:
            return None
        import os
        from importlib.machinery import PathFinder
        from importlib.util import find_spec

        nnix = find_spec("nnix")  # found, not imported (an editable install's own finder included)
        for base in (nnix.submodule_search_locations or []) if nnix is not None else []:
            spec = PathFinder.find_spec("nni", [os.path.join(base, "trial", "_shim")])
            if spec is not None:
                return spec
        return None


def install() -> None:
    if not any(getattr(f, "__name__", "") == NnixNniFallback.__name__ for f in sys.meta_path):
        sys.meta_path.append(NnixNniFallback)


install()
