"""One convergence rule for every optimiser result (fitting.core.engine.converged), and refits
that did not converge counted as failed and left out of the uncertainty (issue 48, defect 7).

The old rule, at commit 082b6f0: no rule; ``least_squares``' status was not read by the Kaplan
L(N, D) fit, the engine's refits or the DPL polish, so a refit stopped at its evaluation cap was
a sample like any other; the Chinchilla bootstrap's IRLS did not report rows stopped at its
iteration cap. Each test below fails at 082b6f0 and passes with the rule.

A refit is forced to its evaluation cap by wrapping the module's ``least_squares`` and passing
``max_nfev=1`` to chosen calls; the wrapper records every call's status and solution, so the
tests can say which refits converged and what the sd of those alone is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import least_squares, minimize, minimize_scalar

import fitting.core.engine as engine
import fitting.laws.budget.chinchilla as chinchilla_module
import fitting.laws.budget.chinchilla_opt as chinchilla_opt
import fitting.laws.budget.kaplan_nd as kaplan_nd
import fitting.laws.mixture.dpl as dpl
from fitting.core.base import FitError
from fitting.core.engine import F_SCALE_GRID, VarproModel, VarproOptions, converged, varpro_fit
from fitting.core.options import NO_UNCERTAINTY, UncertaintyOptions
from fitting.laws.budget.chinchilla import fit_chinchilla
from fitting.laws.budget.chinchilla_joint import fit_joint_chinchilla
from fitting.laws.budget.kaplan_nd import fit_pair_kaplan, predict_kaplan
from fitting.laws.mixture.dpl import CHEN_EQ6_PRESET, fit_dpl
from fitting.laws.size.power import fit_power_law


def _capping(monkeypatch, module, cap_call) -> list[dict]:
    """Wrap ``module.least_squares``: a call for which ``cap_call(i, kwargs)`` is true (i counts
    the calls ``cap_call`` is asked about, those with a robust ``loss``) runs with max_nfev=1.
    Returns the log of those calls: capped, status, x."""
    log: list[dict] = []

    def wrapped(*args, **kw):
        polish = kw.get("loss", "linear") != "linear"
        cap = polish and cap_call(len(log), kw)
        if cap:
            kw = {**kw, "max_nfev": 1}
        sol = least_squares(*args, **kw)
        if polish:
            log.append({"capped": cap, "status": int(sol.status), "x": np.array(sol.x)})
        return sol

    monkeypatch.setattr(module, "least_squares", wrapped)
    return log


# -- the rule on real scipy results --------------------------------------------------------------


def test_the_rule_reads_each_optimisers_own_status():
    """least_squares: status 0 (evaluation cap) is not converged, status > 0 is; minimize's
    status 1 means the opposite (L-BFGS-B's iteration limit), so ``minimize`` and
    ``minimize_scalar`` are read by ``success``. Fails at 082b6f0 (no rule to import)."""
    def resid(x):
        return np.exp(x) - np.array([1.0, 2.0, 3.0])

    capped = least_squares(resid, [5.0], max_nfev=2)
    done = least_squares(resid, [5.0])
    assert capped.status == 0 and not converged(capped)
    assert done.status > 0 and converged(done)
    lim = minimize(lambda x: float(np.sum((x - 1) ** 2)), [3.0, -2.0], method="L-BFGS-B",
                   options={"maxiter": 1})
    assert lim.status == 1 and not converged(lim)  # a "status > 0" rule would accept it
    assert converged(minimize(lambda x: float(np.sum((x - 1) ** 2)), [3.0, -2.0],
                              method="L-BFGS-B"))
    short = minimize_scalar(lambda e: (e - 1) ** 2, bounds=(0, 3), method="bounded",
                            options={"maxiter": 2})
    assert not converged(short)


# -- the Kaplan L(N, D) path (the defect as filed) -----------------------------------------------

SIZES = (9e3, 2e4, 4e4, 6e4, 1.5e5)
BUDGETS = (6.5e5, 8.7e5, 1.1e6, 1.3e6)
WEIGHTS = (0.5, 1.0)


def _kaplan_table(noise: float = 0.003, seed: int = 3) -> pd.DataFrame:
    """One pair on Kaplan's law with an irreducible loss (E = 0.108, α = 1.5, β = 3.5,
    A_p = 2e4/p, B_p = 4e5/p), times (1 + noise·ε)."""
    rng = np.random.default_rng(seed)
    rows = [dict(pair="en-de", weight=w, n=n, tokens=d,
                 value=float(predict_kaplan(0.108, 1.5, 3.5, 2e4 / w, 4e5 / w, n, d))
                 * (1 + noise * rng.standard_normal()))
            for w in WEIGHTS for n in SIZES for d in BUDGETS]
    return pd.DataFrame(rows)


def test_kaplan_refits_at_the_evaluation_cap_are_failed_and_left_out_of_E_sd(monkeypatch):
    """Polish call 0 is the main fit's; refit i's polish is call i: refits 1, 4, 7 are capped.
    They count in ``perturbation_failed`` and E's sd is the sd of the 6 converged refits.
    At 082b6f0 ``perturbation_failed`` is 0 and the capped refits enter E's sd."""
    log = _capping(monkeypatch, kaplan_nd, lambda i, kw: i % 3 == 1)
    fit = fit_joint_chinchilla(_kaplan_table(), form="kaplan",
                               uncertainty=UncertaintyOptions(method="perturbation", n_refits=9),
                               backtest=None)
    refits = log[1:]
    assert len(refits) == 9
    capped = [r for r in refits if r["capped"]]
    assert len(capped) == 3 and all(r["status"] == 0 for r in capped)
    kept = [r for r in refits if not r["capped"]]
    assert all(r["status"] > 0 for r in kept)
    assert fit.meta["perturbation_failed"]["en-de"] == 3
    assert len(fit.samples["E[en-de]"]) == 6
    e_kept = np.array([r["x"][0] for r in kept])
    e_all = np.array([r["x"][0] for r in refits])
    assert fit.stderr["E[en-de]"] == pytest.approx(np.std(e_kept, ddof=1), rel=1e-12)
    # with the capped refits the sd differs (little here: a capped polish stays near its
    # least-squares start), so the sd check above tells the two rules apart too
    assert not np.isclose(np.std(e_all, ddof=1), np.std(e_kept, ddof=1), rtol=1e-9, atol=0)


