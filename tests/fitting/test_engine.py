import numpy as np
import pytest

from fitting.core.base import FitError, FitResult, json_safe, register_law
from fitting.core.engine import (
    F_SCALE_GRID,
    VarproModel,
    VarproOptions,
    goodness_of_fit,
    robust_fit,
    varpro_fit,
)
from fitting.core.options import NO_UNCERTAINTY
from fitting.core.uncertainty import band_from_samples, summarize_samples

X = np.linspace(0, 4, 30)

#: ordinary least squares
OLS = VarproOptions(loss="linear")


def _design(theta):
    return np.column_stack([np.exp(-theta[0] * X), np.ones_like(X)])


def test_varpro_recovers_nonlinear_and_signed_linear_parameters():
    y = 2.0 * np.exp(-1.3 * X) - 0.5  # negative offset: the second coefficient is free
    res = varpro_fit(VarproModel(_design, theta_bounds=([0.01], [5]), coef_nonneg=[True, False]),
                     y, theta_grid=[np.linspace(0.1, 3, 10)], options=OLS)
    assert res.theta[0] == pytest.approx(1.3, rel=1e-6)
    np.testing.assert_allclose(res.coef, [2.0, -0.5], rtol=1e-6)
    # with both coefficients constrained ≥ 0 the offset cannot go negative
    res_nn = varpro_fit(VarproModel(_design, theta_bounds=([0.01], [5]), coef_nonneg=True), y,
                        theta_grid=[np.linspace(0.1, 3, 10)], options=OLS)
    assert res_nn.coef[1] >= 0


def test_soft_l1_grid_and_outlier():
    y = 2.0 * np.exp(-1.3 * X) + 0.5
    y[5] += 0.3
    model = VarproModel(_design, theta_bounds=([0.01], [5]))
    robust = varpro_fit(model, y, theta_grid=[np.linspace(0.1, 3, 10)])
    ols = varpro_fit(model, y, theta_grid=[np.linspace(0.1, 3, 10)], options=OLS)
    assert robust.f_scale in F_SCALE_GRID
    assert abs(robust.theta[0] - 1.3) < abs(ols.theta[0] - 1.3)
    # the outlier keeps a large residual under soft_l1 (it is not fitted away)
    assert abs(robust.residuals[5]) > 0.25


def test_robust_fit_general_model():
    y = 3.0 + 0.7 * X
    res = robust_fit(lambda t: t[0] + t[1] * X, y, [[0.0, 0.0]], ([-10, -10], [10, 10]),
                     f_scale=0.01)
    np.testing.assert_allclose(res.theta, [3.0, 0.7], rtol=1e-6)


def test_goodness_and_uncertainty_helpers():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    g = goodness_of_fit(y, y + np.array([0.1, -0.1, 0.1, -0.1]), 2)
    assert g["rmse"] == pytest.approx(0.1) and g["r2"] == pytest.approx(1 - 0.04 / 5)
    assert g["sigma"] == pytest.approx(np.sqrt(0.04 / 2))
    s = {"a": np.arange(101.0)}
    sd, iv = summarize_samples(s, level=0.9)
    assert iv["a"] == pytest.approx((5.0, 95.0)) and sd["a"] == pytest.approx(np.std(s["a"], ddof=1))
    lo, hi = band_from_samples(lambda p: np.array([p["a"], 2 * p["a"]]), s, level=0.9)
    np.testing.assert_allclose(lo, [5, 10])
    np.testing.assert_allclose(hi, [95, 190])


def test_registry_and_json_safety():
    with pytest.raises(FitError, match="unknown law 'nope'"):
        FitResult.from_json({"law": "nope", "params": {}})
    with pytest.raises(ValueError, match="already registered"):

        @register_law("power")
        class Other(FitResult):
            pass

    assert json_safe({"x": np.float64("nan"), "y": np.arange(2), "z": (np.int64(3),)}) == {
        "x": None, "y": [0, 1], "z": [3]}


