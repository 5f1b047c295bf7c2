"""What a checkpointed run is: a fingerprint that a resume must match field by field.

:func:`run_fingerprint` records, as flat named fields:

* ``config.<field>`` - every field of the method's config (``config.to_dict()``), but
  ``chain_batching`` at its default ``"auto"`` (a folder written before the field existed
  resumes; forced to ``"vectorized"`` or ``"sequential"``, the draws may differ by float32
  rounding, so it is recorded);
* ``data.x``, ``data.y`` - SHA-256 of the training arrays (dtype, shape and bytes);
* ``seed`` - the random key's data;
* ``model.network`` - SHA-256 of the *jaxpr* of the potential (the network, the prior, the
  likelihood and the tempering, traced at the initial parameters). It captures what the network
  computes, not its ``repr``: an activation changed from relu to tanh in an nnx module, or a
  different lambda in a linen module, is a different program. Memory addresses printed in a
  jaxpr are removed, so the same program gives the same digest in every process;
* ``model.param_shapes`` - every parameter's name, shape and dtype;
* ``model.potential_at_init`` - the potential's value at the initial parameters (catches a
  changed constant that the jaxpr shows only by name, such as an array the network closes over);
* ``versions`` - jax, jaxlib and numpyro (bit-exact resumes need the same programs);
* ``potential.memory_chunk`` - only where the chunk was chosen from free device memory
  (:mod:`bnn_ppl.inference.potential.bnn`): the chunk, which a resume takes again (the rounding
  of float32 sums depends on it).

``digest`` is the SHA-256 of all fields; :func:`check_same` compares two fingerprints and names
every differing field.

Example:
    >>> a = {"fields": {"config.num_samples": 30, "seed": "0 0"}, "digest": "x"}
    >>> b = {"fields": {"config.num_samples": 40, "seed": "0 0"}, "digest": "y"}
    >>> try:
    ...     check_same(a, b, "runs/a")
    ... except CheckpointError as e:
    ...     print(str(e)[:68])
    runs/a holds another run: config.num_samples is 30 there and 40 now.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from bnn_ppl import io
from bnn_ppl.inference.checkpoint.store import CheckpointError, saved_fingerprint

__all__ = [
    "run_fingerprint",
    "check_same",
    "array_digest",
    "function_digest",
    "resume_chunk",
    "recorded_chunk",
]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_NONE = object()
OMITTED_AT = {"chain_batching": "auto"}
"""Config fields added after checkpoint folders existed, left out of the fingerprint at these
values (those folders' behaviour), so that such folders resume."""


def array_digest(a: Any) -> str:
    """Hex SHA-256 of an array's dtype, shape and bytes (C order)."""
    arr = np.ascontiguousarray(np.asarray(a))
    head = f"{arr.dtype.str}{arr.shape}".encode()
    return io.sha256_bytes(head + arr.tobytes())


def _key_text(key: Any) -> str:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(key))
        key = jax.random.key_data(key)
    else:
        impl = "raw"
    return impl + ":" + " ".join(str(int(v)) for v in np.ravel(np.asarray(key)))


def function_digest(fn: Callable[..., Any], *args: Any) -> str:
    """SHA-256 of the jaxpr of ``fn(*args)`` with memory addresses removed: equal for the same
    computation in any process, different when an operation changes.

    Example:
        >>> import jax.numpy as jnp
        >>> x = jnp.ones(3)
        >>> function_digest(jax.nn.relu, x) == function_digest(jax.nn.tanh, x)
        False
        >>> function_digest(jax.nn.relu, x) == function_digest(lambda v: jax.nn.relu(v), x)
        True
    """
    text = _ADDRESS.sub("", str(jax.make_jaxpr(fn)(*args)))
    return hashlib.sha256(text.encode()).hexdigest()


