"""mnmt.study.adaptive: an adaptive study grows round by round on outcomes drawn from a known law;
it stops on its interval or its budget, never spends past the budget, resumes a killed round
without repeating a finished run, and reads back its records."""

import json

import numpy as np
import pytest

from fitting.report.markdown import Document
from fitting.report.sections.design_rounds import design_rounds_section
from mnmt.study import adaptive, design_pool
from mnmt.study.spec import StudyError, StudySpec
from mnmt.study.test_utils import KnownOutcomes, grow_killed_in_round


def _truth(design) -> np.ndarray:
    """The known law: the design law (Kaplan's form across weights) at E = 1.5, α = 1.5,
    β = 3 and A_p = B_p = 0.3 for every weight p, in the design's scaled units."""
    w = len(design.weights)
    return np.array([1.5, 1.5, 3.0, *[0.3] * (2 * w)])


def _spec(**kw) -> StudySpec:
    fields = dict(sizes=("micro-1", "micro-2", "micro-3", "mini-1"),
                  weights=(0.0, 0.3, 0.5, 0.7, 1.0), train_steps=2000,
                  cooldown_branches=(0.45, 0.6, 0.75), branch_cooldown_fraction=0.1,
                  cooldown_fraction=0.2, seed_repeats=(("mini-1", 0.5, 1),),
                  heldout=(("mini-3", 0.6),), adaptive=True, adaptive_sizes=("mini-2",))
    fields.update(kw)
    return StudySpec.of(**fields)


class KnownLaw(KnownOutcomes):
    """Outcomes from `_truth`, noise drawn once per run; records what was trained."""

    def __init__(self, design: adaptive.AdaptiveDesign, noise: float = 0.01, seed: int = 0):
        super().__init__(noise, seed)
        self.design, self.theta = design, _truth(design)

    def clean(self, run):
        x = self.design.inputs(run)[None, :]
        return np.exp(self.design.law.predict(self.theta[:, None], x))[0, 0]


def _grow(tmp_path, spec, noise=0.01):
    design = adaptive.AdaptiveDesign(spec)
    law = KnownLaw(design, noise)
    records = adaptive.grow(design, tmp_path, law.train, law.measure, log=lambda _: None)
    return design, law, records


def test_round_zero_trains_the_seed_repeats_and_the_middle_weight_at_every_grid_size(tmp_path):
    design, law, records = _grow(tmp_path, _spec(adaptive_threshold=0.5))
    assert records[0]["chosen"] == ["micro-1_p0.70_s0", "micro-2_p0.70_s0", "micro-3_p0.70_s0",
                                    "mini-1_p0.70_s0"]
    assert law.trained[0] == "mini-1_p0.50_s1"  # the seed repeat, first
    assert not any(r.startswith("mini-3") for r in law.trained)  # held-out: the caller's


def test_a_reachable_threshold_stops_the_study_before_its_budget(tmp_path):
    design, _, records = _grow(tmp_path, _spec(adaptive_threshold=0.3), noise=0.002)
    last = records[-1]
    assert last["stop"] == "threshold"
    assert last["before"]["relative"] <= 0.3 and last["before"]["source"] == "design law"
    assert last["spent"] < design.budget
    assert last["before"]["lo95"] <= 1.5 <= last["before"]["hi95"]


def test_an_unreachable_threshold_spends_at_most_the_budget_and_never_a_run_twice(tmp_path):
    design, law, records = _grow(tmp_path, _spec(adaptive_threshold=1e-4, adaptive_budget=0.6))
    assert records[-1]["stop"] in ("budget", "pool")
    chosen = [i for r in records for i in r["chosen"]]
    assert len(chosen) == len(set(chosen))
    assert sum(design.cost[i] for i in chosen) <= design.budget * (1 + 1e-9)
    for record in records[1:]:
        if record["chosen"]:
            assert record["cost"] <= max(0.15 * design.budget, max(design.cost.values())) + 1
    assert len(law.trained) == len(set(law.trained))


def test_a_round_killed_while_training_resumes_the_same_batch_and_ends_as_uninterrupted(tmp_path):
    spec = _spec(adaptive_threshold=1e-4)
    _, _, whole = _grow(tmp_path / "whole", spec)
    design = adaptive.AdaptiveDesign(spec)
    recorded = grow_killed_in_round(design, tmp_path / "cut", KnownLaw(design), 2)
    assert [r["round"] for r in recorded] == [0, 1, 2]
    again = KnownLaw(design)
    resumed = adaptive.grow(design, tmp_path / "cut", again.train, again.measure,
                            log=lambda _: None)
    batches = [i for r in recorded for i in r["chosen"]]
    assert again.trained[1:1 + len(batches)] == batches  # recorded rounds handed back in order
    assert [r["chosen"] for r in resumed] == [r["chosen"] for r in whole]
    assert resumed[-1]["stop"] == whole[-1]["stop"]


