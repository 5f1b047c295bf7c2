"""Reference runs that survive a kill: ``reference_hmc(..., checkpoint_dir=...)``."""

# Notes:
#
# A reference run (:func:`~bnn_ppl.inference.reference_hmc`) is open-ended: it samples segments
# of ``segment_draws`` draws until its stopping rule is met or its budget ends, so it cannot use
# :func:`~bnn_ppl.inference.checkpoint.segments.run_segments`, which runs a fixed number of draws.
# :class:`CheckpointedChains` moves its chains through the same
# :class:`~bnn_ppl.inference.checkpoint.store.CheckpointStore` (verified, locked, atomic files;
# no pickle) instead:

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from bnn_ppl import io
from bnn_ppl.config import ReferenceHMCConfig
from bnn_ppl.inference.checkpoint.segments import state_arrays, state_from_arrays
from bnn_ppl.inference.checkpoint.store import (
    CheckpointError,
    CheckpointStore,
    array_digest,
    record_checksum,
    recorded_chunk,
    resume_chunk,
    run_fingerprint,
)
from bnn_ppl.inference.mcmc.checks import as_key
from bnn_ppl.inference.reference.chains import (
    Chains,
    Segment,
    Warmup,
    as_segment,
    continue_chains,
    rule_check,
    rule_settings,
    segment_arrays_of,
    starts_from_arrays,
    warm_up,
)
from bnn_ppl.inference.reference.kernels import TEMPERING_FIELDS, chain_kernel
from bnn_ppl.model import BNN

__all__ = [
    "INIT_FIELDS",
    "NOT_FINGERPRINTED",
    "CheckpointedChains",
    "reference_fingerprint",
    "FILE",
    "CheckCache",
    "CheckCacheWarning",
]

INIT_FIELDS = ("init_steps", "init_learning_rate")
"""The :class:`~bnn_ppl.config.ReferenceHMCConfig` fields of the optimised starts
(:mod:`~bnn_ppl.inference.reference.chains`): fingerprinted only when ``init_steps`` > 0, so a
folder written before they existed resumes."""

NOT_FINGERPRINTED = ("max_draws", "max_seconds", "max_rhat", "min_share", "min_ess", "quantity",
                     "burn_in", "confirm_segments")  # fmt: skip
"""The :class:`~bnn_ppl.config.ReferenceHMCConfig` fields a rerun may change: the budget and
the stopping rule, which decide how many segments are sampled but not what they hold."""


