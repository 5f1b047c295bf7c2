"""The Bayesian neural network: network + prior + likelihood + temperature, as a NumPyro model."""

# Notes:
#
# ``BNN(...)`` is a callable NumPyro model ``model(x, y=None)``: every network parameter is a
# ``numpyro.sample`` site with its prior, the likelihood's own latents (a Gaussian noise scale
# with a prior) are sites too, and the targets are observed at site ``"y"`` inside a
# ``numpyro.plate("data", n)``. So the model works with everything in NumPyro (``NUTS(model)``,
# ``Predictive``, ``initialize_model``, ``render_model``). For large data use the sharded,
# chunked potential of :func:`bnn_ppl.inference.full_batch_potential`, which computes the same
# density from the pieces this class exposes (:meth:`BNN.sites`, :meth:`BNN.log_prior`,
# :meth:`BNN.log_likelihood`).
#
# Temperature ``T`` (the "cold posterior" of Wenzel et al. 2020 and Izmailov et al. 2021):
#
# * ``temper="likelihood"``: ``log p(θ) + (1/T) log p(D | θ)``
# * ``temper="posterior"``: ``(1/T) [log p(θ) + log p(D | θ)]``
#
# (In both, the Jacobian of the transform to unconstrained space is *not* tempered: the tempered
# density is a density over the constrained parameters.)

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions.transforms import Transform, biject_to

from bnn_ppl import priors as _priors
from bnn_ppl import validation
from bnn_ppl.flat_draws import prior_draws
from bnn_ppl.likelihoods import Likelihood, conform_targets
from bnn_ppl.network import Network, as_network
from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["BNN", "OBSERVED_SITE", "PRIOR_TEMPERING_SITE", "TEMPER_MODES", "MAX_LIKELIHOOD_SCALE",
           "Tempered"]  # fmt: skip

OBSERVED_SITE = "y"
PRIOR_TEMPERING_SITE = "prior_tempering"
TEMPER_MODES = ("likelihood", "posterior")
MAX_LIKELIHOOD_SCALE = 1e15
"""The largest n/T (rows over temperature) :meth:`BNN.check_data` accepts in float32: beyond it
the squared gradients of the tempered log-likelihood overflow."""


class Tempered:
    """The log-density multipliers of ``temperature`` ``T`` and ``temper`` (one of
    :data:`TEMPER_MODES`), for :class:`BNN` and the potentials of NumPyro models.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Cold(Tempered):
        ...     temperature: float = 0.5
        ...     temper: str = "likelihood"
        >>> Cold().likelihood_scale, Cold().prior_scale, Cold(temper="posterior").prior_scale
        (2.0, 1.0, 2.0)
    """

    temperature: float
    temper: str

    @property
    def likelihood_scale(self) -> float:
        """Multiplier of the log-likelihood: ``1/T``."""
        return 1.0 / self.temperature

    @property
    def prior_scale(self) -> float:
        """Multiplier of the log-prior: ``1/T`` if ``temper="posterior"`` else 1."""
        return 1.0 / self.temperature if self.temper == "posterior" else 1.0


COMPUTE_DTYPES = ("bfloat16", "float16", "float32", "float64")
"""The dtypes a network's pass can be computed in (:class:`BNN`'s ``compute_dtype``)."""


def check_compute_dtype(compute_dtype: Any) -> Any:
    """``compute_dtype`` as a NumPy dtype (``None`` stays ``None``), or an
    :class:`~bnn_ppl.validation.InputValueError` naming the dtypes allowed."""
    if compute_dtype is None:
        return None
    try:
        dtype = jnp.dtype(compute_dtype)
    except TypeError:
        dtype = None
    if dtype is None or dtype.name not in COMPUTE_DTYPES:
        raise InputValueError(
            f"compute_dtype must be None or one of {', '.join(COMPUTE_DTYPES)} (e.g. "
            f"'bfloat16'), got {compute_dtype!r}."
        )
    return dtype


class _Structure(NamedTuple):
    """A model's sites for one input shape: the network parameters' priors, the hyper-parameter
    sites of hierarchical priors, which hyper sites each parameter uses, and every site."""

    priors: dict[str, _priors.Prior]
    hyper: dict[str, dist.Distribution]
    hyper_of: dict[str, dict[str, str]]
    sites: dict[str, dist.Distribution]
    out_tail: tuple[int, ...]
    """The network output's shape after the batch axis."""


