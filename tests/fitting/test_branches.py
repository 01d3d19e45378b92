"""Cool-down branches (schema revision 1.2; Hägele et al. 2024): the branch columns, branches out
of the size-law fits, the cooled-down regime verdict, L(N, D) on branch ends, check 5 of the
main job."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from fitting.core.base import FitError
from fitting.core.options import NO_UNCERTAINTY, UncertaintyOptions
from fitting.data.rundirs import collect_runs
from fitting.data.schema import OPTIONAL_COLUMNS, SCHEMA_REVISION, TIDY_COLUMNS
from fitting.data.tables import (
    final_losses,
    has_branches,
    read_table,
    with_optional_columns,
    without_branches,
    write_table,
)
from fitting.laws.budget.chinchilla import ChinchillaOptions, fit_chinchilla
from fitting.laws.curves.learning_curve import cooled_drop_per_doubling
from fitting.report.markdown import Document
from fitting.report.record import Report
from fitting.report.sections.chinchilla import (
    COOLED_LAW,
    D_AXIS_BRANCHES,
    D_AXIS_EVALUATIONS,
    chinchilla_points,
    chinchilla_section,
)
from fitting.report.sections.regime import CONVERGED_DROP, compute_regime
from fitting.report.view import prepare_view
from fitting.report.writer import ReportOptions, write_report
from fitting.test_utils import make_curves_table, make_final_table, write_run_dirs


def _edit_run_json(d: str, edit) -> None:
    path = os.path.join(d, "run.json")
    with open(path) as f:
        meta = json.load(f)
    edit(meta)
    with open(path, "w") as f:
        json.dump(meta, f)


def _branch_dir(parent_dir: str, root: str, step: int) -> str:
    """A branch of the run directory ``parent_dir`` leaving at ``step``: rows after it only."""
    with open(os.path.join(parent_dir, "run.json")) as f:
        meta = json.load(f)
    run = f"{meta['run_id']}_cd{step}"
    d = os.path.join(root, run)
    os.makedirs(d)
    meta.update(run_id=run, branch={"parent": meta["run_id"], "step": step,
                                    "cooldown_steps": 100})
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(parent_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for r in rows:
            if r["step"] > step:  # the branch ends at step 700, 10 % above its parent's loss
                s = min(r["step"], 700)
                r = {**r, "run_id": run, "step": s, "tokens": s * 512, "value": r["value"] * 1.1}
                f.write(json.dumps(r) + "\n")
    return d


# -- (a) schema revision 1.2: the branch columns ----------------------------------------------------


def test_branch_columns_load_from_run_directories_and_round_trip_csv(tmp_path):
    assert tuple(int(x) for x in SCHEMA_REVISION.split(".")) >= (1, 2)  # branches: 1.2 on
    assert {"parent_run": "str", "branch_step": "int"}.items() <= TIDY_COLUMNS.items()
    fin = make_final_table(sizes=[1e5, 1e6], weights=(0.5,))
    dirs = write_run_dirs(fin, str(tmp_path / "runs"))
    branch = _branch_dir(dirs[0], str(tmp_path / "runs"), 400)
    tab = collect_runs([*dirs, branch])
    by_run = tab.drop_duplicates("run_id").set_index("run_id")
    parent = os.path.basename(dirs[0])
    assert by_run.loc[f"{parent}_cd400", "parent_run"] == parent
    assert by_run.loc[f"{parent}_cd400", "branch_step"] == 400
    assert (by_run.loc[[os.path.basename(d) for d in dirs], "parent_run"] == "").all()
    assert by_run.loc[[os.path.basename(d) for d in dirs], "branch_step"].isna().all()
    # the branch's own rows: steps after 400 only, its final row at its own last step
    rows = tab[(tab["run_id"] == f"{parent}_cd400") & (tab["metric"] == "loss")]
    assert rows["step"].min() > 400 and set(rows.loc[rows["final"], "step"]) == {700}
    # CSV: "" reads back as NaN, and is "" again once the optional columns are filled in
    write_table(tab, tmp_path / "t.csv")
    back = with_optional_columns(read_table(tmp_path / "t.csv"))
    assert list(back["parent_run"]) == list(tab["parent_run"])
    assert np.array_equal(back["branch_step"].isna(), tab["branch_step"].isna())
    assert has_branches(back) and not has_branches(without_branches(back))


def test_tables_without_branch_columns_load_as_before():
    old = make_final_table(sizes=[1e5, 1e6], weights=(0.5,))
    assert {"parent_run", "branch_step"} <= set(OPTIONAL_COLUMNS)
    filled = with_optional_columns(old)
    assert (filled["parent_run"] == "").all() and filled["branch_step"].isna().all()
    assert not has_branches(old) and without_branches(old) is old
    assert len(final_losses(old)[0]) == len(old)


@pytest.mark.parametrize("branch, field", [
    ("cd500", "'branch'"),                                  # not an object
    ([1, 2], "'branch'"),
    ({"step": 5, "cooldown_steps": 1}, "'branch.parent'"),  # parent missing
    ({"parent": "", "step": 5}, "'branch.parent'"),          # parent empty
    ({"parent": 3, "step": 5}, "'branch.parent'"),
    ({"parent": "a", "step": -1}, "'branch.step'"),         # step not an int >= 0
    ({"parent": "a", "step": 5.0}, "'branch.step'"),
    ({"parent": "a", "step": True}, "'branch.step'"),
    ({"parent": "a"}, "'branch.step'"),
    ({"parent": "a", "step": 5, "cooldown_steps": "x"}, "'branch.cooldown_steps'"),
])
def test_malformed_branch_names_run_json_and_the_field(tmp_path, branch, field):
    fin = make_final_table(sizes=[1e5], weights=(0.5,))
    (d,) = write_run_dirs(fin, str(tmp_path))
    _edit_run_json(d, lambda m: m.update(branch=branch))
    with pytest.raises(FitError, match="run.json") as e:
        collect_runs([d])
    assert field in str(e.value)


def test_null_branch_is_an_ordinary_run(tmp_path):
    fin = make_final_table(sizes=[1e5], weights=(0.5,))
    (d,) = write_run_dirs(fin, str(tmp_path))
    _edit_run_json(d, lambda m: m.update(branch=None))
    tab = collect_runs([d])
    assert (tab["parent_run"] == "").all() and tab["branch_step"].isna().all()


def test_a_run_stopped_early_has_no_final_row(tmp_path):
    fin = make_final_table(sizes=[1e5, 1e6], weights=(0.5,))
    dirs = write_run_dirs(fin, str(tmp_path))
    _edit_run_json(dirs[0], lambda m: m.update(status="stopped"))
    tab = collect_runs(dirs)
    stopped = tab["run_id"] == os.path.basename(dirs[0])
    assert not tab.loc[stopped, "final"].any()
    assert tab.loc[~stopped & (tab["step"] == 1000), "final"].all()
    assert os.path.basename(dirs[0]) not in set(final_losses(tab)[0]["run_id"])


# -- synthetic studies with cool-down branches ----------------------------------------------------


def _with_tokens_and_bleu(tab: pd.DataFrame) -> pd.DataFrame:
    """D = step × 512 tokens on every row, and a BLEU row (30·L^−1.5) next to every loss row."""
    tab = tab.assign(tokens=tab["step"] * 512)
    bleu = tab[tab["metric"] == "loss"].assign(metric="bleu", value=lambda t: 30 * t["value"] ** -1.5)
    return pd.concat([tab, bleu], ignore_index=True)


def _add_branches(tab: pd.DataFrame, steps=(200, 400), lower: float = 0.05) -> pd.DataFrame:
    """Each run of ``tab`` gets a branch at every step b of ``steps``, ending at step 1.25·b
    with a cooled-down loss ``lower`` below its parent's curve there, and one evaluation before."""
    rows = []
    for run, g in tab.groupby("run_id", sort=False):
        first = g.iloc[0].to_dict()
        for b in steps:
            for step, final in ((b + b // 8, False), (b + b // 4, True)):
                for _, gp in g[g["metric"] == "loss"].groupby("pair"):
                    at = gp.iloc[(gp["step"] - step).abs().argmin()]
                    loss = float(at["value"]) - (lower if final else 0.0)
                    for metric, value in (("loss", loss), ("bleu", 30 * loss ** -1.5)):
                        rows.append({**first, **gp.iloc[0][["weight", "pair"]].to_dict(),
                                     "run_id": f"{run}_cd{b}", "parent_run": run,
                                     "branch_step": b, "step": step, "tokens": step * 512,
                                     "metric": metric, "value": value, "final": final})
    branches = pd.DataFrame(rows)
    base = tab.assign(parent_run="", branch_step=np.nan)
    return pd.concat([base, branches], ignore_index=True)


SAME = ("power", "joint", "fraction", "effective", "recommendation", "frontier", "quality",
        "heldout_runs", "seeds", "dpl", "bivariate")


@pytest.fixture(scope="module")
def branch_reports(tmp_path_factory):
    """The report of a study with and without its cool-down branches (one run held out)."""
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.3, 0.5, 1.0), noise=0.01,
                           seed=4)
    plain = _with_tokens_and_bleu(make_curves_table(fin))
    with_branches = _add_branches(plain)
    kw = {"uncertainty": UncertaintyOptions(n_refits=4), "heldout_runs": ["s2_p0.50"],
          "ground_truth": {"en-de": 1.0, "en-zh": 1.5}}
    out = tmp_path_factory.mktemp("branches")
    reps = {name: write_report(t, str(out / name), ReportOptions(**kw))
            for name, t in (("plain", plain), ("branches", with_branches))}
    fits = {name: json.load(open(r.json_path)) for name, r in reps.items()}
    return reps, fits, with_branches


