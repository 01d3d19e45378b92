import numpy as np
import pytest

from fitting.base import FitError
from fitting.learning_curve import convergence_check, fit_learning_curve

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
