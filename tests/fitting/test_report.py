import json
import os

import numpy as np
import pandas as pd
import pytest

from fitting import plots
from fitting.core.options import NO_UNCERTAINTY, UncertaintyOptions
from fitting.report.writer import ReportOptions, write_report
from fitting.test_utils import TRUTH, f_hat, make_curves_table, make_final_table, write_run_dirs


@pytest.fixture(scope="module")
def full_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep")
    tab = make_curves_table(make_final_table(noise=0.01, seed=2))
    return write_report(tab, str(out), ReportOptions(uncertainty=UncertaintyOptions(n_refits=15),
                                                     ground_truth={"en-de": 1.0, "en-zh": 1.5}))


def test_report_files_and_fits(full_report):
    rep = full_report
    for p in (rep.markdown_path, rep.html_path, rep.json_path, *rep.figures.values()):
        assert os.path.getsize(p) > 0, p
    assert {"power_fits", "joint", "frontier", "learning_curves"} <= set(rep.figures)
    assert len(rep.power_fits["en-de"]) == 8  # weights > 0
    assert rep.joint is not None and rep.effective is not None
    # fitted L∞ next to the truth
    md = rep.markdown
    assert "true L∞" in md and "| en-de |" in md
    assert abs(rep.joint.params["l_inf[en-de]"] - 1.0) < 0.05
    data = json.load(open(rep.json_path))
    assert data["joint"]["law"] == "joint" and data["power"]["en-de"]["0.5"]["law"] == "power"
    assert data["recommendation"] and abs(sum(data["recommendation"][0]["weights"].values()) - 1) < 1e-6
    assert "<table>" in open(rep.html_path).read()
    # f(p) of eq. 10 with its perturbation sd, next to the generating f̂ (eq. 12)
    for pair in ("en-de", "en-zh"):  # keyed by the pair's own weight
        entry = data["fraction"][pair]["0.3"]
        assert entry["f"] == pytest.approx(float(f_hat(0.3, *TRUTH[pair][3])), abs=0.05)
        assert 0 < entry["sd"] < 0.1


def test_report_states_compute_limited_regime(full_report):
    # the synthetic curves still fall as t^-0.5 at their end
    assert full_report.regime["verdict"] == "compute-limited"
    assert "not converged" in full_report.markdown


def test_report_near_convergence_and_far_from_linf(tmp_path):
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.3, 0.5, 1.0), noise=0.0)
    flat = make_curves_table(fin, drop=1e-4)
    rep = write_report(flat, str(tmp_path), ReportOptions(uncertainty=UncertaintyOptions(n_refits=10),
                                                          ground_truth={"en-de": 0.2, "en-zh": 0.3}))
    assert rep.regime["verdict"] == "near convergence"
    assert rep.regime["far_from_l_inf"]  # best losses are ≫ the stated true L∞


def test_regime_counts_only_the_pairs_a_run_trains(tmp_path):
    # every trained pair's curve still drops; the zero-weight pairs' curves (p = 0 and p = 1) are
    # flat, as an untrained pair's loss is: they must not count as converged curves
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.0, 0.5, 1.0), noise=0.0)
    tab = make_curves_table(fin)
    untrained = tab["weight"] <= 0
    tab.loc[untrained, "value"] = 6.0
    rep = write_report(tab, str(tmp_path),
                       ReportOptions(uncertainty=UncertaintyOptions(n_refits=5)))
    assert rep.regime["n_curves"] == 16  # 4 sizes x (1 + 2 + 1 trained pairs); 8 untrained left out
    assert rep.regime["n_still_dropping"] == 16
    assert not any(key.startswith("s0_p0.00/en-de") for key in rep.regime["curves"])


