"""Double Power Law (Chen eq. 5/6/7): preset behaviour, estimation on ground truth, optimal ratios."""

import json

import numpy as np
import pandas as pd
import pytest

from fitting.core.base import FitError, FitResult
from fitting.core.options import NO_UNCERTAINTY
from fitting.data.sampling import temperature_weights
from fitting.laws.mixture.dpl import (
    CHEN_EQ6_PARAMS,
    CHEN_EQ6_PRESET,
    DPLFit,
    dpl_objective,
    fit_dpl,
    fit_from_table,
    optimal_sampling_ratios,
)

P_GRID = np.arange(0.05, 0.951, 0.05)
GROUPS = [(10e6, 1.5), (0.26e6, 3.0), (1e6, 2.5), (4.6e6, 2.0)]  # (data size, bias M)


def _data(noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    p, d, y = [], [], []
    for size, m in GROUPS:
        p.append(P_GRID)
        d.append(np.full(P_GRID.size, size))
        y.append(CHEN_EQ6_PRESET.predict(P_GRID, size, bias=m))
    p, d, y = map(np.concatenate, (p, d, y))
    return p, d, y * (1 + noise * rng.standard_normal(y.size))


def test_preset_shapes():
    law = CHEN_EQ6_PRESET
    p = np.linspace(0.01, 1.0, 200)
    low = law.predict(p, 0.26e6)
    high = law.predict(p, 10e6)
    assert np.all(np.diff(high) < 0)  # high resource: monotone
    i = int(np.argmin(low))
    assert 0 < i < p.size - 1 and low[-1] > low[i] + 0.1  # low resource: U-shaped
    assert law.is_u_shaped(0.26e6) and not law.is_u_shaped(10e6)
    # critical ratio is the stationary point of the curve (checked by finite differences)
    pc = law.critical_ratio(0.26e6)
    h = 1e-6
    assert (law.predict(pc + h, 0.26e6) - law.predict(pc - h, 0.26e6)) / (2 * h) == \
        pytest.approx(0, abs=1e-6)
    assert law.overfit_scale(1e6) == pytest.approx(1.0 + CHEN_EQ6_PARAMS["b"])


def test_recovers_parameters_without_noise():
    fit = fit_dpl(*_data())
    for k, v in CHEN_EQ6_PARAMS.items():
        assert fit.params[k] == pytest.approx(v, rel=1e-4), k
    for size, m in GROUPS:
        assert fit.bias[f"{size:g}"] == pytest.approx(m, abs=1e-5)


def test_three_step_only_is_biased_by_step1_approximation():
    # Chen's step 1 ignores the over-fitting term of the 10M group (G = -0.03 under eq. 6):
    # the unrefined estimate of alpha is off, the joint polish removes it.
    raw = fit_dpl(*_data(), refine=False)
    assert abs(raw.params["alpha"] - 0.20) > 0.01
    assert fit_dpl(*_data()).meta["three_step_params"]["alpha"] == pytest.approx(
        raw.params["alpha"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_percent_noise_tolerances(seed):
    # With 1% noise the individual coefficients are not identifiable (k, alpha trade off against
    # the biases), so the stated tolerances are on what the law is used for: the per-group
    # curves within 2.5%, the low-resource critical ratio within 0.03, optimal ratios within 0.03.
    fit = fit_dpl(*_data(noise=0.01, seed=seed))
    for size, m in GROUPS:
        pred = fit.predict(P_GRID, size, group=f"{size:g}")
        true = CHEN_EQ6_PRESET.predict(P_GRID, size, bias=m)
        assert np.max(np.abs(pred / true - 1)) < 0.025
    assert fit.critical_ratio(0.26e6) == pytest.approx(CHEN_EQ6_PRESET.critical_ratio(0.26e6),
                                                       abs=0.03)
    for sizes in ([4.6e6, 0.26e6], [10e6, 4.6e6, 0.26e6, 0.26e6]):
        np.testing.assert_allclose(optimal_sampling_ratios(sizes, law=fit),
                                   optimal_sampling_ratios(sizes), atol=0.03)


def test_bootstrap_intervals():
    fit = fit_dpl(*_data(noise=0.002, seed=4), bootstrap=30, seed=0)
    assert fit.meta["bootstrap"]["succeeded"] >= 25
    for k in ("beta", "gamma"):
        lo, hi = fit.intervals[k]
        assert lo < hi
        assert lo - 0.1 * abs(CHEN_EQ6_PARAMS[k]) <= CHEN_EQ6_PARAMS[k] <= \
            hi + 0.1 * abs(CHEN_EQ6_PARAMS[k])


def test_gamma_required_with_two_low_sizes():
    p, d, y = _data()
    keep = np.isin(d, [10e6, 0.26e6, 1e6])
    with pytest.raises(FitError, match="gamma="):
        fit_dpl(p[keep], d[keep], y[keep])
    fit = fit_dpl(p[keep], d[keep], y[keep], gamma=-0.33)
    assert fit.params["gamma"] == -0.33
    assert fit.params["beta"] == pytest.approx(1.21, rel=1e-3)


def test_optimal_ratios_two_directions():
    # r_Hi = 1: only Hi's own curve matters, so its optimum is the bottom of its U.
    p = optimal_sampling_ratios([4.6e6, 0.26e6], [0.0, 1.0])
    assert p[1] == pytest.approx(CHEN_EQ6_PRESET.critical_ratio(0.26e6), abs=1e-4)
    # uniform r: KKT — equal marginal losses at an interior optimum
    p = optimal_sampling_ratios({"de": 4.6e6, "hi": 0.26e6})
    h = 1e-6
    grads = [(CHEN_EQ6_PRESET.predict(p[i] + h, s) - CHEN_EQ6_PRESET.predict(p[i] - h, s)) / 2 / h
             for i, s in enumerate([4.6e6, 0.26e6])]
    assert grads[0] == pytest.approx(grads[1], rel=1e-3)


def test_optimal_ratios_beat_temperature_sampling():
    sizes = [10e6, 4.6e6, 0.26e6, 0.26e6]
    p = optimal_sampling_ratios(sizes)
    assert p.sum() == pytest.approx(1.0) and np.all(p > 0)
    best = dpl_objective(p, sizes)
    for T in (1, 2, 5, 10, 100):
        assert best <= dpl_objective(temperature_weights(sizes, T), sizes) + 1e-12
    assert p[2] == pytest.approx(p[3], abs=1e-6)  # equal sizes, equal preference → equal ratio


def test_optimal_ratio_errors():
    with pytest.raises(ValueError, match="sizes"):
        optimal_sampling_ratios([1e6, -1.0])
    with pytest.raises(ValueError, match="preferences"):
        optimal_sampling_ratios([1e6, 2e6], [1.0])


def test_bad_input():
    p, d, y = _data()
    p2 = p.copy()
    p2[4] = 1.5
    with pytest.raises(FitError, match="weight, row 4"):
        fit_dpl(p2, d, y)
    y2 = y.copy()
    y2[7] = np.nan
    with pytest.raises(FitError, match="loss, row 7"):
        fit_dpl(p, d, y2)
    with pytest.raises(FitError, match="mixes data sizes"):
        fit_dpl(p, d, y, group=["g"] * len(p))
    with pytest.raises(FitError, match="high_resource"):
        fit_dpl(p, d, y, high_resource="nope")


def test_fit_from_table_plain_and_tidy():
    p, d, y = _data()
    df = pd.DataFrame({"pair": np.where(d == 10e6, "en-fr", "en-de"), "weight": p,
                       "data_size": d, "loss": y})
    extra = pd.DataFrame({"pair": ["en-de"], "weight": [0.0], "data_size": [1e6], "loss": [9.0]})
    fit = fit_from_table(pd.concat([df, extra], ignore_index=True))
    assert fit.params["beta"] == pytest.approx(1.21, rel=1e-4)
    assert set(fit.bias) == {"en-fr@1e+07", "en-de@260000", "en-de@1e+06", "en-de@4.6e+06"}
    assert any("weight 0" in w for w in fit.warnings)
    tidy = df.rename(columns={"loss": "value"}).assign(
        metric="loss", eval_set="validation", final=True, n=1000, run_id="r", step=1)
    fit2 = fit_from_table(tidy)
    assert fit2.params == pytest.approx(fit.params)
    with pytest.raises(FitError, match="missing column"):
        fit_from_table(df.drop(columns=["data_size"]))
    with pytest.raises(FitError, match="pass n="):
        fit_from_table(pd.concat([tidy, tidy.assign(n=2000)]))


def test_json_round_trip():
    fit = fit_dpl(*_data(noise=0.005))
    back = FitResult.from_json(json.loads(json.dumps(fit.to_json())))
    assert isinstance(back, DPLFit)
    assert back.bias == pytest.approx(fit.bias)
    np.testing.assert_allclose(back.predict(P_GRID, 1e6, group="1e+06"),
                               fit.predict(P_GRID, 1e6, group="1e+06"))


def test_fit_from_table_group_by_experiment():
    # the same pair and size in two experiments with different biases: group_by keeps them apart
    p, d, y = _data()
    df = pd.DataFrame({"pair": np.where(d == 10e6, "en-fr", "en-de"), "weight": p,
                       "data_size": d, "loss": y, "study": "a"})
    other = df[df.data_size == 10e6].assign(loss=lambda t: t.loss + 0.3, study="b")
    both = pd.concat([df, other], ignore_index=True)
    fit = fit_from_table(both, group_by=["study"])
    assert fit.bias["en-fr@1e+07/study=b"] - fit.bias["en-fr@1e+07/study=a"] == \
        pytest.approx(0.3, abs=1e-6)
    assert fit.params["alpha"] == pytest.approx(0.20, rel=1e-4)
    with pytest.raises(FitError, match="missing column"):
        fit_from_table(df, group_by=["nope"])


# -- the report's DPL section: its polish judged by the one convergence rule ----------------------


def _one_capped_size_table() -> pd.DataFrame:
    """En→Fr at 10M examples next to En→De at 0.26M, explicit weights, from eq. 5 with
    G(D_high) = 0 (the setting of fitting.report.sections.dpl.fit_dpl_one_low_size)."""
    truth = DPLFit(law="dpl", params={**CHEN_EQ6_PARAMS, "b": -(10.0 ** CHEN_EQ6_PARAMS["gamma"])})
    rows = []
    for w in (0.1, 0.2, 0.3, 0.5, 0.7, 0.9):
        for pair, p, d, m in (("en-de", w, 2.6e5, 2.0), ("en-fr", 1 - w, 1e7, 1.5)):
            rows.append({"run_id": f"r{w}", "study": "chen", "n": 6.4e7, "pair": pair,
                         "weight": p, "data_size": d, "mixture": "", "seed": 0,
                         "eval_set": "validation", "metric": "loss", "step": 1000,
                         "tokens": 10**6, "final": True,
                         "value": float(truth.predict(p, d, bias=m))})
    return pd.DataFrame(rows)


def test_dpl_section_reports_a_polish_that_did_not_converge(tmp_path, monkeypatch):
    """The (α, β) polish of fit_dpl_one_low_size forced to stop at its evaluation cap
    (max_nfev = 1, scipy status 0) is reported: a warning, ``meta["converged"]`` and
    ``dpl.converged`` false. The old rule (73f0f32) read no status: the same fit said nothing."""
    from scipy import optimize

    import fitting.report.sections.dpl as report_dpl
    from fitting.report.markdown import Document
    from fitting.report.record import Report

    def section():
        rep = Report(out_dir=str(tmp_path), markdown_path=str(tmp_path / "r.md"),
                     html_path=str(tmp_path / "r.html"), json_path=str(tmp_path / "r.json"))
        doc = Document()
        report_dpl.dpl_section(doc, rep, _one_capped_size_table(), str(tmp_path),
                               uncertainty=NO_UNCERTAINTY)
        return rep, doc.markdown()

    rep, md = section()
    assert rep.dpl["converged"] == {"N=6.4e+07": True}
    assert rep.dpl["fits"]["N=6.4e+07"]["meta"]["converged"] is True
    assert not [w for w in rep.warnings if "converg" in w] and "Not converged" not in md

    statuses = []

    def capped(*args, **kwargs):
        res = optimize.least_squares(*args, **{**kwargs, "max_nfev": 1})
        statuses.append(res.status)
        return res

    monkeypatch.setattr(report_dpl, "least_squares", capped)
    rep, md = section()
    assert statuses == [0]  # scipy's evaluation cap: not converged
    assert rep.dpl["converged"] == {"N=6.4e+07": False}
    fit = rep.dpl["fits"]["N=6.4e+07"]
    assert fit["meta"]["converged"] is False
    assert any("stopped before converging" in w for w in fit["warnings"])
    assert any(w.startswith("DPL N=6.4e+07:") and "stopped before converging" in w
               for w in rep.warnings)
    assert "Not converged" in md
    json.dumps(rep.dpl)  # the section's JSON stays JSON
