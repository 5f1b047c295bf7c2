"""Network architectures (Flax modules) for Bayesian neural networks.

Installed as ``bnn_ppl.models``. Each architecture lives in its own file and documents its
parameter tree, which is what a BNN prior is keyed on.
"""

from bnn_ppl.models.mlp import MLP, NnxMLP

__all__ = ["MLP", "NnxMLP"]