def test_report_few_points_degrades_gracefully(tmp_path):
    # 4 sizes × 3 weights: everything fits, no p = 0
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.3, 0.5, 1.0), noise=0.01)
    rep = write_report(fin, str(tmp_path / "a"),
                       ReportOptions(uncertainty=UncertaintyOptions(n_refits=10)))
    assert rep.joint is not None and os.path.exists(rep.markdown_path)
    # 2 sizes × 1 weight: no law can be fitted; the reasons are stated, nothing crashes
    tiny = make_final_table(sizes=[1e5, 1e6], weights=(0.5,))
    rep = write_report(tiny, str(tmp_path / "b"),
                       ReportOptions(uncertainty=UncertaintyOptions(n_refits=10)))
    assert rep.joint is None and rep.effective is None
    assert "joint law (eq. 7)" in rep.skipped and "3 sizes" in rep.skipped["joint law (eq. 7)"]
    assert "Skipped" in rep.markdown and os.path.exists(rep.html_path)


def test_report_from_run_directories(tmp_path):
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.5, 1.0), noise=0.0)
    write_run_dirs(fin, str(tmp_path / "runs"))
    rep = write_report(str(tmp_path / "runs"), str(tmp_path / "out"),
                       ReportOptions(uncertainty=UncertaintyOptions(n_refits=5)))
    assert rep.power_fits["en-de"][1.0].params["l_inf"] == pytest.approx(1.0, rel=1e-3)
    assert np.isfinite(rep.joint.params["alpha[en-zh]"])


def test_report_quality_frontier_and_bivariate(tmp_path, monkeypatch):
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.1, 0.3, 0.5, 0.7, 1.0),
                           noise=0.0)
    tab = make_curves_table(fin, steps=(250, 500, 750, 1000))
    chrf = tab[tab.metric == "loss"].copy()
    chrf["metric"] = "chrf"
    chrf["value"] = 70.0 - 12.0 * chrf["value"]
    # decoder fraction varies with size: the bivariate law becomes identifiable
    frac = {1e5: 0.3, 3e5: 0.5, 1e6: 0.7, 3e6: 0.4}
    tab = pd.concat([tab, chrf], ignore_index=True)
    tab["n_dec"] = (tab["n"] * tab["n"].map(frac)).astype(int)
    tab["n_enc"] = tab["n"] - tab["n_dec"]
    drawn = {}
    real_plot = plots.plot_frontier

    def recording_plot(curves, pairs, **kw):
        drawn[kw.get("metric", "loss")] = kw.get("observed")
        return real_plot(curves, pairs, **kw)

    monkeypatch.setattr(plots, "plot_frontier", recording_plot)
    rep = write_report(tab, str(tmp_path),
                       ReportOptions(uncertainty=UncertaintyOptions(n_refits=5)))
    q = rep.quality[("chrf", "en-de")]
    assert q.form == "linear" and q.params["b"] == pytest.approx(-12.0, rel=1e-6)
    assert "frontier_chrf" in rep.figures and os.path.exists(rep.figures["frontier_chrf"])
    # the ChrF frontier shows the runs' measured final ChrF (runs trained on both pairs)
    both = fin[(fin.weight > 0) & (fin.weight < 1)]
    for n, (de, zh) in drawn["chrf"].items():
        want = both[both.n == n].pivot_table(index="run_id", columns="pair", values="value")
        assert sorted(de) == pytest.approx(sorted(70.0 - 12.0 * want["en-de"]))
        assert sorted(zh) == pytest.approx(sorted(70.0 - 12.0 * want["en-zh"]))
    assert drawn["chrf"]
    assert "allocation_penalty" in rep.figures
    # proportional enc/dec (the synthetic default) → bivariate skipped with its reason
    rep2 = write_report(make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.5, 1.0)),
                        str(tmp_path / "b"),
                            ReportOptions(uncertainty=UncertaintyOptions(n_refits=5)))
    assert "proportionally" in rep2.skipped["bivariate law (Ghorbani eq. 2)"]


