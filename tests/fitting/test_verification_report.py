"""The verification section (fitting.report.verification): the verdict at the 2-sd edge, the
payload from known numbers, and verification runs kept out of every fit."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from fitting.report.verification import (
    RECOMMENDED,
    compare_means,
    predict_mixtures,
    split_verification,
    verification_payload,
    verification_seed_noise,
)
from fitting.report.writer import write_report
from fitting.test_utils import make_final_table

PI = {"a": 0.5, "b": 0.25, "c": 0.25}
REC = {"weights": {"a": 0.6, "b": 0.2, "c": 0.2}, "law": "transfer", "target_size": 1e6,
       "constraints": {"preferences": PI, "max_loss": {}}}


def _plan(names=("uniform", "T5")):
    mixtures = {RECOMMENDED: dict(REC["weights"]),
                **{n: {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3} for n in names}}
    runs = {f"m_{n}_s{s}": n for n in mixtures for s in (1000, 1001)}
    return {"size": "mini-1", "seeds": [1000, 1001], "mixtures": mixtures, "runs": runs}


def _losses(j: float) -> dict[str, float]:
    """Per-pair losses whose objective Σ π_i L_i is exactly j."""
    return {"a": j, "b": j + 0.2, "c": j - 0.2}


def test_compare_means_at_the_two_sd_edge():
    rec = [1.0, 1.2]  # mean 1.1, s² 0.02
    sd = math.sqrt(0.02 / 2 + 0.02 / 2)
    above = compare_means(rec, [1.1 + 2 * sd + 0.005 - 0.1, 1.1 + 2 * sd + 0.005 + 0.1])
    below = compare_means(rec, [1.1 + 2 * sd - 0.005 - 0.1, 1.1 + 2 * sd - 0.005 + 0.1])
    assert above["sd"] == pytest.approx(sd) and below["sd"] == pytest.approx(sd)
    assert above["gap"] == pytest.approx(2 * sd + 0.005)
    assert above["beats"] is True and below["beats"] is False
    worse = compare_means(rec, [0.5, 0.6])
    assert worse["gap"] < 0 and worse["beats"] is False


def test_compare_means_p_value_is_welchs_t_on_two_dof_for_two_seeds():
    # equal variances, two seeds a side: Welch's dof = 2, and t_2's tail is
    # P(T > t) = (1 − t / √(t² + 2)) / 2 in closed form
    rec = [1.0, 1.2]
    sd = math.sqrt(0.02 / 2 + 0.02 / 2)
    out = compare_means(rec, [1.1 + 2 * sd - 0.1, 1.1 + 2 * sd + 0.1])
    assert out["p"] == pytest.approx((1 - 2 / math.sqrt(6)) / 2, rel=1e-6)  # 0.092
    far = compare_means(rec, [3.0, 3.2])
    assert far["p"] < 0.01 < out["p"]
    assert compare_means(rec, [0.5, 0.6])["p"] > 0.5  # the baseline is better


def test_compare_means_needs_two_seeds_per_side():
    out = compare_means([1.0], [5.0, 5.1])
    assert out["beats"] is False and math.isnan(out["sd"]) and out["gap"] == pytest.approx(4.05)


def test_payload_objective_sd_and_verdict_from_known_numbers():
    plan = _plan()
    sd = math.sqrt(0.02 / 2 + 0.02 / 2)  # recommended and baselines: per-seed J ± 0.1
    measured = {
        RECOMMENDED: {"m_recommended_s1000": _losses(1.0), "m_recommended_s1001": _losses(1.2)},
        "uniform": {"m_uniform_s1000": _losses(1.0 + 2 * sd + 0.01),
                    "m_uniform_s1001": _losses(1.2 + 2 * sd + 0.01)},
        "T5": {"m_T5_s1000": _losses(1.0 + 2 * sd - 0.01),
               "m_T5_s1001": _losses(1.2 + 2 * sd - 0.01)},
    }
    v = verification_payload(plan, REC, measured, n=5.8e4)
    rec = v["mixtures"][RECOMMENDED]
    assert rec["measured"]["objective"] == pytest.approx(1.1)
    assert rec["sd"]["objective"] == pytest.approx(math.sqrt(0.02))
    assert rec["measured"]["losses"]["b"] == pytest.approx(1.3)
    assert rec["weights"] == REC["weights"] and rec["predicted"] is None
    assert v["beats"] == {"uniform": True, "T5": False}
    assert v["comparisons"]["uniform"]["sd"] == pytest.approx(sd)
    assert v["size"] == "mini-1" and v["seeds"] == [1000, 1001] and v["n"] == 5.8e4
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
    plain = write_report(base, str(tmp_path / "plain"), uncertainty=None, n_refits=4)
    with_v = write_report(pd.concat([base, _verify_rows(base, plan, 50.0)]),
                          str(tmp_path / "verified"), uncertainty=None, n_refits=4,
                          verification=plan)
    a = json.loads(open(plain.json_path).read())
    b = json.loads(open(with_v.json_path).read())
    assert b["power"] == a["power"] and b["joint"] == a["joint"]
    # a two-pair table has no K-pair recommendation: the section says so
    assert b["mixture"]["verification"] == {"skipped": "the report has no K-pair "
                                                       "recommendation to verify"}
    assert "Verification" in with_v.markdown


def test_verification_seed_noise_pools_the_seeds_of_each_mixture():
    base = make_final_table(sizes=[2e5, 1e6])
    plan = _plan(("uniform",))
    rows = _verify_rows(base, plan, 1.0)
    # recommended: 1.0 and 1.2 for every pair; uniform: 2.0 and 2.0 (no spread)
    rows.loc[rows["run_id"] == "m_recommended_s1001", "value"] = 1.2
    rows.loc[rows["run_id"].str.startswith("m_uniform"), "value"] = 2.0
    got = verification_seed_noise(rows, plan)
    n = float(base["n"].max())
    assert set(got) == {("en-de", n), ("en-zh", n)}
    # Σ (y/ȳ − 1)² = 2 (1/11)² over 2 dof (one per mixture)
    assert got[("en-de", n)]["relative_sd"] == pytest.approx(np.sqrt((1 / 11) ** 2))
    assert got[("en-de", n)]["dof"] == 2 and got[("en-de", n)]["mixtures"] == 2
    assert verification_seed_noise(rows, None) == {}
