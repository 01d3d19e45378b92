"""The report's sections for Chen (DPL), Caillaut (L(N, D)) and Ghorbani (bivariate): each fitted
on tables generated from the law with known parameters and small noise, recovered within a
tolerance; each present only when the table supports it, and skipped with its reason otherwise."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from fitting import plots
from fitting.core.options import NO_UNCERTAINTY
from fitting.data.sampling import temperature_weights
from fitting.laws.budget.chinchilla import ChinchillaFit
from fitting.laws.mixture.dpl import CHEN_EQ6_PARAMS, DPLFit, optimal_sampling_ratios
from fitting.laws.size.bivariate import BivariateLawFit
from fitting.report.markdown import Document
from fitting.report.record import Report
from fitting.report.sections.bivariate import bivariate_section
from fitting.report.sections.chinchilla import chinchilla_section
from fitting.report.sections.dpl import dpl_section, fit_study_dpl
from fitting.report.view import prepare_view
from fitting.report.writer import ReportOptions, write_report
from fitting.test_utils import check_figure, make_curves_table, make_final_table

BIAS = {"en-fr": 1.5, "en-de": 2.0}
WEIGHTS = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)


def _report(tmp_path) -> Report:
    os.makedirs(tmp_path / "figures", exist_ok=True)
    return Report(out_dir=str(tmp_path), markdown_path=str(tmp_path / "r.md"),
                  html_path=str(tmp_path / "r.html"), json_path=str(tmp_path / "r.json"))


@pytest.fixture
def checked_figures(monkeypatch):
    """Every figure saved through fitting.plots.save, with its check_figure problems."""
    found, save = {}, plots.save

    def checking_save(fig, path, **kwargs):
        found[os.path.basename(path)] = check_figure(fig, os.path.basename(path))
        return save(fig, path, **kwargs)

    monkeypatch.setattr(plots, "save", checking_save)
    return found


# -- Chen et al.: the Double Power Law ------------------------------------------------------------


def chen_table(settings, params=CHEN_EQ6_PARAMS, weights=WEIGHTS, temperatures=(), noise=0.001,
               seed=0, n=6.4e7) -> tuple[pd.DataFrame, DPLFit]:
    """Final losses of En→{Fr, De} runs from eq. 5 with ``params``; one (D_fr, D_de) setting per
    entry of ``settings``; temperature baselines tagged "T…" in the mixture column."""
    truth = DPLFit(law="dpl", params=dict(params), data_unit=1e6)
    rng = np.random.default_rng(seed)
    rows = []
    for s, (d_fr, d_de) in enumerate(settings):
        mixes = [("", {"en-de": w, "en-fr": 1 - w}) for w in weights]
        for t in temperatures:
            tw = temperature_weights([d_fr, d_de], t)
            mixes.append((f"T{t:g}", {"en-fr": tw[0], "en-de": tw[1]}))
        for tag, ws in mixes:
            run = f"s{s}_{tag or ws['en-de']}"
            for pair, d in (("en-fr", d_fr), ("en-de", d_de)):
                y = float(truth.predict(ws[pair], d, bias=BIAS[pair]))
                rows.append(dict(run_id=run, study="chen", n=int(n), n_enc=int(n / 2),
                                 n_dec=int(n / 2), pair=pair, weight=ws[pair], data_size=d,
                                 mixture=tag, seed=0, eval_set="validation", metric="loss",
                                 step=1000, tokens=10**6, final=True,
                                 value=y * (1 + noise * rng.standard_normal())))
    return pd.DataFrame(rows), truth


def test_dpl_three_step_estimation_recovers_chen_eq6():
    # Chen §3.2: En→Fr-10M next to En→De at 0.26M, 1M and 4.6M (three settings); eq. 6 truth
    tab, truth = chen_table([(1e7, 2.6e5), (1e7, 1e6), (1e7, 4.6e6)])
    fit, how = fit_study_dpl(tab)
    assert "three steps" in how and "fixed" not in how
    p, t = fit.params, truth.params
    assert abs(p["alpha"] - t["alpha"]) < 0.05 and abs(p["beta"] - t["beta"]) < 0.1
    assert abs(p["gamma"] - t["gamma"]) < 0.03 and abs(p["b"] - t["b"]) < 0.05
    assert abs(p["q"] - t["q"]) < 0.06
    for d in (2.6e5, 1e6):  # the bottom of each U
        assert fit.critical_ratio(d) == pytest.approx(truth.critical_ratio(d), abs=0.015)
    assert optimal_sampling_ratios([1e7, 2.6e5], None, fit) == pytest.approx(
        optimal_sampling_ratios([1e7, 2.6e5], None, truth), abs=0.01)


def test_dpl_with_one_capped_size_recovers_the_u_curve_and_optimum():
    # two directions only (the CPU setting): G(D_high) = 0 in the truth, as the variant assumes
    params = {**CHEN_EQ6_PARAMS, "b": -(10.0 ** CHEN_EQ6_PARAMS["gamma"])}
    tab, truth = chen_table([(1e7, 2.6e5)], params=params)
    fit, how = fit_study_dpl(tab)
    assert "one data size below the largest" in how
    assert abs(fit["alpha"] - params["alpha"]) < 0.05 and abs(fit["beta"] - params["beta"]) < 0.1
    assert fit.critical_ratio(2.6e5) == pytest.approx(truth.critical_ratio(2.6e5), abs=0.015)
    for pair, d in (("en-fr", 1e7), ("en-de", 2.6e5)):  # the curves, biases included
        grid = np.linspace(0.1, 0.9, 9)
        assert fit.predict(grid, d, group=f"{pair}@{d:g}") == pytest.approx(
            truth.predict(grid, d, bias=BIAS[pair]), abs=0.01)
    assert optimal_sampling_ratios([1e7, 2.6e5], None, fit) == pytest.approx(
        optimal_sampling_ratios([1e7, 2.6e5], None, truth), abs=0.01)


def test_dpl_section_tables_the_optimum_next_to_the_trained_baselines(tmp_path, checked_figures):
    params = {**CHEN_EQ6_PARAMS, "b": -(10.0 ** CHEN_EQ6_PARAMS["gamma"])}
    sizes = [1e7, 2.6e5]
    tab, truth = chen_table([tuple(sizes)], params=params, temperatures=(1, 2, 5, 10, 100))
    rep, doc = _report(tmp_path), Document()
    dpl_section(doc, rep, tab, str(tmp_path), uncertainty=NO_UNCERTAINTY)
    assert "DPL (Chen eq. 5–7)" not in rep.skipped
    (setting,) = rep.dpl["settings"]
    assert [b["mixture"] for b in setting["baselines"]] == ["T1", "T2", "T5", "T10", "T100"]
    assert "baselines predicted, not fitted" in rep.dpl["fitted_on"]["N=6.4e+07"]
    for b in setting["baselines"]:  # never fitted, predicted within the noise
        for pair in ("en-fr", "en-de"):
            assert b["predicted"][pair] == pytest.approx(b["measured"][pair], rel=0.01)
    # the truth: eq. 7's optimum beats every temperature by more than the noise here
    opt = optimal_sampling_ratios(sizes, None, truth)
    best = np.mean([truth.predict(opt[i], sizes[i], bias=BIAS[p])
                    for i, p in enumerate(("en-fr", "en-de"))])
    margins = [b["measured_mean"] - best for b in setting["baselines"]]
    assert min(margins) > 0.005
    assert setting["beats_all_baselines"] is True
    assert setting["optimum"]["en-de"] == pytest.approx(opt[1], abs=0.01)
    assert setting["predicted_mean"] == pytest.approx(best, abs=0.01)
    md = doc.markdown()
    assert "DPL optimum (eq. 7)" in md and "T5 (trained)" in md and "beats every" in md
    assert rep.figures["dpl"] and checked_figures["dpl.png"] == []


def test_dpl_fits_the_baselines_too_when_explicit_weights_are_few(tmp_path):
    """Three explicit weights per direction next to their own biases leave the curves loose: the
    temperature baselines join the fit (and the report says so); six explicit weights do not."""
    few, _ = chen_table([(1e7, 2.6e5)], weights=(0.1, 0.5, 0.9), temperatures=(1, 2, 5, 10))
    many, _ = chen_table([(1e7, 2.6e5)], temperatures=(1, 2, 5, 10))
    for table, baselines_fitted in ((few, True), (many, False)):
        rep = _report(tmp_path)
        dpl_section(Document(), rep, table, str(tmp_path), uncertainty=NO_UNCERTAINTY)
        (text,) = rep.dpl["fitted_on"].values()
        assert text.startswith("every run, baselines included") == baselines_fitted, text
        (fit,) = rep.dpl["fits"].values()
        assert fit["n_points"] == 2 * (7 if baselines_fitted else 6)


def test_write_report_recognises_a_chen_study(tmp_path):
    tab, _ = chen_table([(1e7, 2.6e5)], temperatures=(1, 5))
    rep = write_report(tab, str(tmp_path), ReportOptions(uncertainty=NO_UNCERTAINTY))
    assert "## Sampling ratio and data size: Double Power Law (Chen eq. 5–7)" in rep.markdown
    assert os.path.exists(rep.figures["dpl"])
    data = json.load(open(rep.json_path))
    assert data["dpl"]["fits"]["N=6.4e+07"]["law"] == "dpl"
    assert [b["mixture"] for b in data["dpl"]["settings"][0]["baselines"]] == ["T1", "T5"]
    # one model size: the size laws are skipped once per pair, not once per weight
    assert "1 model size(s)" in data["skipped"]["power en-de"]
    assert not [k for k in data["skipped"] if k.startswith("power en-de p=")]


def test_dpl_section_is_skipped_with_its_reason(tmp_path):
    rep = _report(tmp_path)
    # Fernandes' setting: unlimited data (no data_size)
    dpl_section(Document(), rep, make_final_table(sizes=[1e5, 1e6, 1e7]), str(tmp_path))
    assert "data_size" in rep.skipped["DPL (Chen eq. 5–7)"] and not rep.dpl
    # capped pairs, but two weights per pair
    tab, _ = chen_table([(1e7, 2.6e5)], weights=(0.3, 0.7))
    rep = _report(tmp_path)
    dpl_section(Document(), rep, tab, str(tmp_path))
    assert "fewer than 3 distinct weights" in rep.skipped["DPL (Chen eq. 5–7)"]
    # one cap shared by both pairs: no low-resource direction
    tab, _ = chen_table([(1e6, 1e6)])
    rep = _report(tmp_path)
    dpl_section(Document(), rep, tab, str(tmp_path))
    assert "differs between pairs" in rep.skipped["DPL (Chen eq. 5–7)"]


# -- Caillaut et al.: L(N, D) ---------------------------------------------------------------------

TRUE_ND = {"E": 1.2, "A": 60.0, "alpha": 0.34, "B": 300.0, "beta": 0.28}
STEPS = (50, 100, 200, 400, 800, 1600, 3200, 6400)


def curves_table(sizes=np.geomspace(1e5, 1e7, 5), steps=STEPS, tokens_per_step=4096,
                 noise=0.001, seeds=(0,), seed=0, warmup=100) -> pd.DataFrame:
    """Learning curves from L(N, D) with D = step × tokens per step, plus learning-rate rows
    peaking at ``warmup``."""
    truth = ChinchillaFit(law="chinchilla", params=TRUE_ND)
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        for s in seeds:
            run = f"n{n:.0f}_s{s}"
            for st in steps:
                d = st * tokens_per_step
                common = dict(run_id=run, study="c", n=int(n), n_enc=int(n) // 2,
                              n_dec=int(n) - int(n) // 2, data_size=np.nan, seed=s, mixture="",
                              step=st, tokens=d, final=st == max(steps))
                rows.append({**common, "pair": "en-de", "weight": 1.0, "eval_set": "validation",
                             "metric": "loss",
                             "value": float(truth.predict(n, d)) * (1 + noise * rng.standard_normal())})
                rows.append({**common, "pair": "all", "weight": np.nan, "eval_set": "train",
                             "metric": "learning_rate",
                             "value": min(st / warmup, (warmup / st) ** 0.5)})
    return pd.DataFrame(rows)


def test_chinchilla_section_recovers_the_law_and_the_compute_optimum(tmp_path, checked_figures):
    rep, doc = _report(tmp_path), Document()
    chinchilla_section(doc, rep, prepare_view(curves_table()), str(tmp_path),
                       uncertainty=NO_UNCERTAINTY)
    fit = ChinchillaFit.from_json(rep.chinchilla["fits"]["en-de"])
    p = fit.params
    assert p["E"] == pytest.approx(1.2, rel=0.05) and p["A"] == pytest.approx(60, rel=0.15)
    assert p["B"] == pytest.approx(300, rel=0.05)
    assert abs(p["alpha"] - 0.34) < 0.015 and abs(p["beta"] - 0.28) < 0.01
    # the warm-up (steps 50 and 100, up to the learning-rate peak) is left out: 5 sizes x 2
    assert "10 warm-up evaluations left out (up to the learning-rate peak)" in \
        rep.chinchilla["points_note"]
    assert fit.n_points == 5 * (len(STEPS) - 2)
    truth = ChinchillaFit(law="chinchilla", params=TRUE_ND)
    budgets = rep.chinchilla["budgets"]["en-de"]
    assert len(budgets) == 4 and budgets[-1]["C"] == pytest.approx(10 * 6 * 1e7 * 6400 * 4096,
                                                                   rel=1e-6)
    for b in budgets:
        n_true, d_true = truth.compute_optimal(b["C"])
        assert b["N"] == pytest.approx(float(n_true), rel=0.1)  # N* is extrapolated here
        assert b["N"] * b["D"] * 6 == pytest.approx(b["C"], rel=1e-9)
    md = doc.markdown()
    assert "L(N, D) (Caillaut eq. 2)" in md and "Compute-optimal" in md
    assert checked_figures["chinchilla.png"] == []


def test_chinchilla_section_is_skipped_with_its_reason(tmp_path):
    key = "L(N, D) (Caillaut eq. 2)"
    # final values only
    rep = _report(tmp_path)
    chinchilla_section(Document(), rep, prepare_view(make_final_table()), str(tmp_path))
    assert "fewer than 3 distinct token counts" in rep.skipped[key]
    # curves whose tokens column does not grow with the step
    rep = _report(tmp_path)
    chinchilla_section(Document(), rep, prepare_view(make_curves_table(make_final_table())),
                       str(tmp_path))
    assert "fewer than 3 distinct token counts" in rep.skipped[key]
    # two model sizes
    rep = _report(tmp_path)
    chinchilla_section(Document(), rep, prepare_view(curves_table(sizes=[1e5, 1e6])),
                       str(tmp_path))
    assert "fewer than 3 model sizes" in rep.skipped[key] and not rep.chinchilla


def test_write_report_recognises_a_caillaut_study_with_seeds(tmp_path):
    tab = curves_table(sizes=np.geomspace(1e5, 1e7, 4), seeds=(0, 1, 2), noise=0.002)
    rep = write_report(tab, str(tmp_path), ReportOptions(uncertainty=NO_UNCERTAINTY))
    assert rep.seeds["n_repeated"] == 4 and rep.seeds["seeds_min"] == 3
    # the fit sees one point per (size, step): the seed means
    assert rep.chinchilla["fits"]["en-de"]["n_points"] == 4 * (len(STEPS) - 2)
    data = json.load(open(rep.json_path))
    assert data["chinchilla"]["fits"]["en-de"]["law"] == "chinchilla"
    assert data["seeds"]["n_repeated"] == 4 and data["dpl"] is None
    assert "DPL (Chen eq. 5–7)" in data["skipped"]
    assert "## Seeds (Ghorbani App. C)" in rep.markdown
    assert "## Model size and training tokens" in rep.markdown


# -- Ghorbani et al.: the bivariate law ------------------------------------------------------------

TRUE_BIV = {"alpha": 0.8, "p_e": 0.25, "p_d": 0.40, "l_inf": 1.5}


def ghorbani_table(noise=0.001, seed=0) -> pd.DataFrame:
    """Encoder-scaling runs (decoder fixed) and decoder-scaling runs (encoder fixed), Fig. 2."""
    truth = BivariateLawFit(law="bivariate", params=TRUE_BIV, n_e_bar=3e7, n_d_bar=3e7)
    rng = np.random.default_rng(seed)
    base, grid = 3e7, np.geomspace(1e7, 2e8, 5)
    sizes = list(dict.fromkeys([(ne, base) for ne in grid] + [(base, nd) for nd in grid]))
    rows = []
    for i, (ne, nd) in enumerate(sizes):
        y = float(truth.predict(ne, nd)) * (1 + noise * rng.standard_normal())
        rows.append(dict(run_id=f"r{i}", n=int(ne + nd), n_enc=int(ne), n_dec=int(nd),
                         pair="en-de", weight=1.0, eval_set="validation", metric="loss",
                         step=1000, tokens=1000, value=y, final=True))
    return pd.DataFrame(rows)


def test_bivariate_section_recovers_the_exponents_and_draws_fig2(tmp_path, checked_figures):
    rep, doc = _report(tmp_path), Document()
    bivariate_section(doc, rep, ghorbani_table(), str(tmp_path), n_refits=10)
    b = BivariateLawFit.from_json(rep.bivariate["en-de"]["fit"])
    assert abs(b["p_e"] - 0.25) < 0.02 and abs(b["p_d"] - 0.40) < 0.02
    assert b["l_inf"] == pytest.approx(1.5, abs=0.02)
    assert rep.bivariate["en-de"]["optimal_decoder_fraction"] == pytest.approx(0.40 / 0.65,
                                                                               abs=0.02)
    md = doc.markdown()
    assert "en-de: L_opt(B) = " in md and "N_d* = " in md
    assert {"bivariate_slices.png", "allocation_penalty.png"} <= set(checked_figures)
    assert all(not v for v in checked_figures.values()), checked_figures
    # proportional encoder and decoder: skipped, saying why
    rep = _report(tmp_path)
    bivariate_section(Document(), rep, make_final_table(), str(tmp_path))
    assert "proportionally" in rep.skipped["bivariate law (Ghorbani eq. 2)"]