def test_kaplan_main_fit_that_did_not_converge_is_returned_and_says_so(monkeypatch):
    """The main fit is not a refit: at its cap it is returned, ``status`` saying so; a refit from
    it at the cap raises FitError. At 082b6f0 there is no ``status`` and no FitError."""
    t = _kaplan_table()
    args = (t["n"], t["tokens"], t["weight"], t["value"])
    status: dict = {}
    raw, fs = fit_pair_kaplan(*args, status=status)
    assert status["converged"] is True
    _capping(monkeypatch, kaplan_nd, lambda i, kw: True)
    status = {}
    fit_pair_kaplan(*args, status=status)
    assert status["converged"] is False and "maximum number" in status["message"]
    with pytest.raises(FitError, match="did not converge"):
        fit_pair_kaplan(*args, f_scale=fs, theta0=raw)


# -- the engine and a law built on it ------------------------------------------------------------

X = np.linspace(0, 4, 30)


def _design(theta):
    return np.column_stack([np.exp(-theta[0] * X), np.ones_like(X)])


def test_engine_refit_at_the_cap_raises_and_a_main_fit_reports_it(monkeypatch):
    """A local refit (``theta0``) whose polish stops at the cap raises FitError; a main fit
    returns ``success=False``. At 082b6f0 the refit returned its capped iterate."""
    y = 2.0 * np.exp(-1.3 * X) + 0.5 + 0.01 * np.random.default_rng(0).standard_normal(X.size)
    model, grid = VarproModel(_design, theta_bounds=([0.01], [5])), [np.linspace(0.1, 3, 10)]
    options = VarproOptions(f_scale=0.01)
    assert varpro_fit(model, y, theta_grid=grid, options=options).success
    _capping(monkeypatch, engine, lambda i, k: True)
    assert not varpro_fit(model, y, theta_grid=grid, options=options).success
    with pytest.raises(FitError, match="did not converge"):
        varpro_fit(model, y, theta_grid=grid, theta0=[1.0], options=options)
    assert not varpro_fit(model, y, theta_grid=grid, theta0=[1.0],
                          options=VarproOptions(f_scale=0.01, require_convergence=False)).success


def _power_loss(noise=0.002, seed=1):
    n = np.geomspace(1e6, 1e9, 8)
    rng = np.random.default_rng(seed)
    return n, (40.0 * n ** -0.3 + 1.8) * (1 + noise * rng.standard_normal(n.size))


def test_power_law_counts_capped_refits_as_failed_and_records_its_main_fit(monkeypatch):
    """The main fit polishes once per f_scale of the grid; then one polish per refit. Refits
    0, 3, 6, 9 capped: 4 failed, 8 samples. At 082b6f0 ``perturbation_failed`` is 0."""
    n, y = _power_loss()
    main = len(F_SCALE_GRID)
    log = _capping(monkeypatch, engine, lambda i, kw: i >= main and (i - main) % 3 == 0)
    fit = fit_power_law(n, y, uncertainty=UncertaintyOptions(n_refits=12), backtest=None)
    assert sum(r["capped"] and r["status"] == 0 for r in log) == 4
    assert fit.meta["perturbation_failed"] == 4
    assert len(fit.samples["alpha"]) == 8
    alphas = np.array([r["x"][0] for r in log[main:] if not r["capped"]])
    assert fit.stderr["alpha"] == pytest.approx(np.std(alphas, ddof=1), rel=1e-12)
    assert fit.converged is True


