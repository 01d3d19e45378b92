"""The report's prepared view (fitting.report.view): derived once, read by every section; the
held-out runs seen by no choice."""

from __future__ import annotations

import collections
import dataclasses
import sys

import numpy as np
import pandas as pd
import pytest

from fitting.core.options import UncertaintyOptions
from fitting.data import tables
from fitting.laws.budget import chinchilla_joint
from fitting.laws.curves import learning_curve
from fitting.report.view import StudyView, prepare_view
from fitting.report.writer import ReportOptions, write_report
from fitting.test_utils import make_curves_table, make_final_table

HELD = "s2_p0.50"


def _branch_study() -> pd.DataFrame:
    """A 2-pair study with learning curves, BLEU rows and two cool-down branches per run."""
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.3, 0.5, 1.0), noise=0.01,
                           seed=4)
    tab = make_curves_table(fin).pipe(lambda t: t.assign(tokens=t["step"] * 512))
    tab = pd.concat([tab, tab[tab["metric"] == "loss"].assign(
        metric="bleu", value=lambda t: 30 * t["value"] ** -1.5)], ignore_index=True)
    rows = []
    for run, g in tab.groupby("run_id", sort=False):
        first = g.iloc[0].to_dict()
        for b in (200, 400):
            for step, final in ((b + b // 8, False), (b + b // 4, True)):
                for _, gp in g[g["metric"] == "loss"].groupby("pair"):
                    at = gp.iloc[(gp["step"] - step).abs().argmin()]
                    loss = float(at["value"]) - (0.05 if final else 0.0)
                    for metric, value in (("loss", loss), ("bleu", 30 * loss ** -1.5)):
                        rows.append({**first, **gp.iloc[0][["weight", "pair"]].to_dict(),
                                     "run_id": f"{run}_cd{b}", "parent_run": run,
                                     "branch_step": b, "step": step, "tokens": step * 512,
                                     "metric": metric, "value": value, "final": final})
    return pd.concat([tab.assign(parent_run="", branch_step=np.nan), pd.DataFrame(rows)],
                     ignore_index=True)


def _count_calls(functions, run):
    """Calls of each function in ``functions`` while ``run()`` runs, however it was imported
    (a profiler matches the code objects)."""
    codes = {f.__code__: f.__name__ for f in functions}
    count: collections.Counter = collections.Counter()

    def prof(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            count[codes[frame.f_code]] += 1

    sys.setprofile(prof)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count


def test_the_report_derives_each_view_once(tmp_path):
    """Old rule (a8299e0): write_report and its sections went back to
    fitting.data.tables.final_losses 6 times on this study — once for the final losses, three
    times for the same cooled-down budgets (regime, L(N, D) across weights, the L(N, D)
    section), once for the mixture runs and once for the BLEU frontier's measured points. Now
    the cooled-down budgets are derived once (StudyView.budgets): 4 calls, one per distinct
    view (final loss, cooled-down budgets, the mixture laws' own runs, BLEU)."""
    tab = _branch_study()
    count = _count_calls(
        [tables.final_losses, learning_curve.cooldown_budgets],
        lambda: write_report(tab, str(tmp_path), ReportOptions(uncertainty=UncertaintyOptions(method=None, n_refits=4),
                                                               heldout_runs=[HELD])))
    assert count["cooldown_budgets"] == 1
    assert count["final_losses"] == 4


def test_view_fields_split_held_out_runs_and_their_branches():
    view = prepare_view(_branch_study(), heldout_runs=[HELD])
    assert isinstance(view, StudyView) and dataclasses.is_dataclass(view)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.metric = "bleu"  # type: ignore[misc]
    assert set(view.held["run_id"]) == {HELD}
    assert HELD not in set(view.final["run_id"]) and HELD in set(view.final_all["run_id"])
    fit_runs = set(view.table_fit["run_id"])
    assert not {HELD, f"{HELD}_cd200", f"{HELD}_cd400"} & fit_runs
    assert HELD not in set(view.budgets_fit["parent"]) and HELD in set(view.budgets["parent"])
    assert view.branches and view.n_branch_runs == 2 * view.final_all["run_id"].nunique()
    assert set(view.points) == {"en-de", "en-zh"} and view.sizes == [1e5, 3e5, 1e6, 3e6]


def test_held_out_run_is_seen_by_no_choice(tmp_path, monkeypatch):
    """The form and budget selection of L(N, D) across weights (select_form) sees the fitted
    runs only: no point of the held-out run (N = 1e6, en-de weight 0.5) reaches it."""
    seen = []
    real = chinchilla_joint.select_form

    def spy(n, d, p, y, **kw):
        seen.append((np.asarray(n, float), np.asarray(p, float)))
        return real(n, d, p, y, **kw)

    monkeypatch.setattr(chinchilla_joint, "select_form", spy)
    rep = write_report(_branch_study(), str(tmp_path), ReportOptions(uncertainty=UncertaintyOptions(method=None, n_refits=4),
                                                                     heldout_runs=[HELD]))
    assert seen and rep.chinchilla.get("joint")
    for n, p in seen:
        assert not np.any((n == 1e6) & np.isclose(p, 0.5)), "a held-out point reached a choice"
        assert np.any(n == 1e6)  # the other weights at that size are fitted