# -- (b) branches never enter the size-law fits --------------------------------------------------


def test_final_losses_leave_branches_out_unless_asked():
    fin = make_final_table(sizes=[1e5, 3e5], weights=(0.5,))
    tab = _add_branches(_with_tokens_and_bleu(make_curves_table(fin)))
    rows, _ = final_losses(tab)
    assert (rows["parent_run"] == "").all() and len(rows) == len(fin)
    every, _ = final_losses(tab, include_branches=True)
    assert len(every) == 3 * len(fin)  # the run's end and the ends of its two branches
    assert set(every.loc[every["parent_run"] != "", "step"]) == {250, 500}


def test_report_fits_equal_those_of_the_table_without_branches(branch_reports):
    reps, fits, _ = branch_reports
    plain, branched = fits["plain"], fits["branches"]
    assert plain["quality"] and plain["heldout"] and plain["power"] and plain["effective"]
    for key in SAME:
        assert branched[key] == plain[key], key
    # the held-out run: the same eq. 11/7/6 predictions, and first L(N, D) across weights on the
    # cooled-down budgets, which leads (primary) where the table has branches
    lead = [e for e in branched["heldout"] if e["law"].startswith(COOLED_LAW)]
    assert len(lead) == 2 and all(e["primary"] and e["tokens"] == 512000 for e in lead)
    rest = [e for e in branched["heldout"] if e not in lead]
    assert [{**e, "primary": True} if e["law"].startswith("eq. 11") else e for e in rest] == \
        plain["heldout"]
    assert not any(e["primary"] for e in rest)
    # the best losses (regime pairs) and the held-out run's branches are out of every fit too;
    # the fitted L∞ is L(N, D)'s limit, eq. 7's L∞ is kept as this budget's
    for pair, d in branched["regime"]["pairs"].items():
        p = plain["regime"]["pairs"][pair]
        assert d["best_loss"] == p["best_loss"] and d["l_inf_budget"] == p["l_inf_fit"]
        assert d["l_inf_fit"] == branched["chinchilla"]["joint"]["params"][f"E[{pair}]"]
        assert d["l_inf_source"].startswith(COOLED_LAW) and "l_inf_budget" not in p
    # L(N, D): the branch ends, without the held-out run and its branches (3 sizes × 3 budgets)
    assert branched["chinchilla"]["d_axis"] == D_AXIS_BRANCHES
    assert plain["chinchilla"]["d_axis"] == D_AXIS_EVALUATIONS
    assert branched["chinchilla"]["fits"]["en-de p=0.5"]["n_points"] == 9
    assert branched["chinchilla"]["fits"]["en-de p=1"]["n_points"] == 12
    data_line = reps["branches"].markdown.split("\n## ")[0]
    assert "24 cool-down branches" in data_line, data_line


