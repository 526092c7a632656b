"""DNGO (NNI ``DNGO``, alias ``DNGOTuner``): a Bayesian neural-network surrogate, numpy only.

Deep Networks for Global Optimization (Snoek et al., 2015): a small multi-layer perceptron learns
*adaptive basis functions* of the parameters; a Bayesian linear regression on its last hidden layer
gives a mean and a variance for any point, and the next proposal maximises expected improvement.

* **Network**: unit-cube inputs (as :mod:`nnix.tuners.gp` encodes them, scaled to [-1, 1]), three
  tanh layers of ``HIDDEN`` units, trained full-batch with Adam for ``num_epochs_per_training``
  epochs on the standardised metric. It is retrained every ``trials_per_update`` results, on the
  results known at that boundary: the network used after ``n`` results is trained on the first
  ``trials_per_update * floor(n / trials_per_update)`` of them (at most ``TRAIN_POINTS``: the best
  half and the most recent rest), with weights initialised from ``rng_for(seed, m, stream)`` where
  ``m`` is that count. It is therefore a pure function of the history; the tuner caches the last
  trained network, keyed by its training data, so a fresh tuner rebuilds the same one.
* **Bayesian linear regression** on the last hidden layer (plus a bias) over *every* result: the
  prior precision and the noise precision maximise the evidence (closed form in the eigenbasis of
  the features' Gram matrix, L-BFGS-B in log space).
* **Proposal**: the point with the highest expected improvement among ``sample_size`` random points
  of the space plus ``LOCAL_POINTS`` perturbations of the best results (NNI: random points only),
  ranked on a grid (:mod:`nnix.tuners.stable`) so that a near-tie is not decided by the CPU's rounding.
  Until the first training boundary (``trials_per_update`` results), proposals are random draws, as
  in NNI.

History, constant liar (running trials and earlier proposals of the batch enter the regression with
the worst observed value), deduplication of discrete spaces and the supported types (``choice`` with
numeric options, ``randint``, ``uniform``, ``quniform``, ``loguniform``, ``qloguniform``) are those of
:mod:`nnix.tuners.gp`.

Cost: training is O(epochs * TRAIN_POINTS) and happens once per ``trials_per_update`` results; a
suggestion between trainings costs one regression over the results and ``sample_size`` network
evaluations (``sample_size`` is capped at ``SAMPLE_CAP``).

classArgs (NNI's, NNI defaults): ``optimize_mode`` (maximize), ``sample_size`` (1000),
``trials_per_update`` (20), ``num_epochs_per_training`` (500), ``seed`` (overrides the experiment's
seed).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field
from scipy.optimize import minimize

from nnix.space import Params
from nnix.tuners.base import TunerArgs, rng_for
from nnix.tuners.bo import (
    Array,
    BayesianTuner,
    Observations,
    Step,
    UnitEncoding,
    acquisition,
    best_and_recent,
    best_centres,
    candidate_points,
    select_new,
)
from nnix.tuners.stable import order_desc

__all__ = ["DNGOArgs", "DNGOTuner"]

HIDDEN = 50  # units per hidden layer
LAYERS = 3  # hidden layers
TRAIN_POINTS = 256  # results the network is trained on, at most
SAMPLE_CAP = 20000  # sample_size is capped to this
LEARNING_RATE = 0.01
MIN_OBSERVATIONS = 2

_STREAM_NET = 11  # random stream of a network's initial weights (parameter-id slot: its training size)
_STREAM_CANDIDATES = 1  # random stream of a proposal's candidates


class DNGOArgs(TunerArgs):
    """NNI ``DNGO`` classArgs."""

    optimize_mode: Literal["maximize", "minimize"] = "maximize"
    sample_size: int = Field(default=1000, ge=1, description="random candidates scored per proposal")
    trials_per_update: int = Field(default=20, ge=1, description="results between two trainings of the network")
    num_epochs_per_training: int = Field(default=500, ge=1)
    seed: int | None = None  # overrides the experiment's seed when set


# --------------------------------------------------------------------------------------------------
# the network


@dataclass(frozen=True)
class Network:
    """A trained MLP; :meth:`features` gives its last hidden layer."""

    weights: tuple[Array, ...]
    biases: tuple[Array, ...]

    def features(self, u: Array) -> Array:
        h = 2.0 * u - 1.0
        for w, b in zip(self.weights[:-1], self.biases[:-1], strict=True):
            h = np.tanh(h @ w + b)
        return h


def train_network(x: Array, y: Array, epochs: int, rng: np.random.Generator) -> Network:
    """Fit an MLP to standardised ``y`` (full-batch Adam on the mean squared error)."""
    sizes = [x.shape[1]] + [HIDDEN] * LAYERS + [1]
    weights = [rng.standard_normal((a, b)) * math.sqrt(1.0 / a) for a, b in itertools.pairwise(sizes)]
    biases = [np.zeros(b) for b in sizes[1:]]
    params: list[Array] = [*weights, *biases]
    m1 = [np.zeros_like(p) for p in params]
    m2 = [np.zeros_like(p) for p in params]
    b1, b2, eps = 0.9, 0.999, 1e-8
    inputs = 2.0 * x - 1.0
    target = y[:, None]
    n = x.shape[0]
    count = len(weights)
    for step in range(1, epochs + 1):
        acts = [inputs]
        h = inputs
        for w, b in zip(weights[:-1], biases[:-1], strict=True):
            h = np.tanh(h @ w + b)
            acts.append(h)
        out = h @ weights[-1] + biases[-1]
        delta = 2.0 * (out - target) / n
        grads_w: list[Array] = [np.empty(0)] * count
        grads_b: list[Array] = [np.empty(0)] * count
        for layer in range(count - 1, -1, -1):
            grads_w[layer] = acts[layer].T @ delta
            grads_b[layer] = delta.sum(0)
            if layer:
                delta = (delta @ weights[layer].T) * (1.0 - acts[layer] ** 2)
        grads = grads_w + grads_b
        lr = LEARNING_RATE * math.sqrt(1.0 - b2**step) / (1.0 - b1**step)
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            m1[i] = b1 * m1[i] + (1.0 - b1) * g
            m2[i] = b2 * m2[i] + (1.0 - b2) * g * g
            p -= lr * m1[i] / (np.sqrt(m2[i]) + eps)
    return Network(tuple(weights), tuple(biases))


# --------------------------------------------------------------------------------------------------
# Bayesian linear regression on the features


class BayesianLinear:
    """Bayesian linear regression ``y = phi(x) . w + noise`` with evidence-maximised precisions."""

    def __init__(self, phi: Array, y: Array, precisions: tuple[float, float] | None = None) -> None:
        self.mean_y = float(y.mean())
        scale = float(y.std())
        self.scale_y = scale if math.isfinite(scale) and scale > 1e-12 * max(1.0, abs(self.mean_y)) else 1.0
        t = (y - self.mean_y) / self.scale_y
        self.alpha, self.beta = precisions if precisions is not None else self._evidence_fit(phi, t)
        h = phi.shape[1]
        a = self.alpha * np.eye(h) + self.beta * phi.T @ phi
        self._a_inv = np.linalg.inv(a)
        self._w = self.beta * self._a_inv @ (phi.T @ t)

    @staticmethod
    def _evidence_fit(phi: Array, t: Array) -> tuple[float, float]:
        n, h = phi.shape
        lam, vecs = np.linalg.eigh(phi.T @ phi)
        lam = np.maximum(lam, 0.0)
        b = vecs.T @ (phi.T @ t)
        tt = float(t @ t)

        def neg_evidence(theta: Array) -> float:
            alpha, beta = math.exp(theta[0]), math.exp(theta[1])
            s = alpha + beta * lam
            fit = tt - 2.0 * beta * float((b * b / s).sum()) + beta**2 * float((lam * b * b / s**2).sum())
            norm = beta**2 * float((b * b / s**2).sum())
            value = (
                0.5 * h * theta[0]
                + 0.5 * n * theta[1]
                - 0.5 * beta * fit
                - 0.5 * alpha * norm
                - 0.5 * float(np.log(s).sum())
            )
            return -float(value)

        bounds = [(math.log(1e-4), math.log(1e4)), (math.log(1e-2), math.log(1e6))]
        res = minimize(neg_evidence, np.array([0.0, math.log(100.0)]), method="L-BFGS-B", bounds=bounds)
        theta = np.asarray(res.x, dtype=float)
        return math.exp(float(theta[0])), math.exp(float(theta[1]))

    def predict(self, phi: Array) -> tuple[Array, Array]:
        """Mean and standard deviation (epistemic plus noise) in the units of ``y``."""
        mu = phi @ self._w
        var = np.einsum("ij,jk,ik->i", phi, self._a_inv, phi) + 1.0 / self.beta
        return self.mean_y + self.scale_y * mu, self.scale_y * np.sqrt(np.maximum(var, 1e-12))


def _with_bias(features: Array) -> Array:
    return np.hstack([features, np.ones((features.shape[0], 1))])


# --------------------------------------------------------------------------------------------------
# the tuner


def _training_indices(n: int, y: Array, per_update: int) -> NDArray[np.int64]:
    """Indices of the results the current network is trained on (see the module docstring)."""
    m = (n // per_update) * per_update
    return best_and_recent(y[:m], TRAIN_POINTS)


@dataclass(frozen=True)
class _Surrogate:
    """The network and the regression on its features over every result."""

    net: Network
    regression: BayesianLinear
    phi: Array  # the results' features (with the bias)

    def predict(self, z: Array) -> tuple[Array, Array]:
        return self.regression.predict(_with_bias(self.net.features(z)))


class DNGOTuner(BayesianTuner[DNGOArgs, _Surrogate]):
    """DNGO; see the module docstring."""

    Args: ClassVar[type[TunerArgs]] = DNGOArgs
    name: ClassVar[str] = "DNGO"

    def __init__(self, args: DNGOArgs | None = None) -> None:
        super().__init__(args or DNGOArgs())
        self._network: tuple[bytes, Network] | None = None  # (training-data tag, network): a cache

    def network(self, obs: Observations, seed: int) -> Network | None:
        """The network for these observations (trained now, or taken from the cache)."""
        args = self.args
        index = _training_indices(obs.n, obs.y, args.trials_per_update)
        m = (obs.n // args.trials_per_update) * args.trials_per_update
        if index.shape[0] < MIN_OBSERVATIONS:
            return None
        x, y = obs.x[index], obs.y[index]
        tag = b"".join(
            [np.array([seed, m, args.num_epochs_per_training], dtype=np.int64).tobytes(), x.tobytes(), y.tobytes()]
        )
        if self._network is not None and self._network[0] == tag:
            return self._network[1]
        scale = float(y.std())
        target = (y - float(y.mean())) / (scale if scale > 0 else 1.0)
        net = train_network(x, target, args.num_epochs_per_training, rng_for(seed, m, _STREAM_NET))
        self._network = (tag, net)
        return net

    def fit(self, enc: UnitEncoding, obs: Observations, seed: int) -> _Surrogate | None:
        net = self.network(obs, seed) if enc.d > 0 and obs.n >= self.args.trials_per_update else None
        if net is None:
            return None
        phi = _with_bias(net.features(obs.x))
        return _Surrogate(net, BayesianLinear(phi, obs.y), phi)

    def propose(self, model: _Surrogate, step: Step) -> Params | None:
        enc, obs, fantasies, liar = step.enc, step.obs, step.fantasies, step.liar
        net, regression = model.net, model.regression
        if fantasies:
            phi = np.vstack([model.phi, _with_bias(net.features(np.array(fantasies)))])
            y = np.concatenate([obs.y, np.full(len(fantasies), liar)])
            regression = BayesianLinear(phi, y, (regression.alpha, regression.beta))
        rng = step.rng(_STREAM_CANDIDATES)
        candidates = candidate_points(enc, rng, min(self.args.sample_size, SAMPLE_CAP), best_centres(obs))
        mu, sd = regression.predict(_with_bias(net.features(candidates)))
        ei = acquisition("ei", mu, sd, float(obs.y.max()), 0.0, 0.0)[0]
        return select_new(enc, candidates[order_desc(ei)], self._dedup)
