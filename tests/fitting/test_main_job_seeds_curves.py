"""benchmarks/studies/main_job_seeds.py's curve-law columns: the report's longer-run and later-cool-down
rows per pair, and whether both hold for both pairs on a seed."""

from __future__ import annotations

import dataclasses
import json

from fitting.report.sections.extrapolation import (
    FAILS,
    HOLDS,
    LARGER_SIZE,
    LATER_COOLDOWN,
    LONGER_RUN,
)


def _row(kind: str, pair: str, rmse: float | None, three_sigma: float | None,
         verdict: str) -> dict:
    return {"kind": kind, "pair": pair, "rmse": rmse, "three_sigma": three_sigma,
            "verdict": verdict}


def _seed(curves: dict) -> dict:
    return {"seed": 0, "wall_s": None, "heldout": {}, "backtest": {}, "check1_ok": True,
            "check4_ok": True, "all_ok": True, "curves": curves,
            "l_inf": {"en-de": {"fit": 0.1, "true": 0.1, "error": 0.0, "ok": True}}}


def test_curve_rows_keep_the_two_curve_kinds_with_an_rmse(benchmark_script):
    seeds = benchmark_script("main_job_seeds")
    rows = [_row(LARGER_SIZE, "en-de", 0.02, 0.03, HOLDS),
            _row(LONGER_RUN, "en-de", 0.07, 0.05, FAILS),
            _row(LATER_COOLDOWN, "en-de", 0.04, 0.05, HOLDS),
            _row(LONGER_RUN, "en-zh", None, 0.05, "not computed: no curve")]
    curves = seeds.curve_rows(rows)
    assert set(curves) == {"en-de", "en-zh"}
    assert set(curves["en-de"]) == {LONGER_RUN, LATER_COOLDOWN}
    assert curves["en-de"][LONGER_RUN] == {"rmse": 0.07, "three_sigma": 0.05, "verdict": FAILS}
    assert curves["en-zh"][LONGER_RUN]["verdict"].startswith("not computed")  # kept: not held


def test_a_seed_holds_only_when_every_curve_row_of_every_pair_holds(benchmark_script):
    seeds = benchmark_script("main_job_seeds")
    ok = {"rmse": 0.04, "three_sigma": 0.05, "verdict": HOLDS}
    bad = {"rmse": 0.07, "three_sigma": 0.05, "verdict": FAILS}
    both = {"en-de": {LONGER_RUN: ok, LATER_COOLDOWN: ok}, "en-zh": {LONGER_RUN: ok,
                                                                     LATER_COOLDOWN: ok}}
    assert seeds.curves_hold(_seed(both)) is True
    one_fails = {**both, "en-zh": {LONGER_RUN: ok, LATER_COOLDOWN: bad}}
    assert seeds.curves_hold(_seed(one_fails)) is False
    assert seeds.curves_hold(_seed({})) is None
    text = seeds.table([_seed(one_fails)])
    assert "7.00 vs 5.00 %" in text and "| no |" in text


def test_a_missing_or_unjudged_curve_row_never_holds(benchmark_script):
    seeds = benchmark_script("main_job_seeds")
    ok = {"rmse": 0.04, "three_sigma": 0.05, "verdict": HOLDS}
    assert seeds.curves_hold(_seed({"en-de": {LONGER_RUN: ok}})) is False  # cool-down missing
    no_pair = {"en-zh": {LONGER_RUN: ok, LATER_COOLDOWN: ok}}  # en-de (in l_inf) has none
    assert seeds.curves_hold(_seed(no_pair)) is False
    info = {"rmse": 0.04, "three_sigma": None, "verdict": "information: no seed noise measured"}
    assert seeds.curves_hold(_seed({"en-de": {LONGER_RUN: ok, LATER_COOLDOWN: info}})) is False
    assert "missing" in seeds.table([_seed({"en-de": {LONGER_RUN: ok}})])


