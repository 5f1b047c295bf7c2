"""ReusingMCMC: a repeated MCMC.run reuses its compiled loop and gives NumPyro's draws."""

from __future__ import annotations

import threading
from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.util
import pytest
from conftest import count_compiles
from numpyro.infer import HMC, MCMC

from bnn_ppl._compat import ReusingMCMC, reused_jit

STOCK = numpyro.util.maybe_jit


def _potential(z):
    return 0.5 * jnp.sum((z - 1.0) ** 2 / jnp.array([1.0, 4.0]))


def _segments(
    mcmc_cls: type[MCMC], n: int, chain_method: str = "vectorized"
) -> tuple[list[np.ndarray], list[list[str]]]:
    """Warmup, then ``n`` runs of 5 draws each continuing from the last state; each run's
    draws and the compilations it made."""
    kernel = HMC(potential_fn=_potential, num_steps=3, trajectory_length=None)
    mcmc = mcmc_cls(kernel, num_warmup=10, num_samples=5, num_chains=2,
                    chain_method=chain_method, progress_bar=False)  # fmt: skip
    mcmc.warmup(jax.random.key(0), init_params=jnp.zeros((2, 2)))
    draws, compiles = [], []
    for _ in range(n):
        with count_compiles() as events:
            mcmc.run(mcmc.post_warmup_state.rng_key)
        mcmc.post_warmup_state = mcmc.last_state
        draws.append(np.asarray(mcmc.get_samples(group_by_chain=True)))
        compiles.append(events)
    return draws, compiles


@pytest.mark.parametrize("chain_method", ["vectorized", "sequential"])
def test_a_repeated_run_compiles_nothing_and_draws_what_numpyro_draws(chain_method):
    ours, compiles = _segments(ReusingMCMC, 3, chain_method)
    assert compiles[1] == [] and compiles[2] == [], compiles  # the first run's loop, reused
    stock, _ = _segments(MCMC, 3, chain_method)
    for a, b in zip(ours, stock, strict=True):
        np.testing.assert_array_equal(a, b)  # NumPyro's program: the same bits
    assert numpyro.util.maybe_jit is STOCK  # NumPyro's own function again after the runs


def test_the_memo_is_scoped_to_the_block_and_the_thread():
    def f(x):
        return x + 1

    memo: OrderedDict = OrderedDict()
    assert numpyro.util.maybe_jit(f) is not numpyro.util.maybe_jit(f)  # NumPyro's behaviour
    with reused_jit(memo):
        jitted = numpyro.util.maybe_jit(f, donate_argnums=0)
        assert numpyro.util.maybe_jit(f, donate_argnums=0) is jitted
        assert numpyro.util.maybe_jit(f) is not jitted  # other options: another jit object
        with reused_jit(OrderedDict()):  # nested: its own memo, then the outer one again
            assert numpyro.util.maybe_jit(f, donate_argnums=0) is not jitted
        assert numpyro.util.maybe_jit(f, donate_argnums=0) is jitted
        seen = []

        def outside() -> None:
            jit = numpyro.util.maybe_jit
            seen.append(jit(f, donate_argnums=0) is jit(f, donate_argnums=0))

        other = threading.Thread(target=outside)
        other.start()
        other.join()
        assert seen == [False]  # a thread outside any block: NumPyro's behaviour
    assert numpyro.util.maybe_jit is STOCK
    assert len(memo) == 2 and float(jitted(jnp.float32(1.0))) == 2.0