def test_power_law_main_fit_at_the_cap_warns_and_records_it(monkeypatch):
    """Every polish capped: the fit is returned with ``meta["converged"] = False`` and a warning
    (at 082b6f0 neither)."""
    n, y = _power_loss()
    _capping(monkeypatch, engine, lambda i, kw: True)
    fit = fit_power_law(n, y, uncertainty=NO_UNCERTAINTY, backtest=None)
    assert fit.converged is False
    assert any("before converging" in w for w in fit.warnings)


# -- the DPL polish ------------------------------------------------------------------------------


def test_dpl_bootstrap_drops_refits_whose_polish_did_not_converge(monkeypatch):
    """Chen's DPL with the joint polish: polish 0 is the main fit's, polish i the i-th bootstrap
    refit's; the even refits are capped and dropped. At 082b6f0 all 6 succeeded."""
    p_grid = np.arange(0.05, 0.951, 0.05)
    p, d, y = (np.concatenate(v) for v in zip(*[
        (p_grid, np.full(p_grid.size, size), CHEN_EQ6_PRESET.predict(p_grid, size, bias=m))
        for size, m in [(10e6, 1.5), (0.26e6, 3.0), (1e6, 2.5), (4.6e6, 2.0)]], strict=True))
    y = y * (1 + 0.002 * np.random.default_rng(4).standard_normal(y.size))

    log: list[bool] = []

    def wrapped(*args, **kw):
        cap = len(log) > 0 and len(log) % 2 == 0
        log.append(cap)
        return least_squares(*args, **({**kw, "max_nfev": 1} if cap else kw))

    monkeypatch.setattr(dpl, "least_squares", wrapped)
    fit = fit_dpl(p, d, y, bootstrap=6, seed=0)
    assert sum(log) == 3
    assert fit.meta["bootstrap"]["succeeded"] == 3
    assert fit.meta["refine_converged"] is True


# -- the Chinchilla bootstrap (its own IRLS, not scipy) -----------------------------------------


def _chinchilla_data(seed=0):
    rng = np.random.default_rng(seed)
    n = np.repeat(np.geomspace(1e8, 1e10, 8), 5)
    d = np.tile(np.geomspace(1e9, 1e11, 5), 8)
    y = (1.69 + 406.4 * n ** -0.34 + 410.7 * d ** -0.28) * np.exp(0.01 * rng.standard_normal(40))
    return n, d, y


def test_chinchilla_irls_reports_rows_stopped_at_its_iteration_cap(monkeypatch):
    """refit_many fills ``converged``: True when the IRLS stopped by its own test, False at its
    iteration cap (one iteration here). At 082b6f0 refit_many has no ``converged``."""
    n, d, y = _chinchilla_data()
    fit = fit_chinchilla(n, d, y, bootstrap=0)
    free = np.array([[np.log(fit.params["A"]), np.log(fit.params["B"]), np.log(fit.params["E"]),
                      fit.params["alpha"], fit.params["beta"]]])
    x, z, ly = (np.log(v)[None, :] for v in (n, d, y))
    conv = np.zeros(1, dtype=bool)
    chinchilla_opt.refit_many(free + 0.3, x, z, ly, fit.delta, False, converged=conv)
    assert conv.all()
    monkeypatch.setattr(chinchilla_opt, "_IRLS_MAX_ITER", 1)
    chinchilla_opt.refit_many(free + 0.3, x, z, ly, fit.delta, False, converged=conv)
    assert not conv.any()


def test_chinchilla_bootstrap_leaves_out_refits_that_did_not_converge(monkeypatch):
    """Every 4th resample's refit reported as not converged: counted, warned, and left out of
    the sds, intervals and ``bootstrap_params`` (at 082b6f0 no count, all 12 kept)."""
    real = chinchilla_module.refit_many
    kept_rows: list[np.ndarray] = []

    def every_fourth(*args, converged=None, **kw):
        th = real(*args, converged=converged, **kw)
        converged[3::4] = False
        kept_rows.extend(np.delete(th, np.s_[3::4], axis=0))
        return th

    monkeypatch.setattr(chinchilla_module, "refit_many", every_fourth)
    n, d, y = _chinchilla_data(seed=5)
    fit = fit_chinchilla(n, d, y, bootstrap=12, seed=1)
    assert fit.meta["bootstrap"]["not_converged"] == 3
    assert any("did not converge" in w for w in fit.warnings)
    assert len(fit.bootstrap_params) == 9
    alpha = np.array([r[3] for r in kept_rows])
    assert fit.stderr["alpha"] == pytest.approx(np.std(alpha, ddof=1), rel=1e-9)
