"""The training service of an experiment, found by its platform name among the ``nnix.services`` entry points."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nnix.errors import TunerError
from nnix.model.runs import RunnerEvent
from nnix.registry import entry_point_group
from nnix.services.base import ServiceContext, TrainingService

if TYPE_CHECKING:
    from nnix.config import ExperimentConfig


ServiceFactory = Callable[[Callable[[RunnerEvent], None]], TrainingService]


def service_factory(
    config: ExperimentConfig,
    context: ServiceContext | None = None,
    *,
    service_class: type[TrainingService] | None = None,
    **options: Any,
) -> ServiceFactory:
    """The training service for ``config``, found by platform name in entry points ``nnix.services``.
    ``context`` (experiment id and directory) is passed to services that need it (remote ones do).
    ``service_class``: a class to use instead of the installed one (an application embedding nnix with its own
    service; :mod:`nnix.testing` runs a service family's shared part with a fake engine this way); ``options``
    go to its ``from_config``."""
    platform = config.training_service.platform
    cls: Any = service_class
    if cls is None:
        eps = {ep.name: ep for ep in entry_point_group("nnix.services")}
        if platform not in eps:
            raise TunerError(f"training service {platform!r} is not installed", f"installed: {', '.join(eps)}")
        cls = eps[platform].load()

    def make(emit: Callable[[RunnerEvent], None]) -> TrainingService:
        extra = {"context": context} if context is not None else {}
        service: TrainingService = cls.from_config(config, emit, **extra, **options)
        return service

    return make
