"""NNI's YAML shapes (v1, v2 camelCase, v2 snake_case) → the native schema."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from nnix.config import LocalConfig
from nnix.config.nni import format_path, is_v1, normalize_v2, translate, translate_v1
from nnix.errors import ConfigError

DATA = Path(__file__).parent / "data"

needs_space = pytest.mark.skipif(
    importlib.util.find_spec("nnix.space") is None, reason="nnix.space (search-space validation) is not written yet"
)


def v1_config(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "authorName": "me",
        "experimentName": "demo",
        "trialConcurrency": 1,
        "trainingServicePlatform": "local",
        "searchSpacePath": "search_space.json",
        "useAnnotation": False,
        "tuner": {"builtinTunerName": "TPE", "classArgs": {"optimize_mode": "maximize"}},
        "trial": {"command": "python3 main.py", "codeDir": ".", "gpuNum": 0},
    }
    data.update(extra)
    return data


# --------------------------------------------------------------------------------------------------
# The same experiment, three spellings


@needs_space
def test_v1_v2_camel_and_v2_snake_are_the_same_experiment() -> None:
    from nnix.config import load_config

    v1 = load_config(DATA / "experiment_v1.yml")
    camel = load_config(DATA / "experiment_v2_camel.yml")
    snake = load_config(DATA / "experiment_v2_snake.yml")
    assert (v1.format, camel.format, snake.format) == ("v1", "v2", "v2")
    assert v1.config == camel.config == snake.config
    assert v1.config.to_json() == camel.config.to_json() == snake.config.to_json()

    config = camel.config
    assert config.max_experiment_duration == 7200
    assert config.max_trial_duration == 1800
    assert config.search_space_file == DATA / "search_space.json"
    assert config.trial_code_directory == DATA
    assert config.experiment_working_directory == DATA.parent / "experiments"
    assert config.tuner.class_name == "nnix_demo_algorithms.DemoTuner"
    assert config.tuner.code_directory == DATA
    assert isinstance(config.training_service, LocalConfig)
    assert config.training_service.gpu_indices == [0, 1]
    assert config.tuner_gpu_indices == [0]
    # the one field with no effect in nnix is named as each file writes it (NNI's tuner process GPUs)
    assert [w.split(" ", 1)[0] for w in camel.warnings] == ["tunerGpuIndices"], camel.warnings
    assert [w.split(" ", 1)[0] for w in snake.warnings] == ["tuner_gpu_indices"], snake.warnings
    assert camel.warnings[0].split(" ", 1)[1] == snake.warnings[0].split(" ", 1)[1]
    assert "has no effect in nnix" in camel.warnings[0]


@needs_space
def test_v1_warns_once_per_ignored_field() -> None:
    from nnix.config import load_config

    warnings = load_config(DATA / "experiment_v1.yml").warnings
    for name in ("authorName", "description", "multiThread", "tuner.includeIntermediateResults"):
        assert sum(w.startswith(f"{name} ") for w in warnings) == 1, (name, warnings)
    assert not any("experimentName" in w or "trialConcurrency" in w for w in warnings)


# --------------------------------------------------------------------------------------------------
# v2 key normalisation


@pytest.mark.parametrize("key", ["trial_concurrency", "trialConcurrency", "TRIALCONCURRENCY", "_trial_Concurrency_"])
def test_keys_match_ignoring_case_and_underscores(key: str) -> None:
    data, key_map, warnings = normalize_v2({key: 3})
    assert data == {"trial_concurrency": 3}
    assert key_map[("trial_concurrency",)] == (key,)
    assert warnings == []


def test_nested_sections_are_normalised_but_user_data_is_not() -> None:
    data, key_map, _ = normalize_v2(
        {
            "Tuner": {"NAME": "tpe", "Class_Args": {"optimize_mode": "maximize", "someArg": 1}},
            "assessor": {"name": "Medianstop", "classargs": {"start_step": 5}},
            "TRAINING_SERVICE": {"Platform": "local", "USE_ACTIVE_GPU": True, "gpuindices": "0"},
            "searchSpace": {"learning_Rate": {"_type": "choice", "_value": [1]}},
        }
    )
    assert data == {
        "tuner": {"name": "tpe", "class_args": {"optimize_mode": "maximize", "someArg": 1}},
        "assessor": {"name": "Medianstop", "class_args": {"start_step": 5}},
        "training_service": {"platform": "local", "use_active_gpu": True, "gpu_indices": "0"},
        "search_space": {"learning_Rate": {"_type": "choice", "_value": [1]}},
    }
    assert key_map[("training_service", "use_active_gpu")] == ("TRAINING_SERVICE", "USE_ACTIVE_GPU")
    assert key_map[("tuner", "class_args")] == ("Tuner", "Class_Args")


def test_null_is_the_same_as_leaving_a_key_out() -> None:
    data, _, _ = normalize_v2({"assessor": None, "maxTrialNumber": None, "trialConcurrency": 1})
    assert data == {"trial_concurrency": 1}


def test_the_same_field_twice_in_two_spellings_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        normalize_v2({"trialConcurrency": 1, "trial_concurrency": 2})
    assert [i.path for i in info.value.issues] == ["trial_concurrency"]
    assert "trialConcurrency" in info.value.issues[0].message


def test_unknown_keys_get_did_you_mean_in_the_users_spelling() -> None:
    tr = translate(
        {
            "trialConcurency": 1,
            "tuner": {"nmae": "tpe"},
            "trainingService": {"platform": "local", "use_activ_gpu": True},
        }
    )
    hints = {i.path: i.hint for i in tr.issues}
    assert hints == {
        "trialConcurency": "did you mean 'trialConcurrency'?",
        "tuner.nmae": "did you mean 'name'?",
        "trainingService.use_activ_gpu": "did you mean 'use_active_gpu'?",
    }
    assert ("trial_concurrency",) in tr.suggested


def test_misplaced_and_v1_keys_at_top_level_get_a_pointed_hint() -> None:
    tr = translate({"useActiveGpu": True, "maxExecDuration": "1h"})
    hints = {i.path: i.hint for i in tr.issues}
    assert hints["useActiveGpu"] == "'useActiveGpu' belongs under 'trainingService'"
    assert hints["maxExecDuration"] == "'maxExecDuration' is the v1 (legacy) name; use 'maxExperimentDuration'"


def test_advisor_becomes_the_tuner() -> None:
    tr = translate({"advisor": {"name": "Hyperband", "classArgs": {"R": 60}}})
    assert tr.data == {"tuner": {"name": "Hyperband", "class_args": {"R": 60}}}
    assert tr.path(("tuner", "class_args", "R")) == "advisor.classArgs.R"
    assert any("advisor" in w for w in tr.warnings)


def test_advisor_and_tuner_together_is_an_error() -> None:
    tr = translate({"advisor": {"name": "Hyperband"}, "tuner": {"name": "TPE"}})
    assert [i.path for i in tr.issues] == ["advisor"]


@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [
        ({"experimentType": "nas"}, "experimentType", "not supported"),
        ({"useAnnotation": True}, "useAnnotation", "not supported"),
        ({"sharedStorage": {"storageType": "NFS"}}, "sharedStorage", "not supported"),
    ],
)
def test_unsupported_nni_features_are_named(data: dict[str, Any], path: str, fragment: str) -> None:
    tr = translate(data)
    assert [(i.path, fragment in i.message) for i in tr.issues] == [(path, True)]


def test_accepted_nni_defaults_pass_silently() -> None:
    tr = translate({"experimentType": "hpo", "useAnnotation": False})
    assert tr.issues == [] and tr.data == {}


def test_training_service_shortcut_fields_are_lifted() -> None:
    tr = translate({"trainingService": {"platform": "local", "trialCommand": "python3 a.py", "trialGpuNumber": 0}})
    assert tr.data == {
        "training_service": {"platform": "local"},
        "trial_command": "python3 a.py",
        "trial_gpu_number": 0,
    }
    assert tr.path(("trial_command",)) == "trainingService.trialCommand"


def test_error_paths_follow_the_users_style() -> None:
    snake = translate({"trial_concurrency": 1, "training_service": {"platform": "local"}})
    camel = translate({"trialConcurrency": 1, "trainingService": {"platform": "local"}})
    assert snake.path(("trial_command",)) == "trial_command"
    assert camel.path(("trial_command",)) == "trialCommand"
    assert snake.path(("training_service", "use_active_gpu")) == "training_service.use_active_gpu"
    assert camel.path(("training_service", "use_active_gpu")) == "trainingService.useActiveGpu"


def test_format_path() -> None:
    assert format_path(("trainingService", "machineList", 0, "host")) == "trainingService.machineList[0].host"


# --------------------------------------------------------------------------------------------------
# v1 → v2


def test_v1_detection() -> None:
    assert is_v1({"trainingServicePlatform": "local"})
    assert not is_v1({"trainingService": {"platform": "local"}})


def test_v1_translation_table() -> None:
    data, warnings = translate_v1(
        v1_config(
            maxExecDuration="1h",
            maxTrialNum=10,
            maxTrialDuration="10m",
            logDir="~/exps",
            nniManagerIp="10.0.0.1",
            debug=True,
            logLevel="info",
            assessor={"builtinAssessorName": "Medianstop", "classArgs": {"start_step": 3}},
            localConfig={"gpuIndices": "0,1", "maxTrialNumPerGpu": 2, "useActiveGpu": True},
        )
    )
    assert data == {
        "trainingService": {
            "platform": "local",
            "gpuIndices": "0,1",
            "maxTrialNumberPerGpu": 2,
            "useActiveGpu": True,
        },
        "experimentName": "demo",
        "trialConcurrency": 1,
        "searchSpaceFile": "search_space.json",
        "useAnnotation": False,
        "tuner": {"name": "TPE", "classArgs": {"optimize_mode": "maximize"}},
        "trialCommand": "python3 main.py",
        "trialCodeDirectory": ".",
        "trialGpuNumber": 0,
        "maxExperimentDuration": "1h",
        "maxTrialNumber": 10,
        "maxTrialDuration": "10m",
        "experimentWorkingDirectory": "~/exps",
        "nniManagerIp": "10.0.0.1",
        "debug": True,
        "logLevel": "info",
        "assessor": {"name": "Medianstop", "classArgs": {"start_step": 3}},
    }
    assert warnings[1:] == ["authorName has no effect in nnix; ignored"]


def test_v1_absent_limits_mean_unlimited() -> None:
    data, _ = translate_v1(v1_config())
    assert "maxExperimentDuration" not in data and "maxTrialNumber" not in data


def test_v1_ignored_fields_each_get_a_warning() -> None:
    config = v1_config(description="d", multiThread=True, versionCheck=False, logCollection="none")
    config["tuner"]["includeIntermediateResults"] = True
    config["trial"]["nasMode"] = "classic_mode"
    _, warnings = translate_v1(config)
    for name in (
        "authorName",
        "description",
        "multiThread",
        "versionCheck",
        "logCollection",
        "tuner.includeIntermediateResults",
        "trial.nasMode",
    ):
        assert f"{name} has no effect in nnix; ignored" in warnings


def test_v1_custom_algorithm_becomes_module_dot_class() -> None:
    config = v1_config(
        tuner={"codeDir": "algos", "classFileName": "my_tuner.py", "className": "MyTuner", "gpuIndices": "1"},
        advisor=None,
    )
    data, _ = translate_v1(config)
    assert data["tuner"] == {"className": "my_tuner.MyTuner", "codeDirectory": "algos"}
    assert data["tunerGpuIndices"] == "1"


def test_v1_class_file_in_a_subdirectory() -> None:
    data, _ = translate_v1(v1_config(tuner={"codeDir": "a", "classFileName": "b/t.py", "className": "T"}))
    assert data["tuner"] == {"className": "t.T", "codeDirectory": "a/b"}


def test_v1_class_name_without_class_file_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        translate_v1(v1_config(tuner={"codeDir": ".", "className": "MyTuner"}))
    assert [i.path for i in info.value.issues] == ["tuner.className"]


def test_v1_remote_machines_are_translated() -> None:
    config = v1_config(
        trainingServicePlatform="remote",
        remoteConfig={"reuse": True},
        machineList=[
            {"ip": "10.0.0.2", "port": 2222, "username": "me", "sshKeyPath": "~/.ssh/k", "passphrase": "p"},
            {"ip": "10.0.0.3", "username": "me", "passwd": "pw", "maxTrialNumPerGpu": 2, "useActiveGpu": True},
        ],
    )
    data, _ = translate_v1(config)
    assert data["trainingService"] == {
        "platform": "remote",
        "reuseMode": True,
        "machineList": [
            {"host": "10.0.0.2", "port": 2222, "user": "me", "sshKeyFile": "~/.ssh/k", "sshPassphrase": "p"},
            {"host": "10.0.0.3", "user": "me", "password": "pw", "maxTrialNumberPerGpu": 2, "useActiveGpu": True},
        ],
    }


def test_v1_pai_fields_are_renamed() -> None:
    config = v1_config(
        trainingServicePlatform="pai",
        trial={"command": "python3 main.py", "codeDir": ".", "gpuNum": 1, "cpuNum": 2, "memoryMB": 8192,
               "image": "msranni/nni", "nniManagerNFSMountPath": "/mnt/pai", "containerNFSMountPath": "/mnt/c",
               "paiStorageConfigName": "confignfs"},
        paiConfig={"userName": "me", "token": "t", "host": "pai.example.com", "reuse": True},
    )  # fmt: skip
    data, _ = translate_v1(config)
    assert data["trainingService"] == {
        "platform": "openpai",
        "trialCpuNumber": 2,
        "trialMemorySize": 8192,
        "dockerImage": "msranni/nni",
        "localStorageMountPoint": "/mnt/pai",
        "containerStorageMountPoint": "/mnt/c",
        "storageConfigName": "confignfs",
        "username": "me",
        "token": "t",
        "host": "pai.example.com",
        "reuseMode": True,
    }


def test_v1_section_of_another_platform_is_ignored_with_a_warning() -> None:
    data, warnings = translate_v1(v1_config(machineList=[{"ip": "h"}]))
    assert "machineList" not in data["trainingService"]
    assert "machineList ignored: trainingServicePlatform is 'local'" in warnings


def test_v1_unknown_keys_get_did_you_mean() -> None:
    config = v1_config(maxExecDuraton="1h", localConfig={"useActivGpu": True})
    config["trial"]["comand"] = "x"
    with pytest.raises(ConfigError) as info:
        translate_v1(config)
    hints = {i.path: i.hint for i in info.value.issues}
    assert hints == {
        "maxExecDuraton": "did you mean 'maxExecDuration'?",
        "localConfig.useActivGpu": "did you mean 'useActiveGpu'?",
        "trial.comand": "did you mean 'command'?",
    }


def test_v1_use_annotation_true_is_reported_at_its_v1_key() -> None:
    tr = translate(v1_config(useAnnotation=True))
    assert [i.path for i in tr.issues] == ["useAnnotation"]


def test_v1_error_paths_use_v1_names() -> None:
    tr = translate(v1_config(localConfig={"gpuIndices": "x"}))
    assert tr.format == "v1"
    assert tr.path(("trial_command",)) == "trial.command"
    assert tr.path(("trial_code_directory",)) == "trial.codeDir"
    assert tr.path(("max_experiment_duration",)) == "maxExecDuration"
    assert tr.path(("training_service", "gpu_indices")) == "localConfig.gpuIndices"
    assert tr.path(("training_service", "use_active_gpu")) == "localConfig.useActiveGpu"  # not written
    assert tr.path(("training_service", "platform")) == "trainingServicePlatform"
    assert tr.path(("tuner", "name")) == "tuner.builtinTunerName"
    assert tr.path(("tuner", "class_args", "optimize_mode")) == "tuner.classArgs.optimize_mode"


@needs_space
def test_v1_platforms_not_yet_supported_are_named(tmp_path: Path) -> None:
    from nnix.config import parse_config

    (tmp_path / "search_space.json").write_text('{"x": {"_type": "choice", "_value": [1, 2]}}')
    aml = {"subscriptionId": "s", "resourceGroup": "r", "workspaceName": "w", "computeTarget": "c"}
    config = v1_config(trainingServicePlatform="aml", amlConfig=aml)
    with pytest.raises(ConfigError) as info:
        parse_config(config, tmp_path)
    platform = [i for i in info.value.issues if i.path == "trainingServicePlatform"]
    assert len(platform) == 1
    assert "not supported by this nnix version" in platform[0].message
    assert platform[0].hint == ("supported platforms: frameworkcontroller, kubeflow, kubernetes, local, openpai, ray, "
                                "remote, slurm")


@needs_space
def test_v1_machine_list_lands_in_the_remote_schema_with_secrets_masked(tmp_path: Path) -> None:
    from nnix.config import RemoteConfig, config_secrets, parse_config, restore_secrets

    (tmp_path / "search_space.json").write_text('{"x": {"_type": "choice", "_value": [1, 2]}}')
    config = v1_config(
        trainingServicePlatform="remote",
        tuner={"builtinTunerName": "Random"},
        remoteConfig={"reuse": False},
        machineList=[
            {"ip": "10.0.0.2", "port": 2222, "username": "me", "sshKeyPath": "~/.ssh/k", "passphrase": "pp",
             "gpuIndices": "0,1", "maxTrialNumPerGpu": 2, "useActiveGpu": True, "pythonPath": "/opt/py/bin"},
            {"ip": "10.0.0.3", "username": "me", "passwd": "pw"},
        ],
    )
    config["trial"]["gpuNum"] = 1
    loaded = parse_config(config, tmp_path).config
    ts = loaded.training_service
    assert isinstance(ts, RemoteConfig) and ts.reuse_mode is False
    first, second = ts.machine_list
    assert (first.host, first.port, first.user, first.ssh_key_file) == ("10.0.0.2", 2222, "me", Path.home() / ".ssh/k")
    assert first.ssh_passphrase is not None and first.ssh_passphrase.get_secret_value() == "pp"
    assert (first.gpu_indices, first.max_trial_number_per_gpu, first.use_active_gpu) == ([0, 1], 2, True)
    assert first.python_path == "/opt/py/bin" and second.port == 22
    assert second.password is not None and second.password.get_secret_value() == "pw"
    stored = loaded.model_dump(mode="json")
    assert "pw" not in str(stored) and "'pp'" not in str(stored)  # masked wherever shown or stored
    secrets = config_secrets(loaded)
    assert secrets == {"training_service.machine_list.0.ssh_passphrase": "pp",
                       "training_service.machine_list.1.password": "pw"}
    back = type(loaded).model_validate(restore_secrets(stored, secrets)).training_service
    assert isinstance(back, RemoteConfig) and back.machine_list[1].password is not None
    assert back.machine_list[1].password.get_secret_value() == "pw"


@needs_space
def test_v1_errors_are_reported_with_v1_paths(tmp_path: Path) -> None:
    from nnix.config import parse_config

    (tmp_path / "search_space.json").write_text('{"x": {"_type": "choice", "_value": [1, 2]}}')
    (tmp_path / "nnix_v1_tuner.py").write_text("class T:\n    pass\n")
    config = v1_config(
        maxExecDuration="2x",
        localConfig={"gpuIndices": [1, 1]},
        tuner={"codeDir": ".", "classFileName": "nnix_v1_tuner.py", "className": "T"},
    )
    del config["trial"]["command"]
    with pytest.raises(ConfigError) as info:
        parse_config(config, tmp_path)
    assert sorted(i.path for i in info.value.issues) == ["localConfig.gpuIndices", "maxExecDuration", "trial.command"]
