"""``import nni`` for Python scripts run by hand where nnix is installed and NNI is not.

``nnix-nni.pth`` (installed next to this module, at the root of site-packages) appends at interpreter start a
small finder to the *end* of ``sys.meta_path``: it is asked about ``nni`` only after every other finder -- all
of ``sys.path`` included -- found nothing, so a real NNI installation always wins, wherever it is installed.
Without one, that finder imports this module and returns :func:`find_nni_spec`: nnix's shim package
(``nnix/trial/_shim/nni``, the same package trials get on their ``PYTHONPATH``). Nothing is imported at
interpreter start (this module only on ``import nni`` without NNI); ``NNIX_NNI_FALLBACK=0`` turns it off.

The ``.pth`` line, for reference (it must stay one line)::

    import sys, os; ... sys.meta_path.append(<class NnixNniFallback with find_spec(name, path, target)>)
"""

# no `from __future__ import annotations`: nothing more to import when the finder fires
TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec


def find_nni_spec() -> "ModuleSpec | None":
    """The spec of nnix's ``nni`` shim package, or None when nnix cannot be found."""
    import os
    from importlib.machinery import PathFinder
    from importlib.util import find_spec

    nnix = find_spec("nnix")  # found, not imported (an editable install's own finder included)
    for base in (nnix.submodule_search_locations or []) if nnix is not None else []:
        spec = PathFinder.find_spec("nni", [os.path.join(base, "trial", "_shim")])
        if spec is not None:
            return spec
    return None

