"""Diverged results: a fit whose loss or parameters became NaN/inf is an error, never a result.

Example:
    >>> import numpy as np
    >>> from bnn_ppl.divergence import check_finite_result
    >>> check_finite_result("map_estimate", np.array([3.0, np.nan]), {})
    Traceback (most recent call last):
    ...
    bnn_ppl.divergence.DivergedError: map_estimate diverged: the loss became nan (at index [1]). ...
"""

# Notes:
#
# :func:`check_finite_result` raises :class:`DivergedError` (an
# :class:`~bnn_ppl.validation.InputValueError`, so the command line reports it as a user error)
# naming where the loss, or a parameter, first stopped being finite and what usually causes it.
# :func:`~bnn_ppl.inference.map_estimate`, :func:`~bnn_ppl.inference.deep_ensemble`,
# :func:`~bnn_ppl.inference.svi_mean_field` and :func:`~bnn_ppl.fit` check their results with it.

from __future__ import annotations

from typing import Any

import numpy as np

from bnn_ppl.validation import InputValueError

__all__ = ["DivergedError", "check_finite_result"]


class DivergedError(InputValueError):
    """An optimisation or sampler whose loss or parameters became NaN/inf.

    Attributes:
        method: the function that diverged.
        what: which quantity ("the loss", "the parameters").
        value: the first non-finite value.
        index: where it is (for the loss: ``(step,)`` or ``(member, step)``).
    """

    def __init__(self, method: str, what: str, value: float, index: tuple[int, ...]):
        self.method, self.what, self.value, self.index = method, what, value, index
        super().__init__(
            f"{method} diverged: {what} became {value} (at index {list(index)}). Usual causes: "
            "a learning_rate too large for this model, an extreme prior scale or temperature, "
            "or unstandardised data. Nothing was returned."
        )


def check_finite_result(method: str, losses: Any, params: Any) -> None:
    """Raise :class:`DivergedError` if an optimisation ended in NaN/inf.

    A diverged fit is never returned as a result: the message says where the loss (or, if the
    loss stayed finite, a parameter) first stopped being finite and what usually causes it.
    """
    import jax

    losses = np.asarray(losses, np.float64)
    bad = ~np.isfinite(losses)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DivergedError(method, "the loss", float(losses[index]), index)
    for leaf in jax.tree.leaves(params):
        a = np.asarray(leaf, np.float64)
        bad = ~np.isfinite(a)
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            raise DivergedError(method, "the parameters", float(a[index]), index)