def reference_fingerprint(
    c: ReferenceHMCConfig, x: Any, y: Any, rng_key: Any, potential_fn: Any, init: Any,
    memory_chunk: int | None = None, devices: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """:func:`~bnn_ppl.inference.checkpoint.store.run_fingerprint` of a reference run: ``c``'s
    fields but :data:`NOT_FINGERPRINTED` (and the tempering fields without tempering), the
    training data, the key, the potential at the first chain's initial parameters (``init``:
    as :meth:`~bnn_ppl.inference.reference.kernels.ChainKernel.init_params` drew them) and the
    chunk a memory rule chose (``memory_chunk``).

    Example:
        >>> import jax, numpy as np, tempfile, warnings
        >>> import bnn_ppl as bp
        >>> from bnn_ppl.inference import reference_hmc
        >>> from bnn_ppl.models import MLP
        >>> x = np.random.default_rng(0).normal(size=(20, 2)).astype(np.float32)
        >>> model = bp.BNN(MLP(hidden=(), out=1), bp.priors.Normal(1.0),
        ...     bp.likelihoods.Gaussian(0.5))
        >>> folder = tempfile.mkdtemp()
        >>> settings = dict(x_test=x[:3], rng_key=jax.random.key(0), num_warmup=20, segment_draws=5)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # (not converged after so few draws)
        ...     short = reference_hmc(model, (x, x[:, 0]), max_draws=5, checkpoint_dir=folder,
        ...                           **settings)
        ...     longer = reference_hmc(model, (x, x[:, 0]), max_draws=10, checkpoint_dir=folder,
        ...                            **settings)
        >>> short.draws, longer.draws, longer.resumed_after
        (5, 10, 1)
    """
    unused = (*(() if c.tempering else TEMPERING_FIELDS),
              *(() if c.init_steps else INIT_FIELDS))  # fmt: skip
    fields = {k: v for k, v in c.to_dict().items() if k not in (*NOT_FINGERPRINTED, *unused)}
    first = chain_kernel(c).first_params(init)
    return run_fingerprint(
        fields, x, y, as_key(rng_key), potential_fn, first, memory_chunk=memory_chunk,
        devices=devices,
    )


class CheckpointedChains(Chains):
    """:class:`~bnn_ppl.inference.reference.chains.Chains` committed to ``checkpoint_dir``
    and replayed from it (see the module doc); use as a context manager (it holds the
    folder's lock)."""

    def __init__(
        self,
        model: BNN,
        x: Any,
        y: Any,
        c: ReferenceHMCConfig,
        rng_key: Any,
        checkpoint_dir: str | os.PathLike,
    ):
        self._clock = time.monotonic()  # the time of the last commit (or of the start)
        chosen, resumed = resume_chunk(c, checkpoint_dir)  # a memory rule's chunk is kept
        super().__init__(model, x, y, chosen, rng_key)
        fingerprint = reference_fingerprint(c, x, y, rng_key, self.pot.potential_fn, self.init,
                                            recorded_chunk(self.pot, resumed),
                                            devices=self.pot.mesh.devices.size)  # fmt: skip
        self.store = CheckpointStore(checkpoint_dir, fingerprint)
        self._replay: list[dict[str, np.ndarray]] = []  # committed segments not yet replayed
        self._checks: CheckCache | None = None  # opened with the folder's lock
        self._seconds = 0.0  # the time committed up to the last segment returned

    def __enter__(self) -> CheckpointedChains:
        self.store.__enter__()
        self._checks = CheckCache(self.store.path)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.store.__exit__(*exc)

    def check(self, values: list[np.ndarray], first: int) -> dict[str, Any]:
        """:meth:`Chains.check`, read back from ``checks.json`` when a previous call on this
        folder made the same check (:mod:`bnn_ppl.inference.reference.checkpoint`)."""
        if self._checks is None:
            raise RuntimeError("use CheckpointedChains inside `with chains:` (it holds the lock).")
        c = self.c
        parts = self.parts
        return self._checks.check(values, first, rule_settings(c, parts),
                                  lambda a, f: rule_check(a, f, c, parts))  # fmt: skip

    def _lap(self) -> np.ndarray:
        now = time.monotonic()
        lap, self._clock = now - self._clock, now
        return np.asarray(lap)

    def _read_state(self) -> Any:
        where = f"{self.store.path}/{self._record.state_file}"
        return state_from_arrays(self.store.load_state(self._record), self._template, where)

    def start(self, deadline: float | None) -> tuple[Warmup, Segment]:
        """Warmup, committed (or read back), and the first segment (replayed if committed)."""
        c, record = self.c, self.store.latest()
        if record is None:
            fields = self.kernel.extra_fields
            warm = warm_up(self.mcmc, self.pot, self.init, self.run_key, c, fields, deadline,
                           False)  # fmt: skip
            if warm.cut_short:  # nothing committed: the next call redoes warmup
                return warm, as_segment(segment_arrays_of(self.mcmc, self.kernel))
            stats = {"time/seconds": self._lap(), "time/iterations": np.asarray(c.num_warmup)}
            stats |= warm.starts.arrays() if warm.starts is not None else {}
            record = self.store.commit(0, state_arrays(warm.state), stats, [])
            self._template = warm.state
        else:  # the state's structure, and the kernel set up for num_warmup, by the public init
            self.resumed_after = record.segment
            stats = self.store.load_warmup(record)
            if stats is None:
                raise CheckpointError(
                    f"{self.store.path} holds no warmup record; it was not written by "
                    "reference_hmc. Use a new checkpoint_dir."
                )
            keys = jax.random.split(self.run_key, c.num_chains)
            args = self.pot.args
            self._template = self.mcmc.sampler.init(keys, c.num_warmup, self.init, args, {})
            self._replay = self.store.load_draws(record)
            warm = Warmup(c.num_warmup, False, float(stats["time/seconds"]),
                          starts=starts_from_arrays(stats))
        self._seconds = float(stats["time/seconds"])
        self._record = record
        self._state = self._read_state()
        return warm, self.next(min(c.segment_draws, c.max_draws))

    def next(self, n: int) -> Segment:
        """The next committed segment, replayed; once all are, ``n`` new draws per chain from
        the last committed state, committed."""
        if self._replay:
            arrays = self._replay.pop(0)
            if not self._replay:  # the next lap starts here: replaying is not the run's time
                self._clock = time.monotonic()
        else:
            continue_chains(self.mcmc, self.pot, self._state, n, self.kernel.extra_fields)
            arrays = segment_arrays_of(self.mcmc, self.kernel) | {"time/seconds": self._lap()}
            done = [*self._record.draws_per_segment, n]
            state = state_arrays(self.mcmc.last_state)
            self._record = self.store.commit(self._record.segment + 1, state, arrays, done)
            self._state = self._read_state()
        self._seconds += float(arrays["time/seconds"])
        return as_segment(arrays, self._seconds)


# -------------------- check_cache
# The convergence checks of a checkpointed reference run, kept so that a rerun does not redo them.
#
# A rerun of :func:`~bnn_ppl.inference.reference_hmc` with a ``checkpoint_dir`` replays every
# committed segment through the stopping rule (:mod:`bnn_ppl.inference.reference.checkpoint`).
# The rule's rank-normalised R-hat and bulk ESS over all draws so far are the expensive part:
# on digits (3,600 probabilities, 4 chains) one check at 4,500 draws per chain takes ~40 s on
# 2 cores, so replaying a 45-segment run cost more than 15 minutes before its first new draw.
# :class:`CheckCache` keeps each check's figures in ``checks.json`` beside the segments and hands
# them back when the same check comes again.
#
# **What makes two checks the same** is not a list of settings but the values checked: the key of
# the check after segment *k* chains the SHA-256 of every segment's checked values (shape, dtype
# and bytes) up to *k* with the rule (``max_rhat``, ``min_share``, ``min_ess``) and the number of
# draws each chain leaves out (``burn_in``). Anything that changes the values - other test
# inputs, another quantity, another chunk size, a library change in the predictions - gives
# another key, so a stale figure cannot be returned; a rerun with other test inputs simply adds
# its own entries. The file is written atomically after each new check, with a checksum: a
# damaged or foreign file is not trusted (a :class:`CheckCacheWarning` says so) and the checks
# are recomputed and the file rewritten.

FILE = "checks.json"
FORMAT = 1


class CheckCacheWarning(UserWarning):
    """``checks.json`` could not be trusted: its checks are recomputed and the file rewritten."""


class CheckCache:
    """The checks kept in ``folder/checks.json`` (see the module doc).

    :meth:`check` is called once per segment, in order, with the checked values of every
    segment so far; it hashes the newest one into the running key.

    Example:
        >>> import numpy as np, tempfile
        >>> from bnn_ppl.inference.reference.stopping import check_convergence
        >>> folder = tempfile.mkdtemp()
        >>> values = np.random.default_rng(0).normal(size=(4, 100, 3))
        >>> calls = []
        >>> def compute(a, first):
        ...     calls.append(first)
        ...     return check_convergence(a[:, first:])
        >>> cache = CheckCache(folder)
        >>> figures = cache.check([values], 0, {"max_rhat": 1.01}, compute)
        >>> again = CheckCache(folder).check([values], 0, {"max_rhat": 1.01}, compute)
        >>> again == figures, calls       # the second check was read back, not recomputed
        (True, [0])
    """

    def __init__(self, folder: str | os.PathLike):
        self.path = os.path.join(os.fspath(folder), FILE)
        self._running = hashlib.sha256(b"bnn_ppl reference checks").digest()
        self._segments = 0  # segments hashed into the running key
        self.checks: dict[str, dict[str, Any]] = self._load()
        self.hits = 0  # checks read back rather than computed (for tests and logs)

    def _load(self) -> dict[str, dict[str, Any]]:
        if not os.path.exists(self.path):
            return {}
        try:
            body = io.read_json(self.path)
            ok = (isinstance(body, dict) and body.get("format") == FORMAT
                  and isinstance(body.get("checks"), dict)
                  and body.get("checksum") == record_checksum(body))  # fmt: skip
        except (OSError, ValueError):
            ok = False
        if not ok:
            warnings.warn(
                CheckCacheWarning(
                    f"{self.path} is damaged or was not written by this version of bnn_ppl "
                    "(format or checksum); its checks are recomputed and the file rewritten."
                ),
                stacklevel=3,
            )
            return {}
        return dict(body["checks"])

    def check(
        self,
        values: list[np.ndarray],
        first: int,
        rule: Mapping[str, Any],
        compute: Callable[[np.ndarray, int], dict[str, Any]],
    ) -> dict[str, Any]:
        """The figures of the check on ``values`` (one ``(chains, draws, ...)`` array per
        segment so far) with each chain's first ``first`` draws left out under ``rule``:
        read back when this check was made before, else ``compute(joined, first)``, kept."""
        if len(values) < self._segments:
            raise ValueError(
                f"values lists {len(values)} segments but {self._segments} were checked before: "
                "call check once per segment, in order, with every segment so far."
            )
        while self._segments < len(values):  # the segments not yet in the running key
            h = hashlib.sha256(self._running)
            h.update(bytes.fromhex(array_digest(values[self._segments])))
            self._running, self._segments = h.digest(), self._segments + 1
        key = hashlib.sha256(
            self._running + json.dumps({**rule, "first": first}, sort_keys=True).encode()
        ).hexdigest()
        if key in self.checks:
            self.hits += 1
            return dict(self.checks[key])
        figures = compute(np.concatenate(values, axis=1), first)
        self.checks[key] = dict(figures)
        body = {"format": FORMAT, "checks": self.checks}
        io.write_json(self.path, {**body, "checksum": record_checksum(body)})
        return figures
