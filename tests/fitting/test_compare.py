"""f(p) of several studies side by side (Fernandes Fig. 6): one panel per study, the effective
fractions recovered from studies generated with a known f̂, the synergy verdicts, the CLI."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from fitting import plots
from fitting.cli import main
from fitting.data.tables import write_table
from fitting.report.compare import write_comparison
from fitting.test_utils import TRUTH, check_figure, f_hat, make_final_table

WEIGHTS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


def study(c: tuple[float, float, float], name: str, noise=0.001, seed=0):
    """A two-pair study whose pairs share the effective fraction f̂(p) of eq. 12 with ``c``."""
    t = make_final_table(sizes=np.geomspace(2e5, 2e7, 5), weights=WEIGHTS, noise=0.0)
    rng = np.random.default_rng(seed)
    for pair in TRUTH:
        a, b1, li, _ = TRUTH[pair]
        m = (t.pair == pair) & (t.weight > 0)
        f = f_hat(t.loc[m, "weight"], *c)
        t.loc[m, "value"] = (b1 * (f * t.loc[m, "n"]) ** -a + li) * (
            1 + noise * rng.standard_normal(int(m.sum())))
    t["study"] = name
    return t


NEUTRAL, SYNERGY = (0.0, 1.0, 1.0), (1.0, 1.0, 1.0)


@pytest.fixture
def saved(monkeypatch):
    figs, save = {}, plots.save

    def keep(fig, path, **kwargs):
        figs[os.path.basename(path)] = fig
        return save(fig, path, **kwargs)

    monkeypatch.setattr(plots, "save", keep)
    return figs


def test_one_panel_per_study_with_recovered_fractions_and_verdicts(tmp_path, saved):
    # a table file, a study output directory (its metrics.csv) and a study without p = 1 runs
    write_table(study(NEUTRAL, "en-xx"), tmp_path / "a.csv")
    os.makedirs(tmp_path / "b")
    write_table(study(SYNERGY, "xx-en", seed=1), tmp_path / "b" / "metrics.csv")
    no_single = study(NEUTRAL, "one-weight")
    no_single = no_single[(no_single.weight > 0) & (no_single.weight < 1)]
    cmp = write_comparison([str(tmp_path / "a.csv"), str(tmp_path / "b"), no_single],
                           str(tmp_path / "out"), n_refits=10)
    assert [s["label"] for s in cmp.studies] == ["en-xx", "xx-en", "one-weight"]
    assert cmp.studies[1]["source"] == str(tmp_path / "b" / "metrics.csv")
    fig = saved["fraction_comparison.png"]
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["en-xx", "xx-en", "one-weight"]
    assert check_figure(fig, "comparison") == []
    # pairs are labelled in each panel that has f(p)
    assert {"en-de", "en-zh"} <= set(panels[0].get_legend_handles_labels()[1])
    # f(p) recovered against the generating f̂
    for st, c in zip(cmp.studies[:2], (NEUTRAL, SYNERGY), strict=True):
        for pair in ("en-de", "en-zh"):
            for w, (f, sd) in st["pairs"][pair].items():
                assert f == pytest.approx(float(f_hat(w, *c)), abs=0.035), (st["label"], pair, w)
                assert np.isfinite(sd)
    assert {v["verdict"] for v in cmp.studies[0]["synergy"].values()} == {"neutral (within 2 sd)"}
    assert {v["verdict"] for v in cmp.studies[1]["synergy"].values()} == {"synergy"}
    assert cmp.studies[1]["synergy"]["en-de"]["mean_excess"] == pytest.approx(
        np.mean([f_hat(w, *SYNERGY) - w for w in (0.1, 0.3, 0.5, 0.7, 0.9)]), abs=0.03)
    assert cmp.studies[1]["f_hat"]["en-de"]["c1"] == pytest.approx(1.0, abs=0.2)
    # the study without f(p) says why, in the summary and in its panel
    assert "p = 1" in cmp.studies[2]["skipped"] and not cmp.studies[2]["pairs"]
    assert any("p = 1" in t.get_text() for t in panels[2].texts)
    data = json.load(open(cmp.json_path))
    assert [s["label"] for s in data["studies"]] == ["en-xx", "xx-en", "one-weight"]
    assert data["studies"][1]["pairs"]["en-de"]["0.5"]["f"] == pytest.approx(
        float(f_hat(0.5, *SYNERGY)), abs=0.04)
    md = open(cmp.markdown_path).read()
    assert "| xx-en | en-de |" in md and "synergy" in md


def test_compare_cli(tmp_path, capsys):
    write_table(study(NEUTRAL, "s"), tmp_path / "a.csv")
    write_table(study(SYNERGY, "s"), tmp_path / "b.csv")
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--out", str(out),
                 "--labels", "En-XX,XX-En", "--n-refits", "5", "--no-f-hat", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [s["label"] for s in res["studies"]] == ["En-XX", "XX-En"]
    assert os.path.exists(res["figure"]) and os.path.exists(out / "comparison.md")
    # two studies of one name keep apart; a wrong number of labels is an input error
    assert main(["compare", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--out",
                 str(out), "--n-refits", "2", "--no-f-hat"]) == 0
    assert [s["label"] for s in json.load(open(out / "comparison.json"))["studies"]] == \
        ["s", "s (2)"]
    assert main(["compare", str(tmp_path / "a.csv"), "--out", str(out), "--labels", "x,y"]) == 2
    assert "1 studies" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nope.csv"), "--out", str(out)]) == 2


def test_weights_are_merged_and_single_size_weights_left_out(tmp_path):
    """1 − 0.7 and 0.3 are one weight; a weight seen at one size only (a held-out run) cannot
    give β_p and is listed as left out instead of showing an f(p) with an unbounded sd."""
    table = make_final_table(seed=3)
    second = table["pair"] == sorted(table["pair"].unique())[1]
    table.loc[second, "weight"] = 1 - (1 - table.loc[second, "weight"])  # float round-off
    lone = table.iloc[:1].copy()
    lone["run_id"], lone["weight"], lone["n"] = "held", 0.6, table["n"].max() * 2
    cmp = write_comparison([pd.concat([table, lone])], str(tmp_path), n_refits=5)
    (study,) = cmp.studies
    assert study["left_out"] == [f"{lone['pair'].iloc[0]} p=0.6"]
    for d in study["pairs"].values():
        assert 0.6 not in d and all(w == round(w, 6) for w in d)
