"""The verification section (fitting.report.sections.verification): the paired verdict with Holm's
correction, diverged seeds, the seed noise of trained pairs only, the payload from known numbers,
and verification runs kept out of every fit."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fitting.core.options import UncertaintyOptions
from fitting.report.markdown import Document
from fitting.report.sections.verification import (
    RECOMMENDED,
    compare_paired,
    holm,
    predict_mixtures,
    split_verification,
    verification_payload,
    verification_section,
    verification_seed_noise,
)
from fitting.report.writer import ReportOptions, write_report
from fitting.test_utils import make_final_table

PI = {"a": 0.5, "b": 0.25, "c": 0.25}
REC = {"weights": {"a": 0.6, "b": 0.2, "c": 0.2}, "law": "transfer", "target_size": 1e6,
       "constraints": {"preferences": PI, "max_loss": {}}}


def _plan(names=("uniform", "T5"), seeds=(1000, 1001)):
    mixtures = {RECOMMENDED: dict(REC["weights"]),
                **{n: {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3} for n in names}}
    runs = {f"m_{n}_s{s}": n for n in mixtures for s in seeds}
    return {"size": "mini-1", "seeds": list(seeds), "mixtures": mixtures, "runs": runs}


def _losses(j: float) -> dict[str, float]:
    """Per-pair losses whose objective Σ π_i L_i is exactly j."""
    return {"a": j, "b": j + 0.2, "c": j - 0.2}


def test_holm_against_a_hand_computed_example():
    # sorted: d .005·4 = .02; a .01·3 = .03; c .03·2 = .06; b .04·1 = .04 → max(.06, .04)
    got = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert got == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06, "d": 0.02})
    # a baseline without a test counts as p = 1: it still counts in m
    assert holm({"a": 0.01, "b": float("nan")}) == pytest.approx({"a": 0.02, "b": 1.0})


def test_pairing_by_seed_finds_a_gap_that_the_seeds_spread_hides():
    """Old rule (082b6f0): Welch's sd of the difference of means, √(s_r²/n + s_b²/n), from
    seeds treated as independent — here ≈ 0.41 for a gap of 0.05, no verdict. The seeds are the
    same initialisations for both mixtures, so the per-seed differences d_s carry the
    comparison: sd(d) = 0.005, t = 0.05 / (0.005/√3) on 2 dof."""
    rec = {1000: 1.0, 1001: 1.5, 1002: 2.0}
    base = {1000: 1.05, 1001: 1.555, 1002: 2.045}
    c = compare_paired(rec, base)
    assert c["gap"] == pytest.approx(0.05) and c["paired_sd"] == pytest.approx(0.005)
    assert c["n_seeds"] == 3 and c["n_diverged"] == 0 and c["large"]
    t = 0.05 / (0.005 / math.sqrt(3))
    assert c["p"] == pytest.approx((1 - t / math.sqrt(t * t + 2)) / 2, rel=1e-6)  # t_2 tail
    welch_sd = math.sqrt(np.var(list(rec.values()), ddof=1) / 3
                         + np.var(list(base.values()), ddof=1) / 3)
    assert c["gap"] < 2 * welch_sd  # the old rule: no verdict
    v = verification_payload(_plan(("uniform",), seeds=(1000, 1001, 1002)), REC, {
        RECOMMENDED: {f"m_recommended_s{s}": _losses(j) for s, j in rec.items()},
        "uniform": {f"m_uniform_s{s}": _losses(j) for s, j in base.items()}})
    assert v["beats"] == {"uniform": True}
    # the same values with the baseline's seeds shuffled: no pairing left, no verdict
    shuffled = compare_paired(rec, {1000: 2.045, 1001: 1.05, 1002: 1.555})
    assert not shuffled["large"] and shuffled["p"] > 0.05


def test_compare_paired_needs_two_paired_seeds():
    out = compare_paired({1000: 1.0, 1001: 1.1}, {1000: 5.0, 1002: 5.1})
    assert out["n_seeds"] == 1 and math.isnan(out["paired_sd"]) and math.isnan(out["p"])
    assert out["gap"] == pytest.approx(4.0) and "fewer than 2" in out["why"]


def test_holm_changes_a_verdict():
    """Old rule (082b6f0): each baseline judged alone (gap > 2 sd, no multiplicity
    correction): both would be beaten. Two baselines each with d = (g − δ, g, g + δ), δ = 0.01,
    g = 0.0225: one-sided paired p ≈ 0.030 < 0.05 alone, gap 2.25 paired sd; Holm: the smaller
    p times 2 = 0.06, the other max(0.06, 0.03): neither is beaten."""
    rec = {1000: 1.0, 1001: 1.0, 1002: 1.0}
    base = {s: 1.0 + 0.0225 + e for s, e in zip(rec, (-0.01, 0.0, 0.01), strict=True)}
    alone = compare_paired(rec, base)
    assert alone["p"] == pytest.approx(0.030, abs=0.001) and alone["large"]
    measured = {RECOMMENDED: {f"m_recommended_s{s}": _losses(j) for s, j in rec.items()},
                **{name: {f"m_{name}_s{s}": _losses(j) for s, j in base.items()}
                   for name in ("uniform", "T5")}}
    v = verification_payload(_plan(seeds=(1000, 1001, 1002)), REC, measured)
    assert v["beats"] == {"uniform": False, "T5": False}
    for c in v["comparisons"].values():
        assert c["p"] < 0.05 and c["p_holm"] == pytest.approx(2 * c["p"])
        assert "Holm" in c["why"]
    single = verification_payload(_plan(("uniform",), seeds=(1000, 1001, 1002)), REC,
                                  {k: measured[k] for k in (RECOMMENDED, "uniform")})
    assert single["beats"] == {"uniform": True}  # one baseline: no correction


def test_a_diverged_seed_is_counted_and_a_diverged_recommendation_loses():
    """Old rule (082b6f0): final losses read with drop_invalid=True, so a NaN made that seed's
    J NaN and compare_means dropped it silently: the recommendation, 2 good seeds of 3, beat
    uniform by far. Now the diverged seed is counted, shown and a loss."""
    seeds = (1000, 1001, 1002)
    rec = {f"m_recommended_s{s}": _losses(1.0 + 0.01 * i) for i, s in enumerate(seeds)}
    rec["m_recommended_s1002"]["b"] = float("nan")
    base = {f"m_uniform_s{s}": _losses(2.0 + 0.01 * i) for i, s in enumerate(seeds)}
    v = verification_payload(_plan(("uniform",), seeds=seeds), REC,
                             {RECOMMENDED: rec, "uniform": base})
    c = v["comparisons"]["uniform"]
    assert v["beats"] == {"uniform": False}
    assert c["n_diverged"] == 1 and c["diverged"]["recommended"] == [1002]
    assert c["n_seeds"] == 2 and "diverged" in c["why"]
    assert v["mixtures"][RECOMMENDED]["diverged"] == ["m_recommended_s1002"]
    assert any("1 of 3 runs diverged" in note for note in v["notes"])
    # a baseline seed that diverged leaves the pairing, counted; the others still decide
    base["m_uniform_s1001"]["a"] = float("inf")
    rec["m_recommended_s1002"]["b"] = 1.22
    v = verification_payload(_plan(("uniform",), seeds=seeds), REC,
                             {RECOMMENDED: rec, "uniform": base})
    c = v["comparisons"]["uniform"]
    assert c["n_diverged"] == 1 and c["diverged"]["baseline"] == [1001] and c["n_seeds"] == 2
    assert v["beats"] == {"uniform": True}


def test_payload_objective_sd_and_verdict_from_known_numbers():
    seeds = (1000, 1001, 1002)
    plan = _plan(seeds=seeds)
    js = (1.0, 1.1, 1.2)  # recommended: mean 1.1, sd 0.1
    # uniform: d = 0.10, 0.11, 0.12 (sd 0.01): beats; T5: d = 0.01, 0.03, 0.019, gap 0.0197
    # just under 2 paired sd (0.0200), p ≈ 0.04 (the larger p: Holm multiplies it by 1)
    measured = {
        RECOMMENDED: {f"m_recommended_s{s}": _losses(j) for s, j in zip(seeds, js, strict=True)},
        "uniform": {f"m_uniform_s{s}": _losses(j + 0.10 + 0.01 * i)
                    for i, (s, j) in enumerate(zip(seeds, js, strict=True))},
        "T5": {f"m_T5_s{s}": _losses(j + d) for s, j, d in zip(seeds, js, (0.01, 0.03, 0.019),
                                                              strict=True)},
    }
    v = verification_payload(plan, REC, measured, n=5.8e4)
    rec = v["mixtures"][RECOMMENDED]
    assert rec["measured"]["objective"] == pytest.approx(1.1)
    assert rec["sd"]["objective"] == pytest.approx(0.1)
    assert rec["measured"]["losses"]["b"] == pytest.approx(1.3)
    assert rec["weights"] == REC["weights"] and rec["predicted"] is None
    assert v["beats"] == {"uniform": True, "T5": False}
    u, t5 = v["comparisons"]["uniform"], v["comparisons"]["T5"]
    assert u["gap"] == pytest.approx(0.11) and u["paired_sd"] == pytest.approx(0.01)
    d = np.array([0.01, 0.03, 0.019])
    assert t5["gap"] == pytest.approx(d.mean()) and t5["paired_sd"] == pytest.approx(d.std(ddof=1))
    assert t5["p_holm"] < 0.05 and "paired sd" in t5["why"]
    assert v["size"] == "mini-1" and v["seeds"] == list(seeds) and v["n"] == 5.8e4
    assert v["objective"]["preferences"] == PI and not v["notes"]


def test_payload_notes_missing_runs_and_a_changed_recommendation():
    plan = _plan(("uniform",))
    plan["mixtures"][RECOMMENDED] = {"a": 0.1, "b": 0.1, "c": 0.8}
    measured = {RECOMMENDED: {"m_recommended_s1000": _losses(1.0)},
                "uniform": {"m_uniform_s1000": _losses(2.0), "m_uniform_s1001": _losses(2.1)}}
    v = verification_payload(plan, REC, measured)
    assert v["beats"] == {"uniform": False}  # one seed of the recommendation: no verdict
    assert any("1 of 2 runs" in note for note in v["notes"])
    assert any("differs" in note for note in v["notes"])


def test_a_measured_loss_over_its_maximum_loses_every_verdict():
    rec = {**REC, "constraints": {"preferences": PI, "max_loss": {"a": 0.5}}}
    plan = _plan(("uniform",))
    measured = {RECOMMENDED: {"m_recommended_s1000": _losses(1.0),
                              "m_recommended_s1001": _losses(1.01)},
                "uniform": {"m_uniform_s1000": _losses(3.0), "m_uniform_s1001": _losses(3.01)}}
    v = verification_payload(plan, rec, measured)
    assert v["beats"] == {"uniform": False}
    assert v["mixtures"][RECOMMENDED]["violations"]
    assert "maximum loss" in v["comparisons"]["uniform"]["why"]


class _Law:
    """A law whose prediction is L_i = 1 + w_i · n / 1e5 with two bootstrap refits."""

    pairs = ["a", "b", "c"]
    boot = [0.9, 1.1]

    def predict(self, n, W):
        return 1.0 + np.asarray(W) * np.asarray(n)[:, None] / 1e5

    def predict_samples(self, n, W):
        return np.stack([1.0 + f * np.asarray(W) * np.asarray(n)[:, None] / 1e5
                         for f in self.boot])


def test_predict_mixtures_objective_and_bands():
    out = predict_mixtures(_Law(), 1e5, _plan(("uniform",))["mixtures"], PI)
    rec = out[RECOMMENDED]
    assert rec["losses"] == pytest.approx({"a": 1.6, "b": 1.2, "c": 1.2})
    assert rec["objective"] == pytest.approx(0.5 * 1.6 + 0.25 * 1.2 + 0.25 * 1.2)
    lo, hi = rec["band"]
    assert lo < rec["objective"] < hi
    assert rec["bands"]["a"][0] < 1.6 < rec["bands"]["a"][1]


def test_an_untrained_pair_is_not_predicted_and_a_zero_preference_does_not_count():
    mixtures = {RECOMMENDED: {"a": 0.5, "b": 0.5, "c": 0.0}}
    out = predict_mixtures(_Law(), 1e5, mixtures, {"a": 0.5, "b": 0.5, "c": 0.0})[RECOMMENDED]
    assert math.isnan(out["losses"]["c"]) and math.isnan(out["bands"]["c"][0])
    assert out["objective"] == pytest.approx(1.5)
    assert math.isnan(predict_mixtures(_Law(), 1e5, mixtures, PI)[RECOMMENDED]["objective"])


def _verify_rows(base: pd.DataFrame, plan: dict, value: float) -> pd.DataFrame:
    """Rows of the plan's runs (absurd losses) shaped like ``base``'s largest-size rows."""
    top = base[base["n"] == base["n"].max()].drop_duplicates("pair")
    rows = []
    for rid in plan["runs"]:
        for _, r in top.iterrows():
            rows.append({**r.to_dict(), "run_id": rid, "value": value, "weight": 0.5})
    return pd.DataFrame(rows)


def test_split_verification_takes_out_the_runs_and_their_branches():
    base = make_final_table(sizes=[2e5, 1e6])
    plan = {"size": "s1", "seeds": [1], "mixtures": {RECOMMENDED: {}},
            "runs": {"v_recommended_s1": RECOMMENDED}}
    extra = _verify_rows(base, plan, 50.0)
    branch = extra.assign(run_id="v_recommended_s1@b100", parent_run="v_recommended_s1")
    table = pd.concat([base.assign(parent_run=""), extra.assign(parent_run=""), branch])
    kept, verify = split_verification(table, plan)
    assert len(kept) == len(base) and set(kept["run_id"]) == set(base["run_id"])
    assert len(verify) == len(extra) + len(branch)
    assert split_verification(base, None)[0] is base


def test_verification_runs_never_enter_the_fits(tmp_path):
    base = make_final_table(sizes=np.geomspace(2e5, 2e7, 4), weights=(0.0, 0.5, 1.0))
    plan = {"size": "s4", "seeds": [1000, 1001],
            "mixtures": {RECOMMENDED: {"en-de": 0.5, "en-zh": 0.5}},
            "runs": {"s4_verify-recommended_s1000": RECOMMENDED,
                     "s4_verify-recommended_s1001": RECOMMENDED}}
    plain = write_report(base, str(tmp_path / "plain"),
                         ReportOptions(uncertainty=UncertaintyOptions(method=None, n_refits=4)))
    with_v = write_report(pd.concat([base, _verify_rows(base, plan, 50.0)]),
                          str(tmp_path / "verified"), ReportOptions(uncertainty=UncertaintyOptions(method=None, n_refits=4),
                                                                    verification=plan))
    a = json.loads(open(plain.json_path).read())
    b = json.loads(open(with_v.json_path).read())
    assert b["power"] == a["power"] and b["joint"] == a["joint"]
    # a two-pair table has no K-pair recommendation: the section says so
    assert b["mixture"]["verification"] == {"skipped": "the report has no K-pair "
                                                       "recommendation to verify"}
    assert "Verification" in with_v.markdown


def _two_pair_plan(seeds=(1000, 1001)) -> dict:
    """recommended trains both pairs; preferred trains en-de only (en-zh zero-shot)."""
    mixtures = {RECOMMENDED: {"en-de": 0.5, "en-zh": 0.5}, "preferred": {"en-de": 1.0,
                                                                         "en-zh": 0.0}}
    return {"size": "s1", "seeds": list(seeds), "mixtures": mixtures,
            "runs": {f"m_{m}_s{s}": m for m in mixtures for s in seeds}}


def _two_pair_rows() -> tuple[pd.DataFrame, dict, float]:
    base = make_final_table(sizes=[2e5, 1e6])
    plan = _two_pair_plan()
    rows = _verify_rows(base, plan, 1.0)
    # recommended: 1.0 and 1.2 for both pairs; preferred en-de: 2.0 twice (no spread), en-zh
    # (weight 0, zero-shot): 3.0 and 6.0
    rows.loc[rows["run_id"] == "m_recommended_s1001", "value"] = 1.2
    pref = rows["run_id"].str.startswith("m_preferred")
    rows.loc[pref, "value"] = 2.0
    rows.loc[pref & (rows["pair"] == "en-zh") & rows["run_id"].str.endswith("s1001"),
             "value"] = 6.0
    rows.loc[pref & (rows["pair"] == "en-zh") & rows["run_id"].str.endswith("s1000"),
             "value"] = 3.0
    return rows, plan, float(base["n"].max())


def test_verification_seed_noise_pools_trained_pairs_only():
    """Old rule (082b6f0): every evaluated pair of every run was pooled, the zero-shot en-zh of
    `preferred` (3.0 and 6.0: a relative sd of 47 %) with the trained ones, so en-zh's σ came
    out ≈ 35 % on 2 dof instead of 13 % on 1."""
    rows, plan, n = _two_pair_rows()
    got = verification_seed_noise(rows, plan)
    assert set(got) == {("en-de", n), ("en-zh", n)}
    # en-de: Σ (y/ȳ − 1)² = 2 (1/11)² over 2 dof (recommended and preferred train it)
    assert got[("en-de", n)]["relative_sd"] == pytest.approx(1 / 11)
    assert got[("en-de", n)]["dof"] == 2 and got[("en-de", n)]["mixtures"] == 2
    # en-zh: recommended only (preferred holds it at weight 0): 2 (1/11)² over 1 dof
    assert got[("en-zh", n)]["relative_sd"] == pytest.approx(math.sqrt(2) / 11)
    assert got[("en-zh", n)]["dof"] == 1 and got[("en-zh", n)]["mixtures"] == 1
    zero = verification_seed_noise(rows, plan, trained=False)
    assert set(zero) == {("en-zh", n)}
    assert zero[("en-zh", n)]["relative_sd"] == pytest.approx(math.sqrt(2) / 3)
    assert verification_seed_noise(rows, None) == {}


def test_the_section_shows_the_seed_noise_with_its_dof_and_the_paired_table():
    rows, plan, n = _two_pair_rows()
    pi = {"en-de": 0.5, "en-zh": 0.5}
    rec = {"weights": plan["mixtures"][RECOMMENDED], "law": "transfer", "target_size": n,
           "constraints": {"preferences": pi, "max_loss": {}}}
    rows.loc[(rows["run_id"] == "m_recommended_s1001") & (rows["pair"] == "en-de"),
             "value"] = float("nan")  # a diverged seed: kept and counted, not dropped
    doc, rep = Document(), SimpleNamespace(skipped={}, warnings=[])
    v = verification_section(doc, rep, rows, {"recommendation": rec}, plan, {})
    text = doc.markdown()
    # the diverged run is out of the noise too: en-de from preferred only, en-zh from the one
    # finite recommended seed (no sd)
    assert v["seed_noise"]["trained"] == [{"pair": "en-de", "n": n, "relative_sd": 0.0,
                                           "mixtures": 1, "dof": 1}]
    assert "en-de 0 % (1 mixtures, 1 dof)" in text
    assert "en-zh 47 % (1 mixtures, 1 dof)" in text  # the zero-shot pair, shown apart
    for column in ("mean gap", "paired sd", "n seeds", "n diverged", "Holm p", "verdict"):
        assert column in text
    assert v["mixtures"][RECOMMENDED]["diverged"] == ["m_recommended_s1001"]
    assert v["comparisons"]["preferred"]["n_diverged"] == 1 and not v["beats"]["preferred"]
    assert any("diverged" in w for w in rep.warnings)
    assert not any("another size" in note for note in v["notes"])
    rec["target_size"] = 2 * n
    other = verification_section(Document(), SimpleNamespace(skipped={}, warnings=[]), rows,
                                 {"recommendation": rec}, plan, {})
    assert any("another size" in note for note in other["notes"])
