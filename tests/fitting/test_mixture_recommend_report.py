"""What the report says about a recommendation's bounds and about transfer measured directly
(fitting.report.sections.mixture.mixture_text on a payload built without fitting any law)."""

from __future__ import annotations

import numpy as np

from fitting.laws.mixture.recommend import MixtureConstraints, recommend_mixture
from fitting.laws.mixture.runs import MixtureRuns
from fitting.laws.mixture.transfer import direct_transfer
from fitting.report.sections.mixture import mixture_text
from fitting.test_utils import MIXTURE_PAIRS as PAIRS
from fitting.test_utils import transfer_truth


def _payload(rec: dict, direct: dict) -> dict:
    return {"laws": {}, "chosen": "transfer", "chosen_because": "test", "transfer": None,
            "heldout": {}, "recommendation": rec, "transfer_direct": direct}


def _contrast_runs() -> MixtureRuns:
    """x1 at 0.1 beside x0 (its relative: 0.30) and beside x4 (0.40), sd 0.01 each."""
    W = np.zeros((2, 5))
    W[0, [1, 0]] = 0.1, 0.9
    W[1, [1, 4]] = 0.1, 0.9
    Y = np.full((2, 5), np.nan)
    Y[:, 1] = 0.30, 0.40
    return MixtureRuns(PAIRS, ["a", "b"], np.array([1e7, 1e7]), W, Y, np.full((2, 5), 0.01),
                       np.zeros(2, bool))


def test_a_binding_lower_bound_and_a_resolved_contrast_are_stated():
    prefer = {p: float(p == "en-x0") for p in PAIRS}
    rec = recommend_mixture(transfer_truth(), 3e7, MixtureConstraints(
        preferences=prefer, min_weights={p: 0.1 for p in PAIRS}), n_starts=2)
    text = mixture_text(_payload(rec, direct_transfer(_contrast_runs())))
    assert "A lower bound binds" in text and "en-x4" in text.split("A lower bound binds")[1]
    assert "N = 3e+07, a fitted size" in text
    assert "contrast: en-x1 helped more by en-x0 than en-x4" in text
    assert "0.1 ± 0.014 (beyond 2 sd)" in text


def test_the_closest_source_by_zero_shot_loss_is_named():
    W = np.zeros((2, 5))
    W[0, 0], W[1, 4] = 1.0, 1.0  # x0 alone, x4 alone
    Y = np.full((2, 5), 8.0)
    Y[0, 0], Y[1, 4], Y[0, 1] = 0.3, 0.3, 3.0  # x1 after x0 alone: 3 nats, after x4: 8
    runs = MixtureRuns(PAIRS, ["a", "b"], np.array([1e7, 1e7]), W, Y, np.full((2, 5), 0.1),
                       np.zeros(2, bool))
    text = mixture_text(_payload(None, direct_transfer(runs)))
    assert "zero-shot: en-x1 closest to en-x0 at every size (beyond 2 sd" in text


def test_no_binding_line_when_no_bound_binds():
    rec = recommend_mixture(transfer_truth(), 3e7,
                            MixtureConstraints(min_weights={p: 0.01 for p in PAIRS}), n_starts=2)
    assert rec["bounds"]["at_min"] == []
    assert "A lower bound binds" not in mixture_text(_payload(rec, None))