def test_cli_power_fit_leaves_branches_out(tmp_path):
    from fitting.cli import main

    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.5,), noise=0.01)
    plain = make_curves_table(fin)
    outs = {}
    for name, tab in (("plain", plain), ("branches", _add_branches(plain, lower=0.5))):
        write_table(tab, tmp_path / f"{name}.csv")
        main(["fit", "--law", "power", "--input", str(tmp_path / f"{name}.csv"),
              "--uncertainty", "none", "--out", str(tmp_path / f"{name}.json")])
        outs[name] = json.load(open(tmp_path / f"{name}.json"))
    assert outs["branches"] == outs["plain"]


# -- (c) the cooled-down verdict ------------------------------------------------------------------


def test_cooled_drop_per_doubling_on_exact_numbers():
    # (2.0 − 1.9) / 2.0 / log2(4 / 2) = 0.05; unsorted input, only the last two budgets count
    assert cooled_drop_per_doubling([4, 1, 2], [1.9, 3.0, 2.0]) == pytest.approx(0.05, abs=1e-15)
    # D quadruples: the drop is shared over two doublings
    assert cooled_drop_per_doubling([100, 400], [2.0, 1.8]) == pytest.approx(0.05, abs=1e-15)
    assert cooled_drop_per_doubling([1, 2], [2.0, 2.2]) == pytest.approx(-0.1, abs=1e-15)
    with pytest.raises(FitError, match="need at least 2"):
        cooled_drop_per_doubling([1], [2.0])
    with pytest.raises(FitError, match="same D"):
        cooled_drop_per_doubling([1, 2, 2], [3.0, 2.0, 1.9])


def _budget_table(drop: float, sizes=(1e5, 3e5, 1e6, 3e6)) -> pd.DataFrame:
    """Parents ending at D_T = 512,000 tokens with branches at D_T/4 and D_T/2 whose cooled-down
    loss falls by ``drop`` per doubling of D; a zero-weight pair (flat, evaluated only) too."""
    rows = []
    for j, n in enumerate(sizes):
        run = f"s{j}"
        for b, step in ((None, 1000), (200, 250), (400, 500)):
            rid, k = (run, 2) if b is None else (f"{run}_cd{b}", {200: 0, 400: 1}[b])
            for pair, w in (("en-de", 1.0), ("en-zh", 0.0)):
                loss = (3.0 + 1e6 / n) * (1 - drop) ** k if w else 6.0
                for s in (step - 100, step - 50, step) if b is None else (step - 50, step):
                    rows.append(dict(run_id=rid, study="t", family="mini", size=f"s{j}", n=n,
                                     pair=pair, weight=w, eval_set="validation", metric="loss",
                                     step=s, tokens=s * 512, value=loss * (1.02 if s < step else 1),
                                     final=s == step, parent_run="" if b is None else run,
                                     branch_step=b))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("drop, verdict", [(0.005, "near convergence"), (0.05, "compute-limited")])
def test_regime_verdict_from_cooled_down_branches(drop, verdict):
    tab = _budget_table(drop)
    fin, _ = final_losses(tab)
    reg = compute_regime(tab, fin, {}, None, "validation", "loss")
    assert reg["method"] == "cooled-down branches" and reg["verdict"] == verdict
    assert reg["n_curves"] == 4  # trained pairs only: the flat zero-weight curves do not count
    assert reg["n_still_dropping"] == (0 if drop < CONVERGED_DROP else 4)
    assert set(reg["runs"]) == {"s0", "s1", "s2", "s3"}
    c = reg["runs"]["s1"]["en-de"]
    assert [d for d, _ in c["budgets"]] == [125 * 1024, 250 * 1024, 500 * 1024]
    assert c["budgets"][-1][1] == pytest.approx((3.0 + 1e6 / 3e5) * (1 - drop) ** 2)
    assert c["cooled_drop_per_doubling"] == pytest.approx(drop, rel=1e-9)
    assert c["converged"] == (drop < CONVERGED_DROP)
    assert reg["median_cooled_drop_per_doubling"] == pytest.approx(drop, rel=1e-9)
    assert f"{drop:.2%}" in reg["text"] and "1%" in reg["text"]
    # the old method is still computed, on the parent runs only, for comparison
    assert reg["curves"] and all("_cd" not in key for key in reg["curves"])
    # without branches, the slope before the cool-down, as before
    plain = compute_regime(without_branches(tab), fin, {}, None, "validation", "loss")
    assert plain["method"] == "slope before the cool-down" and "runs" not in plain


