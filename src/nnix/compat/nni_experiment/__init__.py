"""NNI 3.0's launcher API (``nni.experiment``) on nnix: ``Experiment``, ``RunMode``, the config classes and
the data classes its methods return.

With nnix installed and NNI not, ``from nni.experiment import Experiment`` imports this (nnix's ``nni`` shim
re-exports it). Where a real NNI is installed, ``nni`` is NNI's own; this module is then reached by its own
name: ``from nnix.compat.nni_experiment import Experiment``.
"""

from __future__ import annotations

from nnix.compat.nni_experiment.config import (
    AlgorithmConfig,
    AmlConfig,
    AzureBlobConfig,
    ConfigBase,
    CustomAlgorithmConfig,
    DlcConfig,
    ExperimentConfig,
    FrameworkAttemptCompletionPolicy,
    FrameworkControllerConfig,
    FrameworkControllerRoleConfig,
    K8sAzureStorageConfig,
    K8sNfsConfig,
    K8sStorageConfig,
    KubeflowConfig,
    KubeflowRoleConfig,
    KubernetesConfig,
    LocalConfig,
    NfsConfig,
    NniConfigError,
    NotSupportedByNnixError,
    OpenpaiConfig,
    RayConfig,
    RemoteConfig,
    RemoteMachineConfig,
    SharedStorageConfig,
    SlurmConfig,
    TrainingServiceConfig,
    UnknownFieldError,
)
from nnix.compat.nni_experiment.experiment import (
    Experiment,
    RunMode,
    TrialHyperParameters,
    TrialJob,
    TrialMetricData,
    TrialResult,
)

__all__ = [
    "AlgorithmConfig",
    "AmlConfig",
    "AzureBlobConfig",
    "ConfigBase",
    "CustomAlgorithmConfig",
    "DlcConfig",
    "Experiment",
    "ExperimentConfig",
    "FrameworkAttemptCompletionPolicy",
    "FrameworkControllerConfig",
    "FrameworkControllerRoleConfig",
    "K8sAzureStorageConfig",
    "K8sNfsConfig",
    "K8sStorageConfig",
    "KubeflowConfig",
    "KubeflowRoleConfig",
    "KubernetesConfig",
    "LocalConfig",
    "NfsConfig",
    "NniConfigError",
    "NotSupportedByNnixError",
    "OpenpaiConfig",
    "RayConfig",
    "RemoteConfig",
    "RemoteMachineConfig",
    "RunMode",
    "SharedStorageConfig",
    "SlurmConfig",
    "TrainingServiceConfig",
    "TrialHyperParameters",
    "TrialJob",
    "TrialMetricData",
    "TrialResult",
    "UnknownFieldError",
]
