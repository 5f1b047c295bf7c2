"""The data and the model of a ``bnn-ppl run``: the data set (:func:`load_data`), its inputs
shaped for the network (:func:`inputs_for`), the :class:`bnn_ppl.BNN` of the settings
(:func:`build_model`), the noise sd ``--noise heldout`` chooses (:func:`choose_noise`) and the
data set's fingerprint recorded in ``config.json``.

Example:
    >>> from bnn_ppl.cli import load_data
    >>> data = load_data("digits", max_train=100)
    >>> data.x_train.shape, data.x_test.shape, data.task
    ((100, 64), (360, 64), 'classification')
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

import bnn_ppl as bp
from bnn_ppl.cli.settings import (
    CNN_MODELS,
    HELDOUT,
    LEARNED_NOISE,
    RunOptions,
    noise_prior,
    parse_noise,
)
from bnn_ppl.validation import InputValueError


def load_data(
    dataset: str,
    *,
    split: int | None = None,
    data_dir: str | None = None,
    max_train: int | None = None,
) -> bp.data.Dataset:
    """``bp.data.load(dataset, ...)`` with only the options given; the first ``max_train``
    training rows.

    Raises:
        ValueError: unknown data set, or ``max_train`` above the number of training rows.
        TypeError: an option the data set does not take.
        DataNotFoundError: the data set is not on this machine.
    """
    options: dict[str, Any] = {}
    if split is not None:
        options["split"] = split
    if data_dir is not None:
        options["data_dir"] = data_dir
    data = bp.data.load(dataset, **options)
    if max_train is not None:
        n = len(data.x_train)
        if max_train > n:
            raise InputValueError(
                f"--max-train {max_train} exceeds the {n} training rows of {dataset}; omit it "
                "to use them all."
            )
        data = data._replace(x_train=data.x_train[:max_train], y_train=data.y_train[:max_train])
    return data


def inputs_for(model: str, data: bp.data.Dataset) -> bp.data.Dataset:
    """Reshape flat square images (8x8 digits) for the CNNs; check token ids for the CNN-LSTM."""
    x = data.x_train
    if model in CNN_MODELS and x.ndim == 2:
        side = math.isqrt(x.shape[1])
        if side * side != x.shape[1]:
            raise InputValueError(
                f"--model {model} needs images; {data.name} has {x.shape[1]} features, which are "
                "not a square image. Use --model mlp."
            )
        return data._replace(
            x_train=x.reshape(-1, side, side, 1), x_test=data.x_test.reshape(-1, side, side, 1)
        )
    if model in CNN_MODELS and x.ndim != 4:
        raise InputValueError(
            f"--model {model} needs (n, H, W, C) images; {data.name} has {x.shape}."
        )
    if model == "cnnlstm" and not np.issubdtype(x.dtype, np.integer):
        raise InputValueError(
            f"--model cnnlstm takes token ids (e.g. --dataset imdb_reviews); {data.name} has "
            f"{x.dtype} features. Use --model mlp."
        )
    return data


def build_model(
    options: RunOptions, data: bp.data.Dataset, *, noise_sd: float | None = None
) -> bp.BNN:
    """The BNN of ``options`` (their network defaults resolved by
    :func:`~bnn_ppl.cli.run_settings`) for ``data`` (whose inputs :func:`inputs_for` has
    prepared). With ``--noise heldout`` the fixed noise sd is ``noise_sd``, which the caller
    chooses first (:func:`choose_noise`); the model's sites do not depend on it."""
    from bnn_ppl import models  # start-up time: Flax loads only to build a network

    classification = data.task == "classification"
    out = data.num_classes if classification else 1
    name, width, depth = options.model, options.width, options.depth
    if name == "mlp":
        network: Any = models.MLP(hidden=(width,) * depth, out=out)
    elif name == "lenet5":
        network = models.LeNet5(out=out)
    elif name == "resnet20frn":
        network = models.ResNet20FRN(out=out, width=width, blocks_per_stage=depth)
    elif name == "resnetpp":
        network = models.ResNetPP(out=out, width=width, blocks_per_stage=depth)
    else:
        vocab = int(max(data.x_train.max(), data.x_test.max())) + 1
        network = models.CNNLSTM(out=out, vocab_size=vocab)
    if classification:
        if options.noise is not None:
            raise InputValueError(
                f"--noise applies to regression; {data.name} is a classification set."
            )
        likelihood: Any = bp.likelihoods.Categorical()
    else:
        noise = parse_noise(LEARNED_NOISE if options.noise is None else options.noise)
        if noise == HELDOUT:
            if noise_sd is None:
                raise InputValueError(
                    "--noise heldout: choose the noise sd first (bnn_ppl.cli.choose_noise) and "
                    "pass it as noise_sd."
                )
            noise = noise_sd
        elif isinstance(noise, tuple):
            noise = noise_prior(*noise)
        likelihood = bp.likelihoods.Gaussian(scale=noise)
    model = bp.BNN(
        network,
        prior=bp.priors.from_string(options.prior),
        likelihood=likelihood,
        temperature=options.temperature,
        temper=options.temper,
    )
    model.check_data(data.x_train, data.y_train)
    return model


def choose_noise(options: RunOptions, data: bp.data.Dataset) -> Any:
    """``--noise heldout``: the fixed noise sd chosen from the training rows alone, with the
    run's seed (:func:`bnn_ppl.inference.heldout_noise`, as ``examples/reference.py --noise
    heldout``: the 5-fold cross-validated MAP RMSE of the run's network and prior with the noise
    sd learned under a ``HalfNormal(1)`` prior, so that the choice does not depend on a guessed
    value, to one significant figure); ``None`` for any other ``--noise``. The choice depends on
    the data, the model and the seed only, so a resumed run chooses the same value."""
    import jax

    from bnn_ppl.inference import heldout_noise  # start-up time: JAX only when it runs

    if options.noise is None or parse_noise(options.noise) != HELDOUT:
        return None
    model = build_model(dataclasses.replace(options, noise="halfnormal:1"), data)
    return heldout_noise(model, data.x_train, data.y_train, rng_key=jax.random.key(options.seed))
