"""Four slips a reader of the default study's report saw ("fitting in rooms", part 2): one f(p)
column per weight (1 − 0.7 is 0.3), no weight recommended where the weights are within noise of
each other, the gap to L∞ phrased as a percentage (never "within 1×"), and an undetermined
coefficient shown as undetermined."""

import json

import pytest

from fitting.core.options import UncertaintyOptions
from fitting.report.markdown import format_number
from fitting.report.writer import ReportOptions, write_report
from fitting.test_utils import make_final_table

TARGETS = [8e7, 1e15]


def two_pair_study(noise: float = 0.01, sizes=None):
    """A two-pair study with the weights a study writes: en-de p, en-zh 1 − p in floating point,
    so that en-de's 0.3 and en-zh's 1 − 0.7 (0.30000000000000004) are the same weight."""
    tab = make_final_table(sizes=sizes, weights=(0.0, 0.3, 0.5, 0.7, 1.0), noise=noise, seed=3)
    de = tab[tab["pair"] == "en-de"].set_index("run_id")["weight"]
    zh = tab["pair"] == "en-zh"
    tab.loc[zh, "weight"] = 1.0 - tab.loc[zh, "run_id"].map(de).to_numpy(float)
    assert 0.3 not in set(tab.loc[zh, "weight"])  # the slip is in the input
    return tab


@pytest.fixture(scope="module")
def slips_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("slips")
    # ground truth just below the best losses: every best loss is a few % above L∞
    return write_report(two_pair_study(), str(out), ReportOptions(uncertainty=UncertaintyOptions(n_refits=5),
                                                                  target_sizes=TARGETS,
                        ground_truth={"en-de": 1.17, "en-zh": 1.58}))


def test_one_weight_of_two_pairs_is_one_column_and_one_key(slips_report):
    rep = slips_report
    header = next(line for line in rep.markdown.splitlines() if line.startswith("| pair | p="))
    cols = [c.strip() for c in header.strip("|").split("|")][1:]
    assert cols == ["p=0.3", "p=0.5", "p=0.7", "p=1"], header
    # the per-weight power fits and f(p) are keyed by the same weight for both pairs
    assert set(rep.power_fits["en-zh"]) == {0.3, 0.5, 0.7, 1.0}
    assert set(rep.fraction["en-zh"]) == set(rep.fraction["en-de"]) == {0.3, 0.5, 0.7, 1.0}


def test_the_weight_rule_is_one_function():
    import pandas as pd

    from fitting.data.tables import round_weights

    df = pd.DataFrame({"weight": [1 - 0.7, 0.3, 1 - 0.95, 0.05, 4e-7, float("nan"), 0.0, 1.0]})
    w = round_weights(df)["weight"].tolist()
    assert w[:4] == [0.3, 0.3, 0.05, 0.05]
    assert w[4] == 4e-7 and w[6:] == [0.0, 1.0]  # small weights keep their value
    assert df["weight"][0] != 0.3  # the input is not modified


def test_weights_within_noise_are_not_recommended(slips_report):
    rep = slips_report
    md = rep.markdown
    # at 1e15 every weighting is within a fraction of the noise of L∞: nothing to recommend
    assert "Recommended weights at N = 1e+15" not in md
    line = next(p for p in md.split("\n\n") if "N = 1e+15" in p and "does not matter" in p)
    assert "RMSE" in line and "L∞" in line
    recs = {r["n"]: r for r in json.load(open(rep.json_path))["recommendation"]}
    far = recs[1e15]
    assert far["weights_matter"] is False
    assert far["spread_over_weightings"] < far["noise"]
    assert far["gain_over_uniform"] <= far["spread_over_weightings"]
    # at 8e7 the best weighting gains less than the noise over uniform weights: not recommended
    # either, and the weights within the noise of the best are named
    near = recs[8e7]
    assert near["weights_matter"] is False and near["gain_over_uniform"] < near["noise"]
    assert near["spread_over_weightings"] > near["noise"]
    lo, hi = near["within_noise"]["en-de"]
    assert lo < 0.5 < hi
    assert "Recommended weights at N = 8e+07" not in md


def test_weights_that_matter_are_still_recommended(tmp_path):
    rep = write_report(two_pair_study(noise=0.0, sizes=[2e5, 1e6, 5e6, 2e7]), str(tmp_path),
                       ReportOptions(uncertainty=UncertaintyOptions(n_refits=5),
                                     target_sizes=[8e7]))
    rec = json.load(open(rep.json_path))["recommendation"][0]
    assert rec["weights_matter"] is True and rec["gain_over_uniform"] > rec["noise"]
    assert "Recommended weights at N = 8e+07" in rep.markdown
    assert "does not matter" not in rep.markdown


def test_the_gap_to_l_inf_is_a_percentage(slips_report):
    text = slips_report.regime["text"]
    assert "within 1×" not in text and "1×" not in text
    gap = max(d["gap_over_true"] for d in slips_report.regime["pairs"].values())
    assert 1 < gap < 1.1
    assert f"{(gap - 1) * 100:.2g} % above L∞" in text


def test_an_undetermined_coefficient_reads_as_undetermined(slips_report):
    # a scale coefficient whose sd is 10^11 times its value
    assert format_number(4.792e5, 1.9e17) == "4.8e+05 (undetermined: sd 1.9e+17)"
    # well determined, and near-zero values with an sd larger than themselves (an f(p) of a
    # small weight, a synergy near 0): value ± sd as before
    assert format_number(4.792e5, 2.1e4) == "4.792e+05 ± 2.1e+04"
    assert format_number(0.018, 0.048, 3) == "0.018 ± 0.048"
    assert format_number(0.0004, 0.05, 3) == "0.0004 ± 0.05"
    assert format_number(1.2, None) == "1.2" and format_number(float("nan"), 3.0) == "–"
    # the report's well-determined power laws are not flagged
    md = slips_report.markdown
    power = md.split("## Power law per pair and weight")[1].split("\n## ")[0]
    assert "undetermined" not in power
