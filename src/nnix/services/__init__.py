"""Training services: they start and stop environments, nothing else (GPU scheduling, process management,
the agent fleet, the cluster engines' launchers). The names below are imported on first use (importing this
package imports none of them: an engine's client library loads only with its service)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnix.lazy import lazy_exports

if TYPE_CHECKING:
    from nnix.services.base import ServiceContext as ServiceContext
    from nnix.services.base import TrainingService as TrainingService
    from nnix.services.cluster import ClusterService as ClusterService
    from nnix.services.cluster import EnvRequest as EnvRequest
    from nnix.services.cluster import EnvStatus as EnvStatus
    from nnix.services.cluster import Launcher as Launcher
    from nnix.services.factory import service_factory as service_factory
    from nnix.services.hybrid import HybridService as HybridService
    from nnix.services.kubernetes import FrameworkControllerService as FrameworkControllerService
    from nnix.services.kubernetes import KubeflowService as KubeflowService
    from nnix.services.kubernetes import KubernetesService as KubernetesService
    from nnix.services.local import LocalService as LocalService
    from nnix.services.openpai import OpenpaiService as OpenpaiService
    from nnix.services.ray import RayService as RayService
    from nnix.services.remote import RemoteService as RemoteService
    from nnix.services.slurm import SlurmService as SlurmService

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "nnix.services.base": ("ServiceContext", "TrainingService"),
        "nnix.services.cluster": ("ClusterService", "EnvRequest", "EnvStatus", "Launcher"),
        "nnix.services.factory": ("service_factory",),
        "nnix.services.hybrid": ("HybridService",),
        "nnix.services.kubernetes": ("FrameworkControllerService", "KubeflowService", "KubernetesService"),
        "nnix.services.local": ("LocalService",),
        "nnix.services.openpai": ("OpenpaiService",),
        "nnix.services.ray": ("RayService",),
        "nnix.services.remote": ("RemoteService",),
        "nnix.services.slurm": ("SlurmService",),
    },
)
