"""nnix's stand-in for the ``nni`` package inside trials.

The nnix agent puts the directory above this package on a trial's PYTHONPATH, so unchanged NNI trial code
(``import nni``, ``nni.get_next_parameter()``, ``nni.report_final_result(...)``,
``from nni.utils import merge_parameter``) runs against nnix without NNI installed.

The functions are those of ``nnix.trial``. When the trial's interpreter cannot import nnix (another Python,
another virtual environment), the SDK is loaded from the files of this nnix checkout, by path, as the
modules ``nnix_trial`` and ``nnix_trial.utils``; either way there is one SDK (one parameter record, one
metric counter) per process.

Partial: ``trace`` is an identity decorator, and ``dump``/``load`` are plain JSON (NaN allowed, numpy/torch
values converted to numbers or lists); NNI's traced-object and pickle serialisation is not provided.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import IO, Any

__version__ = "3.0"  # the NNI API level this shim emulates

__all__ = ["dump", "load", "trace", "trial", "utils"]  # and the SDK functions of ``nni.trial`` (below)


def _load_from_file(name: str, path: str, package: bool) -> ModuleType:
    # importlib.machinery is cheap; importlib.util would pull in contextlib and friends (~10 ms).
    from importlib.machinery import ModuleSpec, SourceFileLoader

    loader = SourceFileLoader(name, path)
    spec = ModuleSpec(name, loader, origin=path, is_package=package)
    spec.has_location = True
    module = type(sys)(name)
    module.__file__ = path
    module.__loader__ = loader
    module.__spec__ = spec
    if package:
        module.__package__ = name
        module.__path__ = [os.path.dirname(path)]
    else:
        module.__package__ = name.rpartition(".")[0]
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _resolve() -> tuple[ModuleType, ModuleType]:
    """The SDK and its utils: ``nnix.trial`` when importable, else the sibling files loaded by path."""
    try:
        import nnix.trial
        import nnix.trial.utils
    except ImportError:
        pass
    else:
        return nnix.trial, nnix.trial.utils
    # _shim/nni/__init__.py -> the nnix/trial directory
    trial_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sdk = sys.modules.get("nnix_trial")
    if sdk is None:
        sdk = _load_from_file("nnix_trial", os.path.join(trial_dir, "__init__.py"), package=True)
    utils = sys.modules.get("nnix_trial.utils")
    if utils is None:
        utils = _load_from_file("nnix_trial.utils", os.path.join(trial_dir, "utils.py"), package=False)
        setattr(sdk, "utils", utils)  # noqa: B010
    return sdk, utils


if TYPE_CHECKING:
    import nnix.trial as _sdk
    import nnix.trial.utils as _utils
else:
    _sdk, _utils = _resolve()

# NNI's ``import nni`` makes ``nni.trial`` and ``nni.utils`` available too; the SDK functions are ``nni.trial``'s.
from . import trial, utils  # noqa: E402
from .trial import *  # noqa: E402, F403

__all__ += trial.__all__


def trace(cls_or_func: Any = None, *, kw_only: bool = True, inheritable: bool = False) -> Any:
    """Partial: returns the class or function unchanged (usable as ``@trace`` and ``@trace(...)``)."""
    if cls_or_func is None:
        return lambda obj: obj
    return cls_or_func


def _to_json(obj: Any) -> Any:
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):  # numpy arrays and scalars, torch tensors
        return tolist()
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(type(obj), "__float__") and not isinstance(obj, (str, bytes, complex)):
        return float(obj)
    raise TypeError(
        f"nni.dump (nnix shim) cannot serialise {type(obj).__name__}: only JSON data, numpy/torch "
        "values, sets and paths are supported."
    )


def dump(
    obj: Any,
    fp: IO[str] | None = None,
    *,
    use_trace: bool = True,
    pickle_size_limit: int = 4096,
    allow_nan: bool = True,
    **json_kwargs: Any,
) -> str:
    """Partial: ``obj`` as JSON text (also written to ``fp`` when given); NaN/Infinity allowed."""
    import json

    text = json.dumps(obj, default=_to_json, allow_nan=allow_nan, **json_kwargs)
    if fp is not None:
        fp.write(text)
    return text


def load(string: str | bytes | None = None, *, fp: IO[str] | None = None, **json_kwargs: Any) -> Any:
    """Partial: parse JSON text from ``string`` or ``fp`` (exactly one of them)."""
    import json

    if (string is None) == (fp is None):
        raise ValueError("nni.load() needs exactly one of `string` and `fp`.")
    if fp is not None:
        return json.load(fp, **json_kwargs)
    assert string is not None
    return json.loads(string, **json_kwargs)


def __getattr__(name: str) -> Any:
    """``nni.experiment`` (the launcher API, which needs nnix installed) is imported on first use only."""
    if name == "experiment":
        from importlib import import_module

        return import_module(f"{__name__}.experiment")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