def _two_rates(theta):
    return np.column_stack([np.exp(-theta[0] * X), np.exp(-theta[1] * X), np.ones_like(X)])


def test_search_jacobian_reaches_the_finite_difference_fit_with_fewer_designs():
    y = 2.0 * np.exp(-2.5 * X) + 0.7 * np.exp(-0.5 * X) + 0.5

    def jac(theta):
        z = np.zeros_like(X)
        return [np.column_stack([-X * np.exp(-theta[0] * X), z, z]),
                np.column_stack([z, -X * np.exp(-theta[1] * X), z])]

    calls = {True: 0, False: 0}
    res = {}
    for search_jac in (True, False):
        def design(theta, key=search_jac):
            calls[key] += 1
            return _two_rates(theta)
        model = VarproModel(design, theta_bounds=([0.01, 0.01], [5, 5]), design_jac=jac)
        res[search_jac] = varpro_fit(model, y, theta_grid=[[0.5, 2.0], [0.05, 0.3]],
                                     options=VarproOptions(loss="linear", search_jac=search_jac))
    np.testing.assert_allclose(res[True].theta, res[False].theta, rtol=1e-3)
    np.testing.assert_allclose(res[True].coef, res[False].coef, rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(res[True].theta, [2.5, 0.5], rtol=1e-3)
    assert calls[True] < calls[False]


def test_explicit_starts_replace_the_grid():
    y = 2.0 * np.exp(-1.3 * X) + 0.7 * np.exp(-0.2 * X) + 0.5
    # the grid alone is one point where both rates are equal (the two columns coincide)
    res = varpro_fit(VarproModel(_two_rates, theta_bounds=([0.01, 0.01], [5, 5])), y,
                     theta_grid=[[3.0], [3.0]], theta_starts=[[3.0, 3.0], [1.0, 0.1]],
                     options=VarproOptions(loss="linear", n_refine=2))
    assert sorted(res.theta) == pytest.approx([0.2, 1.3], rel=1e-4)


def test_converged_and_f_scale_are_attributes_of_every_least_squares_fit():
    """One flag and one scale for a single-curve law, one per pair for the laws fitted pair by
    pair; the JSON keeps them where it always had them (``meta``, or ``goodness`` for the
    encoder/decoder law), so a fit read back has the same attributes."""
    from fitting.laws.size.bivariate import fit_bivariate_law
    from fitting.laws.size.joint import fit_joint_law
    from fitting.laws.size.power import fit_power_law
    from fitting.test_utils import make_final_table

    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.3, 0.5, 1.0), noise=0.01)
    fin = fin.rename(columns={"value": "loss"})
    one = fin[(fin["pair"] == "en-de") & (fin["weight"] == 0.5)]
    power = fit_power_law(one["n"], one["loss"], uncertainty=NO_UNCERTAINTY,
                          backtest=None)
    joint = fit_joint_law(fin[fin["weight"] > 0], loss_col="loss",
                          uncertainty=NO_UNCERTAINTY, backtest=None)
    ne, nd = (g.ravel() for g in np.meshgrid([1e5, 3e5, 1e6], [1e5, 3e5, 1e6]))
    bivariate = fit_bivariate_law(ne, nd, 2.0 + 40 * ne ** -0.3 + 60 * nd ** -0.3,
                                  uncertainty=NO_UNCERTAINTY, backtest=None)
    assert power.converged is True and isinstance(power.f_scale, float)
    assert bivariate.converged is True and bivariate.f_scale == bivariate.goodness["f_scale"]
    assert joint.converged == {"en-de": True, "en-zh": True}
    assert set(joint.f_scale) == {"en-de", "en-zh"}
    for fit in (power, joint, bivariate):
        back = FitResult.from_json(fit.to_json())
        assert (back.converged, back.f_scale) == (fit.converged, fit.f_scale)
