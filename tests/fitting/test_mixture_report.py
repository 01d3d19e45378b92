"""write_report with K ≥ 3 pairs adds the mixture section and fits.json["mixture"]; a two-pair
report has no ``mixture`` key."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from fitting.core.options import UncertaintyOptions
from fitting.data.sampling import dirichlet_mixtures
from fitting.laws.mixture.laws import MixtureLawFit
from fitting.laws.mixture.runs import MixtureRuns
from fitting.report.writer import ReportOptions, write_report
from fitting.test_utils import make_final_table

PAIRS = ["en-de", "en-fr", "en-zh"]


def _table():
    sol = {}
    tau = np.array([[1, 0.5, 0], [0.5, 1, 0], [0, 0, 1.0]])
    for i, p in enumerate(PAIRS):
        oth = [j for j in range(3) if j != i]
        sol[p] = {"theta": [0.3] + list(tau[i, oth]), "coef": [0.8, 1.0 + 0.2 * i],
                  "f_scale": 0.01}
    truth = MixtureLawFit(law="mixture", params={}, form="transfer", pairs=PAIRS,
                          sizes=[1e7, 4e7], n_ref=2e7, solutions=sol)
    Wd = np.vstack([np.full((1, 3), 1 / 3), dirichlet_mixtures(3, 5, seed=2, concentration=3.0)])
    n = np.concatenate([np.repeat([1e7, 2e7, 4e7], len(Wd)), [4e7]])
    W = np.vstack([np.tile(Wd, (3, 1)), [[0.5, 0.2, 0.3]]])
    Y = truth.predict(n, W) * (1 + 0.002 * np.random.default_rng(0).standard_normal(W.shape))
    runs = MixtureRuns(PAIRS, [f"run{j}" for j in range(len(n))], n, W, Y,
                       np.full(Y.shape, np.nan), np.zeros(len(n), bool))
    return runs.to_tidy()


@pytest.mark.slow  # ≈ 18 s of CPU: the report fits every other section on 18 weights too
def test_report_mixture_section(tmp_path):
    rep = write_report(_table(), str(tmp_path), ReportOptions(uncertainty=UncertaintyOptions(method=None, n_refits=4),
                                                              heldout_runs=["run18"], target_sizes=[1e8],
                       mixture_constraints={"max_weights": {"en-zh": 0.25},
                                            "preferences": {"en-de": 2}}))
    fits = json.loads(open(rep.json_path).read())
    mix = fits["mixture"]
    assert {"laws", "chosen", "chosen_because", "transfer", "heldout", "recommendation"} <= \
        set(mix)
    assert {"heldout_mae", "heldout_mape", "cv_mae", "cv_mape", "n_params"} <= \
        set(mix["laws"]["transfer"])
    assert mix["transfer"]["pairs"] == PAIRS and len(mix["transfer"]["matrix"]) == 3
    assert mix["heldout"]["run18"]["en-de"]["measured"] > 0
    assert mix["recommendation"]["weights"]["en-zh"] <= 0.25 + 1e-6
    assert "Mixture laws for K pairs" in rep.markdown
    assert os.path.exists(os.path.join(tmp_path, "figures", "transfer.png"))


def test_two_pair_report_has_no_mixture(tmp_path):
    rep = write_report(make_final_table(), str(tmp_path),
                       ReportOptions(uncertainty=UncertaintyOptions(method=None, n_refits=4)))
    fits = json.loads(open(rep.json_path).read())
    assert "mixture" not in fits
    assert "Mixture laws" not in rep.markdown
    assert not any("mixture" in k for k in fits["skipped"])
