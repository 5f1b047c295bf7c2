"""The bad-input matrix: every public entry point x every class of bad value.

Each case calls one entry point with every argument good but one, and that one drawn by
hypothesis from a family of bad values (NaN/inf; None, str, bool, float where an int belongs;
zero and negative; empty; wrong rank or shape; int/bool ``x`` with float ``y``; labels out of
range or non-integer; malformed prior strings; ...). The case passes only if the call raises
:class:`bnn_ppl.InputError` (a ``ValueError`` or ``TypeError``) whose message names the argument,
before anything is compiled (XLA compilations are counted with ``jax.monitoring``). A hang is a
failure too (``pytest-timeout``). Values that are valid after all (``(n, 1)`` targets of a
one-output network, integer inputs with float targets) are not bad input: their correct result
is tested with the stage they belong to (``tests/test_potential.py``).

Hypothesis runs derandomised (the same cases on every run, so CI cannot turn red at random) and
without an example database (nothing is written into the checkout).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import pytest
from conftest import UCI_DIR, count_compiles
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bnn_ppl as bp
from bnn_ppl import InputError
from bnn_ppl.config import HMCConfig
from bnn_ppl.inference import (
    ATMC,
    HMC,
    NUTS,
    SGHMC,
    SGLD,
    SGNHT,
    deep_ensemble,
    fit,
    full_batch_potential,
    heldout_noise,
    hmc,
    map_estimate,
    model_potential,
    nuts,
    reference_hmc,
    svi_mean_field,
)
from bnn_ppl.inference.reference.tempering import ParallelTempering
from bnn_ppl.models import MLP

# 12 generated values per argument in the default suite; the draws depend on the test's source
# (derandomize), so after editing this file run it once with BNN_PPL_BAD_INPUT_EXAMPLES=100
EXAMPLES = int(os.environ.get("BNN_PPL_BAD_INPUT_EXAMPLES", "12"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ----------------------------------------------------------------------------- good arguments
N, D, K = 24, 3, 3
_rng = np.random.default_rng(0)
X = _rng.normal(size=(N, D)).astype(np.float32)
Y_CLASS = (np.arange(N) % K).astype(np.int32)
Y_REG = (X @ np.array([0.5, -1.0, 0.2]) + 0.1 * _rng.normal(size=N)).astype(np.float32)


def classifier(**kw: Any) -> bp.BNN:
    return bp.BNN(
        MLP(hidden=(4,), out=K), bp.priors.Normal(0.5), bp.likelihoods.Categorical(), **kw
    )


def regressor(**kw: Any) -> bp.BNN:
    return bp.BNN(
        MLP(hidden=(4,), out=1), bp.priors.Normal(0.5), bp.likelihoods.Gaussian(0.3), **kw
    )


def with_likelihood(likelihood: Any, out: int = 1) -> bp.BNN:
    return bp.BNN(MLP(hidden=(4,), out=out), bp.priors.Normal(0.5), likelihood)


Y_BIN = (Y_REG > 0).astype(np.int32)
Y_COUNT = np.round(np.abs(Y_REG) * 3).astype(np.int32)
CLF, REG = classifier(), regressor()
BIN = with_likelihood(bp.likelihoods.Bernoulli())
COUNT = with_likelihood(bp.likelihoods.Poisson())
STT = with_likelihood(bp.likelihoods.StudentT(df=3.0, scale=0.3))
HET = with_likelihood(bp.likelihoods.HeteroscedasticGaussian(), out=2)
CLF.check_data(X, Y_CLASS)  # shape the models once, outside every compile count
REG.check_data(X, Y_REG)
BIN.check_data(X, Y_BIN)
COUNT.check_data(X, Y_COUNT)
STT.check_data(X, Y_REG)
HET.check_data(X, Y_REG)
SAMPLES = {k: np.zeros((2, *d.event_shape), np.float32) for k, d in CLF.sites(X).items()}
POT = full_batch_potential(REG, X, Y_REG)  # built once, outside every compile count
PROBS = np.full((N, K), 1.0 / K, np.float32)
MEAN = np.zeros(N, np.float32)
KEY = jax.random.key(0)


# ------------------------------------------------------------------------- bad-value families
NONFINITE = st.sampled_from([math.nan, math.inf, -math.inf])
NOT_NUMBERS = st.one_of(
    st.none(),
    st.text(max_size=3),
    st.booleans(),
    st.just([1.0]),
    st.complex_numbers(allow_nan=False, allow_infinity=False, min_magnitude=1e-3).filter(
        lambda z: z.imag != 0
    ),
    st.just(np.array([1.0, 2.0])),
)


def counts(minimum: int = 1, optional: bool = False) -> st.SearchStrategy:
    """Never a valid count: below ``minimum``, any float (integral ones too: never rounded),
    or not a number (``None`` too, unless ``optional``: then it means "the default")."""
    return st.one_of(
        st.integers(max_value=minimum - 1, min_value=-(2**40)),
        st.floats(allow_nan=True, allow_infinity=True),
        st.just(np.float32(2.0)),
        NOT_NUMBERS.filter(lambda v: not optional or v is not None),
    )


def positives(optional: bool = False) -> st.SearchStrategy:
    """Never a valid positive number: <= 0, NaN/inf, beyond float32 (denormal or overflowing),
    or not a number (``None`` too, unless ``optional``: then it means "the default")."""
    return st.one_of(
        NONFINITE,
        st.floats(max_value=0.0, allow_nan=False),
        st.floats(min_value=1e-320, max_value=1e-39),
        st.floats(min_value=3.5e38, allow_infinity=False),
        NOT_NUMBERS.filter(lambda v: not optional or v is not None),
    )


def open_unit() -> st.SearchStrategy:
    """Never in (0, 1)."""
    return st.one_of(
        NONFINITE,
        st.floats(max_value=0.0, allow_nan=False),
        st.floats(min_value=1.0, allow_nan=False),
        NOT_NUMBERS,
    )


def unit_from_zero() -> st.SearchStrategy:
    """Never in [0, 1) (averaging factors: 0 means no averaging)."""
    return st.one_of(
        NONFINITE,
        st.floats(max_value=-1e-300, allow_nan=False),
        st.floats(min_value=1.0, allow_nan=False),
        NOT_NUMBERS,
    )


def choices(valid: tuple[str, ...]) -> st.SearchStrategy:
    return st.one_of(
        st.text(max_size=8).filter(lambda t: t not in valid), st.none(), st.integers(), st.just(1.5)
    )


def keys() -> st.SearchStrategy:
    return st.one_of(
        st.integers(), st.none(), st.text(max_size=3), st.floats(), st.just(np.zeros(3))
    )


def _poke(a: np.ndarray, data: st.DataObject, value: float) -> np.ndarray:
    a = a.astype(np.float64).copy()
    i = data.draw(st.integers(0, a.size - 1))
    a.flat[i] = value
    return a


@st.composite
def bad_inputs(draw: Callable, data_like: np.ndarray = X) -> Any:
    """Inputs x that are never valid for a model shaped on ``data_like``."""
    n, d = data_like.shape
    kind = draw(
        st.sampled_from(
            [
                "nonfinite",
                "empty",
                "1d",
                "features",
                "complex",
                "strings",
                "none",
                "int64",
                "huge",
                "rows_object",
            ]
        )
    )
    if kind == "nonfinite":
        value = draw(NONFINITE)
        a = data_like.astype(np.float64).copy()
        a.flat[draw(st.integers(0, a.size - 1))] = value
        return a
    if kind == "empty":
        return np.zeros((0, d), np.float32)
    if kind == "1d":
        return data_like[:, 0]
    if kind == "features":
        return np.zeros((n, draw(st.integers(1, 8).filter(lambda k: k != d))), np.float32)
    if kind == "complex":
        return data_like.astype(np.complex64) * (1 + 1j)
    if kind == "strings":
        return np.full((n, d), "a")
    if kind == "none":
        return None
    if kind == "int64":
        a = np.zeros((n, d), np.int64)
        a[0, 0] = draw(st.sampled_from([2**31, -(2**31) - 1, 2**40]))
        return a
    if kind == "huge":
        a = data_like.astype(np.float64).copy()
        a[0, 0] = draw(st.floats(min_value=3.5e38, max_value=1e300))
        return a
    return [["a"] * d] * n


@st.composite
def bad_labels(draw: Callable) -> Any:
    kind = draw(
        st.sampled_from(
            [
                "high",
                "negative",
                "float",
                "column",
                "onehot",
                "short",
                "nan",
                "none",
                "strings",
                "empty",
                "complex",
            ]
        )
    )
    y = Y_CLASS.copy()
    if kind == "high":
        y[draw(st.integers(0, N - 1))] = draw(st.integers(K, 2**30))
        return y
    if kind == "negative":
        y[draw(st.integers(0, N - 1))] = draw(st.integers(-(2**30), -1))
        return y
    if kind == "float":
        return y.astype(np.float32) + draw(st.sampled_from([0.0, 0.5]))
    if kind == "column":
        return y[:, None]
    if kind == "onehot":
        return np.eye(K, dtype=np.int32)[y]
    if kind == "short":
        return y[: draw(st.integers(1, N - 1))]
    if kind == "nan":
        return _poke(y, _Data(draw), math.nan)
    if kind == "none":
        return None
    if kind == "strings":
        return np.full(N, "a")
    if kind == "empty":
        return np.zeros(0, np.int32)
    return y.astype(np.complex64)


class _Data:
    """The ``draw`` of a composite strategy, used like ``st.data()``'s object."""

    def __init__(self, draw: Callable):
        self.draw = draw


