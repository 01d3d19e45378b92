import numpy as np
import pytest

from fitting.core.base import FitError, FitResult
from fitting.core.options import NO_UNCERTAINTY, UncertaintyOptions
from fitting.laws.size.joint import JointLawFit, fit_joint_law
from fitting.test_utils import TRUTH, f_hat, make_final_table


@pytest.fixture(scope="module")
def noisy_fit():
    return fit_joint_law(make_final_table(noise=0.01, seed=3),
                         uncertainty=UncertaintyOptions(n_refits=30))


def test_exact_recovery_and_fraction():
    fit = fit_joint_law(make_final_table(noise=0.0), uncertainty=NO_UNCERTAINTY)
    for pair, (a, b1, li, c) in TRUTH.items():
        assert fit.params[f"alpha[{pair}]"] == pytest.approx(a, rel=1e-4)
        assert fit.params[f"l_inf[{pair}]"] == pytest.approx(li, rel=1e-4)
        assert fit.params[f"beta[{pair},p=1]"] == pytest.approx(b1, rel=1e-3)
        # eq. 10: f(p) = (β_1/β_p)^(1/α) equals the generating f̂(p)
        ps = np.array([0.05, 0.3, 0.7])
        np.testing.assert_allclose(fit.fraction(ps, pair), f_hat(ps, *c), rtol=1e-3)
        # eq. 9: N_eff = f(p)·N
        np.testing.assert_allclose(fit.effective_params(1e8, 0.3, pair), 1e8 * f_hat(0.3, *c),
                                   rtol=1e-3)
    assert fit.meta["excluded_zero_weight"] == 2 * 8  # zero-shot rows: one weight × 8 sizes per pair


def test_noisy_recovery_within_tolerance(noisy_fit):
    for pair, (a, _, li, _) in TRUTH.items():
        assert abs(noisy_fit.params[f"l_inf[{pair}]"] / li - 1) < 0.03
        assert abs(noisy_fit.params[f"alpha[{pair}]"] / a - 1) < 0.1
        lo, hi = noisy_fit.intervals[f"l_inf[{pair}]"]
        assert lo < hi
    assert set(noisy_fit.backtest) == set(TRUTH)


def test_predict_and_json(noisy_fit):
    g = FitResult.from_json(noisy_fit.to_json())
    assert isinstance(g, JointLawFit)
    np.testing.assert_allclose(g.predict([1e6, 1e7], 0.5, "en-de"),
                               noisy_fit.predict([1e6, 1e7], 0.5, "en-de"))
    lo, hi = g.band([1e8], 0.5, "en-de")
    assert lo[0] < g.predict([1e8], 0.5, "en-de")[0] < hi[0]
    with pytest.raises(FitError, match="no fitted β for weight p=0.42"):
        g.predict(1e6, 0.42, "en-de")
    with pytest.raises(FitError, match="fitted pairs"):
        g.predict(1e6, 0.5, "fr-en")


def test_too_few_points_and_bad_weights():
    small = make_final_table(sizes=[1e5, 1e6], weights=(0.5, 1.0))
    with pytest.raises(FitError, match="need ≥ .* points and ≥ 3 sizes"):
        fit_joint_law(small)
    bad = make_final_table(sizes=[1e5, 1e6, 1e7], weights=(0.5, 1.0))
    bad.loc[3, "weight"] = 1.5
    with pytest.raises(FitError, match=r"'weight', row 3"):
        fit_joint_law(bad)


def test_backtest_warns_only_when_largest_size_breaks_the_trend():
    df = make_final_table(noise=0.0)
    ok = fit_joint_law(df, uncertainty=NO_UNCERTAINTY)
    assert not any("backtest" in w for w in ok.warnings)
    bad = df.copy()
    top = (bad.n == bad.n.max()) & (bad.pair == "en-de") & (bad.weight == 0.3)
    bad.loc[top, "value"] += 0.2  # one weight's largest model is far off the trend
    fit = fit_joint_law(bad, uncertainty=NO_UNCERTAINTY)
    assert any("en-de" in w and "backtest" in w for w in fit.warnings)
    assert not any("en-zh" in w and "backtest" in w for w in fit.warnings)
