"""JAX's persistent compilation cache, on by default for ``fit`` and the command line.

A rerun, a resume or another process fitting the same model reads its compiled programs back
instead of compiling them again. The folder is ``$BNN_PPL_CACHE_DIR``, else
``$XDG_CACHE_HOME/bnn_ppl/jax``, else ``~/.cache/bnn_ppl/jax``; ``BNN_PPL_CACHE_DIR=off``
turns it off. Nothing is changed when JAX's own cache is configured (a
``jax_compilation_cache_dir``, ``JAX_COMPILATION_CACHE_DIR``, or the cache disabled).
Clear it by deleting the folder (:func:`cache_dir` names it).
"""

from __future__ import annotations

import os
from pathlib import Path

from bnn_ppl.validation import InputValueError

__all__ = ["ENV_VAR", "OFF", "MAX_BYTES", "cache_dir", "use_persistent_cache"]

ENV_VAR = "BNN_PPL_CACHE_DIR"
OFF = ("off", "none", "0", "false", "no")
"""Values of ``BNN_PPL_CACHE_DIR`` (or ``cache_dir=``) that turn the cache off."""
MAX_BYTES = 4 * 2**30
"""The folder's size limit: least recently used programs are evicted beyond it (JAX's LRU
eviction, which also takes a file lock around every read and write, so that several processes
share the folder safely)."""
MIN_COMPILE_SECONDS = 0.05
"""Programs that compile faster than this are not written (JAX's default is 1 s, which would
leave most of a small model's programs to be compiled again)."""


def cache_dir(setting: str | os.PathLike | None = None) -> Path | None:
    """The cache folder: ``setting``, else ``$BNN_PPL_CACHE_DIR``, else the user cache
    folder; ``None`` when the value is one of :data:`OFF`."""
    value = os.fspath(setting) if setting is not None else os.environ.get(ENV_VAR, "")
    if value.strip().lower() in OFF:
        return None
    if value.strip():
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bnn_ppl" / "jax"


def _user_configured() -> bool:
    import jax

    return (
        jax.config.jax_compilation_cache_dir is not None
        or bool(os.environ.get("JAX_COMPILATION_CACHE_DIR"))
        or not jax.config.jax_enable_compilation_cache
    )


def use_persistent_cache(setting: str | os.PathLike | None = None) -> Path | None:
    """Turn on JAX's persistent compilation cache in :func:`cache_dir` (``setting`` as there)
    for the rest of this process, unless JAX's cache is configured already or it is off.

    Returns the folder in use (JAX's own when configured), or ``None`` when there is none.
    A folder that cannot be created is an :class:`~bnn_ppl.validation.InputValueError`.
    """
    import jax

    if _user_configured():
        configured = jax.config.jax_compilation_cache_dir
        return Path(configured) if configured and jax.config.jax_enable_compilation_cache else None
    path = cache_dir(setting)
    if path is None:
        return None
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)  # (the cache is trusted code)
    except OSError as e:
        raise InputValueError(
            f"the compilation cache folder {str(path)!r} cannot be created ({e.strerror}); set "
            f"{ENV_VAR} to a writable folder, or to 'off' to compile without a cache."
        ) from None
    try:
        import filelock  # noqa: F401  (JAX's eviction locks the folder with it)

        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    except ImportError:  # pragma: no cover - a declared dependency
        pass
    if jax.config.jax_persistent_cache_min_compile_time_secs == 1.0:  # JAX's default
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_compilation_cache_dir", str(path))
    return path
