"""The chunk-size rule: the pure memory arithmetic, the probe, and what the potential records."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import numpy as np
import pytest
from tolerances import assert_sums_close, potential_magnitudes

import bnn_ppl as bp
from bnn_ppl.inference import full_batch_potential
from bnn_ppl.inference.potential import bnn as chunking
from bnn_ppl.inference.potential.sharded_sum import device_rows
from bnn_ppl.models import MLP
from bnn_ppl.validation import InputTypeError, InputValueError


def _probe_temp_per_row(model, device):
    """XLA's temporary bytes per row of the potential's probe chunk (as the memory rule reads)."""
    probe = chunking.potential_probe(
        model, jax.ShapeDtypeStruct((1, 6), np.float32), jax.ShapeDtypeStruct((1,), np.int32),
        np.float32, device,
    )  # fmt: skip
    temp = probe(chunking.PROBE_ROWS).memory_analysis().temp_size_in_bytes
    return -(-temp // chunking.PROBE_ROWS)


def _problem(n=1500):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = rng.integers(0, 3, n)
    model = bp.BNN(MLP(hidden=(8,), out=3), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    return model, x, y


def test_chunk_for_memory_fits_or_takes_the_largest_that_does():
    # fits: every row of the device in one chunk
    assert chunking.chunk_for_memory(60_000, 6_000, 10**12) == 60_000
    # does not fit: the largest chunk within safety * free - resident, and one more row would not
    for free, per_row, safety, resident in [(10**9, 7_777, 0.5, 0), (10**9, 999, 0.3, 10**8)]:
        c = chunking.chunk_for_memory(10**9, per_row, free, safety, resident_bytes=resident)
        budget = safety * free - resident
        assert 1 <= c < 10**9 and c * per_row <= budget < (c + 1) * per_row, c
    # never below one row, even with no memory or the data alone over budget
    assert chunking.chunk_for_memory(100, 10**6, 0) == 1
    assert chunking.chunk_for_memory(100, 1, 10**6, resident_bytes=10**7) == 1


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((0, 10, 100), {}, InputValueError, "rows_per_device"),
        ((10, 0, 100), {}, InputValueError, "bytes_per_row"),
        ((10, 10, -1), {}, InputValueError, "free_bytes"),
        ((10, 10.5, 100), {}, InputTypeError, "bytes_per_row"),
        ((10, 10, 100, 0.0), {}, InputValueError, "safety"),
        ((10, 10, 100, 1.5), {}, InputValueError, "safety"),
        ((10, 10, 100), {"resident_bytes": -5}, InputValueError, "resident_bytes"),
        ((True, 10, 100), {}, InputTypeError, "rows_per_device"),
    ],
)
def test_chunk_for_memory_refuses_nonsense(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        chunking.chunk_for_memory(*args, **kwargs)


def test_free_device_bytes_reads_memory_stats_or_says_none():
    def dev(stats):
        return SimpleNamespace(memory_stats=lambda: stats)

    a = dev({"bytes_limit": 1000, "bytes_in_use": 300})
    b = dev({"bytes_limit": 900, "bytes_in_use": 100})
    assert chunking.free_device_bytes([a, b]) == 700  # the least over the devices
    assert chunking.free_device_bytes([dev({"bytes_limit": 5, "bytes_in_use": 9})]) == 0
    assert chunking.free_device_bytes([a, dev(None)]) is None
    assert chunking.free_device_bytes([dev({"bytes_in_use": 1})]) is None


def test_cpu_default_sizes_chunks_by_the_activations_of_a_row_and_an_int_is_the_argument():
    model, x, y = _problem()
    row_x = jax.ShapeDtypeStruct((1, 6), np.float32)
    row_y = jax.ShapeDtypeStruct((1,), np.int32)
    per_row = chunking.activation_bytes_per_row(model, row_x, row_y)
    # a small MLP's row takes well under 8 MiB / 1500 bytes: every row in one chunk
    assert 0 < per_row < chunking.CPU_CHUNK_BYTES // 1500
    pot = full_batch_potential(model, x, y, devices=jax.devices()[:1])
    assert (pot.chunk_size, pot.num_chunks, pot.chunk_rule) == (1500, 1, "cpu working set")
    # ... and as many chunks as the budget needs when the row is wide: a hidden layer of
    # 4,000 units (its pre-activation, bias and ReLU) takes over 8 MiB / 1500 rows
    wide = bp.BNN(MLP(hidden=(4000,), out=3), bp.priors.Normal(0.3), bp.likelihoods.Categorical())
    wide_row = chunking.activation_bytes_per_row(wide, row_x, row_y)
    expected = chunking.cpu_chunk(1500, wide_row)
    assert expected < 1500 and expected * wide_row <= chunking.CPU_CHUNK_BYTES
    pot = full_batch_potential(wide, x, y, devices=jax.devices()[:1])
    assert (pot.chunk_size, pot.num_chunks) == device_rows(1500, 1, expected)
    # vectorized chains each hold their activations; chains run one after another do not
    pot4 = full_batch_potential(wide, x, y, devices=jax.devices()[:1], vectorized_chains=4)
    assert pot4.chunk_size == device_rows(1500, 1, chunking.cpu_chunk(1500, wide_row, 4))[0]
    assert pot4.chunk_size < pot.chunk_size
    seq = full_batch_potential(wide, x, y, devices=jax.devices()[:1], vectorized_chains=4,
                               chain_batching="sequential")  # fmt: skip
    assert seq.chunk_size == pot.chunk_size
    pot = full_batch_potential(model, x, y, devices=jax.devices()[:1], chunk_size=500)
    assert (pot.chunk_size, pot.num_chunks, pot.chunk_rule) == (500, 3, "chunk_size")
    assert set(chunking.CHUNK_RULES) >= {"cpu working set", "chunk_size"}


def test_activation_bytes_per_row_are_the_traced_intermediates_of_one_more_row():
    """Linear in a hidden layer's width (each unit adds the same values per row), independent
    of the parameters' own size (weights are not per row), and 4 bytes per float32 value."""
    row_x = jax.ShapeDtypeStruct((1, 6), np.float32)
    row_y = jax.ShapeDtypeStruct((1,), np.int32)

    def per_row(width):
        model = bp.BNN(MLP(hidden=(width,), out=3), bp.priors.Normal(0.3),
                       bp.likelihoods.Categorical())  # fmt: skip
        return chunking.activation_bytes_per_row(model, row_x, row_y)

    b50, b100, b200 = per_row(50), per_row(100), per_row(200)
    assert b200 - b100 == 2 * (b100 - b50) > 0
    values_per_unit = (b100 - b50) / 50 / 4  # float32 values one hidden unit adds per row
    assert values_per_unit == int(values_per_unit) and 2 <= values_per_unit <= 6
    assert chunking.cpu_chunk(10**8, 1) == chunking.CPU_CHUNK_BYTES
    assert chunking.cpu_chunk(10**6, 10**9) == chunking.CPU_MIN_CHUNK
    assert chunking.cpu_chunk(10, 10**9) == 10  # never more rows than the device holds