def test_a_torn_last_line_is_ignored_and_replaced_a_bad_middle_line_named(tmp_path):
    adaptive.append_round(tmp_path, {"round": 0, "chosen": ["a"]})
    path = tmp_path / adaptive.ROUNDS_FILE
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"round": 1, "cho')  # killed while writing
    assert [r["round"] for r in adaptive.read_rounds(tmp_path)] == [0]
    adaptive.append_round(tmp_path, {"round": 1, "chosen": ["b"]})
    assert [json.loads(line)["round"] for line in path.read_text().splitlines()] == [0, 1]
    path.write_text('{"round": 0, "chosen": []}\nnot json\n{"round": 2, "chosen": []}\n')
    with pytest.raises(StudyError, match=r"rounds.jsonl:2: not a JSON round record"):
        adaptive.read_rounds(tmp_path)


def test_a_record_naming_a_run_outside_the_pool_is_refused(tmp_path):
    design = adaptive.AdaptiveDesign(_spec())
    adaptive.append_round(tmp_path, {"round": 0, "chosen": ["mega-1_p0.50_s0"]})
    law = KnownLaw(design)
    with pytest.raises(StudyError, match="mega-1_p0.50_s0.*not a run of this study's pool"):
        adaptive.grow(design, tmp_path, law.train, law.measure, log=lambda _: None)


def test_the_budget_is_a_multiple_of_the_grid_and_extra_sizes_only_join_the_pool():
    spec = _spec()
    design = adaptive.AdaptiveDesign(spec)
    grid = adaptive.grid_design_runs(spec)
    assert len(grid) == 4 * 5 and all(r.size != "mini-2" for r in grid)
    assert any(r.size == "mini-2" for r in design.pool)
    assert all(r.weights["en-de"] > 0 for r in design.pool)  # p = 0 teaches nothing of en-de E
    doubled = adaptive.AdaptiveDesign(_spec(adaptive_budget=2.0))
    assert doubled.budget == pytest.approx(2 * design.budget)
    # a run's cost: its 2,000 steps and its branches' cool-downs (10 % of each branch's budget:
    # 100, 133 and 167 steps from steps 900, 1,200 and 1,500)
    assert design.cost["micro-1_p0.50_s0"] == pytest.approx(
        2400 * design_pool.size_step_flops(spec, "micro-1"))
    assert design.budget_steps(design.pool[0]) == [1000, 1333, 1667, 2000]


@pytest.mark.parametrize("field, value, message", [
    ("adaptive_threshold", 0.0, "adaptive_threshold: expected a share of E in"),
    ("adaptive_budget", -1.0, "adaptive_budget: expected a positive multiple"),
    ("adaptive_round", 1.5, "adaptive_round: expected a share of the budget"),
    ("adaptive_pair", "en-fr", "adaptive_pair: 'en-fr' is not a pair"),
    ("adaptive_sizes", ("mega-9",), "adaptive_sizes: unknown size 'mega-9'"),
    ("stop_fraction", 0.5, "cannot also stop runs early"),
])
def test_bad_adaptive_settings_are_refused_naming_the_field(field, value, message):
    with pytest.raises(StudyError, match=message):
        _spec(**{field: value})


def test_an_initial_weight_not_in_the_grid_is_refused_naming_the_grid():
    spec = _spec(adaptive_initial=(0.4,))
    with pytest.raises(StudyError, match=r"no run of the grid has en-de weight in \[0.4\]"):
        adaptive.initial_runs(spec, adaptive.AdaptiveDesign(spec).pool)


def test_the_report_section_shows_every_round_and_why_it_stopped(tmp_path):
    _, _, records = _grow(tmp_path, _spec(adaptive_threshold=1e-4, adaptive_budget=0.5))
    doc = Document()
    payload = design_rounds_section(doc, records, str(tmp_path), None)
    text = doc.markdown()
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(records)  # header + one row per round
    assert "Stopped: the compute budget is spent" in text or "every run of the pool" in text
    narrowest = min(r["before"]["relative"] for r in records[1:])
    assert "did not reach ±0% of log E" in text and f"the narrowest ±{narrowest:.1%}" in text
    assert "from the other form" not in text  # these intervals carry no terms
    records[-1]["before"].update(sd_resample=0.0512, sd_forms=0.1834)
    doc = Document()
    design_rounds_section(doc, records, str(tmp_path), None)
    assert "0.051 from the resampled runs and 0.183 from the other form" in doc.markdown()
    assert "the forms keep it wide" in doc.markdown()
    assert payload["stop"] == records[-1]["stop"]
    assert (tmp_path / "figures" / "design_rounds.png").exists()


