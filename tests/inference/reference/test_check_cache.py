"""``checks.json`` of a checkpointed reference run (:mod:`bnn_ppl.inference.reference.checkpoint`):
a check
made before on the same values under the same rule is read back; a change anywhere in the
checked values, the rule or the burn-in is a new check; a damaged or tampered file is not
trusted."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from bnn_ppl.inference.reference.checkpoint import FILE, CheckCache, CheckCacheWarning
from bnn_ppl.inference.reference.stopping import check_convergence

RULE = {"max_rhat": 1.01, "min_share": 0.99, "min_ess": 400.0}


def _segments(seed=0, n=3):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(4, 50, 6)).astype(np.float32) for _ in range(n)]


class Counting:
    def __init__(self):
        self.calls = 0

    def __call__(self, values, first):
        self.calls += 1
        return check_convergence(values[:, first:])


def _run(folder, segments, rule=RULE, first=0, compute=None):
    """Check after every segment, as reference_hmc does: the figures of each check."""
    compute = compute or Counting()
    cache = CheckCache(folder)
    return [cache.check(segments[: k + 1], first, rule, compute) for k in range(len(segments))]


def test_the_same_checks_are_read_back_and_equal_the_computed_ones(tmp_path):
    segs = _segments()
    first = Counting()
    figures = _run(tmp_path, segs, compute=first)
    assert first.calls == 3 and (tmp_path / FILE).exists()
    again = Counting()
    assert _run(tmp_path, segs, compute=again) == figures and again.calls == 0
    # and they are the figures of the rule on the joined values
    assert figures[-1] == check_convergence(np.concatenate(segs, axis=1))


@pytest.mark.parametrize("change", ["earlier_segment", "rule", "first", "dtype"])
def test_a_change_in_the_values_the_rule_or_the_burn_in_is_a_new_check(tmp_path, change):
    segs = _segments()
    _run(tmp_path, segs)
    counting, rule, first = Counting(), RULE, 0
    if change == "earlier_segment":  # segment 1 differs in one value: checks 1-3 are new
        segs[0] = segs[0].copy()
        segs[0][0, 0, 0] += 1e-3
    elif change == "rule":
        rule = RULE | {"min_ess": 100.0}
    elif change == "first":
        first = 10
    else:
        segs = [s.astype(np.float64) for s in segs]
    _run(tmp_path, segs, rule=rule, first=first, compute=counting)
    assert counting.calls == 3
    kept = json.loads((tmp_path / FILE).read_text())["checks"]
    assert len(kept) == 6  # the old checks stay beside the new ones


@pytest.mark.parametrize("damage", ["garbage", "figure_edited", "other_format"])
def test_a_damaged_or_tampered_file_is_not_trusted(tmp_path, damage):
    segs = _segments()
    figures = _run(tmp_path, segs)
    path = tmp_path / FILE
    if damage == "garbage":
        path.write_text("{not json")
    else:
        body = json.loads(path.read_text())
        if damage == "figure_edited":  # a check made to look converged
            key = next(iter(body["checks"]))
            body["checks"][key]["converged"] = not body["checks"][key]["converged"]
        else:
            body["format"] = 99
        path.write_text(json.dumps(body))
    counting = Counting()
    with pytest.warns(CheckCacheWarning, match="damaged or was not written"):
        assert _run(tmp_path, segs, compute=counting) == figures
    assert counting.calls == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckCacheWarning)  # rewritten: trusted again
        assert _run(tmp_path, segs) == figures


def test_checks_must_come_once_per_segment_in_order(tmp_path):
    segs = _segments()
    cache = CheckCache(tmp_path)
    cache.check(segs[:2], 0, RULE, Counting())
    with pytest.raises(ValueError, match="once per segment, in order"):
        cache.check(segs[:1], 0, RULE, Counting())