def test_auto_picks_one_chunk_when_memory_is_plenty_and_several_when_tight(monkeypatch):
    """``chunk_size="auto"`` on the CPU (free memory injected: the CPU reports none): one chunk
    with plenty of memory, several when tight, and the value and gradient equal those of the
    1024-row chunks to the float32 rounding of their sums."""
    model, x, y = _problem()
    devices = jax.devices()[:1]
    per_row = _probe_temp_per_row(model, devices[0]) + 6 * 4 + 4 + 1
    # memory for the data and about 300 rows of a chunk: 1500 rows make 5 chunks of 300
    tight = int((1500 * (6 * 4 + 4 + 1) + 300.5 * per_row) / chunking.SAFETY)
    reference = full_batch_potential(model, x, y, devices=devices, chunk_size=1024)
    u = reference.init_params(jax.random.key(0))
    f = jax.jit(lambda u, d: jax.value_and_grad(reference.potential_fn_gen(d))(u))
    v_ref, g_ref = f(u, reference.data)
    value_mag, grad_mag = potential_magnitudes(reference, u, x, y)
    cases = {10**12: ("fits in memory", 1500, 1), tight: ("largest that fits", 300, 5)}
    for free, (rule, chunk, num_chunks) in cases.items():
        monkeypatch.setattr(chunking, "free_device_bytes", lambda devices, free=free: free)
        pot = full_batch_potential(model, x, y, devices=devices, chunk_size="auto")
        assert (pot.chunk_rule, pot.chunk_size, pot.num_chunks) == (rule, chunk, num_chunks)
    # (one chunk against several is tested in test_potential.py; here the chunks of the rule)
    v, g = pot.value_and_grad(u)
    assert_sums_close(v, v_ref, value_mag, 1500 + 1, what="value")
    assert_sums_close(g, g_ref, grad_mag, 1500 + 1, what="gradient")
    # ... and the comparison has power: the same 1024-chunk program without row 0 fails it
    dropped = full_batch_potential(model, x[1:], y[1:], devices=devices, chunk_size=1024)
    v_bug, g_bug = f(u, dropped.data)
    with pytest.raises(AssertionError, match="value"):
        assert_sums_close(v, v_bug, value_mag, 1500 + 1, what="value")
    with pytest.raises(AssertionError, match="gradient"):
        assert_sums_close(g, g_bug, grad_mag, 1500 + 1, what="gradient")
    # a device that reports no memory: the 1024-row default, said so
    monkeypatch.setattr(chunking, "free_device_bytes", lambda devices: None)
    pot = full_batch_potential(model, x, y, devices=devices, chunk_size="auto")
    assert (pot.chunk_rule, pot.chunk_size, pot.num_chunks) == ("no memory stats", 750, 2)