ADAPTIVE_CI = ["StudySpec.sizes=('micro-1', 'micro-2', 'micro-3')",
               "StudySpec.weights=(0.3, 0.7, 1.0)", "StudySpec.train_steps=200",
               "StudySpec.eval_every=50", "StudySpec.checkpoint_every=100",
               "StudySpec.warmup_steps=20", "StudySpec.decode_at_end=False",
               "StudySpec.cooldown_branches=(0.5, 0.75)", "StudySpec.branch_cooldown_fraction=0.1",
               "StudySpec.adaptive=True", "StudySpec.adaptive_threshold=0.01",
               "StudySpec.adaptive_round=0.3", "StudySpec.adaptive_budget=0.8"]


@pytest.mark.slow
def test_an_adaptive_study_trains_its_rounds_reports_them_and_resumes_with_nothing_to_train(
        tmp_path):
    """`mnmt-study run` on a 3-size miniature grown adaptively: the rounds file, the report's
    section and the table hold the same runs; the same command again trains nothing."""
    from mnmt.study import cli

    out = tmp_path / "adaptive"
    args = ["run", "--preset", "ci", "--out", str(out)]
    for binding in ADAPTIVE_CI:
        args += ["--gin", binding]
    assert cli.main(args) == 0
    records = adaptive.read_rounds(out)
    chosen = {i for r in records for i in r["chosen"]}
    assert records[-1].get("stop") in ("threshold", "budget", "pool")
    fits = json.loads((out / "report" / "fits.json").read_text())
    assert [r["round"] for r in fits["design_rounds"]["rounds"]] == [r["round"] for r in records]
    assert "## Design rounds" in (out / "report" / "report.md").read_text()
    table = __import__("pandas").read_csv(out / "metrics.csv")
    parents = {r.split("_cd")[0] for r in table["run_id"].unique()}
    assert parents == chosen  # every chosen run (and its branches) trained, nothing else
    before = (out / adaptive.ROUNDS_FILE).read_text()
    mtimes = {p: p.stat().st_mtime for p in (out / "runs").glob("*/run.json")}
    assert cli.main(args) == 0
    assert (out / adaptive.ROUNDS_FILE).read_text() == before
    assert {p: p.stat().st_mtime for p in (out / "runs").glob("*/run.json")} == mtimes


def test_a_plan_before_any_run_narrows_e_round_by_round_and_costs_each_round(capsys):
    """`mnmt-study design-plan`: from the prior alone, every round's predicted interval of log E
    is no wider than the last (information only grows), and its hours are its FLOPs at the
    device's rate."""
    from mnmt.study import cli

    args = ["design-plan", "--preset", "ci", "--json", "--rounds", "3", "--peak-tflops", "100",
            "--mfu", "0.5", "--gin", "StudySpec.weights=(0.3, 0.7, 1.0)",
            "--gin", "StudySpec.cooldown_branches=(0.5, 0.75)",
            "--gin", "StudySpec.branch_cooldown_fraction=0.1"]
    assert cli.main(args) == 0
    plan = json.loads(capsys.readouterr().out)
    rounds = plan["rounds"]
    assert [r["round"] for r in rounds] == list(range(len(rounds))) and len(rounds) >= 2
    widths = [r["relative"] for r in rounds]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(widths, widths[1:], strict=False)), widths
    assert rounds[0]["accelerator_hours"] == pytest.approx(rounds[0]["cost"] / 50e12 / 3600)
    assert rounds[-1]["spent"] <= plan["budget"] * (1 + 1e-9)


def test_a_plan_with_an_unknown_prior_parameter_is_refused_in_one_line(capsys):
    from mnmt.study import cli

    assert cli.main(["design-plan", "--preset", "ci", "--prior", '{"gamma": 1}']) == 2
    assert "unknown parameter(s) ['gamma']" in capsys.readouterr().err


def test_plan_says_an_adaptive_grid_is_what_the_rounds_pick_from(capsys):
    from mnmt.study import cli

    assert cli.main(["plan", "--preset", "ci", "--gin", "StudySpec.adaptive=True"]) == 0
    err = capsys.readouterr().err
    assert "4 design runs to pick from" in err and "not what trains" in err


