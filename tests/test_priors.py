"""Priors: families, path matching, unmatched/unused errors, parsing."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st

import bnn_ppl as bp
from bnn_ppl.priors import Laplace, Normal, StudentT, from_string, resolve

SHAPES = {
    "Dense_0.kernel": (4, 3),
    "Dense_0.bias": (3,),
    "Dense_1.kernel": (3, 2),
    "Dense_1.bias": (2,),
}


@pytest.mark.parametrize(
    "prior,ref",
    [
        (Normal(0.3), st.norm(0, 0.3)),
        (Laplace(0.2), st.laplace(0, 0.2)),
        (StudentT(3.0, 0.5), st.t(3.0, 0, 0.5)),
    ],
)
def test_families_have_the_right_density_and_stddev(prior, ref):
    w = np.linspace(-1, 1, 6).reshape(2, 3)
    d = prior.distribution((2, 3))
    assert d.event_shape == (2, 3) and d.batch_shape == ()
    np.testing.assert_allclose(d.log_prob(jnp.asarray(w)), ref.logpdf(w).sum(), rtol=1e-5)
    assert prior.stddev == pytest.approx(ref.std())


def test_single_prior_applies_everywhere():
    assert set(resolve(Normal(1.0), SHAPES).values()) == {Normal(1.0)}


def test_patterns_prefix_glob_and_first_match_wins():
    spec = {"Dense_0": Laplace(1.0), "*.bias": Normal(0.01), "*": Normal(0.1)}
    got = resolve(spec, SHAPES)
    assert got["Dense_0.kernel"] == Laplace(1.0)
    assert got["Dense_0.bias"] == Laplace(1.0)  # "Dense_0" comes first
    assert got["Dense_1.bias"] == Normal(0.01)
    assert got["Dense_1.kernel"] == Normal(0.1)
    assert resolve({"Dense_1.kernel": Normal(2.0), "*": Normal(1.0)}, SHAPES)[
        "Dense_1.kernel"
    ] == Normal(2.0)
    # a prefix must end at a dot: "Dense_1" does not match "Dense_10.kernel"
    shapes = {"Dense_10.kernel": (2, 2), "Dense_1.kernel": (2, 2)}
    assert resolve({"Dense_1": Normal(1.0), "*": Normal(2.0)}, shapes)["Dense_10.kernel"] == Normal(
        2.0
    )


def test_unmatched_parameters_are_an_error_listing_them():
    with pytest.raises(ValueError) as e:
        resolve({"Dense_0": Normal(1.0)}, SHAPES)
    assert "no prior for parameters ['Dense_1.kernel', 'Dense_1.bias']" in str(e.value)
    with pytest.raises(ValueError, match="Dense_1.bias"):
        resolve(
            lambda path, shape: Normal(1.0) if "kernel" in path or path == "Dense_0.bias" else None,
            SHAPES,
        )


def test_patterns_matching_nothing_are_an_error():
    with pytest.raises(ValueError, match=r"\['Dense_9'\] match no parameter"):
        resolve({"Dense_9": Normal(1.0), "*": Normal(1.0)}, SHAPES)
    with pytest.raises(ValueError, match="shadowed"):
        resolve({"*": Normal(1.0), "Dense_0": Normal(2.0)}, SHAPES)


def test_callable_priors_see_path_and_shape():
    seen = {}

    def rule(path, shape):
        seen[path] = shape
        return Normal(1.0 / np.sqrt(shape[0])) if path.endswith("kernel") else Normal(1.0)

    got = resolve(rule, SHAPES)
    assert seen == SHAPES
    assert got["Dense_0.kernel"].scale == pytest.approx(0.5)


def test_bad_priors_and_scales():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="scale must be a finite number > 0"):
            Normal(bad)
    with pytest.raises(ValueError, match="df"):
        StudentT(0.0, 1.0)
    with pytest.raises(TypeError, match=r"prior\['\*'\] must be a bnn_ppl prior"):
        resolve({"*": 0.1}, SHAPES)
    with pytest.raises(TypeError, match="prior must be"):
        resolve(0.1, SHAPES)


def test_from_string():
    assert from_string("normal:0.3") == Normal(0.3)
    assert from_string("Laplace:0.1") == Laplace(0.1)
    assert from_string("student_t:3,0.1") == StudentT(3.0, 0.1)
    with pytest.raises(ValueError, match=r"unknown prior 'gauss'; known priors: \['laplace'"):
        from_string("gauss:1")
    with pytest.raises(ValueError, match="takes 2 to 3 numbers"):
        from_string("student_t:0.1")
    with pytest.raises(ValueError, match="must be numbers"):
        from_string("normal:abc")
    with pytest.raises(ValueError, match="scale must be"):
        from_string("normal:-1")


def test_model_describe_shows_each_leaf_and_its_prior():
    from bnn_ppl.models import MLP

    model = bp.BNN(
        MLP(hidden=(3,), out=2),
        {"Dense_0.kernel": Laplace(1.0), "*": Normal(0.5)},
        bp.likelihoods.Categorical(),
    )
    table = model.describe(np.zeros((1, 4)))
    assert "Dense_0.kernel  (4, 3)  Laplace(scale=1.0, loc=0.0)" in table
    assert "Dense_1.bias    (2,)    Normal(scale=0.5, loc=0.0)" in table
