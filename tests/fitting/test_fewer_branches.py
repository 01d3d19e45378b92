"""Fewer cool-down branches (fitting.report.predicted_budgets, fitting.report.fewer_branches):
budgets not trained predicted from their run's curve, marked and counted, L(N, D) across weights
refitted with them, a stopped study no longer refused, and the side-by-side verdict — on runs
whose training losses come from an exact LR-annealing law (relative form; rsqrt after a 100-step
warm-up, a linear cool-down over the last 20 % of 1,000 steps, branches at 450, 600 and 750
cooling down over 10 % of their length)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fitting.core.options import NO_UNCERTAINTY
from fitting.core.seed_noise import FEW_SEEDS, SeedNoise
from fitting.laws.budget.chinchilla_joint import coef_key
from fitting.laws.curves.annealing import AnnealingLawFit
from fitting.laws.curves.early_stop import PLANNED_LR_METRIC, planned_branch_curve
from fitting.laws.curves.runs import Curve
from fitting.report.fewer_branches import (
    check_branches,
    compare,
    verdict,
    without_branches_except,
)
from fitting.report.predicted_budgets import (
    WHOLE_RUN_LAMBDA,
    BudgetPlan,
    infer_plan,
    predicted_budgets,
)
from fitting.report.sections.chinchilla import PREDICTED, fit_cooled_law
from fitting.report.sections.extrapolation import CURVE_FORM, CURVE_LAMBDA, FAILS, HOLDS
from fitting.report.view import prepare_view
from fitting.test_utils import SCHEDULE_BRANCHES, SCHEDULE_STEPS, family_schedules

T, STOP = SCHEDULE_STEPS, 600
SIZES = (1e5, 3e5, 1e6, 3e6)
D = 0.002  # the validation loss's seed offset at the largest size: σ_seed = 0.2 %


def family(run: str, n: float, lam: float) -> dict[str, Curve]:
    """A parent (training loss every 10 steps to T) and its three branches from one exact law
    whose L0 falls with n."""
    fit = AnnealingLawFit(law="lr_annealing", lam=lam, form=CURVE_FORM,
                          params={"L0": 1.0 + 30.0 * n ** -0.4, "A": 1.5, "alpha": 0.7,
                                  "C": 0.3})
    return {r.run: Curve(r.run, r.lr_steps, r.lr, r.steps, fit.predict(r.steps, r.lr_steps, r.lr),
                         n, parent=r.parent, branch_step=r.branch_step)
            for r in family_schedules(run)}


def table(lam: float = WHOLE_RUN_LAMBDA, stopped: bool = False) -> pd.DataFrame:
    """Sizes SIZES training en-de, the largest with 3 seeds (validation × 1 + D, 1 − D, 1);
    ``stopped``: every run but the largest size's cut at the stop with planned rates and no
    branch after it (a study stopped at 60 % with one checked experiment)."""
    rows = []
    for j, n in enumerate(SIZES):
        for seed in range(3 if n == SIZES[-1] else 1):
            run = f"s{j}_s{seed}"
            shift = 1 + D * (1, -1, 0)[seed] if n == SIZES[-1] else 1.0
            cut = stopped and n != SIZES[-1]
            for name, c in family(run, n, lam).items():
                if cut and c.branch_step > STOP:
                    continue
                base = {"run_id": name, "parent_run": c.parent, "branch_step": c.branch_step,
                        "n": n, "seed": seed, "study": "t", "family": "mini",
                        "size": f"{n:g}", "weight": 1.0}
                own_cut = cut and name == run
                first = c.branch_step if c.parent else 0
                for s, v in zip(c.lr_steps, c.lr, strict=True):
                    if s > first:
                        metric = PLANNED_LR_METRIC if own_cut and s > STOP else "learning_rate"
                        rows.append({**base, "pair": "all", "eval_set": "train",
                                     "metric": metric, "step": s, "value": v})
                keep = c.steps <= (STOP if own_cut else np.inf)
                for s, v in zip(c.steps[keep], c.loss[keep], strict=True):
                    rows.append({**base, "pair": "en-de", "eval_set": "train",
                                 "metric": "train_loss", "step": s, "value": v})
                end = STOP if own_cut else c.steps.max()
                for s in sorted({*np.arange(first + 100, end, 100), end}):
                    v = float(c.loss[np.searchsorted(c.steps, s)]) * shift
                    rows.append({**base, "pair": "en-de", "eval_set": "validation",
                                 "metric": "loss", "step": s, "value": v})
    df = pd.DataFrame(rows)
    df["tokens"] = 512 * df["step"]
    last = df.groupby(["run_id", "eval_set", "metric"])["step"].transform("max")
    stopped_runs = [f"s{j}_s0" for j in range(len(SIZES) - 1)] if stopped else []
    df["final"] = (df["step"] == last) & ~df["run_id"].isin(stopped_runs)
    return df


def test_a_planned_branch_has_the_schedule_of_the_trained_one():
    fam = family("r", 1e5, CURVE_LAMBDA)
    for b, end in SCHEDULE_BRANCHES.items():
        trained = fam[f"r_cd{b}"]
        planned = planned_branch_curve(fam["r"], b, end - b)
        assert planned.run == trained.run and planned.lr_steps.max() == end
        at = trained.lr_steps[trained.lr_steps > b]
        # the cool-down start is read from rates logged every 10 steps: within 10 % of a rate
        np.testing.assert_allclose(np.interp(at, planned.lr_steps, planned.lr),
                                   trained.lr[trained.lr_steps > b], rtol=0.1, atol=2e-4)
    with pytest.raises(Exception, match="outside its schedule"):
        planned_branch_curve(fam["r"], T, 10)


def test_the_plan_is_read_from_the_table_and_gives_the_stacks_cooldowns():
    plan = infer_plan(table())
    assert plan.points == (0.45, 0.6, 0.75) and plan.cooldown_share == pytest.approx(0.1, 0.01)
    assert BudgetPlan((0.45, 0.6, 0.75), 0.1).branches(T) == [(450, 50), (600, 67), (750, 83)]
    with pytest.raises(Exception, match="cool-down share"):
        BudgetPlan((0.5,), 1.0)


def test_predicted_budgets_are_marked_counted_and_match_the_trained_ones():
    full = table()
    keep = check_branches(full)
    assert keep == sorted([f"s{j}_s0_cd600" for j in range(3)]
                          + [f"s3_s{k}_cd600" for k in range(3)])
    fewer = prepare_view(without_branches_except(full, keep))
    rows, failed = predicted_budgets(fewer, infer_plan(full))
    assert not failed and len(rows) == 2 * 6 and rows[PREDICTED].all()
    trained = prepare_view(full).budgets_fit.set_index("run_id")["value"]
    for _, r in rows.iterrows():  # the law is exact: each prediction is the trained end (the
        # offset is additive, the seeds' shift ± D a factor: ≤ D off where the loss has fallen)
        assert r["value"] == pytest.approx(trained[r["run_id"]], rel=D * 1.5)
        assert r["tokens"] == 512 * r["step"]
    fit, note, why = fit_cooled_law(fewer, uncertainty=NO_UNCERTAINTY, predicted=rows)
    assert not why and "predicted from their run's curve" in note
    # seed means: per size 2 predicted budgets of one experiment (the largest: 3 seeds, 1 mean)
    assert fit.meta["predicted_points"]["en-de"] == 2 * len(SIZES)
    ref, _, _ = fit_cooled_law(prepare_view(full), uncertainty=NO_UNCERTAINTY)
    e = coef_key("E", "en-de")
    assert fit.params[e] == pytest.approx(ref.params[e], rel=0.01)


def test_a_stopped_study_no_longer_makes_the_law_refuse():
    view = prepare_view(table(lam=CURVE_LAMBDA, stopped=True))
    fit, _, why = fit_cooled_law(view, uncertainty=NO_UNCERTAINTY)
    assert fit is None and "needs ≥ 3 per run" in why  # before: trained budgets only
    rows, failed = predicted_budgets(view, None)
    assert not failed
    # each stopped run: its own end and its branch after the stop
    assert sorted(rows["run_id"]) == sorted([f"s{j}_s0" for j in range(3)]
                                            + [f"s{j}_s0_cd750" for j in range(3)])
    fit, _, why = fit_cooled_law(view, uncertainty=NO_UNCERTAINTY, predicted=rows)
    assert not why and fit.meta["predicted_points"]["en-de"] == 6
    ref, _, _ = fit_cooled_law(prepare_view(table(lam=CURVE_LAMBDA)), uncertainty=NO_UNCERTAINTY)
    e = coef_key("E", "en-de")
    assert fit.params[e] == pytest.approx(ref.params[e], rel=0.02)


def test_the_side_by_side_holds_on_exact_curves():
    res = compare(table())
    d = res["pairs"]["en-de"]
    assert abs(d["e_change"]) < 0.01 and d["predicted_points"] == 8
    assert d["n_within"] == len(d["budget_errors"]) == 12
    assert res["verdict"] == HOLDS


def _row(e_change: float, bt: float = 0.02, held: float = 0.01) -> dict:
    return {"e_change": e_change, "backtest_trained": {"rmse_rel": 0.02},
            "backtest_fewer": {"rmse_rel": bt}, "heldout_trained": [{"error": 0.01}],
            "heldout_fewer": [{"error": held}]}


def test_the_side_by_side_verdict_can_fail():
    noise = {"en-de": SeedNoise(0.01, 5, 4)}  # 4 dof: the multiple is 3
    assert verdict({"en-de": _row(0.02)}, noise) == HOLDS
    assert verdict({"en-de": _row(0.04)}, noise) == FAILS  # E moved by 4σ_seed
    # E at a bound in both fits (e.g. 0): no estimate to compare, the other criteria judge
    assert verdict({"en-de": {**_row(1e6), "e_bound_both": True}}, noise) == HOLDS
    assert verdict({"en-de": _row(0.0, bt=0.06)}, noise) == FAILS  # backtest 4σ worse
    assert verdict({"en-de": _row(0.0, held=-0.05)}, noise) == FAILS  # held-out 4σ worse
    assert verdict({"en-de": _row(0.0)}, {"en-de": SeedNoise(0.01, 2, 1)}).startswith(
        FEW_SEEDS)
    assert verdict({}, noise).startswith("not computed")


def test_the_side_by_side_verdict_is_two_sided_and_counts_the_budgets_within():
    """A paired difference judged two-sided: a held-out error that flips from +2 % to −2 % (|Δ|
    4 % > 3σ_seed) or a backtest 4σ *better* is a change the predicted budgets made, not
    noise; and fewer than 80 % of the predicted budgets within 3σ_seed of the trained ones
    fails however the fits compare. On 2 dof the multiple is t's 4.85, not 3."""
    noise = {"en-de": SeedNoise(0.01, 5, 4)}
    flipped = {**_row(0.0), "heldout_trained": [{"error": 0.02}],
               "heldout_fewer": [{"error": -0.02}]}
    assert verdict({"en-de": flipped}, noise) == FAILS
    assert verdict({"en-de": _row(0.0, bt=-0.02)}, noise) == FAILS
    budgets = [{"error": 0.005}] * 7 + [{"error": 0.05}] * 3
    assert verdict({"en-de": {**_row(0.0), "budget_errors": budgets}}, noise) == FAILS
    budgets = [{"error": 0.005}] * 8 + [{"error": 0.05}] * 2
    assert verdict({"en-de": {**_row(0.0), "budget_errors": budgets}}, noise) == HOLDS
    assert verdict({"en-de": _row(0.04)}, {"en-de": SeedNoise(0.01, 3, 2)}) == HOLDS
    assert verdict({"en-de": _row(0.05)}, {"en-de": SeedNoise(0.01, 3, 2)}) == FAILS
    assert verdict({"en-de": _row(0.048)}, {"en-de": SeedNoise(0.01, 3, 2)}) == HOLDS


@pytest.mark.slow  # a whole report (every section): ≈ 20 s of CPU
def test_the_report_of_a_stopped_study_marks_and_counts_the_predicted_points(tmp_path):
    import json  # noqa: PLC0415

    from fitting.report.writer import ReportOptions, write_report  # noqa: PLC0415

    rep = write_report(table(lam=CURVE_LAMBDA, stopped=True), str(tmp_path),
                       ReportOptions(uncertainty=NO_UNCERTAINTY))
    fits = json.loads((tmp_path / "fits.json").read_text())
    joint = fits["chinchilla"]["joint"]
    assert joint["meta"]["predicted_points"] == {"en-de": 6}
    assert len(fits["chinchilla"]["predicted_budgets"]["points"]) == 6
    assert "points predicted" in rep.markdown and "Points predicted:" in rep.markdown
