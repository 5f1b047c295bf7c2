"""A fixed noise sd for a regression reference, chosen from the training rows alone."""

# Notes:
#
# A reference run with the Gaussian noise sd *learned* (a HalfNormal prior) does not converge on
# the UCI sets: the chains settle at different noise scales (README, "Reference posteriors"). With
# the noise *fixed* they mix, but the value is then part of the model and must be chosen before
# the run, from the training rows only. The first rule used, the noise sd of a MAP fit of the
# learned-noise model on all training rows, is the *training* residual: where an MLP(50) fits the
# training rows far more closely than it predicts new ones it is far too small (boston split 0:
# 0.064 against a held-out error of 0.42, standardised), and a likelihood that sharp has modes HMC
# does not cross.
#
# :func:`heldout_noise` takes the error on rows the fit did not see: ``folds``-fold
# cross-validation on the training rows, a MAP fit (:func:`~bnn_ppl.inference.map_estimate`) of
# ``model`` on each fold's complement, and the root mean squared error of its predictive mean on
# the fold, pooled over every training row. ``noise`` is that RMSE to one significant figure
# (the round value the run's command and file name carry). It is a point fit's error, so it is
# larger than a converged posterior's; what it is not is the training residual.

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from bnn_ppl.inference.ensemble import map_estimate
from bnn_ppl.likelihoods import Gaussian
from bnn_ppl.model import BNN
from bnn_ppl.predictive import predict
from bnn_ppl.types import PRNGKey
from bnn_ppl.validation import InputTypeError, check_choice, check_int, check_key, check_positive


class HeldoutNoise(NamedTuple):
    """What :func:`heldout_noise` measured.

    Attributes:
        rmse: the held-out RMSE pooled over every training row (each predicted by the fit
            that did not see it; over every output, for several), in the targets' units.
        fold_rmse: ``(folds,)`` each fold's held-out RMSE (their spread shows how stable
            the choice is).
        noise: ``rmse`` to one significant figure: the fixed noise sd to run with.
    """

    rmse: float
    fold_rmse: np.ndarray
    noise: float

    def record(self) -> dict[str, Any]:
        """JSON-ready figures for a run's record."""
        return {"rule": "heldout_rmse", "rmse": self.rmse, "noise": self.noise,
                "fold_rmse": [float(r) for r in self.fold_rmse]}  # fmt: skip


def heldout_noise(
    model: BNN,
    x: Any,
    y: Any,
    *,
    folds: int = 5,
    num_steps: int = 5000,
    learning_rate: float = 1e-2,
    init_method: str = "network",
    rng_key: PRNGKey | None = None,
) -> HeldoutNoise:
    """The ``folds``-fold cross-validated RMSE of ``model``'s MAP fit on ``(x, y)``.

    Args:
        model: a regression :class:`~bnn_ppl.BNN` (a ``Gaussian`` likelihood; its noise sd
            learned or fixed: the MAP fit is of this model, so pass the learned-noise one to
            keep the choice from depending on a guess).
        x, y: the training rows (validated as :meth:`~bnn_ppl.BNN.check_data` does).
        folds: number of folds, 2 to ``len(x)``; rows go to folds by a random permutation.
        num_steps, learning_rate: each fold's :func:`~bnn_ppl.inference.map_estimate` (a
            fit stopped short of its mode predicts worse, and the RMSE comes out too large:
            the defaults are the ones measured on the UCI sets, README "Reference posteriors").
        init_method: where each fit starts (:meth:`~bnn_ppl.BNN.init`): ``"network"``, the
            network's own initialiser, as a network is trained (a draw from a wide prior can
            be so far out that the fit has not arrived in ``num_steps``), or ``"prior"``.
        rng_key: the permutation's and the fits' random key (default ``jax.random.key(0)``).

    Raises:
        TypeError: ``model`` is not a BNN with a Gaussian likelihood; a bad ``rng_key``.
        ValueError: bad data (as ``check_data``), ``folds`` outside 2..``len(x)``,
            ``num_steps`` < 1, ``learning_rate`` <= 0. All before anything is compiled.

    Example:
        >>> import numpy as np
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> rng = np.random.default_rng(0)
        >>> x = rng.normal(size=(200, 2)).astype(np.float32)
        >>> y = (x @ np.array([1.0, -2.0]) + 0.3 * rng.normal(size=200)).astype(np.float32)
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0), bp.likelihoods.Gaussian())
        >>> choice = heldout_noise(model, x, y, folds=4, num_steps=500, learning_rate=0.05)
        >>> choice.noise, len(choice.fold_rmse)
        (0.3, 4)
    """
    if not isinstance(model, BNN) or not isinstance(model.likelihood, Gaussian):
        raise InputTypeError(
            "model must be a regression bnn_ppl.BNN (likelihood bp.likelihoods.Gaussian), got "
            f"{type(getattr(model, 'likelihood', model)).__name__}; the held-out RMSE is a "
            "regression figure."
        )
    x, y = model.check_data(x, y)
    x, y = np.asarray(x), np.asarray(y)
    folds = check_int("folds", folds, minimum=2, maximum=len(x))
    num_steps = check_int("num_steps", num_steps)
    learning_rate = check_positive("learning_rate", learning_rate)
    check_choice("init_method", init_method, ("network", "prior"))
    key = jax.random.key(0) if rng_key is None else check_key("rng_key", rng_key)
    perm_key, fit_key = jax.random.split(key)
    order = np.asarray(jax.random.permutation(perm_key, len(x)))
    squared = np.empty(len(x))
    fold_rmse = []
    for k, rows in enumerate(np.array_split(order, folds)):
        train = np.setdiff1d(order, rows)
        fit = map_estimate(
            model, x[train], y[train], num_steps=num_steps, learning_rate=learning_rate,
            init_method=init_method, rng_key=jax.random.fold_in(fit_key, k),
            progress_bar=False,  # (one fold's short fit of several: no bar each)
        )  # fmt: skip
        draws = {name: v[None, None] for name, v in fit.params.items()}
        mean = np.asarray(predict(model, draws, x[rows]).mean).reshape(len(rows), -1)
        squared[rows] = np.mean((mean - y[rows].reshape(len(rows), -1)) ** 2, axis=1)
        fold_rmse.append(float(np.sqrt(np.mean(squared[rows]))))
    rmse = float(np.sqrt(np.mean(squared)))
    return HeldoutNoise(rmse=rmse, fold_rmse=np.asarray(fold_rmse), noise=float(f"{rmse:.1g}"))
