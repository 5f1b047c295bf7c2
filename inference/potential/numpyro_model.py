"""The sharded, chunked full-batch potential of any NumPyro model with a data plate."""

# Notes:
#
# :func:`model_potential` takes a plain NumPyro model whose data-dependent sites sit inside
# ``numpyro.plate(data_plate, N)`` and returns a :class:`ModelPotential`, a
# :class:`~bnn_ppl.inference.FullBatchPotential`, so NumPyro's ``HMC``/``NUTS(potential_fn=...)``,
# our :class:`~bnn_ppl.inference.HMC`/:class:`~bnn_ppl.inference.NUTS` (data as jit arguments)
# and ``MCMC.get_samples()`` (the model's own site names) all work on it.
#
# The rule for what is sharded: the keyword arguments named in ``data={"x": x, "y": y}``, every
# one with ``N`` rows on its leading axis. They are padded to whole chunks on every device (with
# copies of real rows, masked out) and split over the 1-D ``"data"`` mesh; every other argument
# (``*model_args``, ``model_kwargs``) is passed to every call unchanged. The model must size its
# plate from the data (``numpyro.plate("data", x.shape[0])``), since it is called on chunks.
#
# How the density is split (one concept, two traces):
#
# * **global sites** (every sample site outside the plate: weights, noise, hyper-priors) are
#   traced once per evaluation on a *probe* (the data's first row), with the unconstrained
#   values mapped to each site's support by ``biject_to`` (so supports that depend on other
#   sites work) and the log |Jacobian| kept apart, untempered;
# * **plate sites** (observed sites inside the plate) are traced per chunk with the global values
#   substituted, their log densities summed per row, masked and added up by
#   :func:`~bnn_ppl.inference.potential.sharded_sum.sharded_chunked_sum` (one ``psum``; value and
# gradient
#   in one pass, memory flat in ``N``).
#
# Why a sibling of :func:`~bnn_ppl.inference.full_batch_potential` and not a rewrite of ``BNN``
# onto it: the ``BNN`` path knows its network and evaluates ``network.apply`` and the
# likelihood directly, with no NumPyro trace in the chunk loop, and its checkpointed runs
# (:func:`~bnn_ppl.inference.fit` with ``checkpoint_dir``) fingerprint the network and priors;
# both share the one sharded sum, which is the part worth sharing.
#
# Refused before anything compiles (``InputValueError`` naming the site): a model with no plate
# named ``data_plate``; a plate whose size is not the data's rows; a latent site inside the plate
# (per-row latents are not supported); an observed site outside the plate; a global site whose
# density depends on the sharded data (found by following the data through the jaxpr), or whose
# shape or density depends on their number of rows (a prior scaled by ``x.shape[0]``: pass ``n``
# as a model argument instead; see :mod:`bnn_ppl.inference.potential.model_structure`); a
# per-row array passed outside ``data`` that the plate reads by position (``offset[:m]``).
#
# Tempering (``temperature=T``), as for ``BNN``: ``temper="likelihood"`` scales the plate sites'
# log density by ``1/T``, ``temper="posterior"`` the global sites' too; the Jacobian is never
# tempered (a tempered density over the constrained values).
#
# Several processes (``jax.distributed``), as for ``BNN``: when ``devices`` (default
# ``jax.devices()``) belong to several processes, every process makes the same call with
# ``data`` holding only **its own block of rows**
# (:func:`bnn_ppl.inference.potential.distributed.process_rows`), as NumPy arrays. The potential
# gathers
# the row counts (``num_data`` and the plate size are the global ``n``: the model is traced on
# the global shapes), checks them and a fingerprint of the arguments that must agree on every
# process alike, probes the global sites on the global first row, and builds the global padded
# and masked arrays: padding and masking are those of one process over the same devices, and
# every process evaluates the same potential (see :mod:`bnn_ppl.inference.potential.distributed`).
#
# Deterministic sites: ``postprocess_fn`` (so ``MCMC.get_samples()``) also returns every
# ``numpyro.deterministic`` site outside the plate whose value does not depend on the sharded
# data. The others (in the plate, or using ``x @ w``, ``x.shape[0]``) would need every row in
# every draw; as they leave the density untouched, the model is accepted with one warning naming
# them and pointing to ``Predictive`` (see :func:`.model_structure.deterministic_sites`).
#
# Checkpointed runs go through :func:`~bnn_ppl.inference.run_segments` (any kernel).

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from numpyro import handlers
from numpyro.distributions.transforms import Transform, biject_to
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.util import initialize_model, unconstrain_fn

