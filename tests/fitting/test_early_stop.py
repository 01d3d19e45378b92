"""Early stop (fitting.laws.curves.early_stop, fitting.report.sections.early_stop): a stopped run's
cooled-down end predicted from its curve up to the stop, its calibrated interval, and the
report section's verdict — on runs whose losses come from an exact LR-annealing law (Tissue et
al. 2024 eq. 1 in the report's form and λ), rsqrt after a 100-step warm-up with a linear
cool-down over the last 20 % of 1,000 steps, branches at 450, 600 and 750 cooling down over
10 % of their length, stopped at 60 % (step 600)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fitting.core.seed_noise import FEW_SEEDS, SeedNoise
from fitting.intervals.early_stop import calibrated_intervals
from fitting.intervals.predictive import coverage, coverage_of_marks
from fitting.laws.curves.annealing import AnnealingLawFit
from fitting.laws.curves.early_stop import (
    PLANNED_LR_METRIC,
    StoppedEnd,
    predict_stopped_end,
    stop_step,
    with_planned_rates,
)
from fitting.laws.curves.runs import Curve, pair_training_curves
from fitting.report.markdown import Document
from fitting.report.record import Report
from fitting.report.sections.early_stop import (
    REQUIRED_SHARE,
    early_stop_payload,
    early_stop_section,
    table_stop_fraction,
    verdict,
)
from fitting.report.sections.extrapolation import CURVE_FORM, CURVE_LAMBDA, FAILS, HOLDS, NO_NOISE
from fitting.report.view import prepare_view
from fitting.test_utils import (
    SCHEDULE_COOLDOWN,
    SCHEDULE_STEPS,
    family_schedules,
    logged_steps,
    schedule_rate,
)

T, COOL, STOP = SCHEDULE_STEPS, SCHEDULE_COOLDOWN, 600
D = 0.001  # the validation loss's seed offset at the largest size: σ_seed = 0.1 %


def law(l0: float) -> AnnealingLawFit:
    return AnnealingLawFit(law="lr_annealing", lam=CURVE_LAMBDA, form=CURVE_FORM,
                           params={"L0": l0, "A": 1.5, "alpha": 0.7, "C": 1.0})


def family(run: str, l0: float, scatter: float = 0.0, seed: int = 0) -> dict[str, Curve]:
    """A parent (losses every 10 steps to T) and its three branches, each training-loss value
    × (1 + scatter·ε)."""
    rng = np.random.default_rng(seed)
    out = {}
    for r in family_schedules(run):
        loss = (law(l0).predict(r.steps, r.lr_steps, r.lr)
                * (1 + scatter * rng.standard_normal(r.steps.size)))
        out[r.run] = Curve(r.run, r.lr_steps, r.lr, r.steps, loss, 1e5, parent=r.parent,
                           branch_step=r.branch_step)
    return out


def truth(l0: float) -> float:
    lr = logged_steps(0, T)
    return float(law(l0).predict([T], lr, schedule_rate(lr, T, COOL))[0])


def test_a_stopped_run_is_predicted_at_its_end_from_its_prefix_and_early_branches():
    curves = family("r", 0.3)
    stopped = dict(curves, r=Curve("r", curves["r"].lr_steps, curves["r"].lr,
                                   curves["r"].steps[curves["r"].steps <= STOP],
                                   curves["r"].loss[curves["r"].steps <= STOP], 1e5))
    del stopped["r_cd750"]  # not trained: it leaves after the stop
    e = predict_stopped_end(stopped, "r", stop_step(T, 0.6), from_step=0.4 * T,
                            lam=CURVE_LAMBDA, form=CURVE_FORM)
    assert (e.stop, e.end, e.branches) == (600, 1000, ["r_cd450", "r_cd600"])
    assert e.predicted == pytest.approx(truth(0.3), rel=2e-3)
    # the full curve, cut at the stop, gives the same prediction: the 750 branch is not fitted
    full = predict_stopped_end(curves, "r", 600, from_step=400.0, lam=CURVE_LAMBDA,
                               form=CURVE_FORM)
    assert full.branches == e.branches and full.predicted == pytest.approx(e.predicted)
    with pytest.raises(Exception, match="not after the stop"):
        predict_stopped_end(curves, "r", 1000, lam=CURVE_LAMBDA, form=CURVE_FORM)


def test_the_interval_covers_at_about_its_nominal_rate_on_simulated_noise():
    """40 runs, training-loss rows with 1 % scatter and trained ends with 1 % noise: each
    check's interval, calibrated on the other runs' errors, holds its end at ≈ 80 / 95 %."""
    rng = np.random.default_rng(7)
    ends = []
    for i in range(40):
        l0 = 0.2 + 0.3 * rng.random()
        e = predict_stopped_end(family(f"r{i}", l0, scatter=0.01, seed=i), f"r{i}", STOP,
                                from_step=400.0, lam=CURVE_LAMBDA, form=CURVE_FORM)
        e.measured = truth(l0) * (1 + 0.01 * rng.standard_normal())
        ends.append(e)
    assert calibrated_intervals(ends, {e.run: e.run for e in ends}) == ""
    cov = coverage([(e.interval, e.measured) for e in ends])
    assert 0.65 <= cov["0.80"]["fraction"] <= 0.95
    assert cov["0.95"]["fraction"] >= 0.85
    # the calibration is the others' error: near the 1 % noise of an end, not the fit residuals
    assert 0.007 < ends[0].interval.sd_total < 0.02


def test_calibration_leaves_out_the_runs_own_experiment_and_needs_two_errors():
    ends = []
    for run, meas in (("a_s0", 1.10), ("a_s1", 1.10), ("b", 1.0), ("c", 1.0)):
        e = predict_stopped_end(family(run, 0.3), run, STOP, lam=CURVE_LAMBDA, form=CURVE_FORM,
                                from_step=400.0)
        e.predicted, e.measured = 1.0, meas
        ends.append(e)
    experiment = {"a_s0": "a", "a_s1": "a", "b": "b", "c": "c"}
    assert calibrated_intervals(ends, experiment) == ""
    assert ends[0].interval.sd_total == pytest.approx(0.0)  # b and c only: both exact
    assert ends[2].interval.sd_total == pytest.approx(np.sqrt(2 / 3) * np.log(1.1))
    few = calibrated_intervals(ends[:2], experiment)
    assert "fewer than 2 check errors" in few and ends[0].interval is not None


def test_verdict_needs_the_share_within_three_sigma_and_a_judging_sigma():
    judged = SeedNoise(0.01, 3, 2)
    assert verdict([True] * 8 + [False] * 2, judged) == HOLDS
    assert verdict([True] * 7 + [False] * 3, judged) == FAILS
    assert REQUIRED_SHARE == 0.8
    assert verdict([True] * 10, SeedNoise(0.01, 2, 1)).startswith(FEW_SEEDS)
    assert verdict([True] * 10, None) == NO_NOISE
    assert verdict([], judged).startswith("not computed")


def _table(stopped: tuple[str, ...] = (), off: float = 0.0) -> pd.DataFrame:
    """A tidy table: sizes 1e5, 3e5, 1e6 training en-de (en-zh evaluated at weight 0), the
    largest with 3 seeds (validation × 1 + D, 1 − D, 1); every run's end × (1 + off); runs in
    ``stopped`` cut at the stop with planned rates and no branch after it."""
    rows = []
    for j, n in enumerate((1e5, 3e5, 1e6)):
        for seed in range(3 if n == 1e6 else 1):
            run = f"s{j}_s{seed}"
            shift = 1 + D * (1, -1, 0)[seed] if n == 1e6 else 1.0
            for name, c in family(run, 0.1 + 30.0 * n ** -0.4).items():
                if run in stopped and (c.branch_step > STOP or name == run):
                    if name != run:
                        continue
                base = {"run_id": name, "parent_run": c.parent, "branch_step": c.branch_step,
                        "n": n, "seed": seed, "study": "t", "family": "mini", "size": f"{n:g}"}
                cut = run in stopped and name == run
                first = 0 if not c.parent else c.branch_step
                for s, v in zip(c.lr_steps, c.lr, strict=True):
                    if s > first:
                        metric = PLANNED_LR_METRIC if cut and s > STOP else "learning_rate"
                        rows.append({**base, "pair": "all", "eval_set": "train",
                                     "metric": metric, "step": s, "value": v})
                keep = c.steps <= (STOP if cut else np.inf)
                for s, v in zip(c.steps[keep], c.loss[keep], strict=True):
                    rows += [{**base, "pair": p, "eval_set": "train", "metric": "train_loss",
                              "step": s, "value": v, "weight": 1.0 if p == "en-de" else np.nan}
                             for p in ("all", "en-de")]
                end = c.steps.max()
                evals = [s for s in (*np.arange(first + 100, end, 100), end)
                         if s > first and (not cut or s <= STOP)] + ([STOP] if cut else [])
                for s in sorted(set(evals)):
                    v = float(c.loss[np.searchsorted(c.steps, s)]) * shift
                    v *= 1 + off if (s == T and not c.parent) else 1.0
                    rows.append({**base, "pair": "en-de", "eval_set": "validation",
                                 "metric": "loss", "step": s, "value": v, "weight": 1.0})
                    rows.append({**base, "pair": "en-zh", "eval_set": "validation",
                                 "metric": "loss", "step": s, "value": 6.0 * shift,
                                 "weight": 0.0})
    df = pd.DataFrame(rows)
    df["tokens"] = 512 * df["step"]
    last = df.groupby(["run_id", "eval_set", "metric"])["step"].transform("max")
    df["final"] = (df["step"] == last) & ~df["run_id"].isin(stopped)
    return df


def test_section_holds_on_exact_curves_and_fails_when_the_ends_are_off():
    good = early_stop_payload(prepare_view(_table()), 0.6)
    d = good["pairs"]["en-de"]
    assert d["n_predicted"] == d["n_checked"] == 5 and not d["failed"]
    assert d["sigma"] == pytest.approx(D, rel=0.05) and d["sigma_dof"] == 2
    assert d["n_within"] == 5 and d["verdict"] == HOLDS
    assert all(e["marked"] == "predicted" for e in d["ends"])
    # every trained end 1 % above its curve (10σ_seed): the predictions no longer hold
    bad = early_stop_payload(prepare_view(_table(off=0.01)), 0.6)["pairs"]["en-de"]
    assert bad["n_within"] == 0 and bad["verdict"] == FAILS


def test_a_stopped_study_predicts_its_stopped_runs_and_checks_the_others(tmp_path):
    table = _table(stopped=("s0_s0", "s1_s0"))
    view = prepare_view(table)
    assert table_stop_fraction(view.table_fit) == pytest.approx(0.6)
    curves = with_planned_rates(pair_training_curves(view.table_fit, "en-de"), view.table_fit)
    assert curves["s0_s0"].lr_steps.max() == T and curves["s0_s0"].steps.max() == STOP
    doc = Document()
    rep = Report(out_dir=str(tmp_path), markdown_path="r.md", html_path="r.html",
                 json_path="f.json")
    out = early_stop_section(doc, rep, view, None)
    d = out["pairs"]["en-de"]
    by_run = {e["run"]: e for e in d["ends"]}
    assert not by_run["s0_s0"]["check"] and by_run["s0_s0"]["measured"] is None
    assert by_run["s0_s0"]["interval"] is not None  # calibrated on the 3 checks
    assert by_run["s0_s0"]["predicted"] == pytest.approx(truth(0.1 + 30.0 * 1e5 ** -0.4),
                                                         rel=0.01)
    assert d["n_checked"] == 3 and out["runs_stopped"] == 2
    assert out["run_steps_not_trained"] == 2 * (T - STOP)
    text = doc.markdown()
    assert "Early stop" in text and "not trained" in text and "(predicted)" in text


def _interval_marks(k: int, draws: int, rng: np.random.Generator, **kw) -> np.ndarray:
    """(draws, 2) inside-80/95 marks of one check per draw, calibrated on ``k`` other checks'
    errors, every log error ~ N(0, 0.02) (the law exact, the end noisy)."""
    errs = rng.normal(0, 0.02, (draws, k + 1))
    out = np.zeros((draws, 2), bool)
    for d in range(draws):
        ends = [StoppedEnd(run=f"r{i}", pair="p", n=1.0, stop=600, end=1000,
                           predicted=float(np.exp(errs[d, i])), offset=0.0, offset_points=0,
                           measured=1.0) for i in range(k + 1)]
        assert calibrated_intervals(ends, {e.run: e.run for e in ends}) == ""
        iv = ends[0].interval
        out[d] = [iv.contains(1.0, 0.80), iv.contains(1.0, 0.95)]
    return out


@pytest.mark.parametrize("k", [2, 3, 5])
def test_an_interval_on_k_check_errors_covers_at_its_nominal_rate(k):
    """Known truth: every check's log error ~ N(0, τ); a check calibrated on k others' errors
    (t quantiles on k dof) holds its trained end at the nominal rate over 600 draws: the
    observed fraction's Clopper–Pearson band holds 80 % and 95 %."""
    marks = _interval_marks(k, 600, np.random.default_rng(10 + k))
    cov = coverage_of_marks({0.80: marks[:, 0].tolist(), 0.95: marks[:, 1].tolist()})
    for q in (0.80, 0.95):
        lo, hi = cov[f"{q:.2f}"]["ci90"]
        assert lo <= q <= hi, (k, q, cov)


def test_an_interval_on_two_check_errors_carries_its_count_and_dof():
    rng = np.random.default_rng(2)
    ends = [StoppedEnd(run=f"r{i}", pair="p", n=1.0, stop=600, end=1000,
                       predicted=float(np.exp(rng.normal(0, 0.02))), offset=0.0,
                       offset_points=0, measured=1.0) for i in range(3)]
    calibrated_intervals(ends, {e.run: e.run for e in ends})
    iv = ends[0].interval
    assert iv.calibrated and iv.calibration_n == 2 and iv.dof == pytest.approx(2)
    assert iv.hi95 / iv.estimate == pytest.approx(float(np.exp(4.302653 * iv.sd_total)),
                                                  rel=1e-5)
