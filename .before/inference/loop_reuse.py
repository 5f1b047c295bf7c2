"""A repeated ``MCMC.run`` that reuses its compiled sampling loop (NumPyro 0.22 compiles it again).

Why: ``numpyro.util.fori_collect`` (the loop of every ``MCMC.run`` with ``progress_bar=False``)
wraps its cached body in a *new* ``jax.jit`` object on every call and passes it as a static
argument of the outer jitted loop. Static arguments are compared by identity, so each run is a
cache miss: the loop is traced, lowered and compiled again, although the program is the same.
Every checkpoint segment (:mod:`~bnn_ppl.inference.resume`, the reference recipe's segments)
is a new ``MCMC.run`` and paid that compilation: on a concrete-sized MLP(50) with 256 leapfrog
steps per draw, 3.3 s of CPU a segment on 2 CPU cores, and 10 short segments of a small ``fit``
cost 4-5x one run instead of 1.5-1.7x (``benchmarks/segments.py``; benchmarks/RESULTS.md).
Fixed upstream by pyro-ppl/numpyro#2171.

The fix here changes nothing in NumPyro's computation: :class:`ReusingMCMC`'s ``run`` and
``warmup`` make ``numpyro.util.maybe_jit`` return the *same* jit object for the same function
and options while they run, so the static argument is equal and JAX's caches hit. The draws
are bit for bit those of ``numpyro.infer.MCMC`` (tested). Each ``ReusingMCMC`` keeps its own
small memo (the functions it holds close over the model's arrays, so it lives and dies with the
MCMC object), and outside its calls ``maybe_jit`` is NumPyro's own again. Concurrent runs in
several threads each see their own memo (a ``ContextVar``); a thread that is not inside one sees
NumPyro's function. With a NumPyro that no longer has ``util.maybe_jit`` nothing is patched.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from numpyro.infer import HMC
    >>> mcmc = ReusingMCMC(HMC(potential_fn=lambda z: 0.5 * jnp.sum(z ** 2), num_steps=3,
    ...                        trajectory_length=None),
    ...                    num_warmup=10, num_samples=5, progress_bar=False)
    >>> mcmc.run(jax.random.key(0), init_params=jnp.zeros(2))
    >>> mcmc.post_warmup_state = mcmc.last_state
    >>> mcmc.run(mcmc.post_warmup_state.rng_key)   # the same loop: not compiled again
    >>> mcmc.get_samples().shape
    (5, 2)
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import numpyro.util
from numpyro.infer import MCMC

__all__ = ["ReusingMCMC", "reused_jit"]

MEMO_SIZE = 16  # jit objects kept per MCMC (a run makes two or three; NumPyro's own cache: 8)

_memo: ContextVar[OrderedDict | None] = ContextVar("bnn_ppl_jit_memo", default=None)
_lock = threading.Lock()
_depth = 0  # contexts open in any thread; the dispatcher is installed while it is > 0
_NUMPYRO_MAYBE_JIT: Callable | None = getattr(numpyro.util, "maybe_jit", None)
_stock: Callable | None = _NUMPYRO_MAYBE_JIT  # what maybe_jit was when the dispatcher went in


def _dispatch(fn: Callable, *args: Any, **kwargs: Any) -> Callable:
    """``numpyro.util.maybe_jit`` while a context is open: memoised in the caller's context."""
    stock = _stock or _NUMPYRO_MAYBE_JIT
    assert stock is not None and stock is not _dispatch
    memo = _memo.get()
    if memo is None:  # (another thread, not inside a ReusingMCMC call)
        return stock(fn, *args, **kwargs)
    try:
        key = (fn, args, tuple(sorted(kwargs.items())))
        hash(key)
    except TypeError:  # (unhashable options: NumPyro's behaviour)
        return stock(fn, *args, **kwargs)
    if key in memo:
        memo.move_to_end(key)
        return memo[key]
    jitted = memo[key] = stock(fn, *args, **kwargs)
    if len(memo) > MEMO_SIZE:
        memo.popitem(last=False)
    return jitted


@contextlib.contextmanager
def reused_jit(memo: OrderedDict) -> Iterator[None]:
    """Inside the block, ``numpyro.util.maybe_jit(fn, **options)`` returns the jit object that
    ``memo`` holds for ``(fn, options)`` (made and stored on first use), so a repeated
    ``MCMC.run`` finds its loop in JAX's caches. Re-entrant and thread-safe."""
    global _depth, _stock
    if _NUMPYRO_MAYBE_JIT is None:  # (a NumPyro without it: nothing to do)
        yield
        return
    with _lock:
        if _depth == 0:
            _stock = numpyro.util.maybe_jit
            numpyro.util.maybe_jit = _dispatch
        _depth += 1
    token = _memo.set(memo)
    try:
        yield
    finally:
        _memo.reset(token)
        with _lock:
            _depth -= 1
            if _depth == 0:
                numpyro.util.maybe_jit = _stock


class ReusingMCMC(MCMC):
    """``numpyro.infer.MCMC`` whose repeated ``run`` (continuing from ``post_warmup_state``, or
    a checkpoint segment) reuses the compiled sampling loop instead of compiling it again; the
    draws are NumPyro's. See the module docstring for why."""

    def _jit_memo(self) -> OrderedDict:
        memo = self.__dict__.get("_bnn_ppl_jit_memo")
        if memo is None:
            memo = self.__dict__["_bnn_ppl_jit_memo"] = OrderedDict()
        return memo

    def run(self, rng_key: Any, *args: Any, **kwargs: Any) -> None:
        with reused_jit(self._jit_memo()):
            super().run(rng_key, *args, **kwargs)

    def warmup(self, rng_key: Any, *args: Any, **kwargs: Any) -> None:
        with reused_jit(self._jit_memo()):
            super().warmup(rng_key, *args, **kwargs)