def test_an_unjudged_backtest_says_so_and_pooled_coverage_counts_calibrated_clusters(
        benchmark_script):
    seeds = benchmark_script("main_job_seeds")
    row = _seed({})
    row["backtest"] = {"en-de": {"rmse_rel": 0.05, "noise_rel": 0.01, "tolerance": 3.0,
                                 "within": False, "sigma_seeds": 2, "sigma_dof": 1,
                                 "marks": {"0.80": [True, False, True],
                                           "0.95": [True, True, True]}}}
    row["heldout"] = {"en-de": {"error": 0.01, "within_rel": True, "inside80": True,
                                "inside95": True, "lo95": 1, "hi95": 2, "calibrated": True},
                      "en-zh": {"error": 0.01, "within_rel": True, "inside80": False,
                                "inside95": True, "lo95": 1, "hi95": 2, "calibrated": False}}
    text = seeds.table([row])
    assert "not judged" in text and "beyond" not in text
    cov = seeds.pooled_coverage([row, {**row, "seed": 1}])
    bt = cov["backtest"]["0.80"]
    assert (bt["inside"], bt["n"], bt["clusters"]) == (4, 6, 2)
    assert bt["ci90_clusters"][0] < bt["ci90"][0] and bt["ci90_clusters"][1] > bt["ci90"][1]
    held = cov["heldout"]["0.95"]
    assert (held["inside"], held["n"], held["clusters"]) == (2, 2, 2)  # en-zh not calibrated
    assert "4/6 (90 % CI" in seeds.coverage_lines(cov)


def test_report_into_writes_another_folder_with_the_studys_report_arguments(
        benchmark_script, tmp_path, monkeypatch):
    """--report-into re-reports a finished seed beside it: the study's held-out runs, target
    sizes and ground truth, written under the destination; the study's own report is only
    read."""
    from fitting.data import tables  # noqa: PLC0415
    from fitting.report import writer  # noqa: PLC0415
    from mnmt.study.expansion import expand  # noqa: PLC0415
    from mnmt.study.loading import load_spec  # noqa: PLC0415
    from mnmt.study.stages import spec_json  # noqa: PLC0415

    seeds = benchmark_script("main_job_seeds")
    study = tmp_path / "seed7"
    (study / "report").mkdir(parents=True)
    spec = load_spec(None, None, [])   # the default study: three held-out mini-3 seeds
    (study / "study.json").write_text(json.dumps(spec_json(spec)))
    (study / "report" / "fits.json").write_text(json.dumps({"ground_truth": {"en-de": 0.1}}))
    calls = []
    monkeypatch.setattr(tables, "read_table", lambda path: f"table of {path}")
    monkeypatch.setattr(writer, "write_report", lambda *args: calls.append(args))
    seeds.report_into(str(study), str(tmp_path / "after" / "seed7"))
    ((table, dest, options),) = calls
    assert table == f"table of {study / 'metrics.csv'}"
    assert dest == str(tmp_path / "after" / "seed7" / "report")
    assert options.ground_truth == {"en-de": 0.1}
    held = [r.run_id for r in expand(spec) if r.heldout]
    assert held and options.heldout_runs == held
    assert options.target_sizes == list(spec.report_target_sizes)
    assert sorted(p.name for p in (study / "report").iterdir()) == ["fits.json"]


def test_a_checkout_without_report_options_gets_the_same_arguments_as_keywords(
        benchmark_script, tmp_path, monkeypatch):
    """The "before" side of a comparison runs an older checkout whose write_report takes flat
    keywords: rewrite_report passes it the arguments ReportOptions would hold."""
    from fitting.data import tables  # noqa: PLC0415
    from fitting.report import writer  # noqa: PLC0415
    from mnmt.study.loading import load_spec  # noqa: PLC0415
    from mnmt.study.stages import spec_json  # noqa: PLC0415

    rewrite = benchmark_script("rewrite_report")
    study = tmp_path / "seed7"
    (study / "report").mkdir(parents=True)
    (study / "study.json").write_text(json.dumps(spec_json(load_spec(None, None, []))))
    (study / "report" / "fits.json").write_text(json.dumps({"ground_truth": {"en-de": 0.1}}))
    expected = rewrite.report_arguments(str(study))
    assert set(expected) <= {f.name for f in dataclasses.fields(writer.ReportOptions)}
    calls = []
    monkeypatch.setattr(tables, "read_table", lambda path: "table")
    monkeypatch.delattr(writer, "ReportOptions")
    monkeypatch.setattr(writer, "write_report",
                        lambda table, out, **kw: calls.append((table, out, kw)))
    assert rewrite.rewrite_report(str(study), str(tmp_path / "before")) == str(
        tmp_path / "before" / "report")
    ((table, out, keywords),) = calls
    assert table == "table" and out == str(tmp_path / "before" / "report")
    assert keywords == expected and keywords["ground_truth"] == {"en-de": 0.1}
