"""The curve laws on probe rows (``probe_loss``, schema revision 1.4): preferred to ``train_loss``
where a table has them (fitting.laws.curves.runs.curve_loss_metric), in ``mnmt-fit curves`` and
in the report's curve sections; tables without them fit ``train_loss`` as before.

The study: runs shaped like the main job's (rsqrt after a 100-step warm-up, a linear cool-down
over the last 20 % of 1,000 steps, cool-down branches at 450, 600 and 750 cooling down over
10 % of their length), each training one pair, at three sizes (the largest with three seeds).
Their losses follow an exact LR-annealing law: ``train_loss`` every 10 steps with the main job's
≈ 6 % batch scatter, ``probe_loss`` every 25 steps exact on a subset 1 % above the whole split
(``PROBE_LEVEL``), the validation ``loss`` every 100 steps with a seed offset of ±0.1 % at the
largest size (σ_seed = 0.1 % on 2 dof)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fitting.cli import main
from fitting.laws.curves.annealing import AnnealingLawFit
from fitting.laws.curves.runs import (
    PROBE_METRIC,
    TIDY_LOSS_METRIC,
    curve_loss_metric,
    curves_from_table,
    pair_training_curves,
)
from fitting.report.record import Report
from fitting.report.sections.curves import CURVE_FORM, CURVE_LAMBDA, curve_continuations
from fitting.report.sections.extrapolation import FAILS, HOLDS, LONGER_RUN, extrapolation_rows
from fitting.report.view import prepare_view
from fitting.test_utils import SCHEDULE_STEPS, ScheduledRun, family_schedules, logged_steps

T = SCHEDULE_STEPS
SIZES = (1e5, 3e5, 1e6)
SCATTER = 0.057  # relative sd of a train_loss row about the curve on the main job
PROBE_LEVEL = 1.01  # the probe subset's loss relative to the whole split's
D = 0.001  # the validation loss's seed offset at the largest size


def _law(n: float) -> AnnealingLawFit:
    return AnnealingLawFit(law="lr_annealing", lam=CURVE_LAMBDA, form=CURVE_FORM,
                           params={"L0": 0.1 + 30.0 * n ** -0.4, "A": 1.5, "alpha": 0.7,
                                   "C": 1.0})


def _rows(sched: ScheduledRun, n: float, pair: str, seed: int, rng) -> list[dict]:
    """One run's rows (:func:`fitting.test_utils.family_schedules`)."""
    run, parent, b = sched.run, sched.parent, sched.branch_step
    first, end = sched.first, sched.end
    own, lr_steps, eta = sched.steps, sched.lr_steps, sched.lr
    law, other = _law(n), "en-zh" if pair == "en-de" else "en-de"
    base = {"run_id": run, "parent_run": parent, "branch_step": b, "n": n, "seed": seed,
            "study": "t", "family": "mini", "size": f"{n:g}"}

    def rows(p, es, metric, steps, values, w):
        return [{**base, "pair": p, "eval_set": es, "metric": metric, "step": s,
                 "tokens": 512 * s, "value": v, "weight": w} for s, v in zip(steps, values,
                                                                           strict=True)]
    out = rows("all", "train", "learning_rate", own, eta[-own.size:], np.nan)
    train = law.predict(own, lr_steps, eta) * (1 + SCATTER * rng.standard_normal(own.size))
    out += rows("all", "train", TIDY_LOSS_METRIC, own, train, np.nan)
    out += rows(pair, "train", TIDY_LOSS_METRIC, own, train, 1.0)
    probe = logged_steps(first, end, 25)
    out += rows(pair, "validation", PROBE_METRIC, probe,
                law.predict(probe, lr_steps, eta) * PROBE_LEVEL, 1.0)
    out += rows(other, "validation", PROBE_METRIC, probe, np.full(probe.size, 6.0), 0.0)
    evals = logged_steps(first, end, 100)
    shift = 1 + D * (1, -1, 0)[seed] if n == max(SIZES) else 1.0
    out += rows(pair, "validation", "loss", evals, law.predict(evals, lr_steps, eta) * shift, 1.0)
    return out + rows(other, "validation", "loss", evals, np.full(evals.size, 6.0), 0.0)


def study(probes: bool = True) -> pd.DataFrame:
    """The study of the module docstring; ``probes=False``: without its probe rows."""
    rng = np.random.default_rng(7)
    rows = []
    for j, n in enumerate(SIZES):
        for pair in ("en-de", "en-zh"):
            for seed in range(3 if n == max(SIZES) else 1):
                for sched in family_schedules(f"s{j}_{pair}_s{seed}"):
                    rows += _rows(sched, n, pair, seed, rng)
    df = pd.DataFrame(rows)
    return df if probes else df[df["metric"] != PROBE_METRIC].reset_index(drop=True)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return study()


