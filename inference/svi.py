"""Mean-field variational inference (the MFVI baseline of Izmailov et al. 2021) on NumPyro's SVI."""

# Notes:
#
# :func:`svi_mean_field` fits a fully factorised Gaussian (:class:`MeanFieldGuide`: NumPyro's
# ``AutoNormal``, its draws made flat so that a CNN's compile quickly) to the BNN's tempered
# posterior by maximising the ELBO with an optax optimiser. Temperature means exactly what it
# means in :class:`bnn_ppl.BNN`: the target is ``p_T(θ) ∝ p(θ)^a p(D|θ)^(1/T)`` (``a = 1`` for
# ``temper="likelihood"``, ``1/T`` for ``"posterior"``), and the ELBO is ``E_q[log p_T] + H[q]``.
# (bnn_hmc's VI multiplies the KL by T *and* divides the likelihood by T, an effective T²; we
# don't.)
#
# The analytic-KL ELBO (``TraceMeanField_ELBO``) is used where it is exact, i.e. when the prior
# is not tempered; with ``temper="posterior"`` a scaled KL would also scale the entropy, so
# ``Trace_ELBO`` is used instead.
#
# Minibatching goes through ``numpyro.plate(..., subsample_size=b)``, which scales the
# log-likelihood of a minibatch by ``n / b`` (an unbiased ELBO estimate).

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from numpyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO
from numpyro.infer.autoguide import AutoNormal
from numpyro.infer.initialization import init_to_value
from numpyro.optim import optax_to_numpyro

from bnn_ppl import validation
from bnn_ppl.divergence import check_finite_result
from bnn_ppl.flat_draws import flat_normal_draws, init_to_prior_draw
from bnn_ppl.inference.progress_bar import check_progress_bar, loop_bar
from bnn_ppl.model import BNN
from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputTypeError

__all__ = ["MeanFieldGuide", "SVIResult", "svi_mean_field", "default_optimizer"]


class MeanFieldGuide(AutoNormal):
    """NumPyro's ``AutoNormal`` with its draws made flat.

    Draws come from :func:`bnn_ppl.flat_draws.flat_normal_draws`: the same values, parameters
    and ELBO, but the draw of a many-axis site (a convolution kernel) compiles quickly. With
    the initial values drawn flat too
    (:func:`bnn_ppl.flat_draws.init_to_prior_draw`), a ResNet-20's SVI set-up on a CPU, from
    nothing compiled to two ELBO steps, took 59 s instead of 99 s (1.67x,
    ``benchmarks/init_draw.py``, RESULTS.md). :func:`svi_mean_field` builds it (its docstring
    has an example); its fitted parameters are ``AutoNormal``'s (``"<site>_auto_loc"``,
    ``"<site>_auto_scale"``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Array]:
        with flat_normal_draws():
            return super().__call__(*args, **kwargs)

    def sample_posterior(
        self, rng_key: PRNGKey, params: dict[str, Array], *args: Any, sample_shape: tuple = (),
        **kwargs: Any,
    ) -> Params:  # fmt: skip
        with flat_normal_draws():
            return super().sample_posterior(
                rng_key, params, *args, sample_shape=sample_shape, **kwargs
            )


class SVIResult(NamedTuple):
    """A fitted mean-field guide.

    ``guide`` is the :class:`MeanFieldGuide` (an ``AutoNormal``); ``params`` its fitted
    parameters (``"<site>_auto_loc"``, ``"<site>_auto_scale"``); ``losses`` the negative ELBO
    at every step (the ELBO trace).
    """

    guide: MeanFieldGuide
    params: dict[str, Array]
    losses: Array

    def sample_posterior(self, key: PRNGKey, num_samples: int) -> Params:
        """Draws from the fitted guide, keyed by site, with a leading sample axis."""
        num_samples = validation.check_int("num_samples", num_samples)
        return self.guide.sample_posterior(key, self.params, sample_shape=(num_samples,))

    def means(self) -> Params:
        """The guide's means (its median), in constrained space."""
        return self.guide.median(self.params)

    def scales(self) -> dict[str, Array]:
        """The guide's standard deviations, in unconstrained space."""
        return {
            k[: -len("_auto_scale")]: v for k, v in self.params.items() if k.endswith("_auto_scale")
        }


def default_optimizer(learning_rate: float, num_steps: int) -> optax.GradientTransformation:
    """Adam with a cosine decay of the learning rate to 1% over ``num_steps``."""
    schedule = optax.cosine_decay_schedule(learning_rate, num_steps, alpha=0.01)
    return optax.adam(schedule)