from bnn_ppl import validation
from bnn_ppl.flat_draws import init_to_prior_draw
from bnn_ppl.inference.potential.bnn import (
    FullBatchPotential,
    accumulation_dtype,
    cpu_chunk,
    is_real,
    memory_chunk,
    mesh_devices,
)
from bnn_ppl.inference.potential.bnn import compute_dtype as data_dtype
from bnn_ppl.inference.potential.distributed import (
    check_process_local,
    describe_arguments,
    first_row,
    gather_layout,
    place_local,
)
from bnn_ppl.inference.potential.model_structure import (
    check_globals,
    check_row_arguments,
    check_sites,
    deterministic_sites,
    in_plate,
    per_row,
    site_lp,
    structure,
)
from bnn_ppl.inference.potential.sharded_sum import (
    CHAIN_BATCHING,
    DATA_AXIS,
    bytes_per_row,
    chain_batched,
    device_rows,
    pad_rows,
    sharded_chunked_sum,
)
from bnn_ppl.model import TEMPER_MODES, Tempered, check_compute_dtype
from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["ModelData", "ModelPotential", "model_potential"]


class ModelData(NamedTuple):
    """The sharded keyword arguments (padded, split on the ``"data"`` mesh axis) and the mask
    (False on padding rows)."""

    arrays: dict[str, Array]
    mask: Array