def test_probe_rows_are_the_default_loss_where_every_trained_run_has_them(table):
    assert curve_loss_metric(table, "en-de") == PROBE_METRIC
    assert curve_loss_metric(study(probes=False), "en-de") == TIDY_LOSS_METRIC
    # two pairs' probe rows and no pair named: train_loss of `all`, as before
    assert curve_loss_metric(table) == TIDY_LOSS_METRIC
    one_pair = table[~((table["metric"] == PROBE_METRIC) & (table["pair"] == "en-zh"))]
    assert curve_loss_metric(one_pair) == PROBE_METRIC
    # a run that trains en-de without probe rows: the pair falls back to train_loss
    part = table[~((table["metric"] == PROBE_METRIC) & (table["run_id"] == "s0_en-de_s0"))]
    assert curve_loss_metric(part, "en-de") == TIDY_LOSS_METRIC
    wide = pd.DataFrame({"run": ["a"], "step": [10], "lr": [1.0], PROBE_METRIC: [2.0]})
    assert curve_loss_metric(wide) == PROBE_METRIC


def test_pair_training_curves_read_probe_rows_at_their_steps_for_trained_runs(table):
    curves = pair_training_curves(table, "en-de")
    assert all("en-de" in r for r in curves)  # the runs at weight 0 for en-de are left out
    c = curves["s2_en-de_s1"]
    assert c.steps.tolist() == logged_steps(0, T, 25).tolist() and not c.window.any()
    law = _law(1e6)
    assert c.loss == pytest.approx(PROBE_LEVEL * law.predict(c.steps, c.lr_steps, c.lr))
    b = curves["s2_en-de_s1_cd600"]
    assert b.steps.tolist() == [625.0, 650.0, 667.0] and b.parent == "s2_en-de_s1"
    old = pair_training_curves(study(probes=False), "en-de")["s2_en-de_s1"]
    assert old.steps.tolist() == logged_steps(0, T).tolist()


def test_curves_from_table_defaults_to_probe_rows_with_window_zero(table):
    single = table[table["pair"].isin(["all", "en-de"]) & table["run_id"].str.contains("en-de")]
    c = curves_from_table(single)["s0_en-de_s0"]
    assert c.steps.tolist() == logged_steps(0, T, 25).tolist() and not c.window.any()
    named = curves_from_table(single, loss_metric=TIDY_LOSS_METRIC)["s0_en-de_s0"]
    assert named.steps.tolist() == logged_steps(0, T).tolist() and named.window[1] == 10


def test_report_curve_section_fits_probe_rows_and_judges_on_them(table):
    """Exact probe rows 1 % above the whole split: fitted on them, each cooled-down end is
    predicted to the probe loss there (judged on it, not on the validation loss the probe
    level is 1 % off) and holds; on the same study without probe rows the section fits the
    6 %-scattered training loss and the ends miss by more than 3σ_seed."""
    out, _ = curve_continuations(prepare_view(table))
    assert "probe loss" in out["loss"]
    for d in out["pairs"].values():
        assert d["metric"] == PROBE_METRIC and d["judged_on"] == d["loss"]
        assert d["verdict"] == HOLDS and d["worst"] < 1e-3
    old, _ = curve_continuations(prepare_view(study(probes=False)))
    for d in old["pairs"].values():
        assert d["metric"] == TIDY_LOSS_METRIC and d["judged_on"] == "validation loss of the pair"
        assert d["verdict"] == FAILS


def test_longer_run_backtest_names_the_probe_loss(table):
    rep = Report(out_dir="", markdown_path="", html_path="", json_path="")
    rows = [r for r in extrapolation_rows(rep, prepare_view(table), None, None)
            if r["kind"] == LONGER_RUN]
    assert len(rows) == 2
    for r in rows:
        assert r["detail"].startswith("probe loss of the pair") and r["worst"] < 1e-3
    old = [r for r in extrapolation_rows(rep, prepare_view(study(probes=False)), None, None)
           if r["kind"] == LONGER_RUN]
    assert all(r["detail"].startswith("training loss of the pair") for r in old)


def test_cli_curves_fits_a_pairs_probe_rows_and_says_so(table, tmp_path, capsys):
    runs = table[table["run_id"].str.contains("en-de")]  # the en-de runs and their branches
    path = str(tmp_path / "metrics.csv")
    runs.to_csv(path, index=False)
    args = ["curves", path, "--holdout", "s2_en-de_s2", "--uncertainty", "none", "--json"]
    assert main([*args, "--pair", "en-de"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["loss"] == {"metric": PROBE_METRIC, "pair": "en-de"}
    steps = np.asarray(d["heldout"]["s2_en-de_s2"]["steps"])
    assert steps.size and not np.any(steps % 25)  # the probe steps, not the train_loss ones
    assert main(args) == 0  # no pair named: train_loss of `all` (two pairs' probe rows)
    d = json.loads(capsys.readouterr().out)
    assert d["loss"] == {"metric": TIDY_LOSS_METRIC, "pair": None}
    assert np.any(np.asarray(d["heldout"]["s2_en-de_s2"]["steps"]) % 25)