def svi_mean_field(
    model: BNN,
    x: Any,
    y: Any,
    *,
    num_steps: int = 5000,
    optimizer: optax.GradientTransformation | None = None,
    learning_rate: float = 1e-2,
    init_scale: float = 1e-2,
    init_loc: Params | None = None,
    batch_size: int | None = None,
    num_particles: int = 1,
    rng_key: PRNGKey | None = None,
    progress_bar: bool | None = None,
    minibatch_size: int | None = None,
) -> SVIResult:
    """Fit a mean-field Gaussian to the BNN's (tempered) posterior.

    Args:
        model, x, y: the BNN and its data (validated before anything compiles).
        num_steps: optimisation steps.
        optimizer: an optax transformation (default :func:`default_optimizer`: Adam with a
            cosine schedule from ``learning_rate``).
        learning_rate: initial learning rate of the default optimiser.
        init_scale: initial standard deviation of every factor (small, so that the means move
            first, as in Izmailov et al.'s MFVI).
        init_loc: constrained initial means, e.g. ``map_estimate(...).params`` (Izmailov et
            al. initialise MFVI from a MAP solution). Default: a draw from the prior.
        batch_size: rows per step (default: full batch).
        num_particles: Monte Carlo samples per ELBO estimate.
        rng_key: random key (default ``jax.random.key(0)``).
        progress_bar: a bar of the steps with the loss (the negative ELBO estimate) on stderr
            (the same result as without); default: when stderr is a
            terminal and ``CI`` is not set.
        minibatch_size: the old name of ``batch_size`` (deprecated).

    Returns:
        An :class:`SVIResult` (guide, fitted params, ELBO trace).

    Example:
        >>> import jax, optax
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> from bnn_ppl.inference import svi_mean_field
        >>> data = bp.data.load("diabetes")
        >>> model = bp.BNN(MLP(hidden=(8,), out=1), bp.priors.Normal(1.0),
        ...                bp.likelihoods.Gaussian(0.7))
        >>> fit = svi_mean_field(model, data.x_train, data.y_train, num_steps=200,
        ...                      rng_key=jax.random.key(0))
        >>> fit.losses.shape
        (200,)
        >>> draws = fit.sample_posterior(jax.random.key(1), 50)   # same layout as MCMC samples
        >>> bp.predict(model, draws, data.x_test).mean.shape
        (50, 89)
    """
    if not isinstance(model, BNN):
        raise InputTypeError(f"model must be a bnn_ppl.BNN, got {type(model).__name__}.")
    x, y = model.check_data(x, y)
    num_steps = validation.check_int("num_steps", num_steps)
    init_scale = validation.check_positive("init_scale", init_scale)
    num_particles = validation.check_int("num_particles", num_particles)
    learning_rate = validation.check_positive("learning_rate", learning_rate)
    progress_bar = check_progress_bar(progress_bar)
    if rng_key is not None:
        validation.check_key("rng_key", rng_key)
    batch_size = validation.renamed_argument(
        "minibatch_size", minibatch_size, "batch_size", batch_size
    )
    batch_size = validation.check_batch_size("batch_size", batch_size, len(x))
    if init_loc is not None:
        init_loc_fn = init_to_value(
            values=validation.check_init_values("init_loc", init_loc, model, x)
        )
    else:
        init_loc_fn = init_to_prior_draw  # init_to_sample's values, drawn flat
    if optimizer is None:
        optimizer = default_optimizer(learning_rate, num_steps)
    elif not isinstance(optimizer, optax.GradientTransformation):
        raise InputTypeError(
            f"optimizer must be an optax.GradientTransformation (e.g. optax.adam(1e-3)), got "
            f"{type(optimizer).__name__}."
        )
    guide = MeanFieldGuide(model, init_loc_fn=init_loc_fn, init_scale=init_scale)
    elbo_cls = TraceMeanField_ELBO if model.prior_scale == 1.0 else Trace_ELBO
    kwargs = {} if batch_size is None else {"subsample_size": batch_size}
    svi = SVI(
        model, guide, optax_to_numpyro(optimizer), elbo_cls(num_particles=num_particles), **kwargs
    )
    key = jax.random.key(0) if rng_key is None else rng_key
    # SVI.run's loop (NumPyro's own bar steps in Python, which rounds differently), with a
    # bar's callback in it whether or not the bar shows: the same result either way
    with loop_bar(num_steps, "svi", progress_bar, label="loss (-ELBO)") as tick:

        def body(state: Any, i: Array) -> tuple[Any, Array]:
            state, loss = svi.update(state, x, y)
            tick(i, loss)
            return state, loss

        state, losses = jax.lax.scan(body, svi.init(key, x, y), jnp.arange(num_steps))
    params = svi.get_params(state)
    check_finite_result("svi_mean_field", losses, params)
    return SVIResult(guide=guide, params=params, losses=losses)
