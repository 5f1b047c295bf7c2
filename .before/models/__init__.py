"""Network architectures (Flax modules) for Bayesian neural networks.

Installed as ``bnn_ppl.models``. Each architecture lives in its own file and documents its
parameter tree, which is what a BNN prior is keyed on.
"""

from bnn_ppl.models.cnn_lstm import CNNLSTM
from bnn_ppl.models.frn import FRN
from bnn_ppl.models.lenet import LeNet5, lenet5_bnn_hmc
from bnn_ppl.models.mlp import MLP, NnxMLP
from bnn_ppl.models.recipes import mlp_bnn
from bnn_ppl.models.resnet import ResNet20FRN
from bnn_ppl.models.resnetpp import ResNetPP, WNConv, WNDense

__all__ = [
    "MLP",
    "NnxMLP",
    "mlp_bnn",
    "LeNet5",
    "lenet5_bnn_hmc",
    "ResNet20FRN",
    "FRN",
    "ResNetPP",
    "WNDense",
    "WNConv",
    "CNNLSTM",
]
