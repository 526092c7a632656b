"""Tuners: pure algorithms that propose parameter sets. One module per algorithm; the classes below are
imported on first use (importing this package imports none of them).

Acronyms are upper case in class names (``TPETuner``, ``BOHBTuner``, ``GPTuner``, ``SMACTuner``, ``PBTTuner``,
``DNGOTuner``); the other spellings (``TpeTuner``, NNI's class name, ``TpeLegacyTuner``, ``BohbTuner``) stay as
aliases of the same classes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnix.lazy import lazy_exports

if TYPE_CHECKING:
    from nnix.tuners.anneal import AnnealTuner as AnnealTuner
    from nnix.tuners.base import Tuner as Tuner
    from nnix.tuners.base import TunerArgs as TunerArgs
    from nnix.tuners.base import TunerContext as TunerContext
    from nnix.tuners.batch import BatchTuner as BatchTuner
    from nnix.tuners.bohb import BOHBTuner as BOHBTuner
    from nnix.tuners.bohb import BohbTuner as BohbTuner
    from nnix.tuners.dngo import DNGOTuner as DNGOTuner
    from nnix.tuners.evolution import EvolutionTuner as EvolutionTuner
    from nnix.tuners.gp import GPTuner as GPTuner
    from nnix.tuners.gridsearch import GridSearchTuner as GridSearchTuner
    from nnix.tuners.hyperband import HyperbandTuner as HyperbandTuner
    from nnix.tuners.metis import MetisTuner as MetisTuner
    from nnix.tuners.pbt import PBTTuner as PBTTuner
    from nnix.tuners.random import RandomTuner as RandomTuner
    from nnix.tuners.regularized_evolution import RegularizedEvolutionTuner as RegularizedEvolutionTuner
    from nnix.tuners.smac import SMACTuner as SMACTuner
    from nnix.tuners.tpe import TPELegacyTuner as TPELegacyTuner
    from nnix.tuners.tpe import TpeLegacyTuner as TpeLegacyTuner
    from nnix.tuners.tpe import TPETuner as TPETuner
    from nnix.tuners.tpe import TpeTuner as TpeTuner

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "nnix.tuners.anneal": ("AnnealTuner",),
        "nnix.tuners.base": ("Tuner", "TunerArgs", "TunerContext"),
        "nnix.tuners.batch": ("BatchTuner",),
        "nnix.tuners.bohb": ("BOHBTuner",),
        "nnix.tuners.dngo": ("DNGOTuner",),
        "nnix.tuners.evolution": ("EvolutionTuner",),
        "nnix.tuners.gp": ("GPTuner",),
        "nnix.tuners.gridsearch": ("GridSearchTuner",),
        "nnix.tuners.hyperband": ("HyperbandTuner",),
        "nnix.tuners.metis": ("MetisTuner",),
        "nnix.tuners.pbt": ("PBTTuner",),
        "nnix.tuners.random": ("RandomTuner",),
        "nnix.tuners.regularized_evolution": ("RegularizedEvolutionTuner",),
        "nnix.tuners.smac": ("SMACTuner",),
        "nnix.tuners.tpe": ("TPELegacyTuner", "TPETuner"),
    },
    aliases={  # the other spelling of an acronym -> the class's name
        "BohbTuner": "BOHBTuner",
        "TpeLegacyTuner": "TPELegacyTuner",
        "TpeTuner": "TPETuner",
    },
)
