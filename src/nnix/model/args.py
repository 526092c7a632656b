"""The base of every tuner's and assessor's ``classArgs`` model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["TunerArgs"]


class TunerArgs(BaseModel):
    """Base of every tuner's ``classArgs`` model: unknown args are errors."""

    model_config = ConfigDict(extra="forbid")