@dataclass(frozen=True, eq=False)
class ModelPotential(FullBatchPotential, Tempered):
    """A NumPyro model's tempered potential on fixed data. Build with :func:`model_potential`.

    ``model`` is the model function and ``data`` a :class:`ModelData`; the other attributes
    are those of :class:`~bnn_ppl.inference.FullBatchPotential`, plus the model's fixed
    arguments, the plate name, the temperature and the init strategy.
    """

    model_args: tuple
    model_kwargs: dict
    probe: dict[str, np.ndarray]
    data_plate: str
    plate_sites: tuple[str, ...]
    temperature: float
    temper: str
    init_strategy: Callable
    deterministic_sites: tuple[str, ...]
    compute_dtype: Any = field(default=None, kw_only=True)
    """The dtype the plate sites' model code runs in per chunk (``None``: as given)."""

    def _trace(self, substitute: dict | Callable, kwargs: Mapping[str, Any]) -> Any:
        key = "substitute_fn" if callable(substitute) else "data"
        model = handlers.substitute(self.model, **{key: substitute})
        return handlers.trace(model).get_trace(*self.model_args, **self.model_kwargs, **kwargs)

    # ------------------------------------------------------------------ structure
    @cached_property
    def transforms(self) -> dict[str, Transform | None]:
        """Per global latent, the bijection to its support at the initial values (the
        potential recomputes it at every evaluation, so dependent supports work)."""
        tr = self._trace(self.postprocess_fn(self.init_params(jax.random.key(0))), self.probe)
        return {k: (None if is_real(s["fn"].support) else biject_to(s["fn"].support))
                for k, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}

    @cached_property
    def num_params(self) -> int:
        """Number of scalar parameters HMC moves (the flat unconstrained dimension)."""
        u = self.init_params(jax.random.key(0))
        return int(sum(np.size(a) for a in jax.tree.leaves(u)))

    # ------------------------------------------------------------- constraining
    def constrain(self, unconstrained: Params) -> tuple[Params, Array]:
        """Constrained values of the global latent sites, and the log |Jacobian|."""
        return self._globals(unconstrained)[:2]

    def _global_trace(self, unconstrained: Params) -> tuple[Any, Array]:
        """One trace of the model on the probe, latents in their supports; the log |Jacobian|."""
        log_dets: list[Array] = []

        def to_support(site: dict) -> Any:
            if site["type"] != "sample" or site["name"] not in unconstrained:
                return None
            u, t = unconstrained[site["name"]], biject_to(site["fn"].support)
            if is_real(site["fn"].support):
                return u
            value = t(u)
            log_det = jnp.sum(t.log_abs_det_jacobian(u, value))
            log_dets.append(log_det if site["scale"] is None else site["scale"] * log_det)
            return value

        tr = self._trace(to_support, self.probe)
        return tr, sum(log_dets, jnp.zeros((), self.dtype)).astype(self.dtype)

    def _globals(self, unconstrained: Params) -> tuple[Params, Array, Array]:
        """``(values, log_det, log_prior)``: one trace of the model on the probe."""
        tr, log_det = self._global_trace(unconstrained)
        values, log_prior = {}, jnp.zeros((), self.dtype)
        for name, site in tr.items():
            if site["type"] != "sample" or in_plate(site, self.data_plate):
                continue
            if not site["is_observed"]:
                values[name] = site["value"]
            log_prior = log_prior + jnp.sum(site_lp(site)).astype(self.dtype)
        return values, log_det, log_prior

    def postprocess_fn(self, unconstrained: Params) -> Params:
        """Unconstrained sample -> the model's constrained latent sites and its global
        deterministic sites (:attr:`deterministic_sites`), as ``get_samples()`` shows them."""
        tr = self._global_trace(unconstrained)[0]
        return {n: s["value"] for n, s in tr.items() if n in self.deterministic_sites
                or (s["type"] == "sample" and not s["is_observed"])}

    def unconstrain(self, params: Params) -> Params:
        """Constrained values -> unconstrained ones (NumPyro's ``unconstrain_fn``); the
        deterministic sites of a ``postprocess_fn`` output are left out."""
        kwargs = {**self.model_kwargs, **self.probe}
        params = {k: v for k, v in params.items() if k not in self.deterministic_sites}
        return unconstrain_fn(self.model, self.model_args, kwargs, params)

    def init_params(
        self, key: PRNGKey, num_chains: int | None = None, method: str | Callable | None = None
    ) -> Params:
        """Unconstrained initial values from a NumPyro init strategy (leading axis
        ``num_chains`` if given): ``method=None`` the potential's ``init_strategy``,
        ``"prior"`` a draw from the prior (``init_to_sample``'s values, drawn flat:
        :func:`bnn_ppl.flat_draws.init_to_prior_draw`), or any strategy."""
        key = validation.check_key("key", key)
        strategy = {None: self.init_strategy, "prior": init_to_prior_draw}.get(method, method)
        if not callable(strategy):
            raise InputValueError(f"method must be None, 'prior' or an init strategy: {method!r}.")
        kwargs = {**self.model_kwargs, **self.probe}

        def one(k: PRNGKey) -> Params:
            info = initialize_model(k, self.model, init_strategy=strategy,
                                    model_args=self.model_args, model_kwargs=kwargs)
            return {n: info.param_info.z[n] for n in info.param_info.z}

        if num_chains is None:
            return one(key)
        keys = jax.random.split(key, validation.check_int("num_chains", num_chains))
        return jax.tree.map(lambda *a: jnp.stack(a), *[one(k) for k in keys])

    # ------------------------------------------------------------------ density
    @cached_property
    def _sharded_log_likelihood(self) -> Callable[[Params, ModelData], Array]:
        acc, plate_sites = self.dtype, set(self.plate_sites)

        low = self.compute_dtype

        def chunk_ll(values: Params, batch: dict[str, Array], mask: Array) -> Array:
            total = jnp.zeros((), acc)
            if low is None:
                trace = self._trace(values, batch)
            else:  # the model's code in `low`; each plate site's density in the values' dtype
                cast = {k: _cast(a, low) for k, a in batch.items()}
                trace = self._trace(jax.tree.map(lambda a: _cast(a, low), values), cast)
            for name, site in trace.items():
                if name not in plate_sites:
                    continue
                if low is not None:
                    site = _site_back(site, cast, batch, acc)
                rows = per_row(site_lp(site), site, self.data_plate)
                total = total + jnp.sum(jnp.where(mask, rows, 0)).astype(acc)
            return total

        total = sharded_chunked_sum(
            chunk_ll, self.mesh, self.num_chunks, acc, chain_batching=self.chain_batching
        )
        return lambda values, data: total(values, data.arrays, data.mask)

    def potential_fn_gen(self, data: ModelData | None = None) -> Callable[[Params], Array]:
        """``potential_fn`` with the data as an argument (``None``: :attr:`data`)."""
        data = self.data if data is None else data

        def potential_fn(unconstrained: Params) -> Array:
            values, log_det, log_prior = self._globals(unconstrained)
            log_lik = self._sharded_log_likelihood(values, data)
            return -(self.prior_scale * log_prior + self.likelihood_scale * log_lik + log_det)

        return potential_fn

    @cached_property
    def _batch_log_likelihood(self) -> Callable[[Params, Array, dict[str, Array]], Array]:
        """``f(values, idx, arrays)``: the plate sites' log density on rows ``idx``; vectorized
        chains of a convolutional model run it one after another (``chain_batching``)."""

        def batch_log_lik(values: Params, idx: Array, arrays: dict[str, Array]) -> Array:
            tr = self._trace(values, {k: a[idx] for k, a in arrays.items()})
            return sum(jnp.sum(site_lp(tr[k])).astype(self.dtype) for k in self.plate_sites)

        return chain_batched(batch_log_lik, self.chain_batching)

    def minibatch_potential_fn_gen(
        self, data: ModelData | None = None
    ) -> Callable[[Params, Array], Array]:
        """Unbiased minibatch estimate of the potential: ``f(unconstrained, idx) -> scalar``
        with the plate sites' log density on rows ``idx`` scaled by ``num_data / len(idx)``."""
        data, n = (self.data if data is None else data), self.num_data
        batch_log_lik = self._batch_log_likelihood

        def potential_fn(unconstrained: Params, idx: Array) -> Array:
            values, log_det, log_prior = self._globals(unconstrained)
            ll = batch_log_lik(values, idx, data.arrays) * (n / idx.shape[0])
            return -(self.prior_scale * log_prior + self.likelihood_scale * ll + log_det)

        return potential_fn


