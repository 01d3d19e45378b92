"""Integration: `mnmt-study run --preset ci` end to end through data, models, trainer and fitting."""

import json
import math
from pathlib import Path

import pytest

from mnmt.study.spec import PRESETS

pytestmark = pytest.mark.integration

RUN_KEYS = {"schema_version", "run_id", "study", "status", "model", "mixture", "training",
            "vocabulary", "gin_config", "versions"}
ROW_KEYS = {"run_id": str, "step": int, "tokens": int, "task": str, "eval_set": str,
            "metric": str, "value": float}


def read_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def final_loss(rows, pair, eval_set="validation"):
    losses = [r for r in rows if r["metric"] == "loss" and r["task"] == pair and r["eval_set"] == eval_set]
    return max(losses, key=lambda r: r["step"])["value"]


def test_run_directories_follow_the_schema(ci_study):
    out, _ = ci_study
    run_dirs = sorted((out / "runs").iterdir())
    assert len(run_dirs) == 4
    for run_dir in run_dirs:
        meta = json.loads((run_dir / "run.json").read_text())
        assert RUN_KEYS <= set(meta), RUN_KEYS - set(meta)
        assert meta["status"] == "finished" and meta["run_id"] == run_dir.name
        params = meta["model"]["params"]
        assert params["total"] == params["embedding"] + params["non_embedding"]
        assert params["non_embedding"] == params["encoder"] + params["decoder"]
        assert meta["mixture"]["weights"] == pytest.approx({"en-de": 0.5, "en-zh": 0.5})
        rows = read_rows(run_dir)
        assert rows
        keys = set()
        for row in rows:
            assert set(row) == set(ROW_KEYS)
            for name, kind in ROW_KEYS.items():
                assert isinstance(row[name], kind) or (kind is float and isinstance(row[name], int))
            assert row["run_id"] == meta["run_id"] and math.isfinite(row["value"])
            key = (row["step"], row["task"], row["eval_set"], row["metric"])
            assert key not in keys, f"duplicate row {key} in {run_dir}"
            keys.add(key)
        metrics = {r["metric"] for r in rows}
        assert {"loss", "train_loss", "bleu", "chrf"} <= metrics


def test_training_lowers_the_loss(ci_study):
    out, _ = ci_study
    for run_dir in (out / "runs").iterdir():
        rows = read_rows(run_dir)
        for pair in ("en-de", "en-zh"):
            losses = sorted((r["step"], r["value"]) for r in rows
                            if r["metric"] == "loss" and r["task"] == pair and r["eval_set"] == "validation")
            assert losses[-1][1] < losses[0][1] - 0.5, (run_dir.name, pair, losses)
        train = sorted((r["step"], r["value"]) for r in rows
                       if r["metric"] == "train_loss" and r["task"] == "all")
        assert train[-1][1] < train[0][1]


def test_largest_model_beats_smallest_on_the_same_weight(ci_study):
    out, _ = ci_study
    sizes = PRESETS["ci"].sizes
    small = read_rows(out / "runs" / f"{sizes[0]}_p0.50_s0")
    large = read_rows(out / "runs" / f"{sizes[-1]}_p0.50_s0")
    for pair in ("en-de", "en-zh"):
        assert final_loss(large, pair) < final_loss(small, pair)


def test_export_and_report(ci_study):
    out, proc = ci_study
    import pandas as pd

    table = pd.read_csv(out / "metrics.csv")
    assert {"run_id", "n", "pair", "weight", "metric", "value", "final"} <= set(table.columns)
    assert table["run_id"].nunique() == 4
    report = out / "report"
    assert (report / "report.md").stat().st_size > 0
    figures = list((report / "figures").glob("*.png"))
    assert figures and all(f.stat().st_size > 1000 for f in figures)
    fits = json.loads((report / "fits.json").read_text())
    alphas = [fit["params"]["alpha"] for by_weight in fits["power"].values() for fit in by_weight.values()]
    assert alphas and all(a > 0 for a in alphas), alphas
    assert "alpha" in proc.stderr  # the fitted exponents are printed


def test_rerun_skips_finished_runs_and_keeps_metrics(ci_study, ci_study_runner):
    out, _ = ci_study
    before = {p: p.read_bytes() for p in (out / "runs").glob("*/metrics.jsonl")}
    proc = ci_study_runner(out, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stderr.count("skipped (finished earlier)") == 4
    assert {p: p.read_bytes() for p in before} == before
