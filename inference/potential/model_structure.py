"""What :func:`~bnn_ppl.inference.model_potential` learns about a NumPyro model, and its rules."""

# Notes:
#
# :func:`structure` traces the model abstractly (``jax.eval_shape``: nothing is computed) and
# records every sample site: observed or latent, a factor or not, inside the data plate (and its
# size) or not. :func:`check_sites` refuses what the sharded potential cannot evaluate, naming the
# site, and :func:`check_globals` a global site that depends on the data: on their values
# (:func:`data_dependent`, following the data forward through the jaxpr of the global log
# densities) or on their number of rows (:func:`size_dependent`, comparing that jaxpr on one row
# and on all rows). :func:`deterministic_sites` finds the deterministic sites ``postprocess_fn``
# can return (the data analysis on their values).

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal
from numpyro import handlers
from numpyro.distributions import Unit

from bnn_ppl.types import Array, Params
from bnn_ppl.validation import InputValueError

__all__ = [
    "DeterministicSiteWarning", "Site", "check_globals", "check_row_arguments", "check_sites",
    "data_dependent", "deterministic_sites", "in_plate", "per_row", "row_arguments", "site_lp",
    "size_dependent", "structure",
]


class DeterministicSiteWarning(UserWarning):
    """Deterministic sites that ``postprocess_fn`` leaves out (:func:`deterministic_sites`),
    named once, when :func:`~bnn_ppl.inference.model_potential` builds the potential."""


class Site(NamedTuple):
    """What the structure trace learns about one sample site."""

    name: str
    observed: bool
    factor: bool
    plate_size: int | None
    """The data plate's size if the site is inside it, else None."""
    rows: tuple[int, int] | None = None
    """A plate site's rows along the plate's dimension: ``(of its log density, of its
    value)`` (1 where it broadcasts); else None."""
    sizes: tuple[int, int] | None = None
    """A plate site's number of entries: ``(of its log density, of its value)``."""
    discrete: bool = False
    """Whether it is a latent site with a discrete support."""


def in_plate(site: dict, plate: str) -> bool:
    """Whether a trace site sits inside the plate named ``plate``."""
    return any(f.name == plate for f in site["cond_indep_stack"])


def per_row(lp: Array, site: dict, plate: str) -> Array:
    """Sum a plate site's log density over every batch axis but the plate's."""
    dim = next(f.dim for f in site["cond_indep_stack"] if f.name == plate)
    lp = jnp.moveaxis(lp, lp.ndim + dim, 0)
    return jnp.sum(lp.reshape(lp.shape[0], -1), axis=1)


def site_lp(site: dict) -> Array:
    """A trace site's log density at its value, times its scale (as NumPyro's log_density)."""
    lp = site["fn"].log_prob(site["value"])
    return lp if site["scale"] is None else site["scale"] * lp


def structure(
    model: Callable, args: tuple, kwargs: dict, data: dict[str, Any], plate: str
) -> tuple[list[Site], dict[str, jax.ShapeDtypeStruct]]:
    """Every sample site of the model on ``data`` (shapes), and the latent values' shapes.

    Example:
        >>> import jax, numpy as np, numpyro, numpyro.distributions as dist
        >>> def model(x, y=None):
        ...     w = numpyro.sample("w", dist.Normal(0, 1))
        ...     with numpyro.plate("data", x.shape[0]):
        ...         numpyro.sample("y", dist.Normal(w * x, 1.0), obs=y)
        >>> spec = {k: jax.ShapeDtypeStruct((5,), np.float32) for k in ("x", "y")}
        >>> sites, values = structure(model, (), {}, spec, "data")
        >>> [(s.name, s.observed, s.plate_size) for s in sites], values["w"].shape
        ([('w', False, None), ('y', True, 5)], ())
    """
    sites: list[Site] = []

    def run(d: dict[str, Array]) -> dict[str, Array]:
        tr = handlers.trace(handlers.seed(model, 0)).get_trace(*args, **kwargs, **d)
        for name, s in tr.items():
            if s["type"] == "sample":
                frame = next((f for f in s["cond_indep_stack"] if f.name == plate), None)
                rows = sizes = None
                if frame is not None:
                    lp, value = site_lp(s), jnp.shape(s["value"])
                    batch = value[: len(value) - s["fn"].event_dim]
                    rows = (_along(jnp.shape(lp), frame.dim), _along(batch, frame.dim))
                    sizes = (int(np.prod(jnp.shape(lp))), int(np.prod(value)))
                discrete = not s["is_observed"] and bool(
                    getattr(s["fn"].support, "is_discrete", False))
                sites.append(Site(name, bool(s["is_observed"]), isinstance(s["fn"], Unit),
                                  None if frame is None else frame.size, rows, sizes,
                                  discrete))
        return {k: s["value"] for k, s in tr.items()
                if s["type"] == "sample" and not s["is_observed"]}

    values = jax.eval_shape(run, data)
    return sites, values