@st.composite
def bad_targets(draw: Callable, integers_are_bad: bool = True) -> Any:
    """Regression targets that are never valid (integer targets are fine for metrics)."""
    kind = draw(
        st.sampled_from(
            [
                "nonfinite",
                "int",
                "two_columns",
                "rank3",
                "short",
                "complex",
                "none",
                "strings",
                "huge",
                "empty",
            ]
        )
    )
    y = Y_REG.copy()
    if kind == "nonfinite":
        return _poke(y, _Data(draw), draw(NONFINITE))
    if kind == "int":
        return np.round(y).astype(np.int32) if integers_are_bad else y[:, None, None]
    if kind == "two_columns":
        return np.stack([y, y], axis=1)
    if kind == "rank3":
        return y[:, None, None]
    if kind == "short":
        return y[: draw(st.integers(1, N - 1))]
    if kind == "complex":
        return y.astype(np.complex64) * 1j
    if kind == "none":
        return None
    if kind == "strings":
        return np.full(N, "a")
    if kind == "huge":
        return _poke(y, _Data(draw), draw(st.floats(min_value=3.5e38, max_value=1e300)))
    return np.zeros(0, np.float32)


@st.composite
def bad_binary_labels(draw: Callable) -> Any:
    """Never valid Bernoulli targets (labels in {0, 1} of shape (n,) or (n, 1))."""
    kind = draw(
        st.sampled_from(
            ["high", "negative", "float", "half", "two_columns", "short", "nan", "none",
             "strings", "empty", "complex"]
        )
    )  # fmt: skip
    y = Y_BIN.copy()
    i = draw(st.integers(0, N - 1))
    if kind == "high":
        y[i] = draw(st.integers(2, 2**30))
        return y
    if kind == "negative":
        y[i] = draw(st.integers(-(2**30), -1))
        return y
    if kind == "float":
        return y.astype(np.float32)
    if kind == "half":
        return y.astype(np.float32) + 0.5
    if kind == "two_columns":
        return np.stack([y, 1 - y], axis=1)
    if kind == "short":
        return y[: draw(st.integers(1, N - 1))]
    if kind == "nan":
        return _poke(y, _Data(draw), math.nan)
    if kind == "none":
        return None
    if kind == "strings":
        return np.full(N, "a")
    if kind == "empty":
        return np.zeros(0, np.int32)
    return y.astype(np.complex64)