def test_report_regime_section_states_method_threshold_and_runs(branch_reports):
    reps, fits, _ = branch_reports
    reg = fits["branches"]["regime"]
    assert reg["method"] == "cooled-down branches" and fits["plain"]["regime"]["method"] == \
        "slope before the cool-down"
    # the branches end 0.05 below their parent's curve, the parent's end is its curve: the last
    # two budgets (D = 256,000 and 512,000 tokens) are the 400-step branch's end and the run's end
    c = reg["runs"]["s0_p0.50"]["en-de"]
    assert [d for d, _ in c["budgets"]] == [128000, 256000, 512000]
    assert reg["n_curves"] == sum(len(p) for p in reg["runs"].values()) == 20  # 12 runs, trained
    section = reps["branches"].markdown.split("\n## Regime")[1].split("\n## ")[0]
    assert "cooled-down branches (Hägele et al. 2024)" in section and "below 1%" in section
    assert "| s0_p0.50 | en-de |" in section and "drop per doubling" in section
    assert reg["verdict"] in section


# -- (d) L(N, D) on the cool-down branch ends -----------------------------------------------------

E, A, ALPHA, B, BETA = 1.2, 300.0, 0.4, 200.0, 0.35


def _chinchilla_table() -> pd.DataFrame:
    """5 sizes × 2 seeds; parents of 2000…8000 steps (512 tokens each) end at D_T, branches at
    D_T/4 and D_T/2; every end is L(N, D) exactly in the seed mean (seeds ±1 %). The
    intermediate evaluations lie on a flatter, uncooled curve that the fit must not use."""
    rows = []
    for j, (n, steps) in enumerate(zip(np.geomspace(1e5, 1e7, 5), (2000, 3000, 4000, 6000, 8000),
                                       strict=True)):
        for seed, sign in ((0, 1), (1, -1)):
            run = f"m{j}_s{seed}"
            ends = [(run, "", np.nan, steps)] + [
                (f"{run}_cd{steps // k}", run, steps // k - steps // 20, steps // k) for k in (4, 2)]
            for rid, parent, b, end in ends:
                for s in np.linspace(end / 4, end, 4).astype(int):
                    d = s * 512.0
                    cooled = E + A / n**ALPHA + B / d**BETA
                    loss = cooled if s == end else E + 0.5 + A / n**ALPHA + 3.0 / d**0.1
                    rows.append(dict(run_id=rid, study="t", family="mini", size=f"m{j}", n=n,
                                     pair="en-de", weight=1.0, seed=seed, eval_set="validation",
                                     metric="loss", step=s, tokens=d,
                                     value=loss * (1 + sign * 0.01), final=s == end,
                                     parent_run=parent, branch_step=b))
    return pd.DataFrame(rows)


def test_chinchilla_points_use_the_branch_ends_and_recover_the_exponents(tmp_path):
    tab = _chinchilla_table()
    pts, note, why = chinchilla_points(tab)
    assert why == "" and D_AXIS_BRANCHES in note
    assert len(pts) == 15 and (pts["n_seeds"] == 2).all()  # 5 sizes × 3 budgets, seeds averaged
    truth = E + A / pts["n"] ** ALPHA + B / pts["tokens"] ** BETA
    assert np.allclose(pts["value"], truth, rtol=1e-12)
    fit = fit_chinchilla(pts["n"], pts["tokens"], pts["value"],
                         options=ChinchillaOptions(init="varpro"))
    assert fit["alpha"] == pytest.approx(ALPHA, rel=0.03)  # noiseless: within 3 %
    assert fit["beta"] == pytest.approx(BETA, rel=0.03)
    # the same runs without branches: the intermediate evaluations, a different law
    plain, plain_note, _ = chinchilla_points(without_branches(tab))
    assert D_AXIS_EVALUATIONS in plain_note
    plain_truth = E + A / plain["n"] ** ALPHA + B / plain["tokens"] ** BETA
    assert not np.allclose(plain["value"], plain_truth, rtol=0.01)
    # the section says which D axis it used
    rep = Report(out_dir=str(tmp_path), markdown_path="", html_path="", json_path="")
    doc = Document()
    chinchilla_section(doc, rep, prepare_view(tab), str(tmp_path), uncertainty=NO_UNCERTAINTY)
    assert rep.chinchilla["d_axis"] == D_AXIS_BRANCHES and D_AXIS_BRANCHES in doc.markdown()
    assert rep.chinchilla["fits"]["en-de"]["params"]["beta"] == pytest.approx(BETA, rel=0.03)


def test_chinchilla_points_need_two_budgets_per_run():
    tab = _chinchilla_table()
    lonely = tab[~tab["parent_run"].isin(["m0_s0", "m0_s1", "m1_s0", "m1_s1", "m2_s0",
                                          "m2_s1"])]
    _, _, why = chinchilla_points(lonely)
    assert "fewer than 3 model sizes (2)" in why
    some = tab[~tab["parent_run"].isin(["m0_s0", "m0_s1"])]
    pts, note, why = chinchilla_points(some)
    assert why == "" and "2 (run, pair) with one budget only left out" in note
    assert sorted(pts["n"].unique()) == sorted(tab["n"].unique())[1:]


# -- (e) check 5 of the main job -------------------------------------------------------------------


def _fits(method: str, verdict: str, drops: list[float], law: str = COOLED_LAW) -> dict:
    """A fits.json whose regime has one en-de curve per drop and en-de's fitted L∞ from ``law``."""
    runs = {f"r{i}": {"en-de": {"budgets": [[1.0, 2.0], [2.0, 2.0 * (1 - x)]],
                                "cooled_drop_per_doubling": x, "converged": x < 0.01}}
            for i, x in enumerate(drops)}
    pair = {"l_inf_fit": 1.01, "l_inf_true": 1.0, "l_inf_law": law, "l_inf_is_bound": False,
            "l_inf_source": law}
    regime = {"pairs": {"en-de": pair}, "method": method, "verdict": verdict,
              "l_inf_law": COOLED_LAW if method == "cooled-down branches" else "joint law (eq. 7)"}
    if method == "cooled-down branches":
        regime["runs"] = runs
    return {"regime": regime}


def test_check_main_job_check5_reads_the_regime_on_cooled_down_budgets(benchmark_script, capsys):
    """Check 5 judges where the regime was read, not what it found: ok on cooled-down branches
    with ≥ 3 curves per pair and the cooled-down law's L∞; the verdict is information. The rule
    of 082b6f0 (ok = method is "cooled-down branches") could not fail a study with branches: it
    passed one curve, and an L∞ from eq. 7."""
    job = benchmark_script("check_main_job")
    # passed by 082b6f0's rule, failed now: two curves, and eq. 7's L∞ on three
    few = job.check(_fits("cooled-down branches", "near convergence", [0.002, 0.004]))
    assert not few["regime"]["ok"] and not few["all_ok"]
    assert "fewer than 3 cooled-down curves for en-de (2)" in few["regime"]["reason"]
    eq7 = job.check(_fits("cooled-down branches", "compute-limited", [0.02, 0.04, 0.03],
                          law="joint law (eq. 7)"))
    assert not eq7["regime"]["ok"] and "not the limit N, D → ∞" in eq7["regime"]["reason"]
    ok = job.check(_fits("cooled-down branches", "near convergence", [0.002, 0.004, 0.03]))
    r = ok["regime"]
    assert r["status"] == "ok" and r["n_converged"] == 2 and r["n_curves"] == 3
    assert r["median_drop_per_doubling"] == pytest.approx(0.004)
    assert r["verdict_status"] == "information" and r["curves_per_pair"] == {"en-de": 3}
    # a compute-limited verdict read on the branches is a finding, not a failure
    limited = job.check(_fits("cooled-down branches", "compute-limited", [0.02, 0.04, 0.005]))
    assert limited["regime"]["status"] == "ok" and limited["regime"]["n_converged"] == 1
    assert limited["regime"]["verdict"] == "compute-limited"
    # the old slope verdict, even "near convergence", does not pass: no cool-down branches
    slope = job.check(_fits("slope before the cool-down", "near convergence", []))
    assert slope["regime"]["status"] == "FAIL" and not slope["all_ok"]
    job.print_result(slope)
    assert "5. regime (slope before the cool-down): 0 cooled-down curves (en-de 0) FAIL: the " \
        "study has no cool-down branches" in capsys.readouterr().out
    job.print_result(ok)
    out = capsys.readouterr().out
    assert f"5. rule: {job.RULES[5]}" in out
    assert "5. regime (cooled-down branches): 3 cooled-down curves (en-de 3) ok" in out
    assert "5. regime verdict (information): near convergence, 2 of 3 curves converged, " \
        "median drop 0.40 % per doubling of D" in out
    for k in range(1, 6):
        assert f"{k}. rule: " in out


def test_check_main_job_reads_the_cooled_law_and_the_seed_table(branch_reports, tmp_path,
                                                                benchmark_script, capsys):
    """Check 1 reads L(N, D)'s limit (eq. 7's shown as this budget's), check 4 the leading
    entry and whether it holds without the noise clause; main_job_seeds tabulates both."""
    _, fits, _ = branch_reports
    job = benchmark_script("check_main_job")
    result = job.check(fits["branches"])
    for pair, d in result["l_inf"].items():
        assert d["fit"] == fits["branches"]["chinchilla"]["joint"]["params"][f"E[{pair}]"]
        assert d["budget"] == fits["plain"]["regime"]["pairs"][pair]["l_inf_fit"]
    assert [h["law"].startswith(COOLED_LAW) for h in result["heldout"]["entries"]] == [True] * 2
    assert set(result["backtest"]) == {"en-de", "en-zh"}
    job.print_result(result)
    out = capsys.readouterr().out
    assert "this budget's (eq. 7)" in out and "backtest en-de (information)" in out
    assert ("(within 2 %)" in out) == any(h["within_rel"] for h in result["heldout"]["entries"])
    seeds = benchmark_script("main_job_seeds")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "fits.json").write_text(json.dumps(fits["branches"]))
    row = seeds.seed_row(str(tmp_path), 3, {"wall_s": 12.0, "rc": 0}, job)
    assert row["check1_ok"] == (result["checks"][1]["status"] == "ok")
    assert row["check4_ok"] == (result["checks"][4]["status"] == "ok")
    assert set(row["backtest"]) == {"en-de", "en-zh"}
    text = seeds.table([row, {"seed": 4, "wall_s": None, "rc": 1, "error": "no report"}])
    assert text.splitlines()[2].startswith("| 3 | 12 | ") and "| 4 | – | no report |" in text
    assert "backtest en-de vs k× seed noise" in text.splitlines()[0]
    # no seed was repeated: not judged (0183a09 printed within/beyond against the fit's
    # residual sd under the header "vs 3× seed noise")
    assert "(no seed noise: not judged)" in text
    assert "(within)" not in text and "(beyond)" not in text
    # held-out entries carry their predictive intervals, pooled over seeds by the table
    assert all("inside95" in h for h in row["heldout"].values())
    pooled = seeds.pooled_coverage([row, {**row, "seed": 4}])
    calibrated = [h for h in row["heldout"].values() if h.get("calibrated")]
    assert pooled["heldout"]["0.95"]["n"] == 2 * len(calibrated)   # calibrated entries only
    assert pooled["heldout"]["0.95"]["clusters"] == 2 * len(calibrated)  # seed × pair
    assert pooled["backtest"]["0.95"]["n"] == 2 * sum(
        b["coverage"]["0.95"]["n"] for b in row["backtest"].values() if b.get("coverage"))
    assert "95 % [" in text
    reps, _, _ = branch_reports
    assert "en-de: refitted without N = " in reps["branches"].markdown
    assert "not judged: no seed noise measured" in reps["branches"].markdown


def test_heldout_predictive_interval_is_fixed_before_the_heldout_loss_is_read(branch_reports):
    """The leading law's held-out entries carry a predictive interval with every component
    (resampled refits, the other form, the backtest's extrapolation term), and its width does
    not depend on the held-out loss: the same entries with another measured value get the same
    interval, and only inside/outside changes."""
    from fitting.intervals.heldout import heldout_predictive
    from fitting.laws.budget.chinchilla_joint import JointChinchillaFit
    from fitting.report.sections.chinchilla import chinchilla_points

    _, fits, table = branch_reports
    entries = [e for e in fits["branches"]["heldout"] if e.get("predictive") and e["primary"]]
    assert len(entries) == 2 and all(e["calibrated"] for e in entries)
    eq11 = [e for e in fits["branches"]["heldout"] if e["law"].startswith("eq. 11")]
    assert eq11 and all("inside95" in e for e in eq11)  # the frontier's law, marked too
    for e in entries:
        iv = e["predictive"]
        assert iv["lo95"] < iv["lo80"] < iv["estimate"] < iv["hi80"] < iv["hi95"]
        assert iv["sd_extrapolation"] > 0 and iv["n_resamples"] > 0 and iv["sd_resample"] > 0
        assert iv["sd_forms"] > 0  # the other form of L(N, D), as the backtest points have
        assert e["inside95"] == (iv["lo95"] <= e["measured"] <= iv["hi95"])
    moved = [{**e, "measured": e["measured"] * 3.0} for e in entries]
    fit_rows = table[~table["run_id"].astype(str).str.startswith("s2_p0.50")]
    points, _, why = chinchilla_points(fit_rows, "validation", "loss")
    assert not why
    cover = heldout_predictive(moved, JointChinchillaFit.from_json(
        fits["branches"]["chinchilla"]["joint"]), points, {})
    for old, new in zip(entries, moved, strict=True):
        assert new["predictive"] == pytest.approx(old["predictive"])
        assert not new["inside95"]
    assert cover["0.95"] == {**cover["0.95"], "inside": 0, "n": 2}
    broken = [{**entries[0], "predicted": float("nan")}, {**entries[1]}]
    cover = heldout_predictive(broken, JointChinchillaFit.from_json(
        fits["branches"]["chinchilla"]["joint"]), points, {})  # no FitError out of the report
    assert broken[0]["predictive"] is None and broken[0]["inside95"] is None
    assert "not a positive finite loss" in broken[0]["predictive_note"]
    assert broken[1]["predictive"] == pytest.approx(entries[1]["predictive"])
    assert cover["0.95"]["n"] == 1


# -- the learning-curve figure ------------------------------------------------------------------


def test_learning_curve_figure_marks_branch_ends(branch_reports):
    from fitting import plots
    from fitting.test_utils import check_figure

    steps, loss = np.array([100.0, 200.0, 400.0, 1000.0]), np.array([3.0, 2.5, 2.2, 2.0])
    ends = {"r/en-de": (np.array([250.0, 500.0]), np.array([2.3, 2.1]))}
    fig = plots.plot_learning_curves({"r/en-de": (steps, loss)},
                                     panels={"r/en-de": ("en-de", 1e5)}, ends=ends)
    (dots,) = fig.axes[0].collections
    assert np.array_equal(dots.get_offsets(), [[250.0, 2.3], [500.0, 2.1]])
    assert check_figure(fig) == []
    reps, _, _ = branch_reports
    assert "learning_curves" in reps["branches"].figures
    assert "Triangles: the final losses of the runs' cool-down branches" in \
        reps["branches"].markdown


def _check1_fits(source_law: str, *, bound: bool | None = False, missing: str | None = None,
                 true: float | None = 0.100, asked: str | None = COOLED_LAW) -> dict:
    """A fits.json with en-de's fitted L∞ 0.104 (4 % above the exact 0.100) from ``source_law``;
    None for ``bound`` / ``asked``: a fits.json written before those fields existed."""
    pair = {"l_inf_fit": 0.104, "l_inf_source": source_law, "l_inf_budget": 0.12,
            "l_inf_law": source_law}
    if true is not None:
        pair["l_inf_true"] = true
    if bound is not None:
        pair["l_inf_is_bound"] = bound
    if missing:
        pair = {"l_inf_true": true, "l_inf_budget": 0.104, "l_inf_missing": missing}
    regime = {"pairs": {"en-de": pair}}
    if asked is not None:
        regime["l_inf_law"] = asked
    # the additive form's bound: 082b6f0 listed only Kaplan's in e_at_lowest_loss
    return {"regime": regime, "chinchilla": {"joint": {"meta": {"form": {"en-de": "additive"}}}}}


def test_check_main_job_check1_fails_an_l_inf_that_is_only_a_bound(benchmark_script, capsys):
    """Check 1: an L∞ flagged as a bound (regime.pairs[pair].l_inf_is_bound, either form) is not
    an estimate, however close it lands. The rule of 082b6f0 read the bound from
    meta["e_at_lowest_loss"], which only Kaplan's form filled: an additive E at the lowest loss,
    4 % from the truth, passed."""
    job = benchmark_script("check_main_job")
    bound = job.check(_check1_fits(COOLED_LAW, bound=True))["l_inf"]["en-de"]
    assert not bound["ok"]
    assert bound["is_bound"] and bound["status"] == "FAIL" and "a bound" in bound["reason"]
    good = job.check(_check1_fits(COOLED_LAW))["l_inf"]["en-de"]
    assert good["status"] == "ok" and good["ok"] and good["error"] == pytest.approx(0.04)
    far = job.check(_check1_fits(COOLED_LAW, true=0.098))["l_inf"]["en-de"]
    assert far["status"] == "FAIL" and "more than 5%" in far["reason"]
    job.print_result(job.check(_check1_fits(COOLED_LAW, bound=True)))
    out = capsys.readouterr().out
    assert f"1. rule: {job.RULES[1]}" in out
    assert "1. L_inf en-de: fitted 0.104 vs exact 0.1 (+4.0 %) FAIL: a bound" in out


def test_check_main_job_check1_never_judges_another_law_in_place_of_the_one_asked_for(
        benchmark_script, capsys):
    """Check 1 names the law it judges and fails a pair whose L∞ comes from another law or is
    missing. The rule of 082b6f0 passed eq. 7's L∞ (this budget's asymptote) where the
    cooled-down law had failed (tests/fitting/test_branches.py enshrined it)."""
    job = benchmark_script("check_main_job")
    eq7 = job.check(_check1_fits("joint law (eq. 7)"))
    d = eq7["l_inf"]["en-de"]
    assert not d["ok"] and not eq7["all_ok"] and d["status"] == "FAIL"
    assert d["law"] == "joint law (eq. 7)" and d["asked_law"] == COOLED_LAW
    assert "no L∞ from the law asked for" in d["reason"]
    why = f"{COOLED_LAW} could not be fitted: a run with 2 cooled-down budgets"
    missing = job.check(_check1_fits("", missing=why))
    d = missing["l_inf"]["en-de"]
    assert d["status"] == "FAIL" and d["fit"] is None and why in d["reason"]
    job.print_result(missing)
    assert why in capsys.readouterr().out
    # without branches eq. 7 is the law asked for
    plain = job.check(_check1_fits("joint law (eq. 7)", asked="joint law (eq. 7)"))
    assert plain["l_inf"]["en-de"]["status"] == "ok"
    # a fits.json from before the fields: a clear failure, not a guess
    for old in (_check1_fits(COOLED_LAW, asked=None), _check1_fits(COOLED_LAW, bound=None)):
        d = job.check(old)["l_inf"]["en-de"]
        assert d["status"] == "FAIL" and d["reason"] == job.OLD_FITS
    # no exact L∞ (not a synthetic study): nothing to judge, said as information
    info = job.check(_check1_fits(COOLED_LAW, true=None))["l_inf"]["en-de"]
    assert info["status"] == "information" and not info["ok"]


def test_a_cooled_down_law_that_cannot_be_fitted_leaves_no_fitted_l_inf(tmp_path,
                                                                        benchmark_script):
    """One branch per run (2 cooled-down budgets, the law needs 3): the report has no fitted L∞
    and says why; eq. 7's stays this budget's; check 1 fails naming the law asked for, check 5
    fails too. Under 082b6f0 the report put eq. 7's L∞ in its place and check 1 judged it."""
    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.5, 1.0), noise=0.01, seed=4)
    tab = _add_branches(_with_tokens_and_bleu(make_curves_table(fin)), steps=(400,))
    rep = write_report(tab, str(tmp_path / "one"), ReportOptions(uncertainty=NO_UNCERTAINTY,
                                                                 ground_truth={"en-de": 1.0, "en-zh": 1.5}))
    fits = json.load(open(rep.json_path))
    reg = fits["regime"]
    assert reg["l_inf_law"] == COOLED_LAW
    for pair, d in reg["pairs"].items():
        assert "l_inf_fit" not in d and "l_inf_law" not in d
        assert d["l_inf_missing"].startswith(f"{COOLED_LAW} could not be fitted: a run with 2 "
                                             "cooled-down budgets")
        assert d["l_inf_budget"] == fits["joint"]["params"][f"l_inf[{pair}]"]
    assert "No fitted L∞ (no other law's takes its place)" in rep.markdown
    result = benchmark_script("check_main_job").check(fits)
    assert not result["all_ok"] and result["regime"]["status"] == "FAIL"
    assert all(d["status"] == "FAIL" and d["reason"].startswith(
        f"no L∞ from the law asked for ({COOLED_LAW}): {COOLED_LAW} could not be fitted")
        for d in result["l_inf"].values())


