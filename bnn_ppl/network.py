"""One functional view of Flax networks, linen or nnx: flat parameters in, outputs out."""

# Notes:
#
# A BNN needs three things from its network: the parameter shapes (to put a prior on each),
# a way to draw initial values, and a pure ``apply(params, x)``. :func:`as_network` wraps a
# ``flax.linen.Module`` or a ``flax.nnx.Module`` into a :class:`Network` that offers exactly
# these, with parameters as a flat dict keyed by dotted path (``"Dense_0.kernel"`` for linen,
# ``"layers.0.kernel"`` for nnx).
#
# Only trainable parameters are allowed: a linen network with other variable collections (batch
# statistics) is refused, because batch statistics do not belong in a posterior; nnx state that is
# not an ``nnx.Param`` (RNG counters, say) is kept fixed.

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol

import flax.linen as nn
import jax
from flax import nnx
from flax.traverse_util import flatten_dict, unflatten_dict

from bnn_ppl.types import Array, Params, PRNGKey
from bnn_ppl.validation import InputTypeError, InputValueError

__all__ = ["Network", "as_network", "LinenNetwork", "NnxNetwork"]


class Network(Protocol):
    """A network seen as pure functions of a flat parameter dict."""

    def shapes(self, x: Array) -> dict[str, jax.ShapeDtypeStruct]:
        """Parameter shapes for inputs like ``x`` (computed abstractly, nothing runs)."""
        ...

    def init(self, key: PRNGKey, x: Array) -> Params:
        """Initial parameter values from the network's own initialisers."""
        ...

    def apply(self, params: Params, x: Array) -> Array:
        """The network output for inputs ``x``."""
        ...


def _path_name(path: tuple[Hashable, ...]) -> str:
    return ".".join(str(p) for p in path)


class LinenNetwork:
    """:class:`Network` view of a ``flax.linen.Module``."""

    def __init__(self, module: nn.Module):
        self.module = module
        self._paths: dict[str, tuple[str, ...]] = {}

    def _flat(self, variables: Any) -> Params:
        extra = sorted(set(variables) - {"params"})
        if extra:
            raise InputValueError(
                f"network {type(self.module).__name__} has variable collections {extra} besides "
                "'params'; a BNN samples parameters only (batch statistics do not belong in a "
                "posterior). Use a normalisation without running statistics (e.g. FRN, "
                "LayerNorm)."
            )
        flat = flatten_dict(variables.get("params", {}))
        out = {}
        for path, leaf in flat.items():
            name = _path_name(path)
            self._paths[name] = path
            out[name] = leaf
        return out

    def shapes(self, x: Array) -> dict[str, jax.ShapeDtypeStruct]:
        # the key is made inside eval_shape: an eager jax.random.key would compile a kernel,
        # and shape checks run before anything may be compiled
        return self._flat(jax.eval_shape(lambda x: self.module.init(jax.random.key(0), x), x))

    def init(self, key: PRNGKey, x: Array) -> Params:
        return self._flat(self.module.init(key, x))

    def apply(self, params: Params, x: Array) -> Array:
        if not self._paths:
            self.shapes(x)
        tree = unflatten_dict({self._paths[k]: v for k, v in params.items()})
        return self.module.apply({"params": tree}, x)


class NnxNetwork:
    """:class:`Network` view of a ``flax.nnx.Module`` (its ``nnx.Param`` s are the parameters).

    ``init`` returns the module's current parameter values whatever the key: an nnx module is
    initialised by its constructor. Draw from the prior for random initial values.
    """

    def __init__(self, module: nnx.Module):
        self.graphdef, params, self.rest = nnx.split(module, nnx.Param, ...)
        self._template = params
        pure = nnx.to_pure_dict(params)
        flat = flatten_dict(pure)
        self._paths = {_path_name(p): p for p in flat}
        self._values = {_path_name(p): v for p, v in flat.items()}

    def shapes(self, x: Array) -> dict[str, jax.ShapeDtypeStruct]:
        return {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in self._values.items()}

    def init(self, key: PRNGKey, x: Array) -> Params:
        return dict(self._values)

    def apply(self, params: Params, x: Array) -> Array:
        state = nnx.clone(self._template)
        nnx.replace_by_pure_dict(
            state, unflatten_dict({self._paths[k]: v for k, v in params.items()})
        )
        return nnx.merge(self.graphdef, state, self.rest)(x)


def as_network(module: Any) -> Network:
    """Wrap a Flax module (linen or nnx) as a :class:`Network`.

    Raises:
        TypeError: ``module`` is neither a ``flax.linen.Module`` nor a ``flax.nnx.Module``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from bnn_ppl.network import as_network
        >>> from bnn_ppl.models import MLP
        >>> net = as_network(MLP(hidden=(3,), out=2))
        >>> {k: v.shape for k, v in net.shapes(jnp.zeros((1, 4))).items()}
        {'Dense_0.bias': (3,), 'Dense_0.kernel': (4, 3), 'Dense_1.bias': (2,), 'Dense_1.kernel':
        (3, 2)}
        >>> params = net.init(jax.random.key(0), jnp.zeros((1, 4)))
        >>> net.apply(params, jnp.ones((5, 4))).shape
        (5, 2)
    """
    if isinstance(module, nn.Module):
        return LinenNetwork(module)
    if isinstance(module, nnx.Module):
        return NnxNetwork(module)
    if isinstance(module, LinenNetwork | NnxNetwork):
        return module
    raise InputTypeError(
        "network must be a flax.linen.Module or a flax.nnx.Module instance, got "
        f"{type(module).__name__}."
    )