def test_a_whole_last_record_without_its_newline_is_kept_when_the_next_is_appended(tmp_path):
    """A kill between a record and its newline: read_rounds counts the record, so the next
    append keeps it too (a round read and trained is never dropped from the file)."""
    adaptive.append_round(tmp_path, {"round": 0, "chosen": ["a"]})
    with open(tmp_path / adaptive.ROUNDS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps({"round": 1, "chosen": ["b"]}))
    assert [r["round"] for r in adaptive.read_rounds(tmp_path)] == [0, 1]
    adaptive.append_round(tmp_path, {"round": 2, "chosen": []})
    assert [r["round"] for r in adaptive.read_rounds(tmp_path)] == [0, 1, 2]


def test_a_held_out_run_of_an_extra_size_never_joins_the_pool():
    spec = _spec(heldout=(("mini-2", 0.5),))
    pool = {r.run_id for r in adaptive.AdaptiveDesign(spec).pool}
    assert "mini-2_p0.50_s0" not in pool and "mini-2_p1.00_s0" in pool


def test_a_round_zero_dearer_than_the_budget_is_refused_before_anything_is_recorded(tmp_path):
    design = adaptive.AdaptiveDesign(_spec(adaptive_budget=0.1))
    law = KnownLaw(design)
    with pytest.raises(StudyError, match="adaptive_budget: round 0 .* more than the budget"):
        adaptive.grow(design, tmp_path, law.train, law.measure, log=lambda _: None)
    assert adaptive.read_rounds(tmp_path) == [] and law.trained == []


def test_the_report_section_compares_the_reports_interval_with_the_design_laws(tmp_path):
    _, _, records = _grow(tmp_path, _spec(adaptive_threshold=1e-4, adaptive_budget=0.5))
    # as in a study: the stop rule's interval ("before") is the report's, not the design law's
    records[-1]["before"] = {"E": 1.6, "lo95": 1.2, "hi95": 2.0, "relative": 0.26,
                             "source": "L(N, D) across weights"}
    doc = Document()
    design_rounds_section(doc, records, str(tmp_path), {"estimate": 1.6, "lo95": 1.2,
                                                        "hi95": 2.0})
    design = records[-1]["design"]
    assert (f"the design law's is {design['E']:.4g} [{design['lo95']:.4g}, "
            f"{design['hi95']:.4g}]") in doc.markdown()


def test_a_resumed_study_starts_its_next_fit_from_the_recorded_parameters_exactly(tmp_path):
    """The warm start of the first fit after a kill is the uninterrupted study's, bit for bit:
    the recorded normalised parameters, not to_u of the recorded theta (a round trip through
    exp and log that moves the last bits)."""
    spec = _spec(adaptive_threshold=1e-4)
    starts: dict[str, list] = {"whole": [], "cut": []}

    def design_for(key):
        design = adaptive.AdaptiveDesign(spec)
        fit = design.fit

        def recording_fit(runs, losses, number, warm=None):
            starts[key].append((number, None if warm is None else warm.copy()))
            return fit(runs, losses, number, warm)

        design.fit = recording_fit
        return design

    whole = design_for("whole")
    law = KnownLaw(whole)
    adaptive.grow(whole, tmp_path / "whole", law.train, law.measure, log=lambda _: None)
    cut = design_for("cut")
    law = KnownLaw(cut)
    grow_killed_in_round(cut, tmp_path / "cut", law, 2)
    starts["cut"].clear()
    adaptive.grow(cut, tmp_path / "cut", law.train, law.measure, log=lambda _: None)
    number, warm = starts["cut"][0]
    expected = dict(starts["whole"])[number]
    assert number == 3 and np.array_equal(warm, expected)
    theta = adaptive.read_rounds(tmp_path / "cut")[2]["theta"]
    assert not np.array_equal(cut.law.to_u(np.asarray(theta)), expected)  # what it was before


def test_the_reason_a_pair_failed_to_fit_reaches_the_round_record(tmp_path, monkeypatch):
    """When the report's fit leaves the target pair out, the stop rule's estimate says why."""
    import types

    from fitting.data import rundirs
    from fitting.report import view
    from fitting.report.sections import chinchilla

    failed = types.SimpleNamespace(meta={"failed_pairs": {"en-de": "E hit its bound"}})
    monkeypatch.setattr(rundirs, "collect_runs", lambda dirs: None)
    monkeypatch.setattr(view, "prepare_view", lambda table, eval_set: types.SimpleNamespace(
        seeds=None))
    monkeypatch.setattr(chinchilla, "largest_size_seed_noises", lambda seeds: ({},))
    monkeypatch.setattr(chinchilla, "fit_cooled_law", lambda v, noise_rel: (failed, "", ""))
    design = adaptive.AdaptiveDesign(_spec())
    estimate = adaptive.report_interval(design, tmp_path, "validation")(design.pool[:2])
    assert estimate.detail == {"why": "E hit its bound"} and estimate.relative == float("inf")