def test_fitted_l_inf_names_its_law_and_its_bounds():
    """fitting.report.sections.regime.fitted_l_inf on stand-in fits: no substitution with branches, eq. 6's
    median named where eq. 7 is missing without them, eq. 7's L∞ at or above the lowest loss a
    bound."""
    from types import SimpleNamespace

    from fitting.report.sections.regime import LAW_JOINT, LAW_POWER, fitted_l_inf

    joint = SimpleNamespace(params={"l_inf[en-de]": 1.1})
    power = {"en-de": {0.5: SimpleNamespace(params={"l_inf": 1.0})},
             "en-zh": {0.5: SimpleNamespace(params={"l_inf": 1.4}),
                       1.0: SimpleNamespace(params={"l_inf": 1.6})}}
    cooled = SimpleNamespace(pairs=["en-de"], meta={"failed_pairs": {"en-zh": "2 sizes"}},
                             l_inf=lambda p: 0.9, e_is_bound=lambda p: True)
    lf = fitted_l_inf(["en-de", "en-zh"], branches=True, cooled=cooled, cooled_why="",
                      joint=joint, power_fits=power, lowest={"en-de": 1.2, "en-zh": 1.55})
    assert lf["law"] == COOLED_LAW and list(lf["l_inf"]) == ["en-de"]
    assert lf["l_inf"]["en-de"][0] == 0.9 and "a bound" in lf["l_inf"]["en-de"][1]
    assert lf["info"]["en-de"] == {"l_inf_law": COOLED_LAW, "l_inf_is_bound": True}
    assert lf["info"]["en-zh"] == {"l_inf_missing": f"{COOLED_LAW} could not be fitted: 2 sizes"}
    assert lf["budget"] == {"en-de": (1.1, LAW_JOINT),
                            "en-zh": (1.5, f"{LAW_POWER}; the joint law was not fitted")}
    none = fitted_l_inf(["en-de"], branches=True, cooled=None, cooled_why="too few budgets",
                        joint=joint, power_fits=power, lowest={})
    assert none["l_inf"] == {} and "too few budgets" in none["info"]["en-de"]["l_inf_missing"]
    plain = fitted_l_inf(["en-de", "en-zh"], branches=False, cooled=None, cooled_why="",
                         joint=joint, power_fits=power, lowest={"en-de": 1.2, "en-zh": 1.5})
    assert plain["law"] == LAW_JOINT
    assert plain["info"]["en-de"] == {"l_inf_law": LAW_JOINT, "l_inf_is_bound": False}
    # en-zh: eq. 6's median (1.5) stands in, named, and sits at the lowest loss: a bound
    assert plain["info"]["en-zh"] == {"l_inf_law": LAW_POWER, "l_inf_is_bound": True}


