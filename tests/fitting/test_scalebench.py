"""benchmarks/scalebench.py's protocol on a miniature task whose law is known exactly."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fitting.design import FitSettings
from fitting.laws.budget.data_constrained import data_constrained_loss

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scalebench.py"
THETA = np.array([2345.0, 0.07, 14500.0, 31.0, 0.45, 2.3, 0.82])  # inside the benchmark's box


@pytest.fixture(scope="module")
def scalebench():
    spec = importlib.util.spec_from_file_location("benchmark_scalebench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_task(root: Path, rng: np.random.Generator) -> None:
    def table(n, n_range, d_range):
        N = np.exp(rng.uniform(*np.log(n_range), n))
        D = np.exp(rng.uniform(*np.log(d_range), n))
        U = D / rng.choice([1.0, 2.0, 4.0, 8.0], n)
        loss = data_constrained_loss(THETA, U, N, D)
        return pd.DataFrame({"group": "all_data", "unique_tokens": U, "params": N, "tokens": D,
                             "loss": loss})

    folder = root / "data_constrained_scaling_law"
    folder.mkdir(parents=True)
    table(60, (1e7, 5e8), (1e8, 2e10)).to_parquet(folder / "train-00000-of-00001.parquet")
    table(6, (2e9, 8e9), (5e10, 2e11)).to_parquet(folder / "test-00000-of-00001.parquet")


def test_the_protocol_scores_a_known_law_near_one_and_keeps_budgets(scalebench, tmp_path,
                                                                     monkeypatch):
    _write_task(tmp_path, np.random.default_rng(0))
    monkeypatch.setattr(scalebench, "DATA", tmp_path)
    monkeypatch.setitem(scalebench.SETTINGS, "data_constrained",
                        FitSettings(n_starts=16, max_nfev=200, design_starts=2))
    law_index = 2  # Muennighoff's form, the law the data come from
    for method in ("ours", "all_data"):
        r2 = scalebench.one_job("data_constrained", law_index, method, 0)
        assert len(r2) == 3 and min(r2[1:]) > 0.99, (method, r2)
    groups = scalebench.load_task("data_constrained", tmp_path)
    assert np.allclose(groups[0].cost, 6 * groups[0].X[:, 1] * groups[0].X[:, 2])


def test_r_squared_is_clipped_and_a_nan_prediction_scores_minus_one(scalebench):
    truth = np.array([1.0, 2.0, 3.0])
    assert scalebench.r_squared(truth, truth) == 1.0
    assert scalebench.r_squared(truth, truth + 100) == -1.0
    assert scalebench.r_squared(truth, np.array([1.0, np.nan, 3.0])) == -1.0
    assert scalebench.r_squared(truth, np.array([1.0, 2.0, 2.0])) == pytest.approx(0.5)


def test_fit_overrides_are_typed_as_the_settings_fields_and_unknown_ones_refused(scalebench):
    assert scalebench.fit_overrides("n_polish=8,guard=1,ridge=0.5") == {
        "n_polish": 8, "guard": True, "ridge": 0.5}
    assert scalebench.fit_overrides("guard=0") == {"guard": False}
    assert scalebench.fit_overrides("") == {}
    with pytest.raises(ValueError, match="n_start"):
        scalebench.fit_overrides("n_start=3")