def _cast(a: Any, dtype: Any) -> Any:
    """``a`` in ``dtype`` if it is a floating array, else unchanged."""
    if isinstance(a, jax.Array | np.ndarray) and jnp.issubdtype(a.dtype, jnp.floating):
        return a.astype(dtype)
    return a


def _site_back(site: dict, cast: dict[str, Array], batch: dict[str, Array], dtype: Any) -> dict:
    """A plate site traced in reduced precision, with its distribution's parameters in
    ``dtype`` and its observed value the data's own (not the cast copy): its log density is
    then computed in ``dtype`` from the reduced-precision network output."""
    value = next((batch[k] for k, a in cast.items() if site["value"] is a), None)
    value = _cast(site["value"], dtype) if value is None else value
    fn = jax.tree.map(lambda a: _cast(a, dtype), site["fn"])
    return {**site, "fn": fn, "value": value}


def check_model_call(
    model: Callable, model_args: tuple, model_kwargs: Mapping[str, Any], data: Mapping[str, Any]
) -> None:
    """Refuse, naming the clash, a ``model`` that cannot be called as ``model(*model_args,
    **model_kwargs, **data)`` (e.g. NumPyro's ``model(X, Y, D_H)`` given ``model_args=(5,)``
    and ``data={"X": ..., "Y": ...}``: the 5 would fill ``X``); a model whose signature Python
    cannot read is left to its call.

    >>> def model(X, Y, D_H, D_Y=1): ...
    >>> check_model_call(model, (5,), {}, {"X": 0, "Y": 0})
    Traceback (most recent call last):
    ...
    bnn_ppl.validation.InputTypeError: model(X, Y, D_H, D_Y=1) cannot take model_args (5,) ...
    """
    import inspect

    try:
        sig = inspect.signature(model)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*model_args, **model_kwargs, **data)
    except TypeError as e:
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        positional = [p.name for p in sig.parameters.values() if p.kind in kinds]
        filled = positional[: len(model_args)]
        named = set(data) | set(model_kwargs)
        taken = [name for name in filled if name in named]
        text = (
            f"model{sig} cannot take model_args {tuple(model_args)!r} with the keywords "
            f"{sorted(data)} of data" + (f" and {sorted(model_kwargs)} of model_kwargs"
                                         if model_kwargs else "") + f" ({e})."
        )  # fmt: skip
        if taken:
            free = [name for name in positional if name not in named]
            pairs = dict(zip(free, model_args, strict=False))
            text += (
                f" model_args fill the model's parameters from the left, so they would fill "
                f"{taken}, which data gives by keyword. Pass the other arguments by keyword: "
                f"model_kwargs={pairs!r} and no model_args."
            )
        raise InputTypeError(text) from None