class BNN(Tempered):
    """A Bayesian neural network as a NumPyro model.

    Args:
        network: a ``flax.linen.Module`` or ``flax.nnx.Module``.
        prior: a prior for every parameter, a mapping ``path pattern -> prior`` or a callable
            ``(path, shape) -> prior`` (see :mod:`bnn_ppl.priors`). Every parameter must get one.
        likelihood: e.g. :class:`bnn_ppl.likelihoods.Categorical`,
            :class:`~bnn_ppl.likelihoods.Bernoulli`, :class:`~bnn_ppl.likelihoods.Gaussian`,
            :class:`~bnn_ppl.likelihoods.HeteroscedasticGaussian`,
            :class:`~bnn_ppl.likelihoods.StudentT` or :class:`~bnn_ppl.likelihoods.Poisson`.
        temperature: ``T > 0``; ``T < 1`` is a cold posterior.
        temper: ``"likelihood"`` tempers the log-likelihood only, ``"posterior"`` the whole
            log joint.
        compute_dtype: the dtype of the network's forward and backward pass, e.g.
            ``"bfloat16"`` (default ``None``: the parameters' own, float32). The weights and
            inputs are cast to it for the network only; its output is cast back before the
            likelihood, so the parameters, the per-row log-likelihoods, their sum, the gradient
            and the sampler's state stay float32. HMC stays exact for the potential it is
            given, which is the reduced-precision one (see the precision guide).

    Raises:
        ValueError: ``temperature <= 0``, an unknown ``temper`` or a ``compute_dtype`` that
            is not a floating dtype.
        TypeError: a network, prior or likelihood of the wrong kind.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.models import MLP
        >>> model = bp.BNN(MLP(hidden=(8,), out=3), prior=bp.priors.Normal(0.3),
        ...                likelihood=bp.likelihoods.Categorical(), temperature=1.0)
        >>> print(model.describe(jnp.zeros((1, 4))))
        site            shape    prior
        Dense_0.bias    (8,)     Normal(scale=0.3)
        Dense_0.kernel  (4, 8)   Normal(scale=0.3)
        Dense_1.bias    (3,)     Normal(scale=0.3)
        Dense_1.kernel  (8, 3)   Normal(scale=0.3)
        >>> from numpyro.infer import Predictive
        >>> draws = Predictive(model, num_samples=2)(jax.random.key(0), jnp.zeros((5, 4)))
        >>> draws["y"].shape
        (2, 5)
    """

    def __init__(
        self,
        network: Any,
        prior: _priors.PriorSpec,
        likelihood: Likelihood,
        temperature: float = 1.0,
        temper: str = "likelihood",
        compute_dtype: Any = None,
    ):
        self.network: Network = as_network(network)
        self.module = network
        if not (isinstance(prior, _priors.Prior | Mapping) or callable(prior)):
            raise InputTypeError(
                "prior must be a bnn_ppl prior (e.g. bp.priors.Normal(0.3)), a mapping from "
                f"path patterns to priors, or a callable; got {type(prior).__name__}."
            )
        self.prior = prior
        if not isinstance(likelihood, Likelihood):
            raise InputTypeError(
                "likelihood must be a bnn_ppl likelihood (e.g. bp.likelihoods.Categorical()), "
                f"got {type(likelihood).__name__}."
            )
        self.likelihood = likelihood
        self.temperature = validation.check_positive("temperature", temperature)
        self.temper = validation.check_choice("temper", temper, TEMPER_MODES)
        self.compute_dtype = check_compute_dtype(compute_dtype)
        self._cache: dict[Any, _Structure] = {}
        self._weight_names: frozenset[str] = frozenset()

    # ----------------------------------------------------------------- structure
    def _structure(self, x: Any, name: str = "x") -> _Structure:
        key = (tuple(np.shape(x)[1:]), jnp.result_type(x))
        if key not in self._cache:
            example = jax.ShapeDtypeStruct((1, *key[0]), key[1])
            shapes = {k: tuple(v.shape) for k, v in self.network.shapes(example).items()}
            resolved = _priors.resolve(self.prior, shapes)
            hyper: dict[str, dist.Distribution] = {}
            hyper_of: dict[str, dict[str, str]] = {}
            owner: dict[str, _priors.Prior] = {}
            for path, prior in resolved.items():
                group = path.rsplit(".", 1)[0] if getattr(prior, "per", "") == "layer" else path
                hyper_of[path] = {}
                for local, d in prior.hyper_sites().items():
                    name = f"{group}.prior_{local}"
                    if name in owner and owner[name] is not prior:
                        raise InputValueError(
                            f"two different hierarchical priors claim the hyper-parameter "
                            f"{name!r}; use one prior object per layer or per='parameter'."
                        )
                    owner[name] = prior
                    hyper[name] = d
                    hyper_of[path][local] = name
            sites = dict(hyper)
            sites.update({k: resolved[k].distribution(shapes[k]) for k in shapes})
            for name, d in self.likelihood.latent_sites().items():
                sites[name] = d
            for other in self._cache.values():
                theirs = {k: tuple(d.event_shape) for k, d in other.sites.items()}
                ours = {k: tuple(d.event_shape) for k, d in sites.items()}
                if theirs != ours:
                    diff = sorted(
                        k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k)
                    )
                    raise InputValueError(
                        f"{name} has per-example shape {key[0]}, which gives this BNN other "
                        f"parameter shapes than the inputs it was first used with ("
                        + ", ".join(f"{k}: {ours.get(k)} vs {theirs.get(k)}" for k in diff[:4])
                        + "). A BNN's parameters have one shape: check the feature count of "
                        "the data, or build a new BNN for data of another shape."
                    )
            clash = (set(hyper) & set(shapes)) | (
                {OBSERVED_SITE, PRIOR_TEMPERING_SITE} & set(sites)
            )
            clash |= set(self.likelihood.latent_sites()) & (set(hyper) | set(shapes))
            if clash:
                raise InputValueError(f"site names {sorted(clash)} are used twice; rename them.")
            self._weight_names = frozenset(shapes)
            params = {k: jax.ShapeDtypeStruct(shapes[k], jnp.float32) for k in shapes}
            out = jax.eval_shape(self.network.apply, params, example)
            self._cache[key] = _Structure(resolved, hyper, hyper_of, sites, tuple(out.shape[1:]))
        return self._cache[key]

    def priors(self, x: Any) -> dict[str, _priors.Prior]:
        """The prior each network parameter got, keyed by path, for inputs shaped like ``x``."""
        return dict(self._structure(x).priors)

    def sites(self, x: Any) -> dict[str, dist.Distribution]:
        """Every latent site with a distribution of its shape and support, in sampling order:
        prior hyper-parameters, network parameters, likelihood latents. (A hierarchical
        parameter's entry stands in for its conditional prior; use :meth:`conditional_sites`
        for densities.)"""
        return dict(self._structure(x).sites)

    def conditional_sites(self, x: Any, values: Params) -> dict[str, dist.Distribution]:
        """Every site's prior given the hyper-parameter ``values`` (the densities to evaluate)."""
        st = self._structure(x)
        out = dict(st.sites)
        for path, names in st.hyper_of.items():
            if names:
                hyper = {local: values[name] for local, name in names.items()}
                out[path] = st.priors[path].distribution(st.sites[path].event_shape, hyper)
        return out

    def transforms(self, x: Any) -> dict[str, Transform]:
        """Bijections from unconstrained space to each site's support."""
        return {k: biject_to(d.support) for k, d in self.sites(x).items()}

    def output_shape(self, x: Any) -> tuple[int, ...]:
        """Shape of the network output for inputs ``x`` (computed abstractly, once per input
        shape)."""
        return (np.shape(x)[0], *self._structure(x).out_tail)

    def describe(self, x: Any) -> str:
        """A table of every site, its shape and its prior (the parameter tree a prior sees)."""
        priors = self.priors(x)
        rows = [("site", "shape", "prior")]
        for name, d in self.sites(x).items():
            rows.append((name, str(tuple(d.event_shape)), repr(priors.get(name, d))))
        w0 = max(len(r[0]) for r in rows) + 2
        w1 = max(len(r[1]) for r in rows) + 2
        return "\n".join(f"{a:<{w0}}{b:<{w1}}{c}".rstrip() for a, b, c in rows)

    def num_params(self, x: Any) -> int:
        """Number of scalar latent values (weights and likelihood latents)."""
        return int(sum(np.prod(d.event_shape, dtype=int) for d in self.sites(x).values()))

    # ------------------------------------------------------------------ density
    def split(self, params: Params) -> tuple[Params, dict[str, Array]]:
        """Separate network weights from likelihood latents (prior hyper-parameters dropped)."""
        weights = {k: v for k, v in params.items() if k in self._weight_names}
        latent = {k: params[k] for k in self.likelihood.latent_sites()}
        return weights, latent

    def forward(self, weights: Params, x: Array) -> Any:
        """The network's output for ``weights`` (the network's parameters only), computed in
        :attr:`compute_dtype` when one is set and returned in the weights' dtype."""
        if self.compute_dtype is None:
            return self.network.apply(weights, x)
        low = self.compute_dtype

        def cast(a: Any, dtype: Any) -> Any:
            a = jnp.asarray(a)
            return a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a

        leaves = jax.tree.leaves(weights)
        back = jnp.result_type(*leaves) if leaves else jnp.result_type(float)
        out = self.network.apply(jax.tree.map(lambda a: cast(a, low), weights), cast(x, low))
        return jax.tree.map(lambda a: cast(a, back), out)

    def apply(self, params: Params, x: Array) -> Array:
        """Network output for constrained ``params`` (likelihood latents are ignored)."""
        return self.forward(self.split(params)[0], x)

    def log_prior(self, params: Params, x: Any) -> Array:
        """Untempered log prior density of constrained ``params`` (x gives the input shape)."""
        sites = self.conditional_sites(x, params)
        return sum(jnp.sum(d.log_prob(params[k])) for k, d in sites.items())

    def log_likelihood(self, params: Params, x: Array, y: Array) -> Array:
        """Untempered per-example log-likelihood, shape ``(n,)``."""
        weights, latent = self.split(params)
        return self.likelihood.log_prob(self.forward(weights, x), y, latent)

    def predict_one(self, params: Params, x: Array) -> Any:
        """Predictive distribution for one parameter draw (probabilities or a Gaussian)."""
        weights, latent = self.split(params)
        return self.likelihood.predict(self.forward(weights, x), latent)

    # ------------------------------------------------------------- initialising
    def _sample_sites(self, x: Any, draw: Any) -> Params:
        """Visit the sites in order, drawing each with ``draw(name, dist)`` given the earlier."""
        st = self._structure(x)
        values: Params = {}
        for name in st.sites:
            hyper = st.hyper_of.get(name)
            if hyper:
                local = {k: values[v] for k, v in hyper.items()}
                d = st.priors[name].distribution(st.sites[name].event_shape, local)
            else:
                d = st.sites[name]
            values[name] = draw(name, d)
        return values

    def init(self, key: PRNGKey, x: Any, method: str = "prior") -> Params:
        """Initial constrained parameter values.

        Args:
            key: random key.
            x: inputs (only their shape is used).
            method: ``"prior"`` draws every site from its prior; ``"network"`` uses the Flax
                initialisers for the weights (an nnx module returns its current values) and the
                prior for likelihood latents.
        """
        validation.check_choice("method", method, ("prior", "network"))
        st = self._structure(x)
        keys = dict(zip(st.sites, jax.random.split(key, len(st.sites) + 1)[1:], strict=True))
        drawn = prior_draws(st.sites, keys, skip={n for n, h in st.hyper_of.items() if h})
        out = self._sample_sites(x, lambda n, d: drawn[n] if n in drawn else d.sample(keys[n]))
        if method == "network":
            example = jnp.zeros((1, *np.shape(x)[1:]), jnp.result_type(x))
            out.update(self.network.init(jax.random.split(key)[0], example))
        return out

    # ---------------------------------------------------------------- checking
    def check_inputs(self, x: Any, name: str = "x") -> np.ndarray:
        """Validate inputs and return them as a NumPy array: real, finite, non-empty, of shape
        ``(n, ...features)``, with a per-example shape that gives the parameter shapes this
        model already has (a BNN's parameters have one shape).

        Raises:
            InputValueError, InputTypeError: naming ``name`` and the fix.
        """
        x = validation.as_array(name, x)
        if x.ndim < 2:
            raise InputValueError(
                f"{name} has shape {x.shape}, but inputs are (n, ...features) with one row per "
                f"example; for a single feature pass {name}[:, None] (shape ({x.shape[0]}, 1))."
            )
        self._structure(x, name)
        return x

    def check_data(self, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """Validate inputs and targets for this model; return them as NumPy arrays, the targets
        in the likelihood's target shape (:func:`bnn_ppl.likelihoods.conform_targets`).

        Raises:
            InputValueError, InputTypeError: empty, complex or non-finite data, a temperature
                so cold that n/T exceeds :data:`MAX_LIKELIHOOD_SCALE` in float32, 1-D inputs,
                inputs whose feature shape does not fit the model's parameters, different
                numbers of rows, targets that do not fit the likelihood (labels out of range,
                wrong shape or dtype).
        """
        x = self.check_inputs(x)
        y = validation.as_array("y", y)
        validation.check_same_length("x", x, "y", y)
        scale = len(x) / self.temperature
        if scale > MAX_LIKELIHOOD_SCALE and not jax.config.read("jax_enable_x64"):
            raise InputValueError(
                f"temperature {self.temperature:g} is too cold for float32 with {len(x)} rows: "
                f"1/T scales their summed log-likelihood by n/T = {scale:.3g} (at most "
                f"{MAX_LIKELIHOOD_SCALE:.0e}), and its squared gradients overflow float32; use "
                f"temperature >= {len(x) / MAX_LIKELIHOOD_SCALE:.3g} (or enable jax_enable_x64)."
            )
        return x, self.likelihood.check_targets(y, self.output_shape(x))

    # ------------------------------------------------------------- NumPyro model
    def __call__(
        self, x: Array, y: Array | None = None, *, subsample_size: int | None = None
    ) -> None:
        """The NumPyro model. ``y=None`` samples the targets (prior/posterior predictive).

        ``subsample_size=b`` evaluates the likelihood on a random minibatch of ``b`` rows
        (``numpyro.plate`` subsampling, which scales the log-likelihood by ``n / b``).

        Targets follow :func:`bnn_ppl.likelihoods.conform_targets` (``(n, 1)`` targets of a
        one-output network are read as ``(n,)``), traced or not. With ``temper="posterior"``
        the prior sites are sampled untempered and a factor site ``"prior_tempering"`` adds
        ``(1/T - 1) log p(θ)``: NumPyro's ``handlers.scale`` would also scale the Jacobian of
        a constrained site's transform, and the convention of this library (the potential,
        SVI, MAP, SG-MCMC) is a tempered density over the *constrained* parameters.
        """
        if not isinstance(x, jax.core.Tracer):
            if y is not None and not isinstance(y, jax.core.Tracer):
                x, y = self.check_data(x, y)
            else:
                x = self.check_inputs(x)
        terms: list[Array] = []

        def draw(name: str, d: dist.Distribution) -> Array:
            value = numpyro.sample(name, d)
            if self.prior_scale != 1.0:
                terms.append(jnp.sum(d.log_prob(value)))
            return value

        params = self._sample_sites(x, draw)
        if self.prior_scale != 1.0:
            numpyro.factor(PRIOR_TEMPERING_SITE, (self.prior_scale - 1.0) * sum(terms))
        weights, latent = self.split(params)
        if y is not None:
            y = conform_targets(self.likelihood, y, self.output_shape(x))
        with (
            numpyro.plate("data", x.shape[0], subsample_size=subsample_size) as idx,
            handlers.scale(scale=self.likelihood_scale),
        ):
            if subsample_size is not None:
                x = jnp.asarray(x)[idx]
                y = None if y is None else jnp.asarray(y)[idx]
            out = self.forward(weights, x)
            numpyro.sample(OBSERVED_SITE, self.likelihood.numpyro_dist(out, latent), obs=y)