@st.composite
def bad_counts(draw: Callable) -> Any:
    """Never valid Poisson targets (non-negative whole numbers)."""
    kind = draw(
        st.sampled_from(
            ["negative", "fraction", "bool", "nan", "two_columns", "short", "none", "strings",
             "empty", "complex", "int64"]
        )
    )  # fmt: skip
    y = Y_COUNT.copy()
    i = draw(st.integers(0, N - 1))
    if kind == "negative":
        y[i] = draw(st.integers(-(2**30), -1))
        return y
    if kind == "fraction":
        return _poke(y, _Data(draw), draw(st.floats(0.01, 0.99)) + draw(st.integers(0, 9)))
    if kind == "bool":
        return y > 0
    if kind == "nan":
        return _poke(y, _Data(draw), draw(NONFINITE))
    if kind == "two_columns":
        return np.stack([y, y], axis=1)
    if kind == "short":
        return y[: draw(st.integers(1, N - 1))]
    if kind == "none":
        return None
    if kind == "strings":
        return np.full(N, "a")
    if kind == "empty":
        return np.zeros(0, np.int32)
    if kind == "complex":
        return y.astype(np.complex64)
    big = y.astype(np.int64)
    big[i] = draw(st.sampled_from([2**31, -(2**31) - 1, 2**40]))
    return big


@st.composite
def bad_prior_strings(draw: Callable) -> str:
    family = draw(st.sampled_from(["normal", "laplace", "logistic", "student_t", "cauchy", ""]))
    bad_number = st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e-320", "1e39", "a", "", "1,"])
    good_number = st.sampled_from(["0.3", "1", "2.5"])
    kind = draw(st.sampled_from(["bad_number", "count", "unknown", "garbage"]))
    known = {*bp.priors.REGISTRY, "studentt"}
    if kind == "unknown" or family in ("cauchy", ""):
        unknown = st.text(max_size=6).filter(
            lambda t: ":" not in t and t.strip().lower().replace("-", "_") not in known
        )
        return f"{draw(unknown)}:0.3"
    if kind == "garbage":  # no ':' at all: never a family with its numbers
        return draw(st.text(max_size=12).filter(lambda t: ":" not in t))
    required = 2 if family == "student_t" else 1
    allowed = 3 if family == "student_t" else 2  # + loc
    if kind == "count":
        n = draw(
            st.sampled_from([0, allowed + 1, allowed + 2]) if required > 0 else st.just(allowed + 1)
        )
        return f"{family}:{','.join(['0.5'] * n)}"
    numbers = [draw(good_number) for _ in range(required)]
    i = draw(st.integers(0, required - 1))
    numbers[i] = draw(bad_number)
    return f"{family}:{','.join(numbers)}"


# --------------------------------------------------------------------------------- the cases
@dataclass(frozen=True)
class Case:
    """One argument of one entry point: ``call(value)`` runs the entry point with that
    argument bad; ``names`` are the words the error message must contain (one of them)."""

    entry: str
    arg: str
    values: st.SearchStrategy
    call: Callable[[Any], Any]
    names: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.entry}-{self.arg}"


