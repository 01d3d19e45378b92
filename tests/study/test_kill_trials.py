"""benchmarks/studies/faults.py: the comparison that decides a kill trial counts what it says (lost,
duplicated and changed rows, each largest difference named by its field; the fits' measured
durations left out), and — under `-m faults` — one real trial of the ci study."""

import json

import pytest


def _study(root, rows, fits=None, csv_rows=None):
    """A study output directory with one run's metrics.jsonl, a metrics.csv and a fits.json."""
    run = root / "runs" / "r"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"run_id": "r", "step": s, "tokens": 0, "task": "en-de", "eval_set": "validation",
                    "metric": "loss", "value": v}) + "\n" for s, v in rows))
    (root / "report").mkdir()
    (root / "report" / "fits.json").write_text(json.dumps(fits or {"joint": {"alpha": 0.5}}))
    lines = ["run_id,pair,eval_set,metric,step,value"] + [
        f"r,en-de,validation,loss,{s},{v}" for s, v in (csv_rows or rows)]
    (root / "metrics.csv").write_text("\n".join(lines) + "\n")
    return root


def test_an_identical_study_has_nothing_lost_duplicated_or_changed(tmp_path, benchmark_script):
    faults = benchmark_script("faults")
    ref = _study(tmp_path / "ref", [(100, 1.5), (200, 1.2)])
    same = _study(tmp_path / "same", [(100, 1.5), (200, 1.2)])
    got = faults.compare(ref, same)
    assert got["rows_lost"] == got["rows_duplicated"] == got["rows_extra"] == 0
    assert got["max_rel_diff_metrics_jsonl"] == got["max_rel_diff_metrics_csv"] == 0
    assert got["max_rel_diff_fits_json"] == 0
    assert got["largest_diff_metrics_jsonl"] is got["largest_diff_metrics_csv"] is \
        got["largest_diff_fits_json"] is None


def test_lost_duplicated_and_changed_rows_are_counted(tmp_path, benchmark_script):
    faults = benchmark_script("faults")
    ref = _study(tmp_path / "ref", [(100, 1.5), (200, 1.2), (300, 1.0)])
    bad = _study(tmp_path / "bad", [(100, 1.5), (100, 1.5), (200, 1.2 * 1.01)],
                 fits={"joint": {"alpha": 0.55}}, csv_rows=[(100, 1.5), (200, 1.2), (300, 1.0)])
    got = faults.compare(ref, bad)
    assert got["rows_lost"] == 1 and got["rows_duplicated"] == 1
    assert got["max_rel_diff_metrics_jsonl"] == pytest.approx(0.01 / 1.01)
    assert got["max_rel_diff_fits_json"] == pytest.approx(0.05 / 0.55)
    assert got["largest_diff_fits_json"] == {"field": "joint/alpha", "reference": 0.5,
                                             "trial": 0.55}
    assert got["max_rel_diff_metrics_csv"] == 0


def test_a_missing_csv_row_is_an_infinite_difference(tmp_path, benchmark_script):
    faults = benchmark_script("faults")
    ref = _study(tmp_path / "ref", [(100, 1.5), (200, 1.2)])
    short = _study(tmp_path / "short", [(100, 1.5), (200, 1.2)], csv_rows=[(100, 1.5)])
    got = faults.compare(ref, short)
    assert got["max_rel_diff_metrics_csv"] == float("inf")
    assert got["largest_diff_metrics_csv"] == {
        "field": "run_id=r pair=en-de eval_set=validation metric=loss step=200",
        "reference": 1.2, "trial": None}
    assert faults.differences(got, 1e-6) == [
        "metrics.csv: run_id=r pair=en-de eval_set=validation metric=loss step=200: "
        "reference 1.2, trial absent (relative difference inf)"]


def _fits(e=1.2, grid=0.8, total=3.1, backtest=0.4, bootstrap=9.5):
    """A fits.json shaped as the report writes it: an L(N, D) fit with its measured durations."""
    return {"chinchilla": {"fits": {"en-de": {
        "params": {"E": e, "A": 60.0, "alpha": 0.34},
        "meta": {"start_stats": {"n_starts": 64, "fraction_reached_optimum": 0.5},
                 "timing_s": {"grid": grid, "total": total},
                 "backtest": {"rmse_log": 0.01, "seconds": backtest},
                 "bootstrap": {"n": 30, "seed": 0, "seconds": bootstrap}},
        "bootstrap_params": [[1.1, 59.0], [1.3, 61.0]]}}}}