def _along(shape: tuple[int, ...], dim: int) -> int:
    """The size of ``shape`` along the (negative) plate dimension ``dim``; 1 if it has none."""
    return int(shape[len(shape) + dim]) if len(shape) >= -dim else 1


def check_sites(full: list[Site], one_row: list[Site], n: int, plate: str) -> None:
    """Refuse, naming the site: no site in the plate; a plate not of ``n`` rows or not sized
    from the data (``one_row``: the sites traced on a one-row probe); a plate site whose value
    or log density does not have the plate's rows (one per data row: on one row of the data,
    one; an array of ``n`` rows passed outside ``data`` gives it ``n`` on every chunk); a
    latent in the plate; a discrete latent; an observed site (other than a factor) outside
    the plate."""
    if not any(s.plate_size is not None for s in full):
        raise InputValueError(f"the model has no sample site inside numpyro.plate({plate!r}, "
                              "n); put the observed sites in that plate (or set data_plate).")
    one = {s.name: s for s in one_row}
    for s in full:
        if s.discrete:
            raise InputValueError(
                f"site {s.name!r} is a discrete latent; model_potential's potential is over "
                "continuous latents only (HMC needs a gradient): marginalise it out (e.g. "
                "dist.MixtureSameFamily), or sample the model with NumPyro's MixedHMC or "
                "DiscreteHMCGibbs.")
        if s.plate_size is None:
            pass
        elif s.plate_size != n:
            raise InputValueError(
                f"site {s.name!r}: plate {plate!r} has size {s.plate_size} but the data have "
                f"{n} rows; size the plate from the data (numpyro.plate({plate!r}, "
                "x.shape[0])): it is called on chunks.")
        elif s.name not in one or one[s.name].plate_size != 1:
            size = one[s.name].plate_size if s.name in one else "no plate"
            raise InputValueError(
                f"site {s.name!r}: plate {plate!r} has the data's {n} rows, but on one row of "
                f"the data it has size {size}: its size does not follow the data; size it "
                f"from them (numpyro.plate({plate!r}, x.shape[0])): it is called on chunks.")
        else:
            o = one[s.name]
            rows_ok = o.rows == (1, 1) and s.rows == (n, n)
            if not rows_ok or (o.sizes is not None and s.sizes is not None
                               and (o.sizes[0] * n, o.sizes[1] * n) != s.sizes):  # fmt: skip
                raise InputValueError(
                    f"site {s.name!r} in plate {plate!r}: on one row of the data its log "
                    f"density has {o.rows[0] if o.rows else '?'} row(s) and its value "
                    f"{o.rows[1] if o.rows else '?'} (expected 1, one per data row): its "
                    "density reads a per-row array passed outside data (model_args or "
                    "model_kwargs, e.g. per-row weights or offsets), which every chunk would "
                    "get whole. Pass every per-row array in data={...} (it is then split with "
                    "the rows).")
        if s.plate_size is not None and not s.observed:
            raise InputValueError(
                f"site {s.name!r} is a latent inside plate {plate!r} (a per-row local latent); "
                "model_potential supports global latents only: move it out of the plate, "
                "marginalise it, or use NumPyro's NUTS(model).")
        if s.plate_size is None and s.observed and not s.factor:
            raise InputValueError(
                f"site {s.name!r} is observed outside plate {plate!r}; every observed site "
                f"must sit inside numpyro.plate({plate!r}, n).")


