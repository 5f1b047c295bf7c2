"""Step-size schedules (bnn_ppl.inference.sgmcmc.schedules) and cycle-end selection (.cycles)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC

from bnn_ppl.inference import ATMC, SGLD
from bnn_ppl.inference.sgmcmc.schedules import (
    as_schedule,
    constant,
    cycle_end_indices,
    cycle_end_samples,
    cyclical_cosine,
    keep_cycle_ends,
    polynomial_decay,
)


def test_constant_and_polynomial_decay():
    t = jnp.arange(50)
    np.testing.assert_allclose(constant(0.3)(t), np.full(50, 0.3), rtol=1e-6)
    h = polynomial_decay(0.2, gamma=0.55, b=7.0)
    np.testing.assert_allclose(h(t), 0.2 * (1 + np.arange(50) / 7.0) ** -0.55, rtol=1e-5)
    assert float(h(0)) == pytest.approx(0.2)
    assert np.all(np.diff(np.asarray(h(t))) < 0)
    np.testing.assert_allclose(polynomial_decay(1.0, gamma=0.0)(t), 1.0)
    assert as_schedule(0.1)(5) == pytest.approx(0.1)
    assert as_schedule(h) is h


def test_cyclical_cosine_hits_h0_at_starts_and_almost_zero_at_ends():
    h0, n, cycles = 0.05, 40, 5
    t = np.arange(n * cycles)
    h = np.asarray(jax.jit(cyclical_cosine(h0, n))(jnp.asarray(t)), np.float64)
    np.testing.assert_allclose(h, h0 / 2 * (1 + np.cos(np.pi * (t % n) / n)), rtol=1e-5)
    np.testing.assert_allclose(h[t % n == 0], h0, rtol=1e-6)  # every cycle starts at h0
    ends = h[t % n == n - 1]
    assert len(ends) == cycles
    # the last step of a cycle: h0 · ½(1 - cos(π/n)) ≈ h0 π²/(4n²)
    np.testing.assert_allclose(ends, h0 * math.pi**2 / (4 * n**2), rtol=1e-3)
    assert np.all(ends < 2.5 * h0 / n**2)
    assert np.all(h > 0) and np.all(h <= h0 * (1 + 1e-6))
    # decreasing within every cycle
    assert np.all(np.diff(h.reshape(cycles, n), axis=1) < 0)


def test_as_schedule_checks_numbers_and_callables_without_compiling():
    from conftest import count_compiles

    from bnn_ppl.validation import InputTypeError, InputValueError

    with count_compiles() as compiles:
        for bad, error in ((0.0, InputValueError), (float("nan"), InputValueError),
                           (-1.0, InputValueError), (None, InputTypeError),
                           ("0.1", InputTypeError), (True, InputTypeError),
                           (lambda t: -0.5, InputValueError),
                           (lambda t: jnp.ones(3), InputValueError),
                           (lambda t: t.nonexistent, InputTypeError)):  # fmt: skip
            with pytest.raises(error, match="step_size"):
                as_schedule(bad)
        for good in (cyclical_cosine(0.1, 10), polynomial_decay(0.1), constant(0.2)):
            assert as_schedule(good) is good  # carries its h0: not evaluated
    assert compiles == []
    assert as_schedule(lambda t: 0.01)(3) == 0.01


def test_cycle_end_selection_checks_its_arguments():
    from bnn_ppl.inference.sgmcmc import schedules

    with pytest.raises(TypeError, match="cycle_length"):
        schedules.keep_cycle_ends({"w": np.zeros(4)}, np.arange(1, 5), 2.0)
    with pytest.raises(TypeError, match="num_samples"):
        cycle_end_indices(10.0, 5)


def test_schedule_arguments_are_checked():
    with pytest.raises(ValueError, match="h0"):
        cyclical_cosine(0.0, 10)
    with pytest.raises(TypeError, match="cycle_length"):
        cyclical_cosine(0.1, 2.5)
    with pytest.raises(ValueError, match="cycle_length"):
        cyclical_cosine(0.1, 0)
    with pytest.raises(ValueError, match="gamma"):
        polynomial_decay(0.1, gamma=-1.0)
    with pytest.raises(ValueError, match="thinning"):
        cycle_end_indices(10, 5, thinning=0)


@pytest.mark.parametrize(
    "num_warmup,num_samples,thinning,cycle_length",
    [(0, 100, 1, 10), (35, 100, 1, 10), (40, 100, 2, 10), (7, 61, 1, 4), (0, 5, 1, 5),
     (30, 95, 5, 10), (1, 1, 1, 1)],
)  # fmt: skip
def test_cycle_end_indices_keep_exactly_one_sample_per_cycle(
    num_warmup, num_samples, thinning, cycle_length
):
    idx = cycle_end_indices(num_samples, cycle_length, num_warmup=num_warmup, thinning=thinning)
    # counters of the collected samples, NumPyro's rule (the last of every `thinning` steps)
    counters = (
        num_warmup + num_samples % thinning + thinning * np.arange(1, num_samples // thinning + 1)
    )
    kept = counters[idx]
    assert np.all(kept % cycle_length == 0)
    cycle_of = kept // cycle_length  # the cycle each kept sample ends
    assert len(np.unique(cycle_of)) == len(kept)  # one per cycle
    # every cycle ending within the collected span is there
    first, last = counters[0] - thinning + 1, counters[-1]
    ends = [c for c in range(first, last + 1) if c % cycle_length == 0]
    assert kept.tolist() == ends


def test_cycle_end_indices_warn_when_thinning_skips_cycle_ends():
    with pytest.warns(UserWarning, match="cycle ends"):
        idx = cycle_end_indices(100, 10, thinning=3)
    assert len(idx) < 10


def test_keep_cycle_ends_flat_and_grouped():
    it = np.arange(1, 13)
    s = {"w": np.arange(12.0)[:, None] * np.ones(3), "b": np.arange(12)}
    out = keep_cycle_ends(s, it, 4)
    assert out["w"].shape == (3, 3) and out["b"].tolist() == [3, 7, 11]
    grouped = {"w": np.stack([np.arange(12.0), -np.arange(12.0)])}
    out = keep_cycle_ends(grouped, np.stack([it, it]), 6)
    assert out["w"].tolist() == [[5.0, 11.0], [-5.0, -11.0]]
    with pytest.raises(ValueError, match="differ between chains"):
        keep_cycle_ends(grouped, np.stack([it, it + 1]), 6)
    with pytest.raises(ValueError, match="does not match"):
        keep_cycle_ends({"w": np.zeros(5)}, it, 4)


def _potential(z):
    return 0.5 * jnp.sum(z["x"] ** 2)


@pytest.mark.parametrize("num_chains", [1, 2])
def test_mcmc_counter_includes_warmup_and_cycle_ends_are_the_smallest_steps(num_chains):
    n, warmup, samples = 8, 12, 30
    mcmc = MCMC(
        ATMC(potential_fn=_potential, step_size=cyclical_cosine(0.1, n)),
        num_warmup=warmup,
        num_samples=samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    init = {"x": jnp.zeros((num_chains, 3) if num_chains > 1 else 3)}
    mcmc.run(jax.random.key(0), init_params=init, extra_fields=("info.step_size",))
    extra = mcmc.get_extra_fields(group_by_chain=True)
    counters = np.asarray(extra["i"])
    assert counters.shape == (num_chains, samples)
    assert np.all(counters == np.arange(warmup + 1, warmup + samples + 1))  # warmup counted
    idx = cycle_end_indices(samples, n, num_warmup=warmup)
    assert np.all(counters[0, idx] % n == 0)
    # the sample kept is the one after the cycle's last (smallest) step
    h = np.asarray(extra["info.step_size"])[0]
    h_end = 0.05 * (1 - math.cos(math.pi / n))
    np.testing.assert_allclose(h[idx], h_end, rtol=1e-4)
    assert np.all(np.delete(h, idx) > h_end * 1.5)
    ends = cycle_end_samples(mcmc, n, group_by_chain=True)
    np.testing.assert_array_equal(
        ends["x"], np.asarray(mcmc.get_samples(group_by_chain=True)["x"])[:, idx]
    )
    flat = cycle_end_samples(mcmc, n)
    assert flat["x"].shape == (num_chains * len(idx), 3)
    # cycles (12, 42]: ends at 16, 24, 32, 40
    assert len(idx) == 4


def test_cycle_end_samples_needs_the_counter():
    class NoCounter:
        def get_extra_fields(self, group_by_chain=False):
            return {}

    with pytest.raises(ValueError, match="step counter"):
        cycle_end_samples(NoCounter(), 4)


def test_sgld_with_polynomial_decay_runs_the_schedule():
    mcmc = MCMC(
        SGLD(potential_fn=_potential, step_size=polynomial_decay(0.1, gamma=1.0, b=10.0)),
        num_warmup=0,
        num_samples=20,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(1), init_params={"x": jnp.zeros(2)}, extra_fields=("info",))
    h = np.asarray(mcmc.get_extra_fields()["info"].step_size)
    np.testing.assert_allclose(h, 0.1 * (1 + np.arange(20) / 10.0) ** -1.0, rtol=1e-5)