def test_bad_chunk_size_is_refused_before_compilation(monkeypatch):
    def no_compile(*args, **kwargs):
        raise AssertionError("compiled before refusing chunk_size")

    monkeypatch.setattr(chunking, "potential_probe", no_compile)
    model, x, y = _problem(20)
    for bad in ("AUTO", "1024", "max"):
        with pytest.raises(InputValueError, match="chunk_size must be a positive int, None"):
            full_batch_potential(model, x, y, chunk_size=bad)
    # several processes: each may see different free memory, so "auto" is refused
    fake = [SimpleNamespace(process_index=i, platform="gpu") for i in range(2)]
    with pytest.raises(InputValueError, match="chunk_size='auto'.*several processes"):
        full_batch_potential(model, x, y, devices=fake, chunk_size="auto")


def test_the_memory_rule_counts_every_vectorized_chain(monkeypatch):
    """Vectorized chains each hold a chunk's activations: with ``vectorized_chains=3`` the
    memory rule fits three chunks' temporary bytes in the budget (a ResNet built for one chain
    and run with three made XLA fail on an H200), and the drivers pass their chain count."""
    model, x, y = _problem()
    devices = jax.devices()[:1]
    temp_per_row = _probe_temp_per_row(model, devices[0])
    data_per_row = 6 * 4 + 4 + 1
    # room for the data and ~600 rows of one chain's chunk
    free = int((1500 * data_per_row + 600.5 * (temp_per_row + data_per_row)) / chunking.SAFETY)
    monkeypatch.setattr(chunking, "free_device_bytes", lambda devices: free)
    chunks = {}
    for chains in (1, 3):
        per_row = chains * temp_per_row + data_per_row
        want = chunking.chunk_for_memory(1500, per_row, free, resident_bytes=1500 * data_per_row)
        pot = full_batch_potential(
            model, x, y, devices=devices, chunk_size="auto", vectorized_chains=chains
        )
        assert pot.chunk_rule == "largest that fits"
        assert pot.chunk_size * pot.num_chunks >= 1500 and pot.chunk_size <= want
        chunks[chains] = want
    assert chunks[1] == 600 and chunks[3] < chunks[1] / 2.5
    # hmc() with 3 vectorized chains builds its potential for 3, sequential chains for 1
    from bnn_ppl.inference.mcmc import run as hmc_drivers

    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs["vectorized_chains"])
        raise _Stop

    monkeypatch.setattr(hmc_drivers, "full_batch_potential", spy)
    for method, want in (("vectorized", 3), ("sequential", 1)):
        with pytest.raises(_Stop):
            bp.inference.hmc(
                model, x, y, num_warmup=1, num_samples=1, num_chains=3, chain_method=method,
                chunk_size="auto", rng_key=jax.random.key(0), progress_bar=False,
            )  # fmt: skip
        assert seen[-1] == want
    with pytest.raises(InputTypeError, match="vectorized_chains"):
        full_batch_potential(model, x, y, vectorized_chains=2.0)


class _Stop(Exception):
    """Raised where the test has seen what it needs (nothing after it is run)."""


def test_model_potential_sizes_its_cpu_chunks_by_the_values_of_a_row():
    """A NumPyro model on the CPU: every row in one chunk for a narrow network; for a hidden
    layer of 4,000 units (at least its product and tanh: 32 KB a row) chunks of at most
    8 MiB / 32 KB rows."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    from bnn_ppl.inference import model_potential

    def mlp(width):
        def model(x, y=None):
            w = numpyro.sample("w", dist.Normal(0, 1).expand([x.shape[1], width]).to_event(2))
            v = numpyro.sample("v", dist.Normal(0, 1).expand([width]).to_event(1))
            with numpyro.plate("data", x.shape[0]):
                numpyro.sample("y", dist.Normal(jnp.tanh(x @ w) @ v, 1.0), obs=y)

        return model

    x = np.random.default_rng(0).normal(size=(1500, 2)).astype(np.float32)
    data = {"x": x, "y": x[:, 0]}
    one = jax.devices()[:1]
    narrow = model_potential(mlp(8), data=data, devices=one)
    assert (narrow.num_chunks, narrow.chunk_rule) == (1, "cpu working set")
    wide = model_potential(mlp(4000), data=data, devices=one)
    assert wide.chunk_rule == "cpu working set" and wide.num_chunks > 1
    assert chunking.CPU_MIN_CHUNK <= wide.chunk_size <= chunking.CPU_CHUNK_BYTES // (2 * 4000 * 4)
