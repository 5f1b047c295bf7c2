"""hmc()/nuts()/HMC/NUTS refuse every bad argument by name before anything compiles, and
settings that used to hang (or run a chain that never moves) are refused or bounded.

Before these checks, ``step_size=nan`` / ``inf`` / ``-0.1`` ran a chain that never moved and
reported acceptance 1.0; ``step_size=0`` (adaptation off) and ``target_accept_prob=1.5`` hung;
``num_chains=2.5`` compiled ~60 programs before a bare "'float' object cannot be interpreted as
an integer", and ``num_warmup="2"`` or ``None`` raised "'<' not supported between instances of
'str' and 'int'".
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from conftest import count_compiles
from conjugate import data, linear_model
from hypothesis import given, settings
from hypothesis import strategies as st

from bnn_ppl.inference import HMC, NUTS, full_batch_potential, hmc, nuts
from bnn_ppl.inference.hmc_checks import (
    MAX_TREE_DEPTH,
    check_hmc_kwargs,
    check_run_args,
)
from bnn_ppl.validation import InputError, InputTypeError, InputValueError

BAD_COMMON = [
    # (argument, bad value, exception): each must be refused, naming the argument
    ("step_size", float("nan"), InputValueError),
    ("step_size", float("inf"), InputValueError),
    ("step_size", -0.1, InputValueError),
    ("step_size", 0.0, InputValueError),
    ("step_size", 1e-320, InputValueError),  # zero in float32
    ("step_size", None, InputTypeError),
    ("step_size", "0.1", InputTypeError),
    ("step_size", True, InputTypeError),
    ("target_accept_prob", 1.5, InputValueError),
    ("target_accept_prob", 1.0, InputValueError),
    ("target_accept_prob", 0.0, InputValueError),
    ("target_accept_prob", -0.2, InputValueError),
    ("target_accept_prob", float("nan"), InputValueError),
    ("target_accept_prob", None, InputTypeError),
    ("adapt_mass_matrix", "yes", InputTypeError),
    ("adapt_mass_matrix", 1, InputTypeError),
    ("num_chains", 2.5, InputTypeError),
    ("num_chains", 2.0, InputTypeError),
    ("num_chains", "2", InputTypeError),
    ("num_chains", None, InputTypeError),
    ("num_chains", True, InputTypeError),
    ("num_chains", 0, InputValueError),
    ("num_warmup", "2", InputTypeError),
    ("num_warmup", None, InputTypeError),
    ("num_warmup", -1, InputValueError),
    ("num_warmup", 2.5, InputTypeError),
    ("num_samples", 0, InputValueError),
    ("num_samples", 10.0, InputTypeError),
    ("num_samples", None, InputTypeError),
    ("num_samples", 2**31, InputValueError),
    ("thinning", 0, InputValueError),
    ("thinning", 1.5, InputTypeError),
    ("thinning", 1000, InputValueError),  # more than num_samples: no draw would be kept
    ("chain_method", "parallel", InputValueError),
    ("chain_method", None, InputValueError),
    ("init_method", "zeros", InputValueError),
    ("progress_bar", "no", InputTypeError),
    ("extra_fields", "accept_prob", InputTypeError),
    ("extra_fields", ("accept_prob", "acceptance"), InputValueError),
    ("extra_fields", None, InputTypeError),
    ("rng_key", 0, InputTypeError),
    ("rng_key", "key", InputTypeError),
]
BAD_HMC = [
    ("trajectory_length", 0.0, InputValueError),
    ("trajectory_length", -1.0, InputValueError),
    ("trajectory_length", float("nan"), InputValueError),
    ("trajectory_length", float("inf"), InputValueError),
    ("trajectory_length", "1", InputTypeError),
    ("adapt_step_size", None, InputTypeError),
    ("max_num_steps", 0, InputValueError),
    ("max_num_steps", 2.5, InputTypeError),
    ("max_num_steps", 2**21, InputValueError),
]
BAD_NUTS = [
    ("max_tree_depth", 0, InputValueError),
    ("max_tree_depth", MAX_TREE_DEPTH + 1, InputValueError),
    ("max_tree_depth", 2.5, InputTypeError),
    ("max_tree_depth", None, InputTypeError),
]


def _case_id(case):
    return f"{case[0]}={case[1]!r}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "run,case",
    [(hmc, c) for c in BAD_COMMON + BAD_HMC] + [(nuts, c) for c in BAD_COMMON + BAD_NUTS],
    ids=lambda v: v.__name__ if callable(v) else _case_id(v),
)
def test_every_argument_is_checked_before_compiling(run, case):
    name, value, exc = case
    x, y = data()
    with count_compiles() as compiles:
        with pytest.raises(exc, match=name) as info:
            run(linear_model(), x, y, **{"num_samples": 10, name: value})
    assert isinstance(info.value, InputError)
    assert compiles == [], f"{name}={value!r} traced/compiled first: {compiles}"


@pytest.mark.timeout(120)
def test_model_and_key_are_checked_before_compiling():
    x, y = data()
    keys = jax.random.split(jax.random.key(0), 2)
    with count_compiles() as compiles:
        for run in (hmc, nuts):
            with pytest.raises(InputTypeError, match="model must be a bnn_ppl.BNN"):
                run("mlp", x, y)
            with pytest.raises(InputValueError, match="rng_key must be one key"):
                run(linear_model(), x, y, rng_key=keys)
    assert compiles == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "kwargs,match",
    [
        # used to hang: ceil(trajectory_length / 0) leapfrog steps
        (dict(step_size=0.0, adapt_step_size=False), "step_size"),
        # used to hang: dual averaging towards an acceptance above 1 shrinks the step to 0
        (dict(target_accept_prob=1.5), "target_accept_prob"),
        # ceil(1.57 / 1e-30) leapfrog steps per iteration
        (dict(step_size=1e-30, adapt_step_size=False), "max_num_steps"),
        (dict(step_size=1e-4, adapt_step_size=False, trajectory_length=1.0), "max_num_steps"),
        # NumPyro would silently integrate with one step of trajectory_length instead
        (dict(step_size=5.0, adapt_step_size=False, trajectory_length=1.0), "exceeds"),
    ],
    ids=["zero-step", "accept-1.5", "1e-30-step", "too-many-steps", "step-over-length"],
)
def test_settings_that_hung_are_refused_at_once(kwargs, match):
    x, y = data()
    with count_compiles() as compiles:
        with pytest.raises(InputValueError, match=match):
            hmc(linear_model(), x, y, **kwargs)
    assert compiles == []


@pytest.mark.timeout(120)
def test_kernel_classes_check_their_arguments_before_compiling():
    x, y = data()
    pot = full_batch_potential(linear_model(), x, y)
    cases = [
        (HMC, dict(step_size=float("nan")), InputValueError, "step_size"),
        (HMC, dict(step_size=-1.0), InputValueError, "step_size"),
        (HMC, dict(target_accept_prob=1.5), InputValueError, "target_accept_prob"),
        (HMC, dict(num_steps=2.5), InputTypeError, "num_steps"),
        (HMC, dict(num_steps=0), InputValueError, "num_steps"),
        (HMC, dict(num_steps=2000), InputValueError, "num_steps"),
        (HMC, dict(trajectory_length=float("inf")), InputValueError, "trajectory_length"),
        (HMC, dict(step_size=0.0, adapt_step_size=False), InputValueError, "step_size"),
        (HMC, dict(dense_mass=[("a",)]), InputTypeError, "dense_mass"),
        (HMC, dict(inverse_mass_matrix=-np.ones(3)), InputValueError, "inverse_mass_matrix"),
        (HMC, dict(inverse_mass_matrix=np.ones((2, 3))), InputValueError, "inverse_mass"),
        (HMC, dict(kinetic_fn=3), InputTypeError, "kinetic_fn"),
        (HMC, dict(adapt_step_size="yes"), InputTypeError, "adapt_step_size"),
        (HMC, dict(regularize_mass_matrix=None), InputTypeError, "regularize_mass_matrix"),
        (HMC, dict(max_tree_depth=5), InputTypeError, "max_tree_depth"),
        (HMC, dict(init_strategy=None), InputTypeError, "init_strategy"),
        (NUTS, dict(max_tree_depth=20), InputValueError, "max_tree_depth"),
        (NUTS, dict(max_tree_depth=(5, 0)), InputValueError, r"max_tree_depth\[1\]"),
        (NUTS, dict(max_tree_depth=(5, 5, 5)), InputValueError, "max_tree_depth"),
        (NUTS, dict(trajectory_length=1.0), InputTypeError, "trajectory_length"),
        (NUTS, dict(step_size=float("inf")), InputValueError, "step_size"),
        (NUTS, dict(find_heuristic_step_size=1), InputTypeError, "find_heuristic_step_size"),
        (HMC, dict(), InputTypeError, "FullBatchPotential"),  # called on the model below
    ]
    with count_compiles() as compiles:
        for cls, kwargs, exc, match in cases[:-1]:
            with pytest.raises(exc, match=match):
                cls(pot, **kwargs)
        with pytest.raises(InputTypeError, match="FullBatchPotential"):
            HMC(linear_model(), trajectory_length=1.0)
    assert compiles == []
    HMC(pot, step_size=0.1, adapt_step_size=False, trajectory_length=1.0)  # fine: 10 steps
    NUTS(pot, max_tree_depth=(6, 8))


# ---------------------------------------------------------------- generated values
def _accepted(check, value):
    try:
        check(value)
    except InputError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    step=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5)),
    accept=st.floats(allow_nan=True, allow_infinity=True),
    length=st.floats(allow_nan=True, allow_infinity=True),
    adapt=st.booleans(),
)
def test_generated_hmc_settings_are_refused_or_bounded(step, accept, length, adapt):
    """Any float settings: either refused by name, or a kernel whose every iteration takes
    between 1 and max_num_steps leapfrog steps with a target acceptance in (0, 1)."""
    kwargs = dict(
        step_size=step, target_accept_prob=accept, trajectory_length=length, adapt_step_size=adapt
    )
    try:
        out = check_hmc_kwargs(kwargs)
    except InputError as e:
        assert any(name in str(e) for name in kwargs), str(e)
        return
    assert 0 < out["target_accept_prob"] < 1
    assert math.isfinite(out["step_size"]) and out["step_size"] > 0
    assert math.isfinite(out["trajectory_length"]) and out["trajectory_length"] > 0
    if not adapt:  # a fixed step: NumPyro's ceil(L / step) must be within the bound
        n = np.ceil(np.float32(out["trajectory_length"]) / np.float32(out["step_size"]))
        assert 1 <= n <= out["max_num_steps"]


COUNT_VALUES = st.one_of(
    st.integers(-3, 2**32),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(warmup=COUNT_VALUES, samples=COUNT_VALUES, chains=COUNT_VALUES, thinning=COUNT_VALUES)
def test_generated_counts_are_refused_by_name_or_used_exactly(warmup, samples, chains, thinning):
    kwargs = dict(num_warmup=warmup, num_samples=samples, num_chains=chains, thinning=thinning)
    try:
        out = check_run_args(
            **kwargs,
            chain_method="vectorized",
            init_method="prior",
            progress_bar=False,
            extra_fields=(),
        )
    except InputError as e:
        assert any(name in str(e) for name in kwargs), str(e)
        return
    for name, value in kwargs.items():  # never rounded or converted
        assert type(value) is int and out[name] == value
    assert 1 <= out["thinning"] <= out["num_samples"]


def test_generated_checks_can_fail():
    """The two generated tests above have power: bad values do reach the error branch."""
    assert not _accepted(check_hmc_kwargs, {"step_size": float("nan")})
    assert not _accepted(check_hmc_kwargs, {"target_accept_prob": 1.5})
    assert _accepted(check_hmc_kwargs, {"step_size": 0.1, "trajectory_length": 1.0})


def test_fixed_step_size_at_the_bound_is_accepted():
    out = check_hmc_kwargs(dict(step_size=1.0 / 1024, trajectory_length=1.0, adapt_step_size=False))
    assert out["max_num_steps"] == 1024
    with pytest.raises(InputValueError, match="max_num_steps=1024"):
        check_hmc_kwargs(dict(step_size=1.0 / 1100, trajectory_length=1.0, adapt_step_size=False))
