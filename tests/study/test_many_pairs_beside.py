"""benchmarks/studies/many_pairs_seeds.py --beside: an adaptive study of the objective judged
beside today's grid of the same design seed."""

from __future__ import annotations

import json
import math


def _study(path, lo: float, hi: float, inside: bool, beats: bool) -> None:
    rec = {"predicted": {"objective": 0.3, "interval": {"estimate": 0.3, "lo95": lo, "hi95": hi}},
           "measured": {"objective": 0.3}, "inside95": inside}
    ver = {"mixtures": {"recommended": rec}, "beats": {"uniform": beats, "T1": True}}
    (path / "report").mkdir(parents=True)
    (path / "report" / "fits.json").write_text(json.dumps({"mixture": {"verification": ver}}))


def test_the_half_width_is_read_beside_the_grids(tmp_path, benchmark_script):
    seeds = benchmark_script("many_pairs_seeds")
    _study(tmp_path / "grid", 0.2, 0.45, True, True)
    _study(tmp_path / "adaptive", 0.27, 0.33, False, False)
    grid = seeds.seed_row(str(tmp_path / "grid"), 7, {})
    mine = seeds.seed_row(str(tmp_path / "adaptive"), 7, {})
    assert math.isclose(mine["half_width_log"], math.log(0.33 / 0.27) / 2)
    ratio = mine["half_width_log"] / grid["half_width_log"]
    line = seeds.beside_table([mine], {7: grid}).splitlines()[-1]
    assert f"({ratio:.2f} of the grid's ±{grid['half_width_log']:.1%})" in line
    assert line.endswith("| no · yes | no · yes |")  # not inside, not every baseline: the grid's are


def test_a_seed_without_its_grid_is_refused_before_anything_trains(tmp_path, benchmark_script,
                                                                    capsys):
    seeds = benchmark_script("many_pairs_seeds")
    rc = seeds.main(["--out", str(tmp_path / "adaptive"), "--seeds", "7",
                     "--beside", str(tmp_path / "grids"), "--gin", "StudySpec.adaptive=True"])
    assert rc == 2
    assert "grids/ds7/report/fits.json: no finished grid of design seed 7" in capsys.readouterr().err
    assert not (tmp_path / "adaptive" / "ds7").exists()


def test_the_noise_floor_pools_the_verified_mixtures_seed_sd_of_log_j(benchmark_script):
    """A law without error still has one seed's noise in every held-out error: the floor is
    t_{0.975, calibration count} times the seed sd of log J pooled over the verified mixtures."""
    seeds = benchmark_script("many_pairs_seeds")
    a, b = [0.30, 0.31, 0.29], [0.50, 0.52]
    ver = {"mixtures": {"recommended": {"measured": {"per_seed": dict(enumerate(a))}},
                        "uniform": {"measured": {"per_seed": dict(enumerate(b))}},
                        "single": {"measured": {"per_seed": {0: 0.4}}}}}  # one seed: no spread
    floor = seeds.noise_floor(ver, 6)
    squares = sum((math.log(x) - sum(map(math.log, v)) / len(v)) ** 2 for v in (a, b) for x in v)
    assert floor["dof"] == 3
    assert math.isclose(floor["sigma_log"], math.sqrt(squares / 3))
    assert math.isclose(floor["half_width"], 2.446912 * floor["sigma_log"], rel_tol=1e-6)
    assert seeds.noise_floor(ver, None) is None  # no calibration count: no t quantile


def test_the_grids_verification_runs_are_not_copied(tmp_path, benchmark_script):
    """A study grown beside a grid trains its own verification: the grid's runs are named by
    mixture, so a different recommendation would meet the grid's 'recommended' runs."""
    seeds = benchmark_script("adaptive_seeds")
    grid = tmp_path / "grid"
    for run in ("mini-1_dir0_s0", "mini-1_verify-recommended_s1000", "mini-1_verify-T1_s1001"):
        (grid / "runs" / run).mkdir(parents=True)
    (grid / "data").mkdir()
    seeds.copy_finished(grid, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out" / "runs").iterdir()) == ["mini-1_dir0_s0"]


def test_a_finished_study_without_bindings_or_the_grids_own_folder_is_refused(
        tmp_path, benchmark_script, capsys):
    seeds = benchmark_script("many_pairs_seeds")
    _study(tmp_path / "grids" / "ds7", 0.2, 0.45, True, True)  # a grid: finished, no .gin
    args = ["--seeds", "7", "--gin", "StudySpec.adaptive=True"]
    assert seeds.main(["--out", str(tmp_path / "grids"), *args]) == 2
    assert "finished without bindings" in capsys.readouterr().err
    assert seeds.main(["--out", str(tmp_path / "grids"), "--beside", str(tmp_path / "grids"),
                       *args]) == 2
    assert "judged beside themselves" in capsys.readouterr().err