def _cases() -> list[Case]:
    cases: list[Case] = []

    def add(entry: str, arg: str, values: st.SearchStrategy, call: Callable, *names: str):
        cases.append(Case(entry, arg, values, call, names or (arg,)))

    # the model and its parts
    add("BNN", "temperature", positives(), lambda v: classifier(temperature=v))
    add("BNN", "temper", choices(("likelihood", "posterior")), lambda v: classifier(temper=v))
    add(
        "BNN",
        "prior",
        st.one_of(NOT_NUMBERS, st.just({"Dense_9": bp.priors.Normal(1.0)}), st.just({"*": 1.0})),
        lambda v: bp.BNN(MLP(hidden=(4,), out=K), v, bp.likelihoods.Categorical()).sites(X),
        "prior",
        "Dense_9",
        "pattern",
    )
    add("BNN", "likelihood", NOT_NUMBERS, lambda v: bp.BNN(MLP(out=K), bp.priors.Normal(1.0), v))
    add(
        "BNN",
        "network",
        NOT_NUMBERS,
        lambda v: bp.BNN(v, bp.priors.Normal(1.0), bp.likelihoods.Categorical()),
    )
    add("Gaussian", "scale", positives(), lambda v: bp.likelihoods.Gaussian(scale=v))
    add("likelihoods.StudentT", "df", positives(), lambda v: bp.likelihoods.StudentT(df=v))
    add("likelihoods.StudentT", "scale", positives(), lambda v: bp.likelihoods.StudentT(scale=v))
    add(
        "HeteroscedasticGaussian",
        "min_scale",
        st.one_of(NONFINITE, st.floats(max_value=-1e-300, allow_nan=False), NOT_NUMBERS),
        lambda v: bp.likelihoods.HeteroscedasticGaussian(min_scale=v),
    )
    add("Normal", "scale", positives(), lambda v: bp.priors.Normal(v))
    add("Normal", "loc", st.one_of(NONFINITE, NOT_NUMBERS), lambda v: bp.priors.Normal(1.0, loc=v))
    add(
        "Normal",
        "fan_in",
        st.one_of(st.integers(), st.none(), st.text(max_size=2)),
        lambda v: bp.priors.Normal(1.0, fan_in=v),
    )
    add("StudentT", "df", positives(), lambda v: bp.priors.StudentT(v, 1.0))
    add(
        "ScaleMixtureNormal", "pi", open_unit(), lambda v: bp.priors.ScaleMixtureNormal(v, 1.0, 0.1)
    )
    add("from_string", "text", bad_prior_strings(), bp.priors.from_string, "prior")
    add("model.check_data", "x", bad_inputs(), lambda v: CLF.check_data(v, Y_CLASS), "x")
    add("model.check_data", "y(labels)", bad_labels(), lambda v: CLF.check_data(X, v), "y")
    add("model.check_data", "y(targets)", bad_targets(), lambda v: REG.check_data(X, v), "y")
    add("Bernoulli", "y", bad_binary_labels(), lambda v: BIN.check_data(X, v))
    add("Poisson", "y", bad_counts(), lambda v: COUNT.check_data(X, v))
    add("StudentT(likelihood)", "y", bad_targets(), lambda v: STT.check_data(X, v))
    add("HeteroscedasticGaussian", "y", bad_targets(), lambda v: HET.check_data(X, v))

    # the potential
    def pot(**kw: Any) -> Any:
        args = {"model": REG, "x": X, "y": Y_REG} | kw
        return full_batch_potential(args.pop("model"), args.pop("x"), args.pop("y"), **args)

    add("full_batch_potential", "x", bad_inputs(), lambda v: pot(x=v))
    add("full_batch_potential", "y", bad_targets(), lambda v: pot(y=v))
    add("full_batch_potential", "model", NOT_NUMBERS, lambda v: pot(model=v))
    add("full_batch_potential", "chunk_size", counts(optional=True), lambda v: pot(chunk_size=v))
    add(
        "full_batch_potential",
        "dtype",
        st.sampled_from([np.int32, "int8", np.bool_]),
        lambda v: pot(dtype=v),
    )
    add("full_batch_potential", "devices", st.just([]), lambda v: pot(devices=v))

    # baselines
    def svi(**kw: Any) -> Any:
        kw.setdefault("num_steps", 5)
        return svi_mean_field(REG, kw.pop("x", X), kw.pop("y", Y_REG), **kw)

    add("svi_mean_field", "x", bad_inputs(), lambda v: svi(x=v))
    add("svi_mean_field", "y", bad_targets(), lambda v: svi(y=v))
    for arg in ("num_steps", "num_particles"):
        add("svi_mean_field", arg, counts(), lambda v, a=arg: svi(**{a: v}))
    add("svi_mean_field", "batch_size", counts(optional=True), lambda v: svi(batch_size=v))
    add(
        "svi_mean_field",
        "batch_size>n",
        st.integers(N + 1, 10**6),
        lambda v: svi(batch_size=v),
        "batch_size",
    )
    for arg in ("learning_rate", "init_scale"):
        add("svi_mean_field", arg, positives(), lambda v, a=arg: svi(**{a: v}))
    add(
        "svi_mean_field",
        "rng_key",
        keys().filter(lambda k: k is not None),
        lambda v: svi(rng_key=v),
    )
    add(
        "svi_mean_field",
        "optimizer",
        NOT_NUMBERS.filter(lambda v: v is not None),
        lambda v: svi(optimizer=v),
    )
    add(
        "svi_mean_field",
        "init_loc",
        st.sampled_from(
            [
                {},
                {"Dense_0.bias": 0.0},
                {k: np.full(v.shape[1:], np.nan) for k, v in SAMPLES.items()},
            ]
        ),
        lambda v: svi_mean_field(CLF, X, Y_CLASS, num_steps=5, init_loc=v),
        "init_loc",
    )
    add(
        "svi_mean_field",
        "progress_bar",
        st.one_of(st.integers(), st.text(max_size=2)),
        lambda v: svi(progress_bar=v),
    )

    def fit_map(**kw: Any) -> Any:
        kw.setdefault("num_steps", 5)
        return map_estimate(REG, kw.pop("x", X), kw.pop("y", Y_REG), **kw)

    def ensemble(**kw: Any) -> Any:
        kw.setdefault("num_steps", 5)
        return deep_ensemble(
            REG, kw.pop("x", X), kw.pop("y", Y_REG), kw.pop("num_members", 2), **kw
        )

    for name, f in (("map_estimate", fit_map), ("deep_ensemble", ensemble)):
        add(name, "x", bad_inputs(), lambda v, f=f: f(x=v))
        add(name, "y", bad_targets(), lambda v, f=f: f(y=v))
        add(name, "num_steps", counts(), lambda v, f=f: f(num_steps=v))
        add(name, "batch_size", counts(optional=True), lambda v, f=f: f(batch_size=v))
        add(name, "learning_rate", positives(), lambda v, f=f: f(learning_rate=v))
        add(name, "init_method", choices(("prior", "network")), lambda v, f=f: f(init_method=v))
        add(name, "rng_key", keys().filter(lambda k: k is not None), lambda v, f=f: f(rng_key=v))
        add(
            name,
            "optimizer",
            NOT_NUMBERS.filter(lambda v: v is not None),
            lambda v, f=f: f(optimizer=v),
        )
    add("deep_ensemble", "num_members", counts(), lambda v: ensemble(num_members=v))

    def noise_choice(**kw: Any) -> Any:
        kw.setdefault("num_steps", 5)
        return heldout_noise(kw.pop("model", REG), kw.pop("x", X), kw.pop("y", Y_REG), **kw)

    add("heldout_noise", "model", st.sampled_from([CLF, STT, "mlp", None]),
        lambda v: noise_choice(model=v))  # fmt: skip
    add("heldout_noise", "x", bad_inputs(), lambda v: noise_choice(x=v))
    add("heldout_noise", "y", bad_targets(), lambda v: noise_choice(y=v))
    add("heldout_noise", "folds", st.one_of(counts(minimum=2), st.integers(min_value=N + 1)),
        lambda v: noise_choice(folds=v))  # fmt: skip
    add("heldout_noise", "num_steps", counts(), lambda v: noise_choice(num_steps=v))
    add("heldout_noise", "learning_rate", positives(), lambda v: noise_choice(learning_rate=v))
    add("heldout_noise", "init_method", choices(("network", "prior")),
        lambda v: noise_choice(init_method=v))  # fmt: skip
    add("heldout_noise", "rng_key", keys().filter(lambda k: k is not None),
        lambda v: noise_choice(rng_key=v))  # fmt: skip
    add(
        "map_estimate",
        "init_params",
        st.sampled_from([{}, {"Dense_0.bias": 0.0}, [1.0]]),
        lambda v: map_estimate(CLF, X, Y_CLASS, num_steps=5, init_params=v),
        "init_params",
    )

    # predictive
    def predict(**kw: Any) -> Any:
        return bp.predict(CLF, kw.pop("samples", SAMPLES), kw.pop("x", X), **kw)

    add("predict", "x", bad_inputs(), lambda v: predict(x=v))
    add("predict", "chunk_size", counts(optional=True), lambda v: predict(chunk_size=v))
    add(
        "predict",
        "sample_chunk_size",
        counts(optional=True),
        lambda v: predict(sample_chunk_size=v),
    )
    add(
        "predict",
        "samples",
        st.sampled_from(["missing", "shape", "nan", "empty", "axes"]).map(_bad_samples),
        lambda v: predict(samples=v),
    )
    add("prior_predictive", "num_samples", counts(), lambda v: bp.prior_predictive(CLF, X, v))
    add(
        "prior_predictive",
        "rng_key",
        keys().filter(lambda k: k is not None),
        lambda v: bp.prior_predictive(CLF, X, 2, rng_key=v),
    )
    add(
        "bma",
        "predictions",
        st.one_of(
            NOT_NUMBERS,
            st.sampled_from([np.zeros((0, N, K)), np.full((2, N, K), np.nan), np.ones(K)]),
        ),
        bp.bma,
    )

    # metrics
    for name in ("accuracy", "nll", "brier", "ece"):
        f = getattr(bp.metrics, name)
        add(
            f"metrics.{name}",
            "probs",
            st.sampled_from(["neg", "sum", "nan", "rank"]).map(_bad_probs),
            lambda v, f=f: f(v, Y_CLASS),
            "probs",
        )
        add(f"metrics.{name}", "labels", bad_labels(), lambda v, f=f: f(PROBS, v), "labels")
    add("metrics.ece", "num_bins", counts(), lambda v: bp.metrics.ece(PROBS, Y_CLASS, num_bins=v))
    add(
        "metrics.ece",
        "binning",
        choices(("width", "mass")),
        lambda v: bp.metrics.ece(PROBS, Y_CLASS, binning=v),
    )
    add(
        "metrics.agreement",
        "probs_b",
        st.sampled_from(["neg", "sum", "nan", "rank"]).map(_bad_probs),
        lambda v: bp.metrics.agreement(PROBS, v),
        "probs_b",
    )
    add(
        "metrics.rmse",
        "y",
        bad_targets(integers_are_bad=False),
        lambda v: bp.metrics.rmse(MEAN, v),
        "y",
    )
    add("metrics.rmse", "y_scale", positives(), lambda v: bp.metrics.rmse(MEAN, Y_REG, y_scale=v))
    add(
        "metrics.gaussian_nll",
        "scale",
        # scale is an array broadcastable to the means: [1.0] is a valid value here
        positives().filter(lambda v: not isinstance(v, list)),
        lambda v: bp.metrics.gaussian_nll(
            MEAN, np.full(N, v) if isinstance(v, float) else v, Y_REG
        ),
        "scale",
    )

    # full-batch MCMC: the drivers and the kernels
    def run(f: Callable, **kw: Any) -> Any:
        kw.setdefault("num_warmup", 5)
        kw.setdefault("num_samples", 5)
        return f(REG, kw.pop("x", X), kw.pop("y", Y_REG), **kw)

    for name, f in (("hmc", hmc), ("nuts", nuts)):
        add(name, "x", bad_inputs(), lambda v, f=f: run(f, x=v))
        add(name, "y", bad_targets(), lambda v, f=f: run(f, y=v))
        add(name, "num_warmup", counts(minimum=0), lambda v, f=f: run(f, num_warmup=v))
        for arg in ("num_samples", "num_chains", "thinning"):
            add(name, arg, counts(), lambda v, f=f, a=arg: run(f, **{a: v}))
        add(name, "step_size", positives(), lambda v, f=f: run(f, step_size=v))
        add(name, "target_accept_prob", open_unit(), lambda v, f=f: run(f, target_accept_prob=v))
        add(
            name,
            "chain_method",
            choices(("vectorized", "sequential")),
            lambda v, f=f: run(f, chain_method=v),
        )
        add(
            name, "init_method", choices(("prior", "network")), lambda v, f=f: run(f, init_method=v)
        )
        add(
            name,
            "rng_key",
            keys().filter(lambda k: k is not None),
            lambda v, f=f: run(f, rng_key=v),
        )
        add(name, "chunk_size", counts(optional=True), lambda v, f=f: run(f, chunk_size=v))
    add(
        "hmc",
        "trajectory_length",
        positives().filter(lambda v: v is not None),
        lambda v: run(hmc, trajectory_length=v),
    )
    add(
        "nuts",
        "max_tree_depth",
        st.one_of(counts(), st.integers(16, 10**6)),
        lambda v: run(nuts, max_tree_depth=v),
    )
    add("HMC", "step_size", positives(), lambda v: HMC(POT, step_size=v))
    add(
        "HMC",
        "trajectory_length",
        positives().filter(lambda v: v is not None),
        lambda v: HMC(POT, trajectory_length=v),
    )
    add("HMC", "target_accept_prob", open_unit(), lambda v: HMC(POT, target_accept_prob=v))
    add("HMC", "potential", NOT_NUMBERS, lambda v: HMC(v), "potential")
    add(
        "NUTS",
        "max_tree_depth",
        st.one_of(counts(), st.integers(16, 10**6)),
        lambda v: NUTS(POT, max_tree_depth=v),
    )
    add("NUTS", "step_size", positives(), lambda v: NUTS(POT, step_size=v))

    add(
        "hmc",
        "dense_mass",
        st.one_of(st.integers(), st.none(), st.text(max_size=2), st.just(1.5)),
        lambda v: run(hmc, dense_mass=v),
    )

    # reference runs: every setting of ReferenceHMCConfig, before anything is compiled
    def reference(**kw: Any) -> Any:
        settings = {"num_warmup": 5, "segment_draws": 5, "max_draws": 5, "x_test": X[:4]} | kw
        return reference_hmc(REG, (X, Y_REG), **settings)

    for arg, minimum in (("max_draws", 4), ("segment_draws", 4), ("num_chains", 2)):
        add("reference_hmc", arg, counts(minimum), lambda v, a=arg: reference(**{a: v}))
    add(
        "reference_hmc",
        "max_seconds",
        positives().filter(lambda v: v is not None),  # None: no time limit
        lambda v: reference(max_seconds=v),
    )
    add(
        "reference_hmc",
        "max_rhat",
        st.one_of(NONFINITE, st.floats(max_value=1.0, allow_nan=False), NOT_NUMBERS),
        lambda v: reference(max_rhat=v),
    )
    add(
        "reference_hmc",
        "min_share",
        st.one_of(
            NONFINITE,
            st.floats(max_value=0.0, allow_nan=False),
            st.floats(min_value=1.0, exclude_min=True, allow_nan=False),
            NOT_NUMBERS,
        ),
        lambda v: reference(min_share=v),
    )
    add("reference_hmc", "min_ess", positives(), lambda v: reference(min_ess=v))
    add(
        "reference_hmc",
        "mass_matrix",
        choices(bp.config.MASS_MATRICES),
        lambda v: reference(mass_matrix=v),
    )
    add("reference_hmc", "x_test", bad_inputs(), lambda v: reference(x_test=v))
    add(
        "ReferenceHMCConfig",
        "max_draws",
        counts(4),
        lambda v: bp.config.ReferenceHMCConfig(max_draws=v),
    )

    # settings that are each fine but not together
    add(
        "ReferenceHMCConfig",
        "burn_in+segment_draws",
        _burn_in_leaving_too_few(),
        lambda v: bp.config.ReferenceHMCConfig(segment_draws=v[0], burn_in=v[1]),
        "burn_in",
    )
    add(
        "ReferenceHMCConfig",
        "min_beta+num_temperatures",
        _ladders_float32_collapses(),
        lambda v: bp.config.ReferenceHMCConfig(num_temperatures=v[0], min_beta=v[1]),
        "min_beta",
    )
    add("ParallelTempering", "betas", _bad_betas(), lambda v: ParallelTempering(POT, betas=v))
    for name in ("sgld", "sghmc", "sgnht", "atmc"):
        add(f"{name} config", "batch_size", st.integers(-3, 1),
            lambda v, m=name: bp.config.CONFIGS[m](batch_size=v))  # fmt: skip

    # model_potential: per-row arrays outside data, discrete latents, chunk_size
    add("model_potential", "model_kwargs", _per_row_arrays(),
        lambda v: model_potential(_np_offset_model, data={"x": X, "y": Y_REG},
                                  model_kwargs={"offset": v[0]}, chunk_size=v[1]),
        "data", "model_kwargs")  # fmt: skip
    add("model_potential", "model_args", _per_row_arrays(),
        lambda v: model_potential(_np_offset_first, v[0], data={"x": X, "y": Y_REG},
                                  chunk_size=v[1]),
        "data", "model_args")  # fmt: skip
    add("model_potential", "discrete site", _discrete_priors(),
        lambda v: model_potential(_np_discrete_model(v), data={"x": X, "y": Y_REG}), "z")
    add(
        "model_potential",
        "chunk_size",
        st.one_of(st.integers(max_value=0), st.text(max_size=4).filter(lambda t: t != "auto"),
                  st.just(1.5), st.just(True)),
        lambda v: model_potential(_np_offset_model, data={"x": X, "y": Y_REG, "offset": Y_REG},
                                  chunk_size=v),
    )  # fmt: skip

    # SG-MCMC kernels
    for name, cls in (("SGLD", SGLD), ("SGHMC", SGHMC), ("SGNHT", SGNHT), ("ATMC", ATMC)):
        add(
            name,
            "step_size",
            positives().filter(lambda v: v is not None),
            lambda v, c=cls: c(POT, step_size=v),
        )
        add(name, "batch_size", counts(optional=True), lambda v, c=cls: c(POT, batch_size=v))
        add(
            name,
            "batch_size>n",
            st.integers(N + 1, 10**9),
            lambda v, c=cls: c(POT, batch_size=v),
            "batch_size",
        )
        add(
            name, "sampling", choices(("independent", "epoch")), lambda v, c=cls: c(POT, sampling=v)
        )
    add("SGLD", "decay", unit_from_zero(), lambda v: SGLD(POT, preconditioning=True, decay=v))
    add("SGHMC", "friction", positives(optional=True), lambda v: SGHMC(POT, friction=v))
    add("SGNHT", "diffusion", positives(optional=True), lambda v: SGNHT(POT, diffusion=v))
    add("ATMC", "momentum_noise", positives(optional=True),
        lambda v: ATMC(POT, momentum_noise=v))  # fmt: skip
    add("ATMC", "mass", positives(), lambda v: ATMC(POT, mass=v))

    # checkpointed fits: every argument before anything is compiled or written
    def checkpointed(data: Any = (X, Y_REG), **kw: Any) -> Any:
        args = {"checkpoint_dir": "/nonexistent/never-created", "checkpoint_every": 2} | kw
        config = HMCConfig(num_warmup=2, num_samples=4)
        return fit(REG, data, config, args.pop("rng_key", KEY), **args)

    add(
        "fit",
        "checkpoint_every",
        counts(optional=True),
        lambda v: checkpointed(checkpoint_every=v),
    )
    add(
        "fit",
        "progress_every",
        counts(optional=True),
        lambda v: checkpointed(progress_every=v),
    )
    add(
        "fit",
        "checkpoint_dir",
        st.one_of(st.none(), st.integers(), st.floats(), st.booleans(), st.just([b"a"])),
        lambda v: checkpointed(checkpoint_dir=v),
    )
    # x_test=None means "no test set" (the default), so None is not a bad value here
    add(
        "fit",
        "x_test",
        bad_inputs().filter(lambda v: v is not None),
        lambda v: checkpointed(data=(X, Y_REG, v)),
    )
    add("fit", "rng_key", keys(), lambda v: checkpointed(rng_key=v))

    # data
    add(
        "data.load",
        "name",
        st.text(max_size=10).filter(lambda t: t not in bp.data.available()),
        bp.data.load,
        "dataset",
    )
    add(
        "data.load",
        "split",
        counts(minimum=0),
        lambda v: bp.data.load("uci/yacht", split=v, data_dir=UCI_DIR),
        "split",
    )
    add(
        "data.load",
        "option",
        st.text(min_size=1, max_size=8)
        .filter(str.isidentifier)
        .filter(lambda t: t not in ("seed", "test_fraction")),
        lambda v: bp.data.load("digits", **{v: 1}),
        "option",
        "takes",
    )
    add(
        "data.load", "test_fraction", open_unit(), lambda v: bp.data.load("digits", test_fraction=v)
    )
    return cases


