"""Repeated seeds (Ghorbani App. C) in the report, BLEURT/COMET quality laws, and the optional
``seed``/``mixture`` columns of the tidy table (schema revision 1.1)."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from fitting.core.base import FitError
from fitting.core.options import NO_UNCERTAINTY
from fitting.data.rundirs import collect_runs
from fitting.data.schema import OPTIONAL_COLUMNS, TIDY_COLUMNS
from fitting.data.seeds import seed_means, seed_spread
from fitting.data.tables import read_table, with_optional_columns, write_table
from fitting.laws.size.joint import fit_joint_law
from fitting.laws.size.power import fit_power_law
from fitting.report.writer import ReportOptions, write_report
from fitting.test_utils import TRUTH, make_final_table, write_run_dirs

SIZES = [1e5, 3e5, 1e6, 3e6, 1e7]


def seeded_table(seeds=(0, 1, 2), sd=0.01, weights=(0.3, 0.5, 1.0), seed=0) -> pd.DataFrame:
    """The two-pair study trained with several seeds: each seed adds Gaussian noise of ``sd``
    nats to the noiseless final loss."""
    fin = make_final_table(sizes=SIZES, weights=weights, noise=0.0)
    rng = np.random.default_rng(seed)
    parts = []
    for s in seeds:
        t = fin.copy()
        t["run_id"] = t["run_id"] + f"_s{s}"
        t["seed"] = s
        t["value"] = t["value"] + sd * rng.standard_normal(len(t))
        parts.append(t)
    return pd.DataFrame(pd.concat(parts, ignore_index=True))


def test_seed_spread_measures_the_noise_and_seed_means_collapse_the_groups():
    tab = seeded_table(seeds=range(6), sd=0.01)
    spread = seed_spread(tab)
    n_groups = len(SIZES) * 3 * 2  # sizes x weights x pairs
    assert spread["n_groups"] == n_groups and spread["n_repeated"] == n_groups
    assert spread["seeds_min"] == spread["seeds_max"] == 6
    assert spread["sd_median"] == pytest.approx(0.01, rel=0.3)
    means = seed_means(tab)
    assert len(means) == n_groups and (means["n_seeds"] == 6).all()
    want = tab.groupby(["pair", "n", "weight"])["value"].mean()
    got = means.set_index(["pair", "n", "weight"])["value"]
    assert got.sort_index().to_numpy() == pytest.approx(want.sort_index().to_numpy())
    # a table without repeats is returned as it is
    one = make_final_table(sizes=SIZES, weights=(0.5,))
    assert seed_means(one) is one and seed_spread(one)["n_repeated"] == 0


def test_power_and_joint_fits_accept_repeated_points():
    tab = seeded_table(sd=0.002)
    sub = tab[(tab.pair == "en-de") & (tab.weight == 1.0)]
    fit = fit_power_law(sub["n"], sub["value"], uncertainty=NO_UNCERTAINTY)
    a, b1, li, _ = TRUTH["en-de"]
    assert fit.n_points == 3 * len(SIZES)
    assert fit["alpha"] == pytest.approx(a, abs=0.03) and fit["l_inf"] == pytest.approx(li, abs=0.03)
    joint = fit_joint_law(tab, uncertainty=NO_UNCERTAINTY)
    assert joint.params["l_inf[en-de]"] == pytest.approx(li, abs=0.03)


def test_the_report_fits_seed_means_and_states_the_spread(tmp_path):
    tab = seeded_table(sd=0.004)
    rep = write_report(tab, str(tmp_path), ReportOptions(uncertainty=NO_UNCERTAINTY))
    assert rep.seeds["n_repeated"] == len(SIZES) * 3 * 2
    assert rep.seeds["sd_median"] == pytest.approx(0.004, rel=0.5)
    # one point per size in every fit, not one per seed
    assert all(f.n_points == len(SIZES) for fits in rep.power_fits.values()
               for f in fits.values())
    assert rep.joint.params["l_inf[en-de]"] == pytest.approx(TRUTH["en-de"][2], abs=0.03)
    assert "## Seeds (Ghorbani App. C)" in rep.markdown
    assert "Every fit of this report uses the seed mean" in rep.markdown
    assert "Data: 45 fitted runs" in rep.markdown  # the runs, not the experiments
    assert json.load(open(rep.json_path))["seeds"]["seeds_max"] == 3


def test_the_quality_section_fits_bleurt_and_comet(tmp_path):
    fin = make_final_table(sizes=SIZES[:4], weights=(0.3, 0.5, 1.0), noise=0.0)
    parts = [fin]
    for metric, a, b in (("bleurt", 0.9, -0.1), ("comet", 1.1, -0.2)):
        q = fin.copy()
        q["metric"] = metric
        q["value"] = a + b * q["value"]
        parts.append(q)
    rep = write_report(pd.concat(parts, ignore_index=True), str(tmp_path),
                       ReportOptions(uncertainty=NO_UNCERTAINTY))
    for metric, a, b in (("bleurt", 0.9, -0.1), ("comet", 1.1, -0.2)):
        for pair in ("en-de", "en-zh"):
            q = rep.quality[(metric, pair)]
            assert q.form == "linear"
            assert q.params["a"] == pytest.approx(a, abs=1e-6)
            assert q.params["b"] == pytest.approx(b, abs=1e-6)
        assert f"frontier_{metric}" in rep.figures
    assert "| en-de | comet | linear |" in rep.markdown


# -- schema revision 1.1 ---------------------------------------------------------------------------


def _edit_run_json(d: str, edit) -> None:
    path = os.path.join(d, "run.json")
    meta = json.load(open(path))
    edit(meta)
    json.dump(meta, open(path, "w"))


def test_run_directories_give_seed_and_mixture(tmp_path):
    assert {"seed": "int", "mixture": "str"}.items() <= TIDY_COLUMNS.items()
    fin = make_final_table(sizes=[1e5, 1e6], weights=(0.3, 1.0))
    dirs = write_run_dirs(fin, str(tmp_path))
    _edit_run_json(dirs[0], lambda m: (m["training"].update(seed=7),
                                       m.update(extra={"mixture": "T5"})))
    _edit_run_json(dirs[1], lambda m: m["training"].pop("seed"))  # a run without a seed
    tab = collect_runs(dirs)
    by_run = tab.drop_duplicates("run_id").set_index("run_id")
    runs = [os.path.basename(d) for d in dirs]
    assert by_run.loc[runs[0], "seed"] == 7 and by_run.loc[runs[0], "mixture"] == "T5"
    assert pd.isna(by_run.loc[runs[1], "seed"])
    # runs written before revision 1.1 (no extra.mixture): explicit weights, ""
    assert (by_run.loc[runs[1:], "mixture"] == "").all()
    assert (by_run.loc[runs[2:], "seed"] == 0).all()
    # a mixture tag of another type is an error naming the field
    _edit_run_json(dirs[0], lambda m: m.update(extra={"mixture": 5}))
    with pytest.raises(FitError, match="extra.mixture"):
        collect_runs(dirs)
    _edit_run_json(dirs[0], lambda m: (m.update(extra={}), m["training"].update(seed="x")))
    with pytest.raises(FitError, match="training.seed"):
        collect_runs(dirs)


def test_tables_without_the_new_columns_still_load(tmp_path):
    old = make_final_table(sizes=[1e5, 1e6], weights=(0.5,))
    assert not set(OPTIONAL_COLUMNS) & set(old.columns)
    filled = with_optional_columns(old)
    assert filled["seed"].isna().all() and (filled["mixture"] == "").all()
    # "" does not survive a CSV file (it reads back as NaN); it is "" again once filled
    tab = filled.assign(mixture=np.where(filled["weight"] > 0.4, "", "T5"))
    write_table(tab, tmp_path / "t.csv")
    back = with_optional_columns(read_table(tmp_path / "t.csv"))
    assert list(back["mixture"]) == list(tab["mixture"])
    # and an old CSV file gives a report as before
    write_table(make_final_table(sizes=SIZES, weights=(0.5, 1.0)), tmp_path / "old.csv")
    rep = write_report(str(tmp_path / "old.csv"), str(tmp_path / "rep"),
                       ReportOptions(uncertainty=NO_UNCERTAINTY))
    assert rep.joint is not None and not rep.seeds["n_repeated"]


def _three_pair_runs(runs) -> pd.DataFrame:
    """Final validation losses of three-pair runs at one size: ``runs`` is ``(run_id, seed,
    (w_de, w_fr, w_zh), loss)``; every pair evaluated, so every pair has a weight row."""
    rows = []
    for run, seed, weights, y in runs:
        for pair, w in zip(("en-de", "en-fr", "en-zh"), weights, strict=True):
            rows.append({"run_id": run, "study": "t", "family": "mini", "size": "s", "n": 1e6,
                         "pair": pair, "weight": w, "data_size": np.nan, "seed": seed,
                         "mixture": "", "eval_set": "validation", "metric": "loss",
                         "step": 100, "tokens": 1e6, "value": y, "final": True})
    return pd.DataFrame(rows)


def test_mixtures_that_share_one_pairs_weight_are_not_seeds_of_one_experiment():
    """Two explicit-weight mixtures, (1, 1, 0)/2 and (1, 0, 1)/2, both give en-de 0.5 at one
    size, one seed each. The old rule (73f0f32: the keys pair, size, weight and the ``mixture``
    tag, which is "" for explicit weights) took them for two seeds of one en-de experiment and
    averaged them; they are two experiments, as are their other pairs."""
    tab = _three_pair_runs([("a", 0, (0.5, 0.5, 0.0), 2.0), ("b", 0, (0.5, 0.0, 0.5), 3.0)])
    spread = seed_spread(tab)
    assert spread["n_repeated"] == 0 and spread["n_groups"] == 6
    means = seed_means(tab)
    de = means[means["pair"] == "en-de"].sort_values("run_id")
    assert list(de["value"]) == [2.0, 3.0]  # not one point at 2.5
    assert len(means) == 6 and list(means.columns) == list(tab.columns)


def test_seeds_of_one_mixture_are_averaged_beside_a_mixture_sharing_a_weight():
    tab = _three_pair_runs([("a_s0", 0, (0.5, 0.5, 0.0), 2.0), ("a_s1", 1, (0.5, 0.5, 0.0), 2.2),
                            ("b_s0", 0, (0.5, 0.0, 0.5), 3.0)])
    spread = seed_spread(tab)
    assert spread["n_groups"] == 6 and spread["n_repeated"] == 3
    assert {g["pair"] for g in spread["groups"]} == {"en-de", "en-fr", "en-zh"}
    assert all(g["seeds"] == 2 and g["mean"] == pytest.approx(2.1) for g in spread["groups"])
    means = seed_means(tab)
    de = means[means["pair"] == "en-de"].sort_values("value")
    assert list(de["n_seeds"]) == [2, 1] and list(de["value"]) == pytest.approx([2.1, 3.0])
    assert list(de["run_id"]) == ["a_s0", "b_s0"]
    # the same runs' curves (one row per step, and mixture-level `all` rows without a weight):
    # the seeds meet per step, the mixtures stay apart
    curves = pd.concat([tab.assign(step=s, value=tab["value"] + s / 1000) for s in (50, 100)]
                       + [tab.drop_duplicates("run_id").assign(pair="all", weight=np.nan)],
                       ignore_index=True)
    per_step = seed_means(curves, by=("step",))
    de = per_step[per_step["pair"] == "en-de"]
    assert len(de) == 4 and sorted(de["n_seeds"]) == [1, 1, 2, 2]


def test_the_schema_page_names_the_current_revision_and_its_change():
    """docs/reference/metrics_schema.md's title and last revision row are SCHEMA_REVISION."""
    from fitting.data.schema import SCHEMA_REVISION
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "docs", "reference", "metrics_schema.md")).read()
    assert text.splitlines()[0] == f"# Metrics schema (version 1, revision {SCHEMA_REVISION})"
    rows = [line.split("|")[1].strip() for line in text.splitlines()
            if line.startswith("| 1.")]
    assert rows[-1] == SCHEMA_REVISION and len(rows) == len(set(rows))
