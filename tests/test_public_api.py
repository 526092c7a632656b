"""The public API, pinned: each family module's ``__all__`` (a change here is a change users see), every name in
it resolves, and the acronym spellings (upper case, with the other spelling kept as an alias of the same class)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PUBLIC: dict[str, set[str]] = {
    "nnix": {"Experiment", "__version__"},
    "nnix.experiment": {"Experiment"},
    "nnix.tuners": {
        "AnnealTuner", "BOHBTuner", "BatchTuner", "DNGOTuner", "EvolutionTuner", "GPTuner", "GridSearchTuner",
        "HyperbandTuner", "MetisTuner", "PBTTuner", "RandomTuner", "RegularizedEvolutionTuner", "SMACTuner",
        "TPELegacyTuner", "TPETuner", "Tuner", "TunerArgs", "TunerContext",
    },
    "nnix.assessors": {"Assessor", "AssessorContext", "CurvefittingAssessor", "Decision", "MedianstopAssessor"},
    "nnix.services": {
        "ClusterService", "EnvRequest", "EnvStatus", "FrameworkControllerService", "HybridService", "KubeflowService",
        "KubernetesService", "Launcher", "LocalService", "OpenpaiService", "RayService", "RemoteService",
        "ServiceContext", "SlurmService", "TrainingService", "service_factory",
    },
    "nnix.store": {"MemoryStore", "SqliteStore", "Store", "Stored"},
    "nnix.trial": {
        "CHANNEL_ENV", "METRICS_FILE", "PARAMETER_FILE", "NoMoreTrialError", "get_current_parameter",
        "get_experiment_id", "get_next_parameter", "get_next_parameters", "get_sequence_id", "get_trial_id",
        "report_final_result", "report_intermediate_result", "shim_path",
    },
    "nnix.testing": {"wait_until", "wait_until_async", "FakeService", "FakeMachine", "Outcome"},
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_exported_names_are_pinned_and_resolve(module: str) -> None:
    mod = importlib.import_module(module)
    exported = getattr(mod, "__all__", None)
    assert exported is not None, f"{module} has no __all__"
    assert len(exported) == len(set(exported)), f"{module}.__all__ lists a name twice"
    assert set(exported) == PUBLIC[module], (
        f"{module}.__all__ changed: added {sorted(set(exported) - PUBLIC[module])}, "
        f"removed {sorted(PUBLIC[module] - set(exported))}"
    )
    for name in exported:
        assert getattr(mod, name) is not None, f"{module}.{name}"
    assert set(exported) <= set(dir(mod))


# canonical (acronyms upper case) -> the other spelling, kept as an alias (NNI's `TpeTuner` among them)
ACRONYMS = {
    ("nnix.tuners.tpe", "TPETuner"): "TpeTuner",
    ("nnix.tuners.tpe", "TPELegacyTuner"): "TpeLegacyTuner",
    ("nnix.tuners.bohb", "BOHBTuner"): "BohbTuner",
}


@pytest.mark.parametrize(("where", "alias"), sorted(ACRONYMS.items()), ids=[c for (_, c) in sorted(ACRONYMS)])
def test_acronyms_are_upper_case_and_the_other_spelling_is_the_same_class(where: tuple[str, str], alias: str) -> None:
    import nnix.tuners

    module, name = where
    cls = getattr(importlib.import_module(module), name)
    assert cls.__name__ == name
    assert getattr(importlib.import_module(module), alias) is cls
    assert getattr(nnix.tuners, name) is cls and getattr(nnix.tuners, alias) is cls


def test_every_tuner_class_name_cases_acronyms_upper() -> None:
    import nnix.tuners

    lower_acronyms = ("Tpe", "Bohb", "Gp", "Smac", "Pbt", "Dngo")
    for name in nnix.tuners.__all__:
        assert not name.startswith(lower_acronyms), name


def test_nni_algorithm_names_still_build_the_renamed_classes() -> None:
    from nnix.registry import AlgorithmRef, resolve
    from nnix.tuners import BOHBTuner, TPELegacyTuner, TPETuner

    assert resolve("tuner", AlgorithmRef(name="TPE")) is TPETuner
    assert resolve("tuner", AlgorithmRef(name="TPE_legacy")) is TPELegacyTuner
    assert resolve("tuner", AlgorithmRef(name="BOHB")) is BOHBTuner


def test_importing_a_family_imports_none_of_its_members() -> None:
    code = (
        "import sys, nnix.tuners, nnix.assessors, nnix.services, nnix.store\n"
        "heavy = [m for m in ('nnix.tuners.tpe', 'nnix.tuners.gp', 'nnix.services.local', 'nnix.store.sqlite',"
        " 'nnix.assessors.curvefitting', 'numpy', 'pydantic') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
