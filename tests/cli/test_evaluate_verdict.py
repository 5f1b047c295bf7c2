"""``bnn-ppl evaluate``'s verdict: the rule that fits the run (ordinary or reference), named,
and for a run that does not meet it the draws per chain that would."""

from __future__ import annotations

import numpy as np
import pytest

from bnn_ppl.cli.evaluate import ESS_PER_CHAIN, Rule, judge, rule_for
from bnn_ppl.runs.load import Run


def _run(method: str, chains: int, **config) -> Run:
    record = {"method": method, "num_chains": chains, "layout": ["chain", "draw"]}
    return Run("runs/x", {"method": method, **config}, record, None, np.zeros(1), None)


def _ar1(chains: int, n: int, q: int, rho: float, seed: int = 0) -> np.ndarray:
    """Stationary AR(1) draws: integrated autocorrelation time (1 + rho) / (1 - rho)."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(chains, n, q))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * e[:, t]
    return x


def test_an_ordinary_run_gets_arviz_ess_per_chain_and_a_reference_run_its_own_rule():
    rule = rule_for(_run("nuts", 2))
    assert (rule.name, rule.max_rhat, rule.min_ess, rule.min_share) == (
        "ordinary-run", 1.01, 2.0 * ESS_PER_CHAIN, 0.99
    )
    assert "100 per chain x 2 chains, ArviZ's recommendation" in rule.describe()
    ref = rule_for(_run("reference_hmc", 4, max_rhat=1.05, min_ess=1000, min_share=0.9))
    assert (ref.name, ref.max_rhat, ref.min_ess, ref.min_share) == (
        "reference-run", 1.05, 1000.0, 0.9
    )
    assert "the run's own stopping rule" in ref.describe()


def test_independent_draws_meet_the_ordinary_rule():
    values = np.random.default_rng(1).normal(size=(4, 2000, 30))
    v = judge(values, rule_for(_run("hmc", 4)))
    assert v["met"] and v["draws_needed_per_chain"] is None
    assert v["text"].startswith("verdict (ordinary-run rule: R-hat <= 1.01 and bulk ESS >= 400")
    assert "met by" in v["text"]


def test_slow_chains_are_told_how_many_draws_would_meet_the_rule():
    # AR(1), rho 0.9: integrated autocorrelation time tau = 19, ESS per draw 1 / 19, so 2
    # chains reach a mean bulk ESS of 200 after about 200 x 19 / 2 = 1,900 draws each. R-hat:
    # the 4 split halves of m draws have means of variance tau / m, so R-hat^2 - 1 is about
    # (tau chi2_3 / 3 - 1) / m; for 99 % of values to pass 1.01 the 99th percentile of
    # chi2_3 / 3 (3.78) must, which takes m = (19 x 3.78 - 1) / (1.01^2 - 1) = 3,500: about
    # 7,000 draws per chain. The rule's share applies to ESS too: the projection starts from
    # the 1 %-quantile ESS (here the 3rd smallest of 200), which estimation noise at 400 draws
    # puts well below the mean, so it asks for more than 1,900 (an overestimate, not less)
    from bnn_ppl.diagnostics import rhat_bulk_ess

    values = _ar1(2, 400, 200, 0.9)
    v = judge(values, rule_for(_run("nuts", 2)))
    assert not v["met"]
    ess = np.sort(rhat_bulk_ess(values)[1])
    assert v["draws_for_ess"] == pytest.approx(400 * 200 / ess[2], rel=1e-9)
    assert 1900 < v["draws_for_ess"] < 6 * 1900, v["draws_for_ess"]
    assert 4000 < v["draws_for_rhat"] < 20000, v["draws_for_rhat"]
    need = v["draws_needed_per_chain"]
    assert need >= max(v["draws_for_rhat"], v["draws_for_ess"])
    assert f"run about {need:,} draws per chain" in v["text"]
    assert "NOT met" in v["text"] and "from 2 x 400 draws" in v["text"]
    assert "cannot reach it" not in v["text"]
    # the same draws judged by the reference rule (bulk ESS 400): twice the draws for ESS
    ref = judge(values, Rule("reference-run", 1.01, 400.0, 0.99, "its rule"))
    assert ref["draws_for_ess"] == pytest.approx(2 * v["draws_for_ess"], rel=1e-9)
    assert ref["text"].startswith("verdict (reference-run rule: R-hat <= 1.01 and bulk ESS >= 400")


def test_too_few_draws_to_reach_the_ess_even_if_independent_is_said():
    values = _ar1(2, 60, 50, 0.5)
    v = judge(values, rule_for(_run("nuts", 2)))
    assert not v["met"]
    assert "60 draws per chain cannot reach it even if every draw were independent" in v["text"]
    assert v["draws_needed_per_chain"] > 100  # at least 200 / 2 draws each