def check_globals(
    model: Callable, args: tuple, kwargs: dict, plate: str, probe: dict[str, Any],
    full: tuple[dict[str, Any], Params], one_row: tuple[dict[str, Any], Params],
) -> None:
    """Refuse, naming the site, a global site that depends on the sharded data
    (:func:`data_dependent`) or on their number of rows (:func:`size_dependent`; ``full`` and
    ``one_row`` as there); ``probe``: the data's first row."""
    if bad := data_dependent(model, args, kwargs, full[1], probe, plate):
        raise InputValueError(
            f"site {bad[0]!r} is outside plate {plate!r} but its density depends on the "
            f"sharded data {sorted(probe)}; put per-row terms inside the plate.")
    if bad := size_dependent(model, args, kwargs, plate, full, one_row):
        n = next(iter(full[0].values())).shape[0]
        raise InputValueError(
            f"site {bad[0]!r} is outside plate {plate!r} but its shape or density depends on "
            f"the number of rows ({n} here, e.g. through x.shape[0]); the potential evaluates "
            "it on one row and the plate on chunks, so it would silently see 1 or the chunk "
            "size. Pass the number of rows as a model argument (model_potential(model, n, "
            "data=...) with model(n, x, y=None)) or use a fixed value.")


def data_dependent(
    model: Callable, args: tuple, kwargs: dict, values: Params, probe: dict[str, Any],
    plate: str,
) -> list[str]:
    """Global sites whose log density depends on the sharded data (a forward taint analysis of
    the jaxpr; a call that takes the data taints all its outputs, so it errs on refusing)."""
    names: list[str] = []
    terms = _global_terms(model, args, kwargs, plate, names)
    return [n for n, t in zip(names, _tainted(terms, values, probe), strict=True) if t]


def _global_terms(
    model: Callable, args: tuple, kwargs: dict, plate: str, names: list[str]
) -> Callable[[Params, dict[str, Array]], list[Array]]:
    """``f(values, batch)``: the summed log density of every sample site outside ``plate``, at
    ``values``; each call puts the sites' names in ``names``."""

    def global_terms(values: Params, batch: dict[str, Array]) -> list[Array]:
        sub = handlers.substitute(model, data=values)
        tr = handlers.trace(sub).get_trace(*args, **kwargs, **batch)
        names.clear()
        out = []
        for name, site in tr.items():
            if site["type"] == "sample" and not in_plate(site, plate):
                names.append(name)
                out.append(jnp.sum(site_lp(site)))
        return out

    return global_terms


def size_dependent(
    model: Callable, args: tuple, kwargs: dict, plate: str,
    full: tuple[dict[str, Any], Params], one_row: tuple[dict[str, Any], Params],
) -> list[str]:
    """Global sites whose value's shape or log density depends on the number of rows (a prior
    scaled by ``x.shape[0]``, a latent of ``x.shape[0]`` entries), sorted. ``full`` and
    ``one_row``: ``(data shapes, latent shapes)`` as from :func:`structure` on all rows and on
    one row.

    Why it matters: the potential evaluates the global sites on a one-row probe and the plate on
    chunks, so such a site would silently see 1 (or the chunk size) for ``x.shape[0]``. How:
    abstractly (nothing is computed or compiled), the jaxpr of each global site's log density,
    pruned to what that output depends on, must be the same on one row and on all rows (its
    operations, shapes, literals and constants; the data are not used, :func:`data_dependent`).
    """
    (spec, values), (one_spec, one_values) = full, one_row
    if shaped := {n for n in set(values) | set(one_values)
                  if n not in values or n not in one_values
                  or values[n].shape != one_values[n].shape}:  # fmt: skip
        return sorted(shaped)
    fingerprints = []
    for data in (spec, one_spec):
        names: list[str] = []
        closed = jax.make_jaxpr(_global_terms(model, args, kwargs, plate, names))(values, data)
        fingerprints.append(dict(zip(names, _output_slices(closed), strict=True)))
    many, one = fingerprints
    return sorted(n for n in set(many) | set(one) if many.get(n) != one.get(n))


def check_row_arguments(
    model: Callable, args: tuple, kwargs: dict, plate: str, n: int, values: Params,
    probe: dict[str, Any],
) -> None:
    """Refuse, naming it, an argument outside ``data`` with the data's ``n`` rows that the
    plate sites read by position (:func:`row_arguments`)."""
    if bad := row_arguments(model, args, kwargs, plate, n, values, probe):
        raise InputValueError(
            f"{bad[0]} has the data's {n} rows and the sites of plate {plate!r} read it by "
            "position (e.g. offset[:x.shape[0]] or offset[jnp.arange(x.shape[0])]): every "
            "chunk of rows would read the array's first rows, not its own. Pass it in "
            "data={...} (it is then split with the rows), or index it with a per-row array "
            "of data (offset[idx] with idx in data).")