def _bad_samples(kind: str) -> dict:
    s = dict(SAMPLES)
    if kind == "missing":
        s.pop("Dense_0.bias")
    elif kind == "shape":
        s["Dense_0.kernel"] = np.zeros((2, D + 1, 4), np.float32)
    elif kind == "nan":
        s["Dense_0.kernel"] = np.full((2, D, 4), np.nan, np.float32)
    elif kind == "empty":
        s = {k: v[:0] for k, v in s.items()}
    else:
        s = {k: v[None, None] for k, v in s.items()}
    return s


def _bad_probs(kind: str) -> np.ndarray:
    p = PROBS.copy()
    if kind == "neg":
        p[0] = [1.5, -0.5, 0.0]
    elif kind == "sum":
        p[0] = [0.5, 0.5, 0.5]
    elif kind == "nan":
        p[0, 0] = np.nan
    else:
        p = p[None]
    return p


# -------------------------------------------------- combinations and NumPyro model potentials
@st.composite
def _burn_in_leaving_too_few(draw: Callable) -> tuple[int, float]:
    """``(segment_draws, burn_in)`` that leave fewer than 4 draws at the first check."""
    segment = draw(st.integers(4, 400))
    kept = draw(st.integers(0, 3))
    low = (segment - kept - 0.5) / segment  # int(burn_in * segment) == segment - kept
    return segment, draw(st.floats(max(low, 0.0) + 1e-9, min(0.9999999, (segment - kept + 0.9) /
                                                              segment)).filter(
        lambda b: segment - int(b * segment) < 4 and 0 <= b < 1))


