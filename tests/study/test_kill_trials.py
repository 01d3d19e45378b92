"""benchmarks/faults.py: the comparison that decides a kill trial counts what it says (lost,
duplicated and changed rows), and — under `-m faults` — one real trial of the ci study."""

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


def test_lost_duplicated_and_changed_rows_are_counted(tmp_path, benchmark_script):
    faults = benchmark_script("faults")
    ref = _study(tmp_path / "ref", [(100, 1.5), (200, 1.2), (300, 1.0)])
    bad = _study(tmp_path / "bad", [(100, 1.5), (100, 1.5), (200, 1.2 * 1.01)],
                 fits={"joint": {"alpha": 0.55}}, csv_rows=[(100, 1.5), (200, 1.2), (300, 1.0)])
    got = faults.compare(ref, bad)
    assert got["rows_lost"] == 1 and got["rows_duplicated"] == 1
    assert got["max_rel_diff_metrics_jsonl"] == pytest.approx(0.01 / 1.01)
    assert got["max_rel_diff_fits_json"] == pytest.approx(0.05 / 0.55)
    assert got["max_rel_diff_metrics_csv"] == 0


def test_a_missing_csv_row_is_an_infinite_difference(tmp_path, benchmark_script):
    faults = benchmark_script("faults")
    ref = _study(tmp_path / "ref", [(100, 1.5), (200, 1.2)])
    short = _study(tmp_path / "short", [(100, 1.5), (200, 1.2)], csv_rows=[(100, 1.5)])
    assert faults.compare(ref, short)["max_rel_diff_metrics_csv"] == float("inf")


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
