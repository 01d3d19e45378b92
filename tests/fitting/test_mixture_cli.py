"""``mnmt-fit mixture`` and the report's mixture section: wide and tidy tables agree, errors
name the file and column, fits.json carries ``mixture`` for K ≥ 3 pairs and not for two."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fitting.cli import main
from fitting.core.base import FitError
from fitting.data.sampling import dirichlet_mixtures
from fitting.laws.mixture.compare import compare_mixture_laws, transfer_matrix
from fitting.laws.mixture.laws import MixtureLawFit
from fitting.laws.mixture.runs import MixtureRuns
from fitting.report.sections.mixture import load_mixture_runs, mixture_text

K = 3
PAIRS = ["en-de", "en-fr", "en-zh"]


def _runs() -> MixtureRuns:
    sol = {}
    tau = np.array([[1, 0.5, 0], [0.5, 1, 0], [0, 0, 1.0]])
    for i, p in enumerate(PAIRS):
        oth = [j for j in range(K) if j != i]
        sol[p] = {"theta": [0.3] + list(tau[i, oth]), "coef": [0.8, 1.0 + 0.2 * i],
                  "f_scale": 0.01}
    truth = MixtureLawFit(law="mixture", params={}, form="transfer", pairs=PAIRS,
                          sizes=[1e7, 4e7], n_ref=2e7, solutions=sol)
    Wd = np.vstack([np.full((1, K), 1 / K), dirichlet_mixtures(K, 5, seed=2, concentration=3.0)])
    n = np.concatenate([np.repeat([1e7, 4e7], len(Wd)), [4e7]])
    W = np.vstack([np.tile(Wd, (2, 1)), [[0.5, 0.2, 0.3]]])
    Y = truth.predict(n, W) * (1 + 0.002 * np.random.default_rng(0).standard_normal(W.shape))
    held = np.zeros(len(n), bool)
    held[-1] = True
    return MixtureRuns(PAIRS, [f"run{j}" for j in range(len(n))], n, W, Y,
                       np.full(Y.shape, np.nan), held,
                       {"en-de": 4e5, "en-fr": 2e5, "en-zh": 5e4})


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    d = tmp_path_factory.mktemp("mix")
    runs = _runs()
    wide, tidy = d / "wide.csv", d / "tidy.csv"
    runs.to_wide().to_csv(wide, index=False)
    runs.to_tidy().to_csv(tidy, index=False)
    return runs, str(wide), str(tidy)


def test_wide_and_tidy_agree(tables):
    runs, wide, tidy = tables
    a = load_mixture_runs(wide)
    b = load_mixture_runs(tidy, heldout_runs=["run12"])
    order = [b.run_ids.index(r) for r in a.run_ids]
    assert a.pairs == b.pairs == PAIRS
    assert np.allclose(a.W, b.W[order]) and np.allclose(a.Y, b.Y[order])
    assert np.array_equal(a.heldout, b.heldout[order]) and a.data_size == b.data_size
    ta = compare_mixture_laws(a, forms=("transfer",), n_boot=0).laws["transfer"]
    tb = compare_mixture_laws(b, forms=("transfer",), n_boot=0).laws["transfer"]
    assert np.allclose(transfer_matrix(ta)[0], transfer_matrix(tb)[0], atol=1e-6)


def test_cli_json_and_out(tables, tmp_path, capsys):
    _, wide, _ = tables
    rc = main(["mixture", wide, "--json", "--n-boot", "3", "--target-size", "1e8",
               "--max-weight", "en-zh=0.2", "--max-loss", "en-de=5", "--prefer", "en-de=2",
               "--epoch-cap", "4", "--budget", "4e5", "--out", str(tmp_path)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert {"laws", "chosen", "chosen_because", "transfer", "heldout", "recommendation"} <= set(out)
    rec = out["recommendation"]
    assert rec["weights"]["en-zh"] <= 0.2 + 1e-6 and "unimax" in rec["baselines"]
    assert out["heldout"]["run12"]["en-de"]["measured"] > 0
    assert (tmp_path / "mixture.json").exists() and (tmp_path / "transfer.png").exists()
    assert "transfer matrix" in mixture_text(out)


def test_errors_name_file_and_column(tables, tmp_path, capsys):
    runs, wide, _ = tables
    bad = tmp_path / "bad.csv"
    runs.to_wide().drop(columns=["loss_en-fr"]).to_csv(bad, index=False)
    only_w = load_mixture_runs(str(bad))  # a weight-only domain: trained, never evaluated
    assert np.isnan(only_w.Y[:, only_w.pairs.index("en-fr")]).all()
    runs.to_wide().drop(columns=["w_en-fr"]).to_csv(bad, index=False)
    with pytest.raises(FitError, match=r"bad\.csv.*w_en-fr"):
        load_mixture_runs(str(bad))
    df = runs.to_wide()
    df.loc[2, "w_en-de"] = 0.9
    df.to_csv(bad, index=False)
    assert main(["mixture", str(bad)]) == 2
    assert "bad.csv" in capsys.readouterr().err
    pd.DataFrame({"x": [1]}).to_csv(bad, index=False)
    with pytest.raises(FitError, match="bad.csv.*run_id"):
        load_mixture_runs(str(bad))
    with pytest.raises(FitError, match="nope"):
        load_mixture_runs(wide, heldout_runs=["nope"])
    assert main(["mixture", wide, "--epoch-cap", "4"]) == 2