@st.composite
def _ladders_float32_collapses(draw: Callable) -> tuple[int, float]:
    """``(num_temperatures, min_beta)`` whose geometric ladder is not one in float32."""
    if draw(st.booleans()):  # the lowest rung underflows float32's normal range
        return draw(st.integers(2, 8)), draw(st.floats(1e-300, 1e-39))
    return draw(st.integers(40, 200)), 1.0 - draw(st.floats(1e-9, 1e-7))  # rungs collide


@st.composite
def _bad_betas(draw: Callable) -> list[float]:
    """Ladders that are not strictly falling from 1 to above 0 in float32."""
    kind = draw(st.sampled_from(["collide", "underflow", "rises", "not_one"]))
    if kind == "collide":
        return [1.0, 1.0 - draw(st.floats(1e-12, 2.9e-8)), 0.5]
    if kind == "underflow":
        return [1.0, 0.5, draw(st.floats(1e-320, 1e-39))]
    if kind == "rises":
        return [1.0, 0.3, draw(st.floats(0.3, 0.9))]
    return [draw(st.floats(0.1, 0.99)), 0.05]


@st.composite
def _per_row_arrays(draw: Callable) -> tuple[np.ndarray, int | None]:
    """A per-row array (N rows, maybe a trailing axis of 1) and a chunk size."""
    shape = draw(st.sampled_from([(N,), (N, 1)]))
    values = draw(st.floats(-5, 5)) + np.arange(N, dtype=np.float32).reshape(shape)
    return values.astype(np.float32), draw(st.sampled_from([1, 2, 5, N, None]))


