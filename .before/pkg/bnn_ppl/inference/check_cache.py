"""The convergence checks of a checkpointed reference run, kept so that a rerun does not redo them.

A rerun of :func:`~bnn_ppl.inference.reference_hmc` with a ``checkpoint_dir`` replays every
committed segment through the stopping rule (:mod:`bnn_ppl.inference.reference_checkpoint`).
The rule's rank-normalised R-hat and bulk ESS over all draws so far are the expensive part:
on digits (3,600 probabilities, 4 chains) one check at 4,500 draws per chain takes ~40 s on
2 cores, so replaying a 45-segment run cost more than 15 minutes before its first new draw.
:class:`CheckCache` keeps each check's figures in ``checks.json`` beside the segments and hands
them back when the same check comes again.

**What makes two checks the same** is not a list of settings but the values checked: the key of
the check after segment *k* chains the SHA-256 of every segment's checked values (shape, dtype
and bytes) up to *k* with the rule (``max_rhat``, ``min_share``, ``min_ess``) and the number of
draws each chain leaves out (``burn_in``). Anything that changes the values - other test
inputs, another quantity, another chunk size, a library change in the predictions - gives
another key, so a stale figure cannot be returned; a rerun with other test inputs simply adds
its own entries. The file is written atomically after each new check, with a checksum: a
damaged or foreign file is not trusted (a :class:`CheckCacheWarning` says so) and the checks
are recomputed and the file rewritten.

Example:
    >>> import numpy as np, tempfile
    >>> from bnn_ppl.inference.stopping_rule import check_convergence
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

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from bnn_ppl import io
from bnn_ppl.inference.checkpoint_store import record_checksum
from bnn_ppl.inference.fingerprint import array_digest

__all__ = ["FILE", "CheckCache", "CheckCacheWarning"]

FILE = "checks.json"
FORMAT = 1


class CheckCacheWarning(UserWarning):
    """``checks.json`` could not be trusted: its checks are recomputed and the file rewritten."""


class CheckCache:
    """The checks kept in ``folder/checks.json`` (see the module doc).

    :meth:`check` is called once per segment, in order, with the checked values of every
    segment so far; it hashes the newest one into the running key.
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
