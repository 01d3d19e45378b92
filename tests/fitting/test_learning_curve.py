import numpy as np
import pytest

from fitting.core.base import FitError
from fitting.core.options import UncertaintyOptions
from fitting.laws.curves.learning_curve import convergence_check, fit_learning_curve

STEPS = np.geomspace(100, 20000, 25)


def test_extrapolates_power_law_curve():
    y = 2.0 * STEPS**-0.4 + 0.8
    lc = fit_learning_curve(STEPS, y)
    assert lc["l_inf"] == pytest.approx(0.8, rel=1e-3)
    assert lc.predict([2.5e6])[0] == pytest.approx(2.0 * 2.5e6**-0.4 + 0.8, rel=1e-4)
    assert lc.gain(2.5e6) > 0
    assert lc.dropped_early == int(np.sum(STEPS < 2000))


def test_convergence_check_distinguishes_regimes():
    dropping = 5.0 * STEPS**-0.3 + 0.5
    flat = 0.9 + 0.3 * np.exp(-STEPS / 500)
    assert convergence_check(STEPS, dropping)["still_dropping"]
    assert not convergence_check(STEPS, flat)["still_dropping"]


def test_too_few_points():
    with pytest.raises(FitError, match="need at least 4"):
        fit_learning_curve([100, 200, 300], [3.0, 2.0, 1.5])


def test_correct_final_losses_extrapolates_low_weight_runs():
    import pandas as pd

    from fitting.laws.curves.learning_curve import correct_final_losses

    rows = []
    steps = np.geomspace(100, 10000, 12).round()
    for run, w, conv in (("a", 0.05, 1.0), ("b", 0.5, 2.0)):
        for s in steps:
            rows.append(dict(run_id=run, pair="en-de", weight=w, n=1e6, eval_set="validation",
                             metric="loss", step=s, value=conv + 5.0 * s**-0.5,
                             final=bool(s == steps[-1])))
    fin = correct_final_losses(pd.DataFrame(rows), target_step=2.5e6)
    a = fin[fin.run_id == "a"].iloc[0]
    b = fin[fin.run_id == "b"].iloc[0]
    assert a.corrected and a.value == pytest.approx(1.0 + 5.0 * 2.5e6**-0.5, rel=1e-4)
    assert a.value < a.value_observed
    assert not b.corrected and b.value == b.value_observed  # p > 0.05: left as observed


def test_uncertainty_and_json_roundtrip():
    from fitting.core.base import FitResult
    from fitting.laws.curves.learning_curve import LearningCurveFit

    rng = np.random.default_rng(3)
    y = (2.0 * STEPS**-0.4 + 0.8) * (1 + 0.005 * rng.standard_normal(STEPS.size))
    lc = fit_learning_curve(STEPS, y,
                            uncertainty=UncertaintyOptions(method="perturbation", n_refits=20))
    lo, hi = lc.intervals["l_inf"]
    assert lo < lc["l_inf"] < hi and lc.stderr["l_inf"] > 0
    back = FitResult.from_json(lc.to_json())
    assert isinstance(back, LearningCurveFit)
    assert back.last_step == lc.last_step and back.dropped_early == lc.dropped_early
    np.testing.assert_allclose(back.predict([2.5e6]), lc.predict([2.5e6]), rtol=1e-12)


def test_cooldown_start_finds_the_last_step_before_the_rate_decays_to_zero():
    import numpy as np

    from fitting.laws.curves.learning_curve import cooldown_start

    steps = np.arange(10, 1001, 10, dtype=float)
    rsqrt = 1.0 / np.sqrt(np.maximum(steps, 100.0)) * np.minimum(steps / 100.0, 1.0)
    assert cooldown_start(steps, rsqrt) is None  # warm-up then rsqrt: no cool-down
    cooled = rsqrt * np.clip((1000 - steps) / 300.0, 0.0, 1.0)
    assert cooldown_start(steps, cooled) == 700.0
    assert cooldown_start(steps, np.full_like(steps, 0.01)) is None  # constant rate
    stable = np.minimum(steps / 100.0, 1.0) * np.clip((1000 - steps) / 300.0, 0.0, 1.0)
    assert 700.0 <= cooldown_start(steps, stable) <= 710.0  # constant rate, then a cool-down
