"""The one result of every inference method: a :class:`Posterior`.

Example:
    >>> import numpy as np
    >>> from bnn_ppl.posterior import Posterior
    >>> post = Posterior("hmc", {"w": np.zeros((2, 100, 3))},
    ...                  sample_stats={"diverging": np.zeros((2, 100), bool)})
    >>> post.num_chains, post.num_draws, post.flat_samples()["w"].shape
    (2, 100, (200, 3))
"""

# Notes:
#
# HMC, NUTS, the SG-MCMC samplers, mean-field SVI, MAP and deep ensembles all end in the same
# record: constrained draws with ``(chain, draw)`` leading axes (an ensemble's members are its
# chains, one draw each; SVI's draws come from the fitted guide as one chain), per-draw sampler
# statistics under ArviZ's names, the configuration that produced them, and, when the data were
# given, the predictions at the test inputs and per-row log-likelihoods of the training and test
# targets. :meth:`Posterior.to_inference_data` turns it into an ArviZ ``DataTree`` (groups
# ``posterior``, ``sample_stats``, ``observed_data``, ``predictions``, ``log_likelihood``), so
# ``az.summary``, ``az.bfmi``, ``az.plot_energy``, ``az.loo(..., var_name="y")`` and
# ``az.waic`` work; :meth:`Posterior.save` writes it as netCDF (``posterior.nc``, atomically) and
# :meth:`Posterior.load` reads it back. Nothing is pickled.
#
# Sample statistics use ArviZ's names: ``acceptance_rate``, ``diverging``, ``energy``,
# ``step_size``, ``n_steps``, ``tree_depth`` and ``lp`` (the log density, minus the potential).
# Optimisation curves (SVI's negative ELBO, MAP and ensemble losses) are kept in ``trace`` and
# stored in a group of their own, ``optimization``.

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from bnn_ppl import io as _io
from bnn_ppl._compat import arviz
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["Posterior", "SAMPLE_STATS", "MARKOV_METHODS"]

SAMPLE_STATS = (
    "acceptance_rate",
    "diverging",
    "energy",
    "step_size",
    "n_steps",
    "tree_depth",
    "lp",
)
"""The sample statistics a Posterior may carry (ArviZ's names), each of shape (chain, draw)."""

MARKOV_METHODS = frozenset({"hmc", "nuts", "sgld", "sghmc", "sgnht", "atmc", "reference_hmc"})
"""Methods whose chains are Markov chains (their ``(chain, draw)`` axes carry convergence
diagnostics); the others' draws are independent (SVI's guide draws, an ensemble's members)."""

CONTENT_ATTR = "content_sha256"
"""The root attribute of ``posterior.nc`` holding :meth:`Posterior.content_sha256`."""

_GROUPS = ("samples", "sample_stats", "predictions", "log_likelihood", "observed", "trace")


