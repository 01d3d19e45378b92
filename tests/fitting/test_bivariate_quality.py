import numpy as np
import pytest

from fitting.core.base import FitError, FitResult
from fitting.core.options import NO_UNCERTAINTY, UncertaintyOptions
from fitting.laws.quality import QualityLawFit, fit_quality_law, quality_points
from fitting.laws.size.bivariate import BivariateLawFit, fit_bivariate_law

NE = np.array([20, 40, 80, 160, 320, 20, 20, 20, 20, 40, 80, 160]) * 1e6
ND = np.array([25, 25, 25, 25, 25, 50, 100, 200, 400, 50, 100, 200]) * 1e6
TRUE = {"alpha": 0.8, "p_e": 0.25, "p_d": 0.35, "l_inf": 0.9}
EB, DB = 120e6, 150e6


def _loss(noise=0.0, seed=0):
    y = TRUE["alpha"] * (EB / NE) ** TRUE["p_e"] * (DB / ND) ** TRUE["p_d"] + TRUE["l_inf"]
    return y * (1 + noise * np.random.default_rng(seed).standard_normal(y.size))


def test_bivariate_recovery_and_allocation():
    f = fit_bivariate_law(NE, ND, _loss(), n_e_bar=EB, n_d_bar=DB,
                          uncertainty=NO_UNCERTAINTY)
    for k, v in TRUE.items():
        assert f[k] == pytest.approx(v, rel=1e-4)
    r_star = 0.35 / 0.6
    assert f.optimal_decoder_fraction() == pytest.approx(r_star, rel=1e-4)
    ne, nd = f.optimal_allocation(1e9)
    assert ne + nd == pytest.approx(1e9) and nd / 1e9 == pytest.approx(r_star, rel=1e-4)
    # eq. 4: the optimal law equals eq. 2 at the optimal allocation
    assert f.optimal_law(1e9) == pytest.approx(f.predict(ne, nd), rel=1e-10)
    # Fig. 6: penalty is 1 at r*, > 1 elsewhere, and α#·B^-s + L∞ equals eq. 2 at that ratio
    assert f.penalty(r_star) == pytest.approx(1.0, abs=1e-9)
    assert np.all(f.penalty([0.2, 0.4, 0.8, 0.95]) > 1)
    r, b = 0.3, 5e8
    direct = f.predict((1 - r) * b, r * b)
    via = f.alpha_sharp(r) * b ** -(0.6) + f["l_inf"]
    assert direct == pytest.approx(via, rel=1e-10)
    assert f.additive_penalty(r, b) == pytest.approx(direct - f.optimal_law(b), rel=1e-8)


def test_bivariate_noise_json_and_errors():
    f = fit_bivariate_law(NE, ND, _loss(0.003, 1), n_e_bar=EB, n_d_bar=DB,
                          uncertainty=UncertaintyOptions(n_refits=20))
    assert abs(f["p_d"] - 0.35) < 0.07 and abs(f["p_e"] - 0.25) < 0.07
    g = FitResult.from_json(f.to_json())
    assert isinstance(g, BivariateLawFit) and g.n_e_bar == EB
    np.testing.assert_allclose(g.predict(NE, ND), f.predict(NE, ND))
    with pytest.raises(FitError, match="n_dec"):
        fit_bivariate_law(NE[:5], np.full(5, 1e7), _loss()[:5])
    with pytest.raises(FitError, match="'n_enc', row 2"):
        fit_bivariate_law(np.r_[NE[:2], np.nan, NE[3:]], ND, _loss())


def test_quality_power_and_linear():
    L = np.linspace(1.2, 2.5, 12)
    q = fit_quality_law(L, 40 * L**-1.5, uncertainty=NO_UNCERTAINTY)
    assert q["c"] == pytest.approx(40, rel=1e-6) and q["p"] == pytest.approx(1.5, rel=1e-6)
    np.testing.assert_allclose(q.inverse(q.predict(L)), L)
    lin = fit_quality_law(L, 70 - 12 * L, form="linear", metric="chrf",
                          uncertainty=UncertaintyOptions(n_refits=10))
    assert lin["b"] == pytest.approx(-12, rel=1e-6)
    g = FitResult.from_json(lin.to_json())
    assert isinstance(g, QualityLawFit) and g.metric == "chrf"
    up = fit_quality_law(L, 10 * L, uncertainty=NO_UNCERTAINTY)
    assert any("does not fall" in w for w in up.warnings)
    with pytest.raises(FitError, match="'bleu', row 0"):
        fit_quality_law(L, np.r_[0.0, np.ones(11)])


def test_quality_predictions_stay_on_the_metric_scale():
    L = np.linspace(1.2, 2.5, 12)
    lin = fit_quality_law(L, 70 - 12 * L, form="linear", metric="chrf",
                          uncertainty=NO_UNCERTAINTY)
    # the line reaches 100 at L = −2.5 and 0 at L = 5.8: extrapolations stay within [0, 100]
    assert lin.predict([0.0])[0] == pytest.approx(70.0)
    np.testing.assert_array_equal(lin.predict([-5.0, 10.0]), [100.0, 0.0])
    bleu = fit_quality_law(L, 40 * L**-1.5, uncertainty=NO_UNCERTAINTY)
    assert bleu.predict([0.01])[0] == 100.0  # 40 · 0.01^−1.5 = 40 000 unclipped
    free = fit_quality_law(L, 70 - 12 * L, form="linear", metric="bleurt",
                           uncertainty=NO_UNCERTAINTY)
    assert free.predict([10.0])[0] == pytest.approx(-50.0)  # no known range: not clipped


def test_quality_points_pairs_loss_and_metric():
    import pandas as pd

    rows = []
    for step in (100, 200, 300):
        rows.append(dict(run_id="r", pair="en-de", eval_set="validation", metric="loss",
                         step=step, value=3.0 / step))
        if step > 100:
            rows.append(dict(run_id="r", pair="en-de", eval_set="validation", metric="bleu",
                             step=step, value=step / 10))
    pts = quality_points(pd.DataFrame(rows), "bleu")
    assert pts["step"].tolist() == [200, 300]
    with pytest.raises(FitError, match="no rows with metric='chrf'"):
        quality_points(pd.DataFrame(rows), "chrf")


def test_bivariate_backtest_on_largest_total_size():
    f = fit_bivariate_law(NE, ND, _loss(), n_e_bar=EB, n_d_bar=DB,
                          uncertainty=NO_UNCERTAINTY)
    assert f.backtest is not None and abs(f.backtest["error"]) < 1e-6
    y = _loss()
    y[np.argmax(NE + ND)] += 0.1
    g = fit_bivariate_law(NE, ND, y, n_e_bar=EB, n_d_bar=DB,
                          uncertainty=NO_UNCERTAINTY)
    assert any("extrapolation backtest" in w for w in g.warnings)
