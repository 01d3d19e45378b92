"""benchmarks/studies/many_pairs_seeds.py's pooled coverage: calibrated intervals only, with
Clopper–Pearson intervals over the points and over the clusters (seed; seed × pair)."""

from __future__ import annotations


def _fits(calibrated: bool) -> dict:
    iv = {"estimate": 1.0, "lo95": 0.9, "hi95": 1.1, "calibrated": calibrated}
    mix = {f"m{i}": {"predicted": {"objective": 1.0, "interval": iv},
                     "measured": {"objective": 1.0}, "inside80": i != 0, "inside95": True}
           for i in range(3)}
    held = {"run": {p: {"inside80": p == "en-de", "inside95": True, "calibrated": p != "en-hi",
                        "predictive": iv, "measured": 1.0} for p in ("en-de", "en-fr", "en-hi")}}
    return {"verification": {"mixtures": mix}, "heldout": held}


def test_pooled_coverage_counts_calibrated_points_in_seed_and_pair_clusters(benchmark_script,
                                                                            tmp_path):
    seeds = benchmark_script("many_pairs_seeds")
    import json
    import os
    rows = []
    for seed, calibrated in ((1, True), (2, True), (3, False)):
        out = tmp_path / f"ds{seed}"
        os.makedirs(out / "report")
        (out / "report" / "fits.json").write_text(json.dumps({"mixture": _fits(calibrated)}))
        rows.append(seeds.seed_row(str(out), seed, {"wall_s": None, "rc": 0}))
    cov = seeds.pooled_coverage(rows)
    ver = cov["verification"]["0.80"]
    assert (ver["inside"], ver["n"], ver["clusters"]) == (4, 6, 2)  # seed 3 uncalibrated
    held = cov["heldout"]["0.80"]
    assert (held["inside"], held["n"], held["clusters"]) == (3, 6, 6)  # en-hi uncalibrated
    assert "4/6 (90 % CI" in seeds.coverage_lines(cov)