def test_report_convergence_correction(tmp_path):
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.05, 0.5, 1.0), noise=0.0)
    tab = make_curves_table(fin, steps=(100, 200, 300, 400, 600, 800, 1000))
    rep = write_report(tab, str(tmp_path), ReportOptions(uncertainty=UncertaintyOptions(n_refits=5),
                                                         convergence_correction=1e5))
    assert "Convergence correction" in rep.markdown
    # weight-0.05 runs (en-de p=0.05 and en-zh p=0.05) were extrapolated below their last value
    fitted = rep.power_fits["en-de"][0.05]
    # curves are final + 0.5·((t/T)^−0.5 − 1): at t = 100·T every loss is 0.45 lower, so is L∞
    assert fitted.params["l_inf"] == pytest.approx(1.0 - 0.45, abs=0.01)
    assert rep.power_fits["en-de"][0.5].params["l_inf"] == pytest.approx(1.0, abs=0.01)


def test_report_quality_leaves_out_zero_shot_and_counts_zero_bleu(tmp_path):
    # BLEU = 40·L^−0.7 on trained rows; zero-shot rows (p = 0: loss ≈ 6, BLEU 0) are off the law
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.0, 0.3, 0.5, 1.0), noise=0.0)
    bleu = fin.copy()
    bleu["metric"] = "bleu"
    bleu["value"] = np.where(bleu["weight"] > 0, 40.0 * bleu["value"] ** -0.7, 0.0)
    # one trained point whose decode failed (BLEU 0): left out of the power form, and counted
    failed = bleu.index[(bleu["weight"] == 0.5) & (bleu["pair"] == "en-de")][0]
    bleu.loc[failed, "value"] = 0.0
    rep = write_report(pd.concat([fin, bleu], ignore_index=True), str(tmp_path),
                       ReportOptions(uncertainty=UncertaintyOptions(n_refits=5)))
    for pair in ("en-de", "en-zh"):
        q = rep.quality[("bleu", pair)]
        assert q.params["c"] == pytest.approx(40.0, rel=1e-3)
        assert q.params["p"] == pytest.approx(0.7, rel=1e-3)
    assert rep.quality[("bleu", "en-de")].n_points == rep.quality[("bleu", "en-zh")].n_points - 1
    assert any("bleu en-de: 1 of" in w for w in rep.warnings), rep.warnings
    assert not any(k.startswith("quality bleu") for k in rep.skipped), rep.skipped


def test_a_pair_only_ever_zero_shot_is_skipped_saying_so(tmp_path):
    # en-zh is zero-shot in every run (p = 1 for en-de): its BLEU rows are all off the law
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(1.0,), noise=0.0)
    bleu = fin.copy()
    bleu["metric"] = "bleu"
    bleu["value"] = np.where(bleu["weight"] > 0, 40.0 * bleu["value"] ** -0.7, 0.5)
    rep = write_report(pd.concat([fin, bleu], ignore_index=True), str(tmp_path),
                       ReportOptions(uncertainty=UncertaintyOptions(n_refits=5)))
    assert ("bleu", "en-de") in rep.quality
    assert "zero-shot" in rep.skipped["quality bleu en-zh"], rep.skipped