def test_fits_differing_only_in_measured_durations_are_equal(tmp_path, benchmark_script):
    """Two fits of the same table differ in the seconds they took, and in nothing else."""
    faults = benchmark_script("faults")
    ref = _study(tmp_path / "ref", [(100, 1.5)], fits=_fits())
    slower = _study(tmp_path / "slower", [(100, 1.5)],
                    fits=_fits(grid=2.5, total=7.0, backtest=1.9, bootstrap=30.2))
    got = faults.compare(ref, slower)
    assert got["max_rel_diff_fits_json"] == 0 and got["largest_diff_fits_json"] is None
    assert faults.differences(got, 1e-6) == []
    # the rule by key name: the timing_s subtree and every key named "seconds", nothing else
    paths = faults.numbers(_fits())
    durations = {faults.field_name(k) for k in paths if faults.is_duration(k)}
    assert durations == {"chinchilla/fits/en-de/meta/timing_s/grid",
                         "chinchilla/fits/en-de/meta/timing_s/total",
                         "chinchilla/fits/en-de/meta/backtest/seconds",
                         "chinchilla/fits/en-de/meta/bootstrap/seconds"}


def test_a_changed_fit_number_is_reported_with_its_path(tmp_path, benchmark_script):
    faults = benchmark_script("faults")
    ref = _study(tmp_path / "ref", [(100, 1.5)], fits=_fits())
    changed = _study(tmp_path / "changed", [(100, 1.5)], fits=_fits(e=1.25, total=99.0))
    got = faults.compare(ref, changed)
    assert got["max_rel_diff_fits_json"] == pytest.approx(0.05 / 1.25)
    assert got["largest_diff_fits_json"] == {"field": "chinchilla/fits/en-de/params/E",
                                             "reference": 1.2, "trial": 1.25}
    assert got["largest_diff_metrics_jsonl"] is None and got["largest_diff_metrics_csv"] is None
    assert faults.differences(got, 1e-6) == [
        "report/fits.json: chinchilla/fits/en-de/params/E: reference 1.2, trial 1.25 "
        "(relative difference 0.04)"]
    # a list entry is named by its index; a number only one side has is an infinite difference
    boot = _fits()
    boot["chinchilla"]["fits"]["en-de"]["bootstrap_params"][1][0] = 1.4
    boot["chinchilla"]["fits"]["en-de"]["params"]["B"] = 300.0
    got = faults.compare(ref, _study(tmp_path / "boot", [(100, 1.5)], fits=boot))
    assert got["max_rel_diff_fits_json"] == float("inf")
    assert got["largest_diff_fits_json"] == {"field": "chinchilla/fits/en-de/params/B",
                                             "reference": None, "trial": 300.0}
    del boot["chinchilla"]["fits"]["en-de"]["params"]["B"]
    got = faults.compare(ref, _study(tmp_path / "boot2", [(100, 1.5)], fits=boot))
    assert got["largest_diff_fits_json"]["field"] == \
        "chinchilla/fits/en-de/bootstrap_params[1][0]"
    assert got["max_rel_diff_fits_json"] == pytest.approx(0.1 / 1.4)


def test_a_changed_metrics_row_is_named_by_its_key(tmp_path, benchmark_script):
    faults = benchmark_script("faults")
    ref = _study(tmp_path / "ref", [(100, 1.5), (200, 1.2)])
    nan = _study(tmp_path / "nan", [(100, 1.5), (200, float("nan"))],
                 csv_rows=[(100, 1.5), (200, 1.2)])
    got = faults.compare(ref, nan)
    assert got["max_rel_diff_metrics_jsonl"] == float("inf")  # NaN where a number was
    assert got["largest_diff_metrics_jsonl"]["field"] == \
        "run_id=r step=200 task=en-de eval_set=validation metric=loss"
    assert [line.split(":")[0] for line in faults.differences(got, 1e-6)] == ["metrics.jsonl"]


@pytest.mark.faults
def test_one_kill_trial_of_the_ci_study_recovers_everything(tmp_path, benchmark_script):
    """SIGKILL the ci study at a random moment, re-run it: the same rows and report."""
    faults = benchmark_script("faults")
    status = faults.main(["--trials", "2", "--dir", str(tmp_path), "--seed", "1"])
    assert status == 0


@pytest.mark.parametrize("lines,phase", [
    ([], "data"),
    (["study cpu-ci: 4 runs …", "data: training a 1024-piece SentencePiece vocabulary"], "data"),
    (["study …", "data: …", "[0/4] micro-1_p0.50_s0 | step 60/300 | loss 2.1"], "training"),
    (["study …", "[3/4] micro-3_p0.50_s0: done in 0:19 — en-de loss 0.35"], "training"),
    (["study …", "[4/4] mini-1_p0.50_s0: done in 0:22 — en-de loss 0.34"], "export"),
    (["study …", "[4/4] mini-1: done in 0:22", "export: 280 rows from 4 runs -> m.csv"], "report"),
    (["study …", "[4/4] x: done in 0:22", "export: …", "fitted L(N) = …", "  en-de p=0.50: …"],
     "report"),
])
def test_the_phase_of_a_killed_study_is_read_from_its_last_lines(benchmark_script, lines, phase):
    assert benchmark_script("faults").phase_of(lines) == phase