def test_a_plan_ends_with_the_round_that_reaches_the_threshold():
    spec = _spec(adaptive_threshold=0.9, adaptive_budget=3.0)
    design = adaptive.AdaptiveDesign(spec)
    rounds = adaptive.plan_rounds(design, 20, 0.01)
    widths = [r["relative"] for r in rounds]
    assert widths[-1] <= 0.9 and all(w > 0.9 for w in widths[:-1]), widths
    assert len(rounds) < 21  # the threshold ended it, not the rounds asked for


def test_round_zero_records_the_flops_outside_the_budget_and_the_report_says_so(tmp_path):
    design, _, records = _grow(tmp_path, _spec(adaptive_threshold=0.5))
    repeats, held = adaptive.fixed_runs(design.spec)
    assert [r.run_id for r in (*repeats, *held)] == ["mini-1_p0.50_s1", "mini-3_p0.60_s0"]
    expected = sum(design_pool.run_flops(design.spec, r, design_pool.size_step_flops(
        design.spec, r.size)) for r in (*repeats, *held))
    assert records[0]["outside_budget"] == pytest.approx(expected) and expected > 0
    doc = Document()
    design_rounds_section(doc, records, str(tmp_path), None)
    assert (f"the seed repeats and the held-out runs ({expected:.3g} FLOPs) are trained besides"
            in doc.markdown())


@pytest.mark.parametrize("terms, stop, says", [
    ({"sd_resample": 0.15, "sd_forms": 0.05}, "budget", "the resampled runs keep it wide"),
    ({"sd_resample": 0.01, "sd_forms": 0.2}, "budget", "larger sizes may: `adaptive_sizes`"),
    ({"sd_resample": 0.01, "sd_forms": 0.2}, "pool", "only sizes beyond the pool's"),
    ({}, "budget", "where the forms disagree"),
    ({"sd_resample": 0.01, "sd_forms": 0.2, "sd_extrapolation": 0.054, "rule": "calibration",
      "calibrated": True, "calibration_n": 6}, "pool", "the held-out mixtures' error of J"),
])
def test_a_study_short_of_its_threshold_is_told_what_would_narrow_it(terms, stop, says):
    """The last interval's larger term decides the advice: more runs for the resampling term,
    larger sizes for the forms term, and once the pool (its larger sizes included) is spent,
    nothing the study could still buy."""
    before = {"E": 0.1, "lo95": 0.07, "hi95": 0.14, "relative": 0.4, **terms}
    records = [{"round": 0, "chosen": ["a"], "cost": 1.0, "spent": 1.0, "budget": 1.0,
                "threshold": 0.1, "target": "E", "pair": "en-de"},
               {"round": 1, "chosen": [], "stop": stop, "cost": 0.0, "spent": 1.0,
                "before": before}]
    doc = Document()
    design_rounds_section(doc, records, None, None)
    text = doc.markdown()
    assert says in text
    if terms:   # one piece of advice, never the others'
        others = {"the resampled runs keep it wide", "larger sizes may: `adaptive_sizes`",
                  "only sizes beyond the pool's", "the held-out mixtures' error of J"} - {says}
        assert not any(o in text for o in others)


def test_a_calibrated_interval_names_its_one_term_and_the_two_it_does_not_add():
    """The objective's interval is the held-out mixtures' error alone: the section gives that
    term with its count and says the resampling and forms terms are not in it."""
    before = {"J": 0.3, "lo95": 0.27, "hi95": 0.35, "relative": 0.13, "sd_resample": 0.014,
              "sd_forms": 0.038, "sd_extrapolation": 0.054, "rule": "calibration",
              "calibrated": True, "calibration_n": 6.0}
    records = [{"round": 0, "chosen": ["a"], "cost": 1.0, "spent": 1.0, "budget": 1.0,
                "threshold": 0.1, "target": "objective", "target_size": 5e4},
               {"round": 1, "chosen": [], "stop": "pool", "cost": 0.0, "spent": 1.0,
                "before": before}]
    doc = Document()
    design_rounds_section(doc, records, None, None)
    assert ("the sd of the log is 0.054, the held-out mixtures' root mean square error of log J "
            "over 6 runs (the resampled runs' 0.014 and the other forms' 0.038 are reported, not "
            "added)") in doc.markdown()
