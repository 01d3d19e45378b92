"""benchmarks/studies/adaptive_seeds.py: the judging script refuses the development seed and a
folder grown with other bindings, and its --widths table reads each round's interval at the FLOPs
spent before the round."""

from __future__ import annotations

import json

from mnmt.study import adaptive


def _grid(tmp_path, vocab_seed: int):
    grid = tmp_path / f"seed{vocab_seed}"
    (grid / "report").mkdir(parents=True)
    (grid / "report" / "fits.json").write_text("{}")
    (grid / "study.json").write_text(json.dumps({"vocab_seed": vocab_seed}))
    return grid


def test_the_development_seed_is_refused(tmp_path, benchmark_script, capsys):
    seeds = benchmark_script("adaptive_seeds")
    rc = seeds.main([str(_grid(tmp_path, 0)), "--out", str(tmp_path / "out")])
    assert rc == 2
    assert "development seed" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_folder_grown_with_other_bindings_is_refused(tmp_path, benchmark_script, capsys):
    seeds = benchmark_script("adaptive_seeds")
    grid = _grid(tmp_path, 31)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "seed31.gin").write_text("StudySpec.adaptive=True\n")
    rc = seeds.main([str(grid), "--out", str(tmp_path / "out")])
    assert rc == 2
    assert "grown with" in capsys.readouterr().err
    assert seeds.check_bindings(tmp_path / "out" / "seed31", ["StudySpec.adaptive=True"]) is None


def test_widths_read_the_flops_spent_before_the_round(tmp_path, benchmark_script):
    seeds = benchmark_script("adaptive_seeds")
    study = tmp_path / "study"
    study.mkdir()
    adaptive.append_round(study, {"round": 0, "spent": 50.0, "cost": 50.0, "budget": 100.0})
    before = {"E": 0.1, "relative": 0.2, "sd_resample": 0.05, "sd_forms": 0.09}
    adaptive.append_round(study, {"round": 1, "spent": 75.0, "cost": 25.0, "budget": 100.0,
                                  "before": before})
    adaptive.append_round(study, {"round": 2, "spent": 75.0, "budget": 100.0, "stop": "budget",
                                  "before": {**before, "relative": 3.0}})
    rows = seeds.width_rows(study)
    assert len(rows) == 2  # round 0 has no interval before it
    assert "| 1 | 50% |" in rows[0] and "±20.0%" in rows[0] and "| 0.090 |" in rows[0]
    assert "| 2 | 75% |" in rows[1] and "| none |" in rows[1]  # wider than ×e^±1: no interval
    assert rows[0].endswith("| 0.090 | – |")  # E's interval has no held-out term


def test_widths_of_an_objective_study_read_j_and_its_held_out_term(tmp_path, benchmark_script):
    seeds = benchmark_script("adaptive_seeds")
    study = tmp_path / "study"
    study.mkdir()
    before = {"J": 0.3047, "relative": 0.132, "sd_resample": 0.014, "sd_forms": 0.045,
              "sd_extrapolation": 0.054, "rule": "calibration", "calibrated": True}
    adaptive.append_round(study, {"round": 1, "spent": 5.0, "cost": 1.0, "budget": 10.0,
                                  "before": {"J": None, "relative": None, "why": "one size"}})
    adaptive.append_round(study, {"round": 5, "spent": 9.0, "cost": 1.0, "budget": 10.0,
                                  "before": before})
    assert seeds.width_rows(study) == [
        "| study | 1 | 40% | – | none | – | – | – |",  # no interval yet: nothing to read
        "| study | 5 | 80% | 0.3047 | ±13.2% | 0.014 | 0.045 | 0.054 |"]


def test_widths_need_round_records_not_a_report(tmp_path, benchmark_script, capsys):
    seeds = benchmark_script("adaptive_seeds")
    growing = tmp_path / "growing"
    growing.mkdir()
    adaptive.append_round(growing, {"round": 0, "spent": 1.0, "cost": 1.0, "budget": 4.0})
    assert seeds.main(["--widths", str(growing)]) == 0  # still growing: no report yet
    assert seeds.main(["--widths", str(_grid(tmp_path, 31))]) == 2  # a fixed grid: no rounds
    assert "not an adaptive study" in capsys.readouterr().err
