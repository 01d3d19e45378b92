"""benchmarks/studies/early_stop.py --as-stopped: a finished default study read as the same study
stopped at 60 % would have written it (stopped runs cut at their stop with planned rates, their
later branches gone, checks and held-out runs whole), and the rows it cannot give counted."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fitting.data.tables import read_table, write_table
from fitting.laws.curves.early_stop import PLANNED_LR_METRIC
from fitting.report.sections.early_stop import early_stop_payload, table_stop_fraction
from fitting.report.view import prepare_view
from mnmt.study.loading import preset
from mnmt.study.spec import expand, stop_check_runs, with_branches
from mnmt.study.stages import spec_json

SPEC = preset("default")
STEP = 100  # the synthetic log grid


def _rows(run, pairs, first: int, last: int, eval_every: int) -> list[dict]:
    base = {"run_id": run.run_id, "size": run.size, "n": float(len(run.size)), "seed": run.seed,
            "parent_run": run.parent or None, "branch_step": run.branch_step or None}
    out = []
    for s in range(first + STEP, last + 1, STEP):
        rate = 1.0 / (1 + s) * (1.0 if s < 0.8 * last else (last - s + 1) / (0.2 * last))
        out.append({**base, "pair": "all", "eval_set": "train", "metric": "learning_rate",
                    "step": s, "tokens": 10 * s, "value": rate, "final": s == last})
        for p in pairs:
            out.append({**base, "pair": p, "eval_set": "train", "metric": "train_loss",
                        "step": s, "tokens": 10 * s, "value": 3.0 / s ** 0.3, "final": s == last})
            if s % eval_every == 0 or s == last:
                out.append({**base, "pair": p, "eval_set": "validation", "metric": "loss",
                            "step": s, "tokens": 10 * s, "value": 3.1 / s ** 0.3,
                            "final": s == last})
    return out


def _finished_table(spec) -> pd.DataFrame:
    rows = []
    for run in with_branches(spec, expand(spec)):
        first, last = spec.run_steps(run)
        rows += _rows(run, spec.pairs, first, last, spec.evaluation.eval_every)
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def script(benchmark_script):
    return benchmark_script("early_stop")


def test_stopped_runs_are_cut_at_their_stop_with_their_later_rates_planned(script):
    table = _finished_table(SPEC)
    stopped, missing = script.as_stopped(table, SPEC, 0.6)
    run = "micro-1_p0.30_s0"  # a design run, not a check: stopped at ⌈0.6 · 2000⌉
    full, cut = table[table["run_id"] == run], stopped[stopped["run_id"] == run]
    trained = cut[cut["metric"] != PLANNED_LR_METRIC]
    assert trained["step"].max() == 1200 and not cut["final"].any()
    pd.testing.assert_frame_equal(
        trained.drop(columns="final").reset_index(drop=True),
        full[full["step"] <= 1200].drop(columns="final").reset_index(drop=True))
    planned = cut[cut["metric"] == PLANNED_LR_METRIC]
    later = full[(full["metric"] == "learning_rate") & (full["step"] > 1200)]
    assert planned["step"].tolist() == later["step"].tolist()
    assert planned["value"].tolist() == later["value"].tolist()
    assert set(planned["tokens"]) == {10 * 1200}  # the tokens trained by the stop
    # its branches that left by the stop stay, the later one is gone; a check keeps all three
    branches = set(stopped.loc[stopped["parent_run"] == run, "run_id"])
    assert branches == {f"{run}_cd900", f"{run}_cd1200"}
    check = "micro-1_p0.50_s0"
    assert check in stop_check_runs(SPEC.replace(stop_fraction=0.6))
    assert len(set(stopped.loc[stopped["parent_run"] == check, "run_id"])) == 3
    for whole in (check, f"{check}_cd1500", "mini-3_p0.60_s0"):  # a check, its branch, held out
        pd.testing.assert_frame_equal(stopped[stopped["run_id"] == whole].reset_index(drop=True),
                                      table[table["run_id"] == whole].reset_index(drop=True))
    # the evaluation at the stop (1200, off the 500-step grid) is what a finished run lacks:
    # one loss per pair for each of the 16 stopped runs
    assert missing == 16 * len(SPEC.pairs)
    assert script.as_stopped(table, SPEC.replace(eval_every=400), 0.6)[1] == 0


def _payload(table: pd.DataFrame) -> dict:
    heldout = [r.run_id for r in expand(SPEC) if r.heldout]
    return early_stop_payload(prepare_view(table, heldout_runs=heldout), 0.6)


def test_the_report_reads_the_table_as_a_stopped_study_and_the_rows_not_given_touch_no_check(
        script, tmp_path):
    """The report's section reads the table as a stopped study's (here through the script's
    one_study, the table written by --save-stopped and read back); the evaluation at the stop
    that a finished run lacks (added here, 5 % above the curve) moves a stopped run's predicted
    end but no check's prediction, interval or verdict: a check is trained to its end, its
    prediction and interval rest on the checks' rows only, so the coverage measured on an
    as-stopped table is the stopped study's."""
    study = tmp_path / "study"
    study.mkdir()
    write_table(_finished_table(SPEC), str(study / "metrics.csv"))
    (study / "study.json").write_text(json.dumps(spec_json(SPEC)))
    plain = script.one_study(study, 0.6, True, tmp_path / "saved")
    stopped = read_table(str(tmp_path / "saved" / "study" / "metrics.csv"))
    assert plain["rows_not_given"] == 16 * len(SPEC.pairs)
    assert table_stop_fraction(stopped) == pytest.approx(0.6)
    assert plain["runs_stopped"] == 16 and plain["run_steps_not_trained"] == 16 * 800
    # every design run's end predicted, only the six checks' trained ends checked
    assert {p: (d["n_predicted"], d["n_checked"]) for p, d in plain["pairs"].items()} == {
        p: (22, 6) for p in SPEC.pairs}
    stopped_ids = set(stopped.loc[stopped["metric"] == PLANNED_LR_METRIC, "run_id"])
    at_stop = stopped[(stopped["metric"] == "train_loss") & (stopped["step"] == 1200)
                      & (stopped["pair"] != "all") & stopped["run_id"].isin(stopped_ids)]
    assert len(at_stop) == 16 * len(SPEC.pairs)
    evals = at_stop.assign(eval_set="validation", metric="loss", value=1.05 * 3.1 / 1200 ** 0.3)
    full = _payload(pd.concat([stopped, evals], ignore_index=True))
    for pair in SPEC.pairs:
        a, b = ({e["run"]: e for e in p["pairs"][pair]["ends"]} for p in (plain, full))
        for run, e in a.items():
            if e["check"]:
                assert b[run] == e
            else:
                assert b[run]["offset_points"] == e["offset_points"] + 1
                assert b[run]["predicted"] > e["predicted"]
        assert full["pairs"][pair]["coverage"] == plain["pairs"][pair]["coverage"]