def _discrete_priors() -> st.SearchStrategy:
    import numpyro.distributions as dist

    return st.sampled_from([dist.Bernoulli(0.5), dist.Poisson(2.0), dist.Geometric(0.3),
                            dist.Categorical(np.full(3, 1 / 3)), dist.Binomial(4, 0.5)])


def _np_offset_model(x: Any, offset: Any, y: Any = None) -> None:
    import numpyro
    import numpyro.distributions as dist

    w = numpyro.sample("w", dist.Normal(0, 1).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        mean = x @ w + (offset if np.ndim(offset) == 1 else offset[..., 0])
        numpyro.sample("y", dist.Normal(mean, 1.0), obs=y)


def _np_offset_first(offset: Any, x: Any, y: Any = None) -> None:
    _np_offset_model(x, offset, y)


def _np_discrete_model(prior: Any) -> Callable:
    import numpyro
    import numpyro.distributions as dist

    def model(x: Any, y: Any = None) -> None:
        z = numpyro.sample("z", prior)
        w = numpyro.sample("w", dist.Normal(0, 1).expand([x.shape[1]]).to_event(1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(x @ w + z, 1.0), obs=y)

    return model


CASES = _cases()


def _named(message: str, names: tuple[str, ...]) -> bool:
    return any(re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", message) for n in names)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@SETTINGS
@given(data=st.data())
def test_bad_value_raises_a_named_error_before_compiling(case: Case, data: st.DataObject) -> None:
    if case.id == "data.load-split" and not (UCI_DIR / "yacht").is_dir():
        # the split's range is read from the data set's folder (n_splits.txt)
        pytest.skip(f"no UCI data at {UCI_DIR}")
    value = data.draw(case.values, label=case.arg)
    with count_compiles() as compiles:
        with pytest.raises(InputError) as info:
            case.call(value)
    assert isinstance(info.value, ValueError | TypeError)
    assert _named(str(info.value), case.names), (
        f"{case.entry}: the message does not name {case.names}: {info.value}"
    )
    assert compiles == [], f"{case.entry}({case.arg}={value!r}) compiled before raising"


@pytest.mark.parametrize(
    "build,y,match",
    [
        # a network output that does not fit the likelihood
        (
            lambda: bp.BNN(MLP(out=1), bp.priors.Normal(1.0), bp.likelihoods.Categorical()),
            Y_CLASS,
            r"y must lie in \[0, 1\)",
        ),
        (
            lambda: bp.BNN(MLP(out=2), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(1.0)),
            Y_REG,
            r"network has 2 outputs",
        ),
        (
            lambda: bp.BNN(_Rank3(), bp.priors.Normal(1.0), bp.likelihoods.Categorical()),
            Y_CLASS,
            r"Categorical needs a network output of shape \(n, num_classes\)",
        ),
        (
            lambda: bp.BNN(MLP(out=K), bp.priors.Normal(1.0), bp.likelihoods.Gaussian(1.0)),
            Y_REG,
            r"network has 3 outputs",
        ),
        (
            lambda: with_likelihood(bp.likelihoods.Bernoulli(), out=2),
            Y_BIN,
            r"Bernoulli needs a network with one output",
        ),
        (
            lambda: with_likelihood(bp.likelihoods.HeteroscedasticGaussian(), out=1),
            Y_REG,
            r"HeteroscedasticGaussian needs a network with two outputs",
        ),
        (
            lambda: with_likelihood(bp.likelihoods.Poisson(), out=K),
            Y_COUNT,
            "network has 3 outputs",
        ),
        (lambda: with_likelihood(bp.likelihoods.StudentT(), out=K), Y_REG, "network has 3 outputs"),
    ],
)
def test_a_network_output_that_does_not_fit_the_likelihood_is_refused(build, y, match) -> None:
    model = build()
    with count_compiles() as compiles:
        with pytest.raises(InputError, match=match):
            full_batch_potential(model, X, y)
    assert compiles == []


class _Rank3(MLP):
    def __call__(self, x: Any) -> Any:
        return super().__call__(x)[:, None, :]


def test_the_matrix_covers_every_public_entry_point() -> None:
    entries = {c.entry for c in CASES}
    for name in (
        "BNN",
        "full_batch_potential",
        "svi_mean_field",
        "map_estimate",
        "deep_ensemble",
        "heldout_noise",
        "predict",
        "bma",
        "from_string",
        "data.load",
        "reference_hmc",
    ):
        assert name in entries, name
    assert len(CASES) >= 60


# ------------------------------------------------------------------------ the command line
def _count_texts(minimum: int = 1) -> st.SearchStrategy:
    return st.one_of(
        st.integers(max_value=minimum - 1, min_value=-(10**12)).map(str),
        st.floats(allow_nan=True, allow_infinity=True)
        .filter(lambda f: f != int(f) if math.isfinite(f) else True)
        .map(str),
        st.sampled_from(["", "abc", "1e3", "2.0", "0x10", "nan", "inf"]),
        st.integers(min_value=2**63).map(str),
    )


def _positive_texts() -> st.SearchStrategy:
    return st.one_of(
        st.floats(max_value=0.0, allow_nan=False).map(repr),
        st.sampled_from(["nan", "inf", "-inf", "1e-320", "1e39", "", "abc", "0"]),
    )


CLI_TINY = ["--model", "mlp", "--width", "4", "--dataset", "iris"]
CLI_FLAGS: dict[str, tuple[st.SearchStrategy, list[str]]] = {
    "--num-samples": (_count_texts(), ["hmc"]),
    "--num-warmup": (_count_texts(minimum=0), ["hmc"]),
    "--num-chains": (_count_texts(), ["hmc"]),
    "--max-tree-depth": (_count_texts(), ["nuts"]),
    "--step-size": (_positive_texts(), ["hmc"]),
    "--trajectory-length": (_positive_texts(), ["hmc"]),
    "--temperature": (_positive_texts(), ["svi"]),
    "--learning-rate": (_positive_texts(), ["svi"]),
    "--num-steps": (_count_texts(), ["svi"]),
    "--batch-size": (_count_texts(), ["svi"]),
    "--num-members": (_count_texts(), ["ensemble"]),
    "--width": (_count_texts(), ["svi"]),
    "--chunk-size": (_count_texts(), ["svi"]),
    "--max-train": (_count_texts(), ["svi"]),
    "--seed": (st.sampled_from(["-1", "2.5", "abc", str(2**32)]), ["svi"]),
    "--prior": (bad_prior_strings(), ["svi"]),
    "--dataset": (
        st.text(min_size=1, max_size=8).filter(
            lambda t: t not in bp.data.available() and not t.startswith("-")
        ),
        ["svi"],
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flag", list(CLI_FLAGS))
@SETTINGS
@given(data=st.data())
def test_cli_run_refuses_a_bad_option_before_claiming_the_folder(
    flag: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import contextlib
    import io

    from bnn_ppl import cli

    values, extra = CLI_FLAGS[flag]
    value = data.draw(values, label=flag)
    out = tmp_path_factory.mktemp("run") / "never-written"
    args = ["run", *extra, *CLI_TINY, f"{flag}={value}", "--out", str(out)]
    err = io.StringIO()
    with count_compiles() as compiles:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = cli.main(args)
    assert rc == 2, f"bnn-ppl {' '.join(args)} exited {rc}: {err.getvalue()}"
    message = err.getvalue()
    assert "Traceback" not in message
    assert flag in message or flag.lstrip("-").replace("-", "_") in message, message
    assert not out.exists(), "a refused run claimed its folder"
    assert compiles == []


@pytest.mark.parametrize(
    "make",
    ["missing", "file", "empty", "not_json", "no_run"],
)
def test_cli_evaluate_and_compare_refuse_what_is_not_a_run_folder(make: str, tmp_path) -> None:
    import contextlib
    import io

    from bnn_ppl import cli

    target = tmp_path / "run"
    if make == "file":
        target.write_text("not a folder")
    elif make == "empty":
        target.mkdir()
    elif make == "not_json":
        target.mkdir()
        (target / "config.json").write_text("{ not json")
    elif make == "no_run":
        target.mkdir()
        (target / "config.json").write_text("{}")
    for command in (["evaluate", str(target)], ["compare", str(target), str(target)]):
        err = io.StringIO()
        with count_compiles() as compiles:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = cli.main(command)
        assert rc == 2, (command, err.getvalue())
        assert "Traceback" not in err.getvalue() and str(target) in err.getvalue()
        assert compiles == []


OUT_STATES = ("a file", "not a run folder", "busy", "another run")


@pytest.mark.timeout(120)
@SETTINGS
@given(state=st.sampled_from(OUT_STATES),
       names=st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,7}\.(txt|npz|json)", fullmatch=True),
                      min_size=1, max_size=3, unique=True))  # fmt: skip
def test_cli_run_refuses_an_out_folder_it_cannot_use_and_leaves_it_as_it_was(
    state: str, names: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``--out`` a file, a folder of other files, a folder another run holds (its lock), or
    another run's folder: exit 2 naming ``--out``, nothing compiled, every byte left as it was."""
    import contextlib
    import io
    import json

    from bnn_ppl import cli, runs

    out = tmp_path_factory.mktemp("out") / "out"
    if state == "a file":
        out.write_text("not a folder")
    else:
        out.mkdir()
        for name in names:
            (out / name).write_text(name)
        if state in ("busy", "another run"):
            cfg = runs.make_config({"method": "map"}, data={"name": "iris"})
            (out / runs.CONFIG).write_text(json.dumps(cfg))
    before = ({p.name: p.read_bytes() for p in out.iterdir()} if out.is_dir()
              else out.read_bytes())  # fmt: skip
    args = ["run", "svi", *CLI_TINY, "--num-steps", "3", "--out", str(out)]
    err = io.StringIO()
    lock = runs.FolderLock(out) if state == "busy" else contextlib.nullcontext()
    with lock, count_compiles() as compiles:
        if state == "busy":  # (the lock file is the holder's)
            before = {p.name: p.read_bytes() for p in out.iterdir()}
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = cli.main(args)
        after = ({p.name: p.read_bytes() for p in out.iterdir()} if out.is_dir()
                 else out.read_bytes())  # fmt: skip
    message = err.getvalue()
    assert rc == 2 and "Traceback" not in message and "--out" in message, message
    assert after == before
    assert compiles == []