def test_report_warns_where_f_hat_is_not_identified(tmp_path):
    # two weights and strong interference at p = 0.5 (f(0.5) = 0.1): eq. 12 cannot be fitted and
    # the linear eq. 13 would need f̂(0) < 0; the frontier, recommendation and eq. 11 rest on an
    # f̂ held to its constraints, and the report says so where they are shown
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6, 1e7], weights=(0.0, 0.5, 1.0), noise=0.0)
    for pair in TRUTH:
        a, b1, li, _ = TRUTH[pair]
        m = (fin.pair == pair) & (fin.weight > 0)
        f = np.where(fin.loc[m, "weight"] < 1, 0.1, 1.0)
        fin.loc[m, "value"] = b1 * (f * fin.loc[m, "n"]) ** -a + li
    rep = write_report(fin, str(tmp_path),
                       ReportOptions(uncertainty=UncertaintyOptions(n_refits=5)))
    assert rep.effective is not None and rep.effective.form == "eq13"
    assert set(rep.effective.not_identified()) == {"en-de", "en-zh"}
    assert "**Warning: f̂ (eq. 13) is not identified for en-de, en-zh.**" in rep.markdown
    assert any("not identified" in w for w in rep.warnings)
    data = json.load(open(rep.json_path))
    assert data["recommendation"] and all(not r["f_hat_identified"] for r in data["recommendation"])
    for r in data["recommendation"]:  # the weights' sentence, a recommendation or not, says so
        lead = "Recommended weights at" if r["weights_matter"] else "At"
        assert (f"(f̂ not identified: not determined by the data) {lead} N = {r['n']:.3g}"
                in rep.markdown)
    # the frontier is drawn from a fraction: every predicted loss finite and above L∞
    for values in rep.frontier.values.values():
        assert np.all(np.isfinite(values[1:-1]))
    grid = np.linspace(0, 1, 101)
    for pair in TRUTH:
        f = rep.effective.f_hat(grid, pair)
        assert np.all((f >= 0) & (f <= 1))


@pytest.mark.parametrize("weights", [(0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0), (0.0, 0.5, 1.0)])
def test_every_figure_of_a_multi_weight_report_passes_the_figure_checks(tmp_path, monkeypatch,
                                                                         weights):
    # the figures the ci preset (one weight) does not draw: coefficients, f(p), f̂, frontier;
    # with three weights eq. 12 cannot be fitted and eq. 13 draws them
    from fitting import plots
    from fitting.test_utils import check_figure

    checked, save = {}, plots.save

    def checking_save(fig, path, **kwargs):
        checked[os.path.basename(path)] = check_figure(fig, os.path.basename(path))
        return save(fig, path, **kwargs)

    monkeypatch.setattr(plots, "save", checking_save)
    tab = make_curves_table(make_final_table(sizes=np.geomspace(2e5, 2e7, 6), weights=weights,
                                             noise=0.01, seed=3))
    rep = write_report(tab, str(tmp_path), ReportOptions(uncertainty=UncertaintyOptions(n_refits=5),
                                                         ground_truth={"en-de": 1.0, "en-zh": 1.5}))
    assert {"frontier.png", "fraction_fit.png", "learning_curves.png"} <= set(checked)
    assert not [k for k in rep.skipped if k.startswith("figures")], rep.skipped
    problems = [p for found in checked.values() for p in found]
    assert not problems, "\n".join(problems)


def test_report_on_a_full_disk_leaves_the_previous_report_whole(small_disk):
    """Old behaviour: report.md, report.html and fits.json were rewritten in place, so a full
    disk left them truncated. Now: one line naming the file, the previous three files as they
    were, no temporary left, and the same call succeeds once space is freed."""
    from fitting.data.io import NoSpaceError

    tab = make_final_table(sizes=np.geomspace(2e5, 2e7, 4), weights=(0.5, 1.0), seed=2)
    out = small_disk.path / "report"
    first = write_report(tab, str(out), ReportOptions(uncertainty=NO_UNCERTAINTY, title="first"))
    paths = (first.markdown_path, first.html_path, first.json_path)
    before = {p: open(p, "rb").read() for p in paths}
    small_disk.fill()
    with pytest.raises(NoSpaceError) as err:
        write_report(tab, str(out), ReportOptions(uncertainty=NO_UNCERTAINTY,
                                                  title="second " + "x" * 20000))
    text = str(err.value)
    assert "\n" not in text and text.split(": ")[0] in paths
    assert "no space left on device" in text
    assert {p: open(p, "rb").read() for p in paths} == before
    assert not [n for n in os.listdir(out) if ".tmp-" in n]
    small_disk.free()
    second = write_report(tab, str(out), ReportOptions(uncertainty=NO_UNCERTAINTY, title="second"))
    assert "second" in open(second.markdown_path).read()