def run_fingerprint(
    config: Mapping[str, Any],
    x: Any,
    y: Any,
    rng_key: Any,
    potential_fn: Callable[[Any], Any],
    init_params: Any,
    *,
    memory_chunk: int | None = None,
) -> dict[str, Any]:
    """The fingerprint of a run (see the module doc): ``{"fields": {...}, "digest": sha}``.

    ``init_params`` are one chain's unconstrained initial parameters (the potential is traced
    and evaluated there). ``memory_chunk``: the chunk the potential's memory rule chose
    (``pot.chunk_size`` where ``pot.chunk_rule`` is one of the memory rules), recorded as
    ``potential.memory_chunk``: a resume (:func:`~bnn_ppl.inference.fit`) builds its potential
    with that chunk again, whatever memory is free then.
    """
    fields: dict[str, Any] = {
        f"config.{k}": v for k, v in config.items() if OMITTED_AT.get(k, _NONE) != v
    }
    if memory_chunk is not None:
        fields["potential.memory_chunk"] = int(memory_chunk)
    fields["data.x"] = array_digest(x)
    fields["data.y"] = array_digest(y)
    fields["seed"] = _key_text(rng_key)
    fields["model.network"] = function_digest(potential_fn, init_params)
    fields["model.param_shapes"] = {
        jax.tree_util.keystr(path): f"{np.dtype(leaf.dtype).str}{tuple(leaf.shape)}"
        for path, leaf in jax.tree_util.tree_flatten_with_path(init_params)[0]
    }
    value = np.asarray(jax.jit(potential_fn)(init_params), np.float64)
    fields["model.potential_at_init"] = float(value).hex()
    import jaxlib
    import numpyro

    fields["versions"] = f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, " + (
        f"numpyro {numpyro.__version__}"
    )
    fields = json.loads(json.dumps(fields, sort_keys=True))  # JSON-normal (tuples -> lists)
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return {"fields": fields, "digest": digest}


def resume_chunk(config: Any, checkpoint_dir: str | os.PathLike) -> tuple[Any, int | None]:
    """``(config to build the potential with, the chunk a run in checkpoint_dir recorded)``:
    a run whose chunk the memory rule chose (``potential.memory_chunk`` in its verified
    ``run.json``) resumes with that chunk, whatever memory is free now; an int ``chunk_size``,
    or no such run, builds with ``config`` as it is (and the recorded chunk is ``None``)."""
    saved = saved_fingerprint(checkpoint_dir) if os.path.isdir(checkpoint_dir) else None
    memory = (saved or {}).get("fields", {}).get("potential.memory_chunk")
    if memory is None or isinstance(config.chunk_size, int):
        return config, None
    return dataclasses.replace(config, chunk_size=memory), memory


def recorded_chunk(pot: Any, resumed: int | None) -> int | None:
    """The ``memory_chunk`` to fingerprint: the resumed run's, else the chunk of ``pot`` if
    a memory rule chose it (:data:`~bnn_ppl.inference.potential.bnn.MEMORY_RULES`), else ``None``."""
    from bnn_ppl.inference.potential.bnn import MEMORY_RULES

    if resumed is not None:
        return resumed
    return pot.chunk_size if pot.chunk_rule in MEMORY_RULES else None


_WHY = {
    "model.network": " (the network's computation changed, e.g. an activation or a layer)",
    "model.param_shapes": " (the parameters' names or shapes changed)",
    "model.potential_at_init": " (the model's prior, likelihood or constants changed)",
    "data.x": " (other training inputs)",
    "data.y": " (other training targets)",
    "potential.memory_chunk": " (the chunk the memory rule chose from free device memory)",
}


def check_same(saved: Mapping[str, Any], current: Mapping[str, Any], where: str) -> None:
    """Raise :class:`~bnn_ppl.inference.checkpoint.store.CheckpointError` naming every field
    in which fingerprint ``current`` differs from ``saved`` (the run in folder ``where``)."""
    if saved.get("digest") == current.get("digest"):
        return
    a, b = dict(saved.get("fields", {})), dict(current.get("fields", {}))
    parts = []
    for name in sorted(set(a) | set(b)):
        if a.get(name, "<missing>") != b.get(name, "<missing>"):
            va, vb = a.get(name, "<missing>"), b.get(name, "<missing>")
            if isinstance(va, str) and len(va) == 64 or isinstance(va, dict):
                parts.append(f"{name} differs{_WHY.get(name, '')}")
            else:
                parts.append(f"{name} is {va!r} there and {vb!r} now{_WHY.get(name, '')}")
    if not parts:
        parts = ["the fingerprint digest differs"]
    raise CheckpointError(
        f"{where} holds another run: {'; '.join(parts)}. Resume with the same settings, or use "
        "a new checkpoint_dir."
    )