def model_potential(
    model: Callable,
    *model_args: Any,
    data: Mapping[str, Any],
    model_kwargs: Mapping[str, Any] | None = None,
    data_plate: str = "data",
    chunk_size: int | None = None,
    devices: Sequence[jax.Device] | None = None,
    dtype: Any = None,
    temperature: float = 1.0,
    temper: str = "likelihood",
    init_strategy: Callable = init_to_uniform,
    chain_batching: str = "auto",
    compute_dtype: Any = None,
) -> ModelPotential:
    """Build the sharded, chunked potential of the NumPyro ``model`` on ``data``.

    Args:
        model: a NumPyro model ``model(*model_args, **model_kwargs, **data)`` whose observed
            sites sit inside ``numpyro.plate(data_plate, n)`` with ``n`` the data's rows.
        model_args: positional arguments passed unchanged to every call.
        data: the sharded keyword arguments, each with ``n`` rows on its leading axis; with
            devices of several processes, this process's block of rows of each.
        model_kwargs: other keyword arguments, passed unchanged.
        data_plate: the name of the plate over the rows.
        chunk_size, devices, dtype: as for :func:`~bnn_ppl.inference.full_batch_potential`
            (``devices`` may span processes, see above): ``chunk_size`` an int, ``None``
            (on the CPU backend the rows whose traced values take about 8 MiB, as for a
            ``BNN``: :func:`~bnn_ppl.inference.potential.bnn.cpu_chunk`; else the memory
            rule) or ``"auto"`` (the memory rule of :mod:`bnn_ppl.inference.potential.bnn` on
            any backend, with the model's own potential compiled for a probe chunk; not with
            several processes);
            :attr:`~bnn_ppl.inference.FullBatchPotential.chunk_rule` says which rule chose
            it.
        temperature, temper: ``T > 0``; ``"likelihood"`` or ``"posterior"`` (see above).
        init_strategy: the NumPyro init strategy of :meth:`ModelPotential.init_params`.
        chain_batching: what vectorized chains do, as for
            :func:`~bnn_ppl.inference.full_batch_potential`; ``"auto"`` (default): one chain
            after another when the model's per-chunk log-likelihood has a convolution.
        compute_dtype: run the model's per-chunk code (its network) in this dtype, e.g.
            ``"bfloat16"``: the global values and the floating data arrays are cast to it for
            the trace, and each observed site's log density is computed from the distribution's
            parameters cast back to ``dtype`` at the data's own (uncast) observed values. The
            prior, the sum, the gradient and the sampler's state stay float32.

    Raises:
        InputValueError, InputTypeError: bad data, arguments, or a model that breaks one of
            the rules in the module docstring (naming the site); all before compiling. With
            several processes also (on every process alike): a block of rows that is not this
            process's, arguments that differ between processes, a global ``jax.Array`` in
            ``data``.

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> import numpyro, numpyro.distributions as dist
        >>> from bnn_ppl.inference import model_potential
        >>> def model(x, y=None):
        ...     w = numpyro.sample("w", dist.Normal(0, 1).expand([3]).to_event(1))
        ...     sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        ...     with numpyro.plate("data", x.shape[0]):
        ...         numpyro.sample("y", dist.Normal(x @ w, sigma), obs=y)
        >>> x = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32)
        >>> pot = model_potential(model, data={"x": x, "y": x[:, 0]}, chunk_size=4)
        >>> pot.num_params, pot.num_chunks, pot.chunk_size
        (4, 3, 4)
        >>> u = pot.init_params(jax.random.key(0))
        >>> sorted(pot.postprocess_fn(u)), bool(jnp.isfinite(pot.potential_fn(u)))
        (['sigma', 'w'], True)
    """
    if not callable(model):
        raise InputTypeError(f"model must be a NumPyro model function, got {type(model).__name__}.")
    if not isinstance(data, Mapping) or not data:
        raise InputValueError("data must be a non-empty mapping {keyword: array}, e.g. "
                              "data={'x': x, 'y': y}, of the model's per-row arguments.")
    model_kwargs = dict(model_kwargs or {})
    if clash := sorted(set(model_kwargs) & set(data)):
        raise InputValueError(f"{clash} are in both data and model_kwargs; pass each once.")
    check_model_call(model, model_args, model_kwargs, data)
    for k, a in data.items():
        check_process_local(f"data[{k!r}]", a)
    arrays = {k: validation.as_array(f"data[{k!r}]", a) for k, a in data.items()}
    first = next(iter(arrays))
    n = arrays[first].shape[0]
    for k, a in arrays.items():
        if a.shape[0] != n:
            raise InputValueError(f"data[{k!r}] has {a.shape[0]} rows but data[{first!r}] has "
                                  f"{n}; every sharded argument has one row per example.")
    arrays = {k: a.astype(data_dtype(a.dtype)) for k, a in arrays.items()}
    temperature = validation.check_positive("temperature", temperature)
    temper = validation.check_choice("temper", temper, TEMPER_MODES)
    validation.check_choice("chain_batching", chain_batching, CHAIN_BATCHING)
    low = check_compute_dtype(compute_dtype)
    chunk_size = validation.check_chunk_size(chunk_size)
    acc = accumulation_dtype(dtype)
    devices = mesh_devices(n, chunk_size, devices)

    layout = None
    if len({d.process_index for d in devices}) > 1:  # several processes: this process's rows
        agree = ("the keys, trailing shapes or dtypes of data, chunk_size, dtype, temperature, "
                 "temper, data_plate, devices, or the structure, shapes or scalar values of "
                 "model_args/model_kwargs")
        args = describe_arguments((model_args, model_kwargs))
        extra = (str(acc), temperature, temper, data_plate, args)
        layout = gather_layout(arrays, devices, chunk_size, fingerprint=extra,
                               caller="model_potential", argument="data", agree=agree)
        n, probe = layout.num_data, first_row(arrays)  # global rows; global row 0
    else:
        probe = {k: a[:1] for k, a in arrays.items()}
    spec = {k: jax.ShapeDtypeStruct((n, *a.shape[1:]), a.dtype) for k, a in arrays.items()}
    full, values = structure(model, model_args, model_kwargs, spec, data_plate)
    probe_spec = {k: jax.ShapeDtypeStruct(a.shape, a.dtype) for k, a in probe.items()}
    one, one_values = structure(model, model_args, model_kwargs, probe_spec, data_plate)
    check_sites(full, one, n, data_plate)
    check_globals(model, model_args, model_kwargs, data_plate, probe, (spec, values),
                  (probe_spec, one_values))
    check_row_arguments(model, model_args, model_kwargs, data_plate, n, values, probe)
    kept = deterministic_sites(model, model_args, model_kwargs, values, probe, data_plate)
    fields = dict(
        model=model, model_args=tuple(model_args), model_kwargs=model_kwargs, probe=probe,
        data_plate=data_plate, plate_sites=tuple(s.name for s in full if s.plate_size),
        temperature=temperature, temper=temper, init_strategy=init_strategy,
        deterministic_sites=tuple(kept), chain_batching=chain_batching, dtype=acc,
        compute_dtype=low,
    )
    rule = "chunk_size"
    if chunk_size is None and layout is not None:
        rule = "several processes"
    elif chunk_size is None and devices[0].platform == "cpu":
        per_row = _model_bytes_per_row(fields, arrays, devices[0])
        chunk_size, rule = cpu_chunk(-(-n // len(devices)), per_row), "cpu working set"
    elif chunk_size in (None, "auto"):  # the memory rule of bnn_ppl.inference.potential.bnn
        data_bytes = 1 + sum(int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize
                             for a in arrays.values())  # fmt: skip
        chunk_size, rule = memory_chunk(
            -(-n // len(devices)), _model_probe(fields, arrays, devices[0]), devices,
            data_bytes_per_row=data_bytes,
        )
    if chunk_size in (None, "auto"):
        chunk_size = None

    if layout is not None:
        mesh, placed, mask = place_local(arrays, layout)
        sharded, chunk, num_chunks = ModelData(placed, mask), layout.chunk, layout.num_chunks
    else:
        chunk, num_chunks = device_rows(n, len(devices), chunk_size)
        padded = len(devices) * num_chunks * chunk
        mesh = Mesh(np.asarray(devices), (DATA_AXIS,))
        sharding = NamedSharding(mesh, P(DATA_AXIS))
        sharded = ModelData(
            {k: jax.device_put(pad_rows(a, padded), sharding) for k, a in arrays.items()},
            jax.device_put(np.arange(padded) < n, sharding),
        )
    return ModelPotential(
        data=sharded, mesh=mesh, num_data=n, chunk_size=chunk, num_chunks=num_chunks,
        _x_spec=None, chunk_rule=rule, **fields,
    )


def _one_chunk(fields: dict, arrays: dict[str, np.ndarray], device: Any, rows: int) -> tuple:
    """``(potential, data spec, parameters spec)`` of one chunk of ``rows`` rows on ``device``:
    shapes only, nothing placed or run (the probes of the chunk rules)."""
    mesh = Mesh(np.asarray([device]), (DATA_AXIS,))
    sharding = NamedSharding(mesh, P(DATA_AXIS))
    data = ModelData(
        {k: jax.ShapeDtypeStruct((rows, *a.shape[1:]), a.dtype, sharding=sharding)
         for k, a in arrays.items()},
        jax.ShapeDtypeStruct((rows,), bool, sharding=sharding),
    )  # fmt: skip
    pot = ModelPotential(data=data, mesh=mesh, num_data=rows, chunk_size=rows,
                         num_chunks=1, _x_spec=None, **fields)  # type: ignore[arg-type]
    return pot, data, jax.eval_shape(lambda: pot.init_params(jax.random.key(0)))


def _model_bytes_per_row(fields: dict, arrays: dict[str, np.ndarray], device: Any) -> int:
    """Bytes of the values one more row adds to the potential's computation (its jaxpr traced
    for one chunk of 2 rows and of 1, nothing compiled or run; at least 1), for the CPU rule."""

    def jaxpr(rows: int) -> Any:
        pot, data, u = _one_chunk(fields, arrays, device, rows)
        return jax.make_jaxpr(lambda u, d: pot.potential_fn_gen(d)(u))(u, data)

    return bytes_per_row(jaxpr)


def _model_probe(fields: dict, arrays: dict[str, np.ndarray], device: Any) -> Callable:
    """``rows -> Compiled``: the potential's value and gradient for one chunk of ``rows`` rows
    on ``device`` (shapes only: nothing runs, no data are placed), for the memory rule."""

    def compile_probe(rows: int) -> Any:
        pot, data, u = _one_chunk(fields, arrays, device, rows)
        f = jax.jit(lambda u, d: jax.value_and_grad(pot.potential_fn_gen(d))(u))
        return f.lower(u, data).compile()

    return compile_probe