def row_arguments(
    model: Callable, args: tuple, kwargs: dict, plate: str, n: int, values: Params,
    probe: dict[str, Any],
) -> list[str]:
    """The arguments outside ``data`` (``model_args[i]``, ``model_kwargs[k]``, with the path of
    a leaf in a pytree) whose leading axis has the data's ``n`` rows and which the plate sites'
    log densities read in a way that depends on the number of rows, not on the data's values.

    Why it matters: every chunk of rows gets such an argument whole, so ``offset[:m]`` on a
    chunk of ``m`` rows reads the array's first ``m`` rows, whichever rows the chunk holds (a
    shape-preserving read, which :func:`check_sites` cannot see). How: abstractly, on a one-row
    and a two-row probe, the operations that use the argument before it meets the data (a slice
    ``[:m]``, a gather at ``arange(m)``, a broadcast to ``m`` rows) must be the same; a read at
    indices from ``data`` (``offset[idx]``) meets the data and is chunk-safe. The one refusal
    of a correct model: an argument that happens to have ``n`` entries, broadcast to the rows
    before it meets the data (``jnp.broadcast_to(w, (x.shape[0], n))``); pass it as
    ``w[None]`` or in ``data``.
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path((tuple(args), dict(kwargs)))
    rows = [i for i, (_, a) in enumerate(leaves)
            if isinstance(a, np.ndarray | jax.Array) and np.ndim(a) >= 1 and np.shape(a)[0] == n]
    if not rows:
        return []

    def plate_terms(chosen: list[Array], values: Params, batch: dict[str, Array]) -> list[Array]:
        flat = [a for _, a in leaves]
        for i, a in zip(rows, chosen, strict=True):
            flat[i] = a
        a, k = jax.tree.unflatten(treedef, flat)
        sub = handlers.substitute(handlers.seed(model, 0), data=values)
        tr = handlers.trace(sub).get_trace(*a, **k, **batch)
        return [site_lp(s) for s in tr.values() if s["type"] == "sample" and in_plate(s, plate)]

    chosen = [jax.ShapeDtypeStruct(np.shape(leaves[i][1]), leaves[i][1].dtype) for i in rows]
    reads = []
    for m in (1, 2):
        batch = {k: jax.ShapeDtypeStruct((m, *np.shape(a)[1:]), a.dtype) for k, a in probe.items()}
        reads.append(_argument_reads(jax.make_jaxpr(plate_terms)(chosen, values, batch),
                                     len(rows), len(jax.tree.leaves(values))))
    where = ("model_args", "model_kwargs")  # (leaves[i][0]: (which of the two, path in it))
    return [where[leaves[i][0][0].idx] + jax.tree_util.keystr(leaves[i][0][1:])
            for i, one, two in zip(rows, *reads, strict=True) if one != two]  # fmt: skip


def _argument_reads(closed: Any, count: int, skip: int) -> list[list[tuple]]:
    """Per argument (the first ``count`` inputs of the jaxpr), the operations that use it
    before it meets the data (the inputs after the next ``skip``, the latent values)."""
    jaxpr = closed.jaxpr
    data = {id(v) for v in jaxpr.invars[count + skip:]}
    for eqn in jaxpr.eqns:
        if any(id(v) in data for v in eqn.invars if not isinstance(v, Literal)):
            data.update(id(v) for v in eqn.outvars)
    out = []
    for var in jaxpr.invars[:count]:
        reached, ops = {id(var)}, []
        for eqn in jaxpr.eqns:
            ins = [v for v in eqn.invars if not isinstance(v, Literal)]
            if any(id(v) in reached for v in ins) and not any(id(v) in data for v in ins):
                reached.update(id(v) for v in eqn.outvars)
                ops.append((str(eqn.primitive), re.sub(r" at 0x[0-9a-f]+", "", str(eqn.params)),
                            [str(v.aval) for v in eqn.outvars]))
        out.append(ops)
    return out


def _output_slices(closed: Any) -> list[list[tuple]]:
    """Per output of a closed jaxpr, the equations it depends on, written out with variables
    numbered in order of appearance (so two traces compare equal when they compute the same),
    literals and constants by value; object addresses in parameters are dropped."""
    jaxpr = closed.jaxpr
    consts = {id(v): np.asarray(c) for v, c in zip(jaxpr.constvars, closed.consts, strict=True)}
    slices = []
    for out in jaxpr.outvars:
        live, kept, ids = {id(out)}, [], {}
        for eqn in reversed(jaxpr.eqns):
            if any(id(v) in live for v in eqn.outvars):
                kept.append(eqn)
                live.update(id(v) for v in eqn.invars if not isinstance(v, Literal))

        def name(v: Any, ids: dict = ids) -> Any:
            if isinstance(v, Literal):
                return repr(np.asarray(v.val).tolist())
            if id(v) in consts:
                return ("const", str(v.aval), consts[id(v)].tobytes())
            return ids.setdefault(id(v), (len(ids), str(v.aval)))

        slices.append([(str(e.primitive), re.sub(r" at 0x[0-9a-f]+", "", str(e.params)),
                        [name(v) for v in e.invars], [name(v) for v in e.outvars])
                       for e in reversed(kept)] + [name(out)])  # fmt: skip
    return slices


def _tainted(fn: Callable, values: Params, probe: dict[str, Any]) -> Any:
    """The outputs of ``fn(values, probe)`` (a pytree), each replaced by whether it depends on
    ``probe`` (the data)."""
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(values, probe)
    jaxpr = closed.jaxpr
    tainted = {id(v) for v in jaxpr.invars[len(jax.tree.leaves(values)):]}
    for eqn in jaxpr.eqns:
        if any(id(v) in tainted for v in eqn.invars):
            tainted.update(id(v) for v in eqn.outvars)
    flags = [id(v) in tainted for v in jaxpr.outvars]
    return jax.tree.unflatten(jax.tree.structure(shapes), flags)


def deterministic_sites(
    model: Callable, args: tuple, kwargs: dict, values: Params, probe: dict[str, Any],
    plate: str,
) -> list[str]:
    """The model's deterministic sites whose value is a function of the global latents alone
    (``postprocess_fn`` computes them on the probe), sorted; one
    :class:`DeterministicSiteWarning` names the others: inside ``plate`` or depending on the
    sharded data.

    Why a warning and not a refusal: a deterministic site adds nothing to the density, so the
    potential is exact with or without it, and NumPyro models often record a per-row mean
    inside the plate for ``Predictive``; refusing would make users edit a correct model. Why
    not compute them: a per-row value is ``n`` numbers per draw gathered from every device
    (what the sharded potential avoids), and the probe holds one row.

    Depending on the data is found as in :func:`data_dependent` (the jaxpr), and on the number
    of rows by evaluating the other sites at one point on a one-row and a two-row probe (a
    value using ``x.shape[0]``, which the one-row probe would get wrong, differs).
    """
    in_rows: list[str] = []

    def global_values(values: Params, batch: dict[str, Any]) -> dict[str, Array]:
        tr = handlers.trace(handlers.substitute(model, data=values)).get_trace(
            *args, **kwargs, **batch)
        dets = {n: s for n, s in tr.items() if s["type"] == "deterministic"}
        in_rows[:] = [n for n, s in dets.items() if in_plate(s, plate)]
        return {n: jnp.asarray(s["value"]) for n, s in dets.items() if n not in in_rows}

    tainted = _tainted(global_values, values, probe)
    dropped = set(in_rows) | {n for n, t in tainted.items() if t}
    kept = [n for n in sorted(tainted) if n not in dropped]
    if kept:  # a value that follows the number of rows differs between a 1- and 2-row probe
        point = jax.tree.map(lambda s: jnp.full(s.shape, 0.731, s.dtype), values)
        one = global_values(point, probe)
        two = global_values(point, {k: np.concatenate([a, a]) for k, a in probe.items()})
        dropped |= {n for n in kept
                    if not np.allclose(one[n], two[n], rtol=1e-6, equal_nan=True)}
    if dropped:
        warnings.warn(
            f"deterministic site(s) {sorted(dropped)} sit inside plate {plate!r} or depend on "
            "the sharded data, so postprocess_fn and MCMC.get_samples() leave them out; compute "
            "them after sampling with numpyro.infer.Predictive(model, mcmc.get_samples(), "
            f"return_sites={sorted(dropped)}).", DeterministicSiteWarning, stacklevel=3)
    return [n for n in kept if n not in dropped]
