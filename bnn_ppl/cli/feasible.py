"""Refusing a ``bnn-ppl run`` that cannot work on its data and machine, before the run folder is
claimed (:func:`check_feasible`): batch sizes, memory for the draws, float32 range of the
tempered likelihood, and the length of hmc trajectories.
"""

from __future__ import annotations

import contextlib
import math
import os

import bnn_ppl as bp
from bnn_ppl import config as configs
from bnn_ppl.cli.settings import RunSettings
from bnn_ppl.validation import InputValueError

MAX_LEAPFROG_STEPS = 100_000
"""hmc: most leapfrog steps per iteration at the initial step size (NUTS' default tree depth
allows 1,023); more is a run that does not finish, refused before it starts."""
MAX_LIKELIHOOD_SCALE = 1e15
"""Largest (training rows) / temperature: 1/T multiplies the summed log-likelihood, and beyond
this its gradients, squared by Adam (svi, ensemble) and in the kinetic energy (hmc, nuts,
sgmcmc), come within a few orders of magnitude of float32's overflow (3.4e38 = (1.8e19)^2):
Adam then silently stops moving and HMC's accept test is rounding noise."""
MEMORY_COPIES = 2
"""The draws and test predictions are held about twice while they are saved (device/host
arrays, then the .npz bytes): the memory estimate counts them twice."""


def _memory_bytes() -> int | None:
    """The memory the draws must fit in: physical RAM, or an accelerator's memory if smaller
    (``None`` when neither is known)."""
    sizes = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    if stats.get("bytes_limit"):
        sizes.append(int(stats["bytes_limit"]))
    return min(sizes) if sizes else None


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n < 2**40 else f"{n / 2**40:,.1f} TiB"


def check_temperature(temperature: float, n: int) -> None:
    """Refuse a ``--temperature`` so cold that float32 cannot hold the tempered gradients of
    ``n`` training rows (:data:`MAX_LIKELIHOOD_SCALE`), naming the option (before the model is
    built, whose own check names the library's argument)."""
    if n / temperature > MAX_LIKELIHOOD_SCALE:
        raise InputValueError(
            f"--temperature {temperature:g} is too cold for float32 with {n} training "
            f"rows: 1/T scales their summed log-likelihood by n/T = {n / temperature:.3g} "
            f"(at most {MAX_LIKELIHOOD_SCALE:.0e} is allowed), and its gradients squared "
            f"overflow float32; pass --temperature >= {n / MAX_LIKELIHOOD_SCALE:.3g}."
        )


def check_feasible(s: RunSettings, data: bp.data.Dataset, model: bp.BNN, num_params: int) -> None:
    """Refuse, before the run folder is claimed, a run that cannot work on this data and machine.

    * ``--batch-size`` above the training rows (nothing is clamped silently);
    * draws and test predictions that would not fit in memory (estimated from the parameter
      count, float32, :data:`MEMORY_COPIES` copies);
    * ``--temperature`` so cold that float32 cannot hold the tempered gradients
      (:data:`MAX_LIKELIHOOD_SCALE`);
    * hmc trajectories of more than :data:`MAX_LEAPFROG_STEPS` leapfrog steps at the initial
      step size (``--prior normal:1e6`` gives a default trajectory length of 1.6e6).

    Raises:
        InputValueError: naming the option(s), the estimate and the fix.

    Example:
        >>> from bnn_ppl import cli
        >>> s = cli.run_settings("svi", cli.RunOptions(out="runs/svi"), {"batch_size": 500})
        >>> data = cli.load_data("digits", max_train=100)
        >>> model = cli.build_model(s.options, data)
        >>> cli.check_feasible(s, data, model, model.num_params(data.x_train[:1]))
        Traceback (most recent call last):
        ...
        bnn_ppl.validation.InputValueError: --batch-size 500 is larger than the 100 training rows...
    """
    n, c, temperature = len(data.x_train), s.config, s.options.temperature
    batch = getattr(c, "batch_size", None)
    if batch is not None and batch > n:
        raise InputValueError(
            f"--batch-size {batch} is larger than the {n} training rows of "
            f"{s.options.dataset}; pass at most {n} (or omit it)."
        )
    check_temperature(temperature, n)
    if isinstance(c, configs.ReferenceHMCConfig):  # every draw stays in memory to the end
        draws, counts = c.num_chains * c.max_draws, "--num-chains x --max-draws"
    elif hasattr(c, "num_chains"):
        draws, counts = c.num_chains * c.num_samples, "--num-chains x --num-samples"
    elif isinstance(c, configs.SVIConfig):
        draws, counts = c.num_samples, "--num-samples"
    elif isinstance(c, configs.EnsembleConfig):
        draws, counts = c.num_members, "--num-members"
    else:
        draws, counts = 1, "the draws"
    outputs = data.num_classes if data.task == "classification" else 2
    per_draw = num_params + len(data.x_test) * outputs
    need = MEMORY_COPIES * 4 * draws * per_draw
    have = _memory_bytes()
    if have is not None and need > have:
        preds = per_draw - num_params
        raise InputValueError(
            f"{counts} = {draws:,} draws of {num_params:,} parameters and {preds:,} test "
            f"predictions each need about {_gib(need)} (float32, held {MEMORY_COPIES}x while "
            f"saved), more than this machine's {_gib(have)} of memory; lower {counts}, or use "
            "a smaller network."
        )
    if isinstance(c, configs.HMCConfig):
        from bnn_ppl.inference import default_trajectory_length  # start-up time: JAX only here

        length = c.trajectory_length
        default = length is None
        if default:
            length = default_trajectory_length(model, data.x_train[:1])
        steps = math.ceil(length / c.step_size)
        if steps > MAX_LEAPFROG_STEPS:
            origin = "the default (pi/2) x prior sd" if default else "--trajectory-length"
            raise InputValueError(
                f"hmc would take {steps:,} leapfrog steps per iteration (trajectory "
                f"length {length:.3g}, {origin}, over --step-size {c.step_size:g}), more "
                f"than the {MAX_LEAPFROG_STEPS:,} allowed: the run would not finish. Pass a "
                "shorter --trajectory-length or a larger --step-size, or use `bnn-ppl run nuts` "
                "(its tree depth bounds the steps)."
            )
