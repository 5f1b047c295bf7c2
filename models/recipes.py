"""The BNN of the papers' small experiments: an MLP with one hidden layer, an isotropic prior,
and the likelihood its data set's task calls for.

Example:
    >>> import bnn_ppl as bp
    >>> from bnn_ppl.models import mlp_bnn
    >>> model = mlp_bnn(bp.data.load("digits"), width=8, prior=0.3)
    >>> type(model.likelihood).__name__, model.num_params(bp.data.load("digits").x_train[:1])
    ('Categorical', 610)
"""

# Notes:
#
# Izmailov et al. (2021) and the examples fit this model over and over: ``MLP(hidden=(width,))``
# with a Normal prior; a categorical likelihood for classification, or for regression a Gaussian
# whose noise sd has a HalfNormal prior (in standardised target units). :func:`mlp_bnn` builds it
# from plain values (never a script's flags).

from __future__ import annotations

from typing import Any

from bnn_ppl import likelihoods, priors
from bnn_ppl.data import Dataset
from bnn_ppl.model import BNN
from bnn_ppl.models.mlp import MLP
from bnn_ppl.validation import InputTypeError

__all__ = ["mlp_bnn"]


def mlp_bnn(
    data: Dataset,
    width: int,
    prior: float | Any,
    *,
    noise_prior: float | Any = 1.0,
    noise: float | None = None,
    temperature: float = 1.0,
    temper: str = "likelihood",
) -> BNN:
    """``MLP(hidden=(width,))`` with ``prior`` on every parameter and ``data``'s likelihood.

    Args:
        data: the :class:`~bnn_ppl.data.Dataset` it is for: classification gets
            ``Categorical`` and ``data.num_classes`` outputs; regression one output and a
            ``Gaussian`` likelihood whose noise sd has a ``HalfNormal(noise_prior)`` prior
            (or ``noise_prior`` itself, a distribution).
        width: hidden units.
        prior: a float (the scale of an isotropic ``Normal`` prior) or a prior of
            :mod:`bnn_ppl.priors` (e.g. ``bp.priors.from_string("laplace:0.3")``).
        noise_prior: regression only: the HalfNormal's scale (standardised targets), or the
            noise sd's prior itself (a NumPyro distribution with positive support).
        noise: regression only: a fixed noise sd instead of the HalfNormal prior
            (``None``, the default: the sd is inferred).
        temperature, temper: as :class:`~bnn_ppl.BNN`'s.

    Raises:
        TypeError: ``data`` is not a Dataset.
        ValueError: what :class:`~bnn_ppl.BNN` and the priors refuse (e.g. a scale <= 0).

    Example:
        >>> import bnn_ppl as bp
        >>> reg = mlp_bnn(bp.data.load("gap1d"), width=4, prior=1.0, temperature=0.5)
        >>> type(reg.likelihood).__name__, reg.temperature
        ('Gaussian', 0.5)
    """
    import numpyro.distributions as dist


    if not isinstance(data, Dataset):
        raise InputTypeError(f"data must be a bp.data.Dataset, got {type(data).__name__}.")
    if data.task == "classification":
        likelihood, out = likelihoods.Categorical(), data.num_classes
    else:
        learned = noise_prior if isinstance(noise_prior, dist.Distribution) else (
            dist.HalfNormal(noise_prior))
        scale = learned if noise is None else noise
        likelihood, out = likelihoods.Gaussian(scale=scale), 1
    if isinstance(prior, int | float) and not isinstance(prior, bool):
        prior = priors.Normal(prior)
    return BNN(MLP(hidden=(width,), out=out), prior, likelihood, temperature=temperature,
               temper=temper)  # fmt: skip
