"""Every workaround for NumPyro and ArviZ, each with the release that makes it removable.

* ArviZ 1.x registers ``numpyro`` as a ``lazy_loader`` proxy when NumPyro is not imported yet,
  and a later ``import numpyro.distributions`` then loads it twice, its submodules unbound.
  :func:`arviz` imports NumPyro first; :func:`ensure_numpyro` repairs a proxy left by an ArviZ
  imported first. Removable when ArviZ stops proxying NumPyro (still needed with ArviZ 1.3).
* NumPyro 0.22's ``MCMC.run`` compiles its loop again on every call (a new ``jit`` object per
  call, pyro-ppl/numpyro#2171): :class:`ReusingMCMC` memoises ``numpyro.util.maybe_jit`` while
  it runs. Removable with the first NumPyro release after 0.22 (the pin is ``<0.23``).
Nothing here imports NumPyro, ArviZ or JAX until first used (``import bnn_ppl`` stays cheap).
"""

from __future__ import annotations

import _thread
import contextlib
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any

__all__ = ["ReusingMCMC", "arviz", "ensure_numpyro", "rebind_numpyro_submodules", "reused_jit"]  # noqa: F822


def rebind_numpyro_submodules() -> None:
    """Re-attach loaded NumPyro submodules to their parent packages where a double load (see
    the module docstring) left them out. Harmless when nothing is missing."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("numpyro.") or module is None:
            continue
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and not hasattr(sys.modules[parent], child):
            setattr(sys.modules[parent], child, module)


def ensure_numpyro() -> None:
    """If ``numpyro`` is in ``sys.modules`` (possibly as ArviZ's lazy proxy), load it for real
    and rebind its submodules; if it is absent, do nothing (nothing can be broken yet)."""
    module = sys.modules.get("numpyro")
    if module is None:
        return
    module.__name__  # noqa: B018  (any attribute access executes a lazy proxy)
    rebind_numpyro_submodules()


def arviz() -> ModuleType:
    """The ``arviz`` module, imported after NumPyro (the order ArviZ 1.x needs; see above).

    Example:
        >>> from bnn_ppl._compat import arviz
        >>> az = arviz()
        >>> import numpyro
        >>> numpyro.distributions.distribution.Unit is not None
        True
    """
    ensure_numpyro()
    import numpyro.distributions  # noqa: F401  (real NumPyro first: ArviZ then finds it)

    # isort: split
    import arviz as az

    rebind_numpyro_submodules()
    return az


# -------------------- a repeated MCMC.run reuses its compiled loop
MEMO_SIZE = 16  # jit objects kept per MCMC (a run makes two or three; NumPyro's own cache: 8)

_memo: ContextVar[OrderedDict | None] = ContextVar("bnn_ppl_jit_memo", default=None)
_lock = _thread.allocate_lock()
_depth = 0  # contexts open in any thread; the dispatcher is installed while it is > 0
_NUMPYRO_MAYBE_JIT: Callable | None = None  # NumPyro's own, read when first needed
_stock: Callable | None = None  # what maybe_jit was when the dispatcher went in


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
    ``MCMC.run`` finds its loop in JAX's caches (what :class:`ReusingMCMC` runs in).
    Re-entrant and thread-safe.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from bnn_ppl._compat import ReusingMCMC
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
    global _depth, _stock, _NUMPYRO_MAYBE_JIT
    import numpyro.util

    with _lock:
        if _depth == 0 and _NUMPYRO_MAYBE_JIT is None:  # (never patched yet: NumPyro's own)
            _NUMPYRO_MAYBE_JIT = getattr(numpyro.util, "maybe_jit", None)
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


def _reusing_mcmc() -> type:
    from numpyro.infer import MCMC

    class ReusingMCMC(MCMC):
        """``numpyro.infer.MCMC`` whose repeated ``run`` (continuing from ``post_warmup_state``, or
        a checkpoint segment) reuses the compiled sampling loop instead of compiling it again; the
        draws are NumPyro's.

        """

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

    return ReusingMCMC


def __getattr__(name: str) -> Any:
    if name == "ReusingMCMC":  # built on first use: ``import numpyro`` is not cheap
        value = globals()["ReusingMCMC"] = _reusing_mcmc()
        return value
    raise AttributeError(f"module 'bnn_ppl._compat' has no attribute {name!r}")