def _arrays(name: str, value: Any) -> dict[str, np.ndarray]:
    """``value`` as a dict str -> numeric NumPy array (copied: a Posterior owns its arrays)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputTypeError(f"{name} must be a dict name -> array, got {type(value).__name__}.")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k or "/" in k:
            raise InputValueError(f"{name} keys must be non-empty strings without '/', got {k!r}.")
        a = np.array(v)
        if a.dtype.kind not in "biuf":
            raise InputTypeError(
                f"{name}[{k!r}] has dtype {a.dtype}; a Posterior stores numbers and booleans "
                "only (convert it, e.g. np.asarray(value, np.float32))."
            )
        a.flags.writeable = False
        out[k] = a
    return out


def _check_finite(name: str, arrays: Mapping[str, np.ndarray], allow_neg_inf: bool = False) -> None:
    for k, a in arrays.items():
        if a.dtype.kind != "f":
            continue
        bad = np.isnan(a) | (a == np.inf) if allow_neg_inf else ~np.isfinite(a)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InputValueError(
                f"{name}[{k!r}] holds NaN/inf values (first at index {where}): the run that made "
                "them diverged; check its diagnostics and rerun with a smaller step size."
            )


def _same(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f")
        for k in a
    )


@dataclass(frozen=True, eq=False)
class Posterior:
    """Draws from (an approximation of) the posterior, with everything needed to judge them.

    Every field is checked on construction (an :class:`~bnn_ppl.validation.InputError` names
    the field and the key): sites with different ``(chain, draw)`` axes, NaN/inf draws, a
    statistic or per-row log-likelihood of another shape, a config that is not JSON. Arrays
    are copied to read-only NumPy arrays. Two Posteriors are ``==`` when every field is equal
    exactly (dtypes included).

    Attributes:
        method: what produced it: ``"hmc"``, ``"nuts"``, ``"sgld"``, ``"sghmc"``, ``"sgnht"``,
            ``"atmc"``, ``"svi"``, ``"map"``, ``"ensemble"``.
        samples: constrained values by site, each ``(chain, draw, *site_shape)``; finite.
        sample_stats: per-draw statistics (:data:`SAMPLE_STATS`), each ``(chain, draw)``.
        config: the JSON-able configuration of the run (stored as its JSON round trip: tuples
            become lists).
        predictions: predictive distribution at the test inputs, per draw: ``{"probs": (chain,
            draw, n, K)}`` or ``{"mean": ..., "scale": ...}`` of shape ``(chain, draw, n[, d])``.
        log_likelihood: per-row log-likelihoods ``(chain, draw, n)``: ``"y"`` for the training
            targets (what ``az.loo``/``az.waic`` use) and ``"y_test"`` for the test targets;
            no NaN or +inf.
        observed: the targets, ``{"y": y_train, "y_test": y_test}``.
        trace: optimisation curves, e.g. ``{"loss": (members, steps)}``.
    """

    method: str
    samples: Mapping[str, np.ndarray]
    sample_stats: Mapping[str, np.ndarray] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    predictions: Mapping[str, np.ndarray] = field(default_factory=dict)
    log_likelihood: Mapping[str, np.ndarray] = field(default_factory=dict)
    observed: Mapping[str, np.ndarray] = field(default_factory=dict)
    trace: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method:
            raise InputTypeError(f"method must be a non-empty str, got {self.method!r}.")
        groups = {name: _arrays(name, getattr(self, name)) for name in _GROUPS}
        samples = groups["samples"]
        if not samples:
            raise InputValueError("samples is empty: a Posterior holds at least one site.")
        lead = None
        for k, v in samples.items():
            if v.ndim < 2:
                raise InputValueError(
                    f"samples[{k!r}] has shape {v.shape}; draws have leading (chain, draw) axes "
                    "(one chain of S draws: add an axis, value[None])."
                )
            if lead is not None and v.shape[:2] != lead:
                raise InputValueError(
                    f"samples[{k!r}] has (chain, draw) = {v.shape[:2]}, other sites {lead}."
                )
            lead = v.shape[:2]
        if 0 in lead:
            raise InputValueError(f"samples hold no draws: (chain, draw) = {lead}.")
        _check_finite("samples", samples)
        for k, v in groups["sample_stats"].items():
            if k not in SAMPLE_STATS:
                raise InputValueError(
                    f"sample_stats[{k!r}] is not one of ArviZ's names {list(SAMPLE_STATS)}."
                )
            if v.shape != lead:
                raise InputValueError(
                    f"sample_stats[{k!r}] has shape {v.shape}; it must be (chain, draw) = {lead}."
                )
        for name in ("predictions", "log_likelihood"):
            for k, v in groups[name].items():
                if v.shape[:2] != lead or v.ndim < 3:
                    raise InputValueError(
                        f"{name}[{k!r}] has shape {v.shape}; it must be (chain, draw, n, ...) "
                        f"with (chain, draw) = {lead}."
                    )
        for k, v in groups["log_likelihood"].items():
            n = groups["observed"].get(k, v[0, 0]).shape[:1]
            if v.ndim != 3 or v.shape[2:] != n:
                raise InputValueError(
                    f"log_likelihood[{k!r}] has shape {v.shape}; it must be (chain, draw, n) "
                    f"with n = {n[0]} rows (observed[{k!r}])."
                )
        _check_finite("log_likelihood", groups["log_likelihood"], allow_neg_inf=True)
        if not isinstance(self.config, Mapping):
            raise InputTypeError(f"config must be a dict, got {type(self.config).__name__}.")
        try:
            config = json.loads(json.dumps(dict(self.config), allow_nan=False))
        except (TypeError, ValueError) as e:
            raise InputTypeError(
                f"config must be JSON-able (str keys; str, finite numbers, bools, None, lists, "
                f"dicts): {e}"
            ) from None
        for name, arrays in groups.items():
            object.__setattr__(self, name, arrays)
        object.__setattr__(self, "config", config)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Posterior):
            return NotImplemented
        return (self.method, self.config) == (other.method, other.config) and all(
            _same(getattr(self, g), getattr(other, g)) for g in _GROUPS
        )

    __hash__ = None  # type: ignore[assignment]  (mutable-looking contents: not hashable)

    # ------------------------------------------------------------------------- shape
    @property
    def num_chains(self) -> int:
        """Chains (an ensemble's members)."""
        return int(next(iter(self.samples.values())).shape[0])

    @property
    def num_draws(self) -> int:
        """Draws per chain."""
        return int(next(iter(self.samples.values())).shape[1])

    @property
    def is_markov(self) -> bool:
        """Whether the draws are Markov chains (:data:`MARKOV_METHODS`): R-hat and ESS apply
        per chain; otherwise the draws are independent and the chain axis is only a layout."""
        return self.method in MARKOV_METHODS

    def flat_samples(self) -> dict[str, np.ndarray]:
        """The draws with one leading axis ``chain * draw`` (the layout of
        ``MCMC.get_samples()``)."""
        return {k: v.reshape(-1, *v.shape[2:]) for k, v in self.samples.items()}

    def replace(self, **changes: Any) -> Posterior:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    # ------------------------------------------------------------------------- ArviZ
    def to_inference_data(self) -> Any:
        """An ArviZ ``DataTree``: posterior, sample_stats, observed_data, predictions,
        log_likelihood and (for optimisers) optimization groups; ``config`` and ``method``
        are attributes of the root (``config`` as a JSON string)."""
        import xarray as xr

        az = arviz()  # NumPyro before ArviZ; see bnn_ppl._compat
        groups: dict[str, dict[str, np.ndarray]] = {"posterior": dict(self.samples)}
        dims: dict[str, list[str]] = {}
        if self.sample_stats:
            groups["sample_stats"] = dict(self.sample_stats)
        if self.observed:
            groups["observed_data"] = dict(self.observed)
            for k, v in self.observed.items():
                dims[k] = [_obs_dim(k), *[f"{k}_dim_{i}" for i in range(1, v.ndim)]]
        if self.log_likelihood:
            groups["log_likelihood"] = dict(self.log_likelihood)
            for k, v in self.log_likelihood.items():
                dims.setdefault(k, [_obs_dim(k), *[f"{k}_dim_{i}" for i in range(1, v.ndim - 2)]])
        pred_dims = {}
        if self.predictions:
            groups["predictions"] = dict(self.predictions)
            for k, v in self.predictions.items():
                tail = ["class"] if k == "probs" else ["output"]
                pred_dims[k] = ["obs_test", *tail[: v.ndim - 3]]
        attrs = {"/": {"method": self.method, "config": json.dumps(self.config, sort_keys=True)}}
        with warnings.catch_warnings():  # an ensemble has more chains (members) than draws
            warnings.filterwarnings("ignore", "Found chain dimension to be longer")
            tree = az.from_dict(groups, dims=dims, pred_dims=pred_dims, attrs=attrs)
        if self.trace:
            ds = xr.Dataset(
                {k: ([f"{k}_dim_{i}" for i in range(v.ndim)], v) for k, v in self.trace.items()}
            )
            tree["optimization"] = xr.DataTree(ds)
        return tree

    def content_sha256(self) -> str:
        """SHA-256 of what the Posterior holds: the method, the config (canonical JSON) and
        every array of every group (name, dtype, shape, bytes). :meth:`save` stores it in the
        file and :meth:`load` recomputes it from what it read: a file whose values changed
        after it was written is refused. It detects damage, not tampering: whoever edits the
        file can store the new digest too."""
        import hashlib

        h = hashlib.sha256()
        h.update(self.method.encode("utf-8"))
        h.update(json.dumps(self.config, sort_keys=True).encode("utf-8"))
        for name in _GROUPS:
            for key, value in sorted(getattr(self, name).items()):
                a = np.ascontiguousarray(np.asarray(value))
                h.update(f"{name}/{key}:{a.dtype.str}:{a.shape}".encode())
                h.update(a.tobytes())
        return h.hexdigest()

    def save(self, path: str | os.PathLike) -> None:
        """Write :meth:`to_inference_data` to ``path`` as netCDF (HDF5), atomically: every
        array with HDF5's Fletcher-32 checksum, and the root attribute ``content_sha256``
        (:meth:`content_sha256`), which :meth:`load` verifies."""
        tree = self.to_inference_data()
        tree.attrs[CONTENT_ATTR] = self.content_sha256()
        encoding = {}
        for node in tree.subtree:
            names = [*node.data_vars, *node.coords] if node.has_data else []
            if names:
                encoding[node.path] = {k: {"fletcher32": True} for k in names
                                       if node[k].ndim > 0}  # fmt: skip
        with _io.atomic_write_path(path) as tmp:
            tree.to_netcdf(tmp, engine="h5netcdf", encoding=encoding)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Posterior:
        """Read a Posterior written by :meth:`save` (no pickle: netCDF through xarray), and
        verify it: HDF5's per-array checksums as the arrays are read, then the stored
        ``content_sha256`` against what was read.

        Raises:
            InputValueError: the file is missing, not a netCDF file written by :meth:`save`,
                or damaged (any checksum mismatch, unreadable structure); the message names
                the file. A damaged file is never returned.
        """
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise InputValueError(f"{path} does not exist (or is not a file); pass the "
                                  "posterior.nc that Posterior.save wrote.")  # fmt: skip
        try:
            post, stored = cls._read(path)
        except InputValueError:
            raise
        except Exception as e:  # h5py/HDF5/xarray errors of a damaged file, whatever their type
            raise InputValueError(
                f"{path} is damaged or not a posterior.nc written by Posterior.save "
                f"({type(e).__name__}: {e}); restore it or re-run to write it again."
            ) from None
        if stored is None:
            warnings.warn(
                f"{path} carries no content checksum (written by an older bnn_ppl): its "
                "values cannot be verified.", UserWarning, stacklevel=2)  # fmt: skip
        elif stored != post.content_sha256():
            raise InputValueError(
                f"{path} is damaged: its values do not match the content checksum stored when "
                "it was written; restore it or re-run to write it again."
            )
        return post

    @classmethod
    def _read(cls, path: str) -> tuple[Posterior, str | None]:
        import xarray as xr

        try:
            tree = xr.open_datatree(path, engine="h5netcdf")
        except (OSError, ValueError) as e:
            raise InputValueError(f"{path} is not a readable posterior.nc file: {e}") from None
        with tree:
            attrs = dict(tree.attrs)
            if "method" not in attrs or "posterior" not in tree.children:
                raise InputValueError(
                    f"{path} is not a bnn_ppl posterior (no 'method' attribute or no posterior "
                    "group); write it with Posterior.save."
                )

            def group(name: str) -> dict[str, np.ndarray]:
                if name not in tree.children:
                    return {}
                ds = tree[name].to_dataset()
                return {k: np.asarray(ds[k].values) for k in ds.data_vars}

            try:
                config = json.loads(attrs.get("config", "{}"))
            except ValueError as e:
                raise InputValueError(f"{path}: the stored config is not JSON ({e}).") from None
            stored = attrs.get(CONTENT_ATTR)
            post = cls(
                method=str(attrs["method"]),
                samples=group("posterior"),
                sample_stats=group("sample_stats"),
                config=config,
                predictions=group("predictions"),
                log_likelihood=group("log_likelihood"),
                observed=group("observed_data"),
                trace=group("optimization"),
            )
            return post, (None if stored is None else str(stored))


def _obs_dim(name: str) -> str:
    return "obs_test" if name.endswith("_test") else "obs"
