"""`mnmt-study design-pool`: a study's candidate runs, costed like `mnmt-study plan`'s steps."""

from __future__ import annotations

import csv

import pytest

from mnmt.study.cli import main, step_flops
from mnmt.study.design_pool import pool_rows
from mnmt.study.expansion import expand
from mnmt.study.loading import preset


def test_pool_rows_cost_the_study_s_steps_and_tokens():
    spec = preset("default")
    rows = pool_rows(spec, (0.5, 1.0), peak_tflops=100.0, mfu=0.5)
    per_step = step_flops(spec, expand(spec))
    mixtures = {tuple(sorted(r.weights.items())) for r in expand(spec) if not r.heldout}
    assert len(rows) == len(spec.sizes) * len(mixtures) * 2
    for row in rows:
        assert row["flops"] == pytest.approx(row["steps"] * per_step[row["size"]])
        assert row["accelerator_hours"] == pytest.approx(row["flops"] / (100e12 * 0.5) / 3600)
        pairs = [k[2:] for k in row if k.startswith("w_")]
        assert sum(row[f"d_{p}"] for p in pairs) == pytest.approx(row["tokens"])
    full = [r for r in rows if r["steps"] == spec.steps_for(r["size"])]
    half = [r for r in rows if r["steps"] != spec.steps_for(r["size"])]
    assert sum(r["flops"] for r in full) == pytest.approx(2 * sum(r["flops"] for r in half), rel=1e-3)


def test_design_pool_command_writes_a_csv_and_rejects_bad_fractions(tmp_path, capsys):
    out = tmp_path / "pool.csv"
    assert main(["design-pool", "--csv", str(out), "--fractions", "1"]) == 0
    with open(out, encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert {"n", "tokens", "d_en-de", "cost", "accelerator_hours"} <= set(header)
    assert main(["design-pool", "--csv", str(tmp_path / "x.csv"), "--fractions", "0"]) == 2
    assert "step fractions" in capsys.readouterr().err
