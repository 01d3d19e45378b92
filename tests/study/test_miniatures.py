"""Each CPU miniature of a paper experiment, run end to end (`mnmt-study run --preset NAME`), shows
its paper's qualitative finding on the synthetic family. Slow: 5–15 minutes each on 2 cores
(`pytest -m slow tests/study/test_miniatures.py`); measured results in benchmarks/RESULTS.md.

Set MNMT_MINIATURE_OUT=DIR to keep (and, on a second call, reuse) the studies' output under DIR.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mnmt.study import cli

pytestmark = pytest.mark.slow

MINI_1_N = 58136.0  # mini-1's non-embedding parameters (the verification size of cpu-many-pairs)


def run_miniature(name: str, tmp_path: Path) -> tuple[Path, dict, pd.DataFrame]:
    """Run (or resume) the preset; its output directory, fits.json and final validation losses."""
    keep = os.environ.get("MNMT_MINIATURE_OUT")
    out = Path(keep) / name if keep else tmp_path / name
    assert cli.main(["run", "--preset", name, "--out", str(out)]) == 0
    fits = json.loads((out / "report" / "fits.json").read_text())
    table = pd.read_csv(out / "metrics.csv")
    final = table[(table.metric == "loss") & table.final & (table.eval_set == "validation")]
    return out, fits, final


def test_chen_2dir_low_resource_loss_is_u_shaped(tmp_path):
    """Chen Fig. 2: the capped direction's loss falls, then rises, with its ratio; the DPL is
    fitted per direction and its eq. 7 optimum is compared with every trained baseline."""
    _, fits, final = run_miniature("cpu-chen-2dir", tmp_path)
    low = final[(final.pair == "en-de") & (final.run_id.str.contains("_p"))].sort_values("weight")
    losses = low.value.to_numpy()
    bottom = int(np.argmin(losses))
    assert 0 < bottom < len(losses) - 1, f"no interior minimum: {losses}"
    assert losses[0] > 1.5 * losses[bottom] and losses[-1] > 1.3 * losses[bottom]
    (setting,) = fits["dpl"]["settings"]
    assert {b["mixture"] for b in setting["baselines"]} == {"T1", "T2", "T5", "T10", "T100"}
    assert 0.05 < setting["optimum"]["en-de"] < 0.5  # the low-resource ratio at the U's bottom


def test_chen_4dir_fits_every_direction(tmp_path):
    _, fits, final = run_miniature("cpu-chen-4dir", tmp_path)
    assert fits["dpl"]["fits"], fits.get("skipped")
    (setting,) = fits["dpl"]["settings"]
    assert set(setting["optimum"]) == {"en-fr", "en-de", "en-zh", "en-hi"}
    assert sum(setting["optimum"].values()) == pytest.approx(1.0)
    assert len(setting["baselines"]) == 5


def test_ghorbani_depths_fits_the_bivariate_law(tmp_path):
    """Ghorbani eq. 2: both exponents positive (depth on either side lowers the loss), an interior
    optimal decoder share (eq. 3)."""
    _, fits, final = run_miniature("cpu-ghorbani-depths", tmp_path)
    (entry,) = fits["bivariate"].values()
    params = entry["fit"]["params"]
    assert params["p_e"] > 0 and params["p_d"] > 0
    assert 0.05 < entry["optimal_decoder_fraction"] < 0.95
    by_size = final.groupby("size").value.mean()
    assert by_size["mini-ed-4-2"] < by_size["mini-ed-1-2"]  # encoder depth helps
    assert by_size["mini-ed-2-4"] < by_size["mini-ed-2-1"]  # decoder depth helps


def test_caillaut_decoder_only_loss_falls_with_n_and_d(tmp_path):
    """Caillaut: the decoder-only loss falls with model size and with training tokens; the
    Chinchilla fit has positive exponents on both."""
    _, fits, final = run_miniature("cpu-caillaut-decoder-only", tmp_path)
    for label, fit in fits["chinchilla"]["fits"].items():
        assert fit["params"]["alpha"] > 0 and fit["params"]["beta"] > 0, label
    by_size = final.groupby(["pair", "n"]).value.mean()
    for pair in ("en-de", "en-zh"):
        losses = by_size[pair].sort_index().to_numpy()
        assert losses[-1] < losses[0], (pair, losses)


@pytest.mark.parametrize("name", ["cpu-fernandes-en-de-fr", "cpu-fernandes-de-zh-en"])
def test_fernandes_pair_studies_fit_f_of_p(tmp_path, name):
    """The joint law and f(p) of each pair; f between 0 and 1 at the interior weights."""
    _, fits, _ = run_miniature(name, tmp_path)
    assert fits["joint"] is not None
    for pair, values in fits["fraction"].items():
        for weight, entry in values.items():
            if 0 < float(weight) < 1:
                assert 0 < entry["f"] < 1.2, (pair, weight, entry)


def test_fernandes_3pair_predicts_held_out_three_pair_runs(tmp_path):
    """App. H: the laws fitted on one- and two-pair mixtures predict the three-pair runs
    (measured: |error| 1–10 %, median 7 %; the runs are compute-limited and their last
    evaluations still move by 3–6 %). One seed and no repeated run: no seed noise is measured,
    so only the 2 % clause judges them (fitting.report.sections.heldout; before commit 375b1e0 the fits'
    residual sd passed 8 of 9)."""
    _, fits, _ = run_miniature("cpu-fernandes-3pair", tmp_path)
    entries = [e for e in fits["heldout"] if e.get("primary")]
    assert len(entries) == 9  # 3 held-out runs x 3 pairs
    errors = [abs(e["error"]) for e in entries]
    assert all(e["noise_source"] == "none" and e["within_tolerance"] == e["within_rel"]
               for e in entries), entries
    assert np.median(errors) < 0.10, errors


def _final_by_weights(final: pd.DataFrame, size: str, weights: dict[str, float]) -> pd.Series:
    """Final losses per pair of the run of `size` trained on exactly `weights`."""
    runs = final[final["size"] == size].pivot_table(index="run_id", columns="pair",
                                                    values="weight")
    match = np.all([np.isclose(runs[p], w) for p, w in weights.items()], axis=0)
    (run_id,) = runs.index[match]
    rows = final[final.run_id == run_id]
    return rows.set_index("pair").value


def test_many_pairs_relatives_help_and_held_out_mixtures_are_predicted(tmp_path):
    """cpu-many-pairs (known relatedness): a low-resource pair at weight 0.1 learns more beside
    its relative than beside the isolate, and at mini-1 the contrasts say so beyond 2 of the
    verification runs' pooled seed sd; the chosen mixture law predicts the held-out mixtures
    (measured with the concentration-3 design, benchmarks/RESULTS.md: median |error| 4.9 %; at mini-1,
    10 of 15 within 3 seed sd); untrained
    and over-repeated losses are outside its domain; the recommendation keeps the low-resource
    pairs inside the epoch cap, and trained it beats the temperature and UniMax baselines (paired
    by seed, Holm-corrected) and has a lower J than uniform. The
    eq. 11 transfer matrix does not resolve the relatives from the Dirichlet design (measured;
    see RESULTS.md), so it is not asserted."""
    _, fits, final = run_miniature("cpu-many-pairs", tmp_path)
    zero = {"en-sv": 0.0, "en-da": 0.0, "en-es": 0.0, "en-it": 0.0, "en-fi": 0.0}
    gaps = []
    for size in ("micro-2", "mini-1"):
        for low, relative in (("en-da", "en-sv"), ("en-it", "en-es")):
            beside_relative = _final_by_weights(final, size, {**zero, low: 0.1, relative: 0.9})
            beside_isolate = _final_by_weights(final, size, {**zero, low: 0.1, "en-fi": 0.9})
            gaps.append(beside_isolate[low] - beside_relative[low])
    assert min(gaps[2:]) > 0.02, gaps  # mini-1: both low-resource pairs
    assert np.mean(gaps) > 0.03, gaps
    mix = fits["mixture"]
    assert mix["chosen"] in mix["laws"]
    assert mix["outside_domain"]["untrained"] > 0 and mix["outside_domain"]["over epoch cap"] > 0
    entries = [e for run in mix["heldout"].values() for e in run.values()]
    assert len(mix["heldout"]) == 7 and len(entries) >= 30  # 3 mixtures x 2 sizes + mini-2
    rel = [abs(e["error"]) / e["measured"] for e in entries]
    assert np.median(rel) < 0.08, rel
    summary = mix["heldout_summary"]
    assert summary["with_seed_noise"] == 15  # the 3 held-out mixtures x 5 pairs at mini-1
    assert summary["within_3_seed_sd"] >= 8, summary
    ranked = [c for c in mix["transfer_direct"]["contrast_rankings"] if c["n"] == MINI_1_N]
    assert {(c["target"], c["better"], c["worse"]) for c in ranked if c["beyond_2sd"]} >= {
        ("en-it", "en-es", "en-fi")}, ranked
    beats = mix["verification"]["beats"]
    assert beats["T1"] and beats["T5"] and beats["unimax4"], mix["verification"]["comparisons"]
    rec = mix["recommendation"]
    caps = rec["constraints"]["max_weights"]
    assert all(rec["weights"][p] <= caps[p] + 1e-6 for p in caps)
    assert all(rec["weights"][p] >= m - 1e-6 for p, m in rec["bounds"]["min_weights"].items())
    # trained, lower than uniform on the mean of 3 paired seeds, none diverged (measured with 2
    # seeds: 0.018 lower, benchmarks/RESULTS.md). It replaces "criterion <= uniform's criterion", which
    # held by construction (uniform is one of the optimiser's start points).
    vs_uniform = mix["verification"]["comparisons"]["uniform"]
    assert vs_uniform["n_seeds"] == 3 and vs_uniform["n_diverged"] == 0, vs_uniform
    assert vs_uniform["gap"] > 0, vs_uniform


def test_gettext_study_records_its_catalogs_and_predicts_held_out_mixtures(tmp_path):
    """cpu-gettext (real translations): the catalogs are recorded, every direction is trained
    and evaluated, the chosen mixture law predicts the held-out mixtures (measured: median
    error 3.0 %, at most 12.8 %), and the recommendation is compared with the baselines."""
    out, fits, final = run_miniature("cpu-gettext", tmp_path)
    manifest = json.loads((out / "data" / "gettext_manifest.json").read_text())
    pairs = {"en-de", "en-fr", "en-es", "en-ru", "en-uk", "en-hi"}
    assert set(manifest["pairs"]) == pairs and len(manifest["digest"]) == 64
    assert set(final.pair) >= pairs
    mix = fits["mixture"]
    assert mix["chosen"] in mix["laws"] and mix["laws"][mix["chosen"]]["cv_mape"] < 10
    entries = [e for run in mix["heldout"].values() for e in run.values()]
    assert len(entries) == 7 * 6  # 3 mixtures x 2 sizes + one run at mini-2
    rel = [abs(e["error"]) / e["measured"] for e in entries]
    assert np.median(rel) < 0.06 and max(rel) < 0.25, rel
    rec = mix["recommendation"]
    assert {"uniform", "temperature T=1", "temperature T=5"} <= set(rec["baselines"])
    # trained (3 paired seeds): within 1 % of uniform's J (measured with 2 seeds: 0.25 % above,
    # benchmarks/RESULTS.md; "criterion <= uniform's" held by construction and was dropped)
    v = mix["verification"]["mixtures"]
    assert v["recommended"]["measured"]["objective"] < 1.01 * v["uniform"]["measured"]["objective"]
    assert min(rec["weights"].values()) > 0  # never a pair at weight 0 (en-uk was, untrained)