def test_check_main_job_checks_with_nothing_to_judge_fail(benchmark_script, capsys):
    """A fits.json without pairs (or held-out runs) fails every check with a message. The rule
    of a8299e0 judged checks 2 and 3 by all() over the pairs, True for none: they printed no
    line and passed; only all_ok caught it."""
    job = benchmark_script("check_main_job")
    for fits in ({}, {"regime": {"pairs": {}, "method": "cooled-down branches"}}):
        result = job.check(fits)
        assert not result["all_ok"]
        assert [result["checks"][k]["status"] for k in range(1, 6)] == ["FAIL"] * 5
        for k in (1, 2, 3):
            assert "no pair in fits.json's regime" in result["checks"][k]["reason"]
        assert "no held-out run" in result["checks"][4]["reason"]
    job.print_result(result)
    out = capsys.readouterr().out
    assert "2. alpha: no pair in fits.json's regime (the main job always has pairs) FAIL" in out
    assert "3. f(p): no pair in fits.json's regime (the main job always has pairs) FAIL" in out
    assert "4. held-out runs: none FAIL" in out


def test_check_main_job_check2_needs_two_per_weight_alphas_to_compare(benchmark_script, capsys):
    """Check 2's per-weight agreement with fewer than 2 per-weight α (with an sd) has nothing to
    compare: the pair fails, said. The rule of a8299e0 started from agree = True and passed."""
    job = benchmark_script("check_main_job")

    def fits(per_weight: dict) -> dict:
        power = {"en-de": {w: {"params": {"alpha": a}, "stderr": {"alpha": 0.01}}
                           for w, a in per_weight.items()}}
        return {"regime": {"pairs": {"en-de": {}}},
                "joint": {"params": {"alpha[en-de]": 0.3}, "stderr": {"alpha[en-de]": 0.01}},
                "power": power}

    one = job.check(fits({"0.5": 0.3}))["alpha"]["en-de"]
    assert one["per_weight_agree"] is None and not one["ok"]
    two = job.check(fits({"0.5": 0.3, "1.0": 0.31}))
    assert two["alpha"]["en-de"]["per_weight_agree"] is True and two["alpha"]["en-de"]["ok"]
    assert two["checks"][2]["status"] == "ok"
    apart = job.check(fits({"0.5": 0.3, "1.0": 0.4}))["alpha"]["en-de"]
    assert apart["per_weight_agree"] is False and not apart["ok"]
    result = job.check(fits({"0.5": 0.3}))
    assert result["checks"][2] == {"status": "FAIL", "reason": "a pair fails"}
    job.print_result(result)
    assert "per weight agree not judged (fewer than 2 per-weight α with an sd) FAIL" in \
        capsys.readouterr().out
