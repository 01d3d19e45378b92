"""The verification stage (mnmt.study.verify, `mnmt-study verify OUT`): the runs it plans from
the report's recommendation (configs built without training), its refusals, and one small study
verified end to end (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mnmt.study import cli, mixture_design, verify
from mnmt.study.runner import make_train_config
from mnmt.study.spec import StudyError, StudySpec, expand, size_weights
from mnmt.study.stages import UsageError, prepare_out_dir
from mnmt.study.test_utils import placeholder_data

PAIRS = ("en-sv", "en-da", "en-es", "en-it", "en-fi")
CAPS = (("en-sv", 6000), ("en-da", 800), ("en-es", 6000), ("en-it", 800), ("en-fi", 2000))
REC = {"en-sv": 0.3, "en-da": 0.1, "en-es": 0.3, "en-it": 0.1, "en-fi": 0.2}
MINI_1_N, MICRO_3_N = 58136.0, 37344.0  # non-embedding parameters (mnmt.models.zoo)


def k5(**fields) -> StudySpec:
    base = dict(name="k5", data_preset="tiny:en-{sv,da,es,it,fi}", pairs=PAIRS, data_caps=CAPS,
                sizes=("mini-1", "micro-2"), weights=(), single_pair_runs=True,
                uniform_mixture=True, temperatures=(5.0,), unimax_epochs=(10.0,),
                dirichlet_mixtures=4, train_steps=600, batch_size=48, examples_per_row=4.0,
                report_target_sizes=(MINI_1_N,))
    base.update(fields)
    return StudySpec.of(**base)


def write_fits(out: Path, recommendation: dict | None = None, **fits) -> None:
    """OUT/report/fits.json with this recommendation (for mini-1's N unless it says)."""
    (out / "report").mkdir(parents=True, exist_ok=True)
    if recommendation:
        recommendation = {"target_size": MINI_1_N, **recommendation}
    payload = {"mixture": {"recommendation": recommendation}} if recommendation else {}
    payload.update(fits)
    (out / "report" / "fits.json").write_text(json.dumps(payload))


def test_the_planned_configs_train_the_recommendation_and_the_design_baselines(tmp_path):
    spec = k5()
    write_fits(tmp_path, {"weights": REC, "law": "transfer"})
    runs, plan = verify.plan(spec, tmp_path)
    data = placeholder_data(spec)
    train = verify.training_spec(spec)  # what `mnmt-study verify` trains them under
    configs = {r.run_id: make_train_config(train, r, data, tmp_path / r.run_id, mixture_name="m")
               for r in runs}
    design = {tag: w for tag, w in mixture_design.uniform_mixtures(spec) + size_weights(spec)
              + mixture_design.unimax_mixtures(spec)}
    assert list(plan["mixtures"]) == ["recommended", "uniform", "T5", "unimax10"]
    assert plan["size"] == "mini-1"  # the size whose N the recommendation is for
    assert plan["seeds"] == [verify.SEED_BASE + i for i in range(3)]  # the default, 3
    for rid, config in configs.items():
        name = plan["runs"][rid]
        want = REC if name == "recommended" else design[name]
        assert config.mixture_weights == pytest.approx(want)
        assert config.model_size == "mini-1" and config.train_steps == 600
        assert config.extra["mixture"] == f"verify-{name}" and not config.extra["heldout"]
    assert sorted(c.seed for c in configs.values()) == sorted(plan["seeds"] * 4)
    assert all(c.eval.period >= 600 for c in configs.values())  # evaluated at the end only
    assert "mini-1_verify-recommended_s1000" in configs
    design_ids = {r.run_id for r in expand(spec)}
    assert not design_ids & set(configs)  # never a design run, nor a design seed


def test_the_size_is_the_recommendations_and_seeds_come_from_the_spec_or_the_command(tmp_path):
    """Old rule (082b6f0): the verification size was verify_size or --size or the largest of
    sizes, whatever N the recommendation was for; now a size of another N is refused, naming
    the fields, and without one the study's size with the recommendation's N is chosen."""
    write_fits(tmp_path, {"weights": REC, "target_size": MICRO_3_N})
    runs, plan = verify.plan(k5(verify_size="micro-3", verify_seeds=4), tmp_path)
    assert plan["size"] == "micro-3" and len(plan["seeds"]) == 4 and len(runs) == 16
    _, plan = verify.plan(k5(), tmp_path, size="micro-3", seeds=2)
    assert plan["size"] == "micro-3" and len(plan["seeds"]) == 2
    with pytest.raises(UsageError, match=r"--size 'mini-1' has N = 58136.*target_size"):
        verify.plan(k5(), tmp_path, size="mini-1")
    with pytest.raises(UsageError, match=r"StudySpec.verify_size 'micro-1'.*report_target_sizes"):
        verify.plan(k5(verify_size="micro-1"), tmp_path)
    with pytest.raises(UsageError, match=r"no size of StudySpec.sizes.*mini-1: 58136"):
        verify.plan(k5(), tmp_path)  # micro-3's N, but the study trains mini-1 and micro-2
    with pytest.raises(UsageError, match="giant-9"):
        verify.plan(k5(), tmp_path, size="giant-9")
    write_fits(tmp_path, {"weights": REC})
    with pytest.raises(UsageError, match="at least 2"):
        verify.plan(k5(), tmp_path, seeds=1)


def test_the_size_is_checked_from_the_spec_before_the_study_trains(tmp_path, capsys):
    assert verify.verification_size(k5()) == "mini-1"
    with pytest.raises(UsageError, match="report_target_sizes: empty"):
        verify.verification_size(k5(report_target_sizes=()))
    with pytest.raises(UsageError, match=r"report_target_sizes\[0\] = 2e\+06"):
        verify.verification_size(k5(report_target_sizes=(2e6,)))
    out = tmp_path / "out"
    args = ["--gin", 'StudySpec.data_preset="tiny:en-{de,fr,zh}"',
            "--gin", 'StudySpec.pairs=("en-de", "en-fr", "en-zh")', "--gin", "StudySpec.weights=()",
            "--gin", "StudySpec.single_pair_runs=True", "--gin", "StudySpec.verify=True",
            "--gin", "StudySpec.report_target_sizes=(2e6,)"]
    assert cli.main(["run", "--preset", "ci", *args, "--out", str(out)]) == cli.EXIT_USAGE
    assert "StudySpec.report_target_sizes[0] = 2e+06" in capsys.readouterr().err
    assert not out.exists()  # refused before anything was written or trained


def test_unequal_preferences_add_the_preferred_baseline_and_design_seeds_stay_apart(tmp_path):
    write_fits(tmp_path, {"weights": REC})
    prefs = (("en-sv", 0.0), ("en-da", 1.0), ("en-es", 0.0), ("en-it", 3.0), ("en-fi", 0.0))
    _, plan = verify.plan(k5(mixture_preferences=prefs), tmp_path)
    assert list(plan["mixtures"])[-1] == verify.PREFERRED
    assert plan["mixtures"][verify.PREFERRED] == pytest.approx(
        {"en-sv": 0.0, "en-da": 0.25, "en-es": 0.0, "en-it": 0.75, "en-fi": 0.0})
    equal = tuple((p, 2.0) for p in PAIRS)
    assert verify.PREFERRED not in verify.plan(k5(mixture_preferences=equal), tmp_path)[1][
        "mixtures"]
    with pytest.raises(UsageError, match=r"StudySpec.seeds \[0, 1001\].*\[1001\]"):
        verify.plan(k5(seeds=(0, 1001)), tmp_path)


@pytest.mark.parametrize("fields", [dict(verify_seeds=1), dict(verify=True, pairs=("en-sv", "en-da"),
                                                              data_caps=CAPS[:2], dirichlet_mixtures=0)])
def test_the_spec_refuses_one_seed_and_verifying_two_pairs(fields):
    with pytest.raises(StudyError, match="verify"):
        k5(**fields)


def test_a_report_without_a_recommendation_is_refused_with_its_reason(tmp_path):
    with pytest.raises(UsageError, match="no report yet"):
        verify.plan(k5(), tmp_path)
    write_fits(tmp_path, None, skipped={"mixture recommendation": "no law predicts at N"})
    with pytest.raises(UsageError, match="no law predicts at N"):
        verify.plan(k5(), tmp_path)


def test_a_verification_run_trained_on_other_weights_is_refused(tmp_path):
    write_fits(tmp_path, {"weights": REC})
    runs, _ = verify.plan(k5(), tmp_path)
    verify.check_trained_weights(runs, tmp_path)  # nothing trained yet: fine
    stale = tmp_path / runs[0].run_id
    stale.mkdir()
    (stale / "run.json").write_text(json.dumps({"mixture": {"weights": {**REC, "en-sv": 0.5}}}))
    with pytest.raises(UsageError, match=runs[0].run_id):
        verify.check_trained_weights(runs, tmp_path)
    (stale / "run.json").write_text(json.dumps({"mixture": {"weights": REC}}))
    verify.check_trained_weights(runs, tmp_path)  # the same weights: resumed, not refused


def test_the_recorded_spec_is_the_study_that_ran(tmp_path):
    spec = k5(heldout=(("mini-2", (1, 1, 1, 1, 1)),), train_overrides=(("label_smoothing", 0.1),))
    prepare_out_dir(tmp_path, spec)
    assert verify.recorded_spec(tmp_path) == spec
    with pytest.raises(UsageError, match="study.json"):
        verify.recorded_spec(tmp_path / "elsewhere")


def test_the_report_written_after_the_verification_keeps_the_design_rounds(tmp_path,
                                                                          monkeypatch):
    """An adaptive study's report is written again once the verification trained: the
    rounds recorded in OUT/design/rounds.jsonl stay in it (they were dropped before)."""
    records = [{"round": 0, "chosen": ["a"], "spent": 1.0}, {"round": 1, "stop": "pool"}]
    (tmp_path / "design").mkdir()
    (tmp_path / "design" / "rounds.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records))
    seen = {}
    monkeypatch.setattr(verify, "plan", lambda spec, out, size, seeds: (
        [], {"mixtures": {}, "seeds": [], "size": "micro-1"}))
    monkeypatch.setattr(verify, "check_trained_weights", lambda runs, runs_dir: None)
    monkeypatch.setattr(cli, "_train", lambda *args: [])
    monkeypatch.setattr(cli, "export_and_report", lambda *args, **kw: seen.update(kw))
    cli._verify(k5(), tmp_path, None, [], 1, lambda text: None)
    assert seen["design_rounds"] == records


def test_verify_of_an_adaptive_study_fits_the_runs_its_rounds_chose(tmp_path, monkeypatch):
    """`mnmt-study verify` on an adaptive study reports the runs its rounds chose (the seed
    repeats, the chosen design runs, the held-out runs), not the whole pool it picked from; a
    study still growing is refused."""
    spec = k5(adaptive=True, adaptive_target="objective")
    pool = [r.run_id for r in expand(spec) if not r.heldout]
    held = [r.run_id for r in expand(spec) if r.heldout]
    (tmp_path / "design").mkdir()
    rounds = tmp_path / "design" / "rounds.jsonl"
    rounds.write_text(json.dumps({"round": 0, "chosen": pool[:3]}) + "\n")
    seen = []
    monkeypatch.setattr(verify, "recorded_spec", lambda out: spec)
    monkeypatch.setattr(cli, "prepare_out_dir", lambda out, spec, command: None)
    monkeypatch.setattr(cli, "prepare_data", lambda spec, out, log: None)
    monkeypatch.setattr(cli, "run_complete", lambda spec, run, runs_dir: True)
    monkeypatch.setattr(cli, "_verify", lambda spec, out, data, dirs, *a, **kw: seen.append(dirs))
    assert cli.main(["verify", str(tmp_path)]) == cli.EXIT_USAGE  # no stop recorded yet
    rounds.write_text(rounds.read_text() + json.dumps({"round": 1, "chosen": [],
                                                       "stop": "budget"}) + "\n")
    assert cli.main(["verify", str(tmp_path)]) == 0
    assert [d.name for d in seen[0]] == [*pool[:3], *held]


def test_verify_on_a_directory_without_a_study_exits_2(tmp_path, capsys):
    assert cli.main(["verify", str(tmp_path)]) == cli.EXIT_USAGE
    assert "study.json" in capsys.readouterr().err


@pytest.mark.slow  # trains 8 + 6 micro-1 runs of 40 steps and fits the mixture laws twice
def test_verify_trains_the_recommendation_and_reports_it(tmp_path):
    out = tmp_path / "out"
    args = ["--gin", 'StudySpec.data_preset="tiny:en-{de,fr,zh}"',
            "--gin", 'StudySpec.pairs=("en-de", "en-fr", "en-zh")',
            "--gin", "StudySpec.sizes=('micro-1',)", "--gin", "StudySpec.weights=()",
            "--gin", "StudySpec.single_pair_runs=True", "--gin", "StudySpec.uniform_mixture=True",
            "--gin", "StudySpec.dirichlet_mixtures=4", "--gin", "StudySpec.train_steps=40",
            "--gin", "StudySpec.warmup_steps=10", "--gin", "StudySpec.eval_every=20",
            "--gin", "StudySpec.checkpoint_every=40", "--gin", "StudySpec.batch_size=16",
            "--gin", "StudySpec.decode_at_end=False", "--gin", "StudySpec.name='k3'",
            "--gin", "StudySpec.report_target_sizes=(9456,)"]  # micro-1's N
    assert cli.main(["run", "--preset", "ci", *args, "--out", str(out), "--workers", "1"]) == 0
    assert cli.main(["verify", str(out), "--workers", "1"]) == 0
    fits = json.loads((out / "report" / "fits.json").read_text())
    v = fits["mixture"]["verification"]
    rec = fits["mixture"]["recommendation"]
    assert v["size"] == "micro-1" and v["seeds"] == [1000, 1001, 1002]
    assert set(v["mixtures"]) == {"recommended", "uniform"} and set(v["beats"]) == {"uniform"}
    assert v["mixtures"]["recommended"]["weights"] == pytest.approx(rec["weights"])
    assert all(len(m["runs"]) == 3 and m["measured"]["objective"] > 0
               for m in v["mixtures"].values())
    assert v["mixtures"]["recommended"]["predicted"]["objective"] > 0
    table = (out / "metrics.csv").read_text()
    assert "micro-1_verify-recommended_s1001" in table
    # never fitted: the mixture section counts the design runs only
    report = (out / "report" / "report.md").read_text()
    assert "Verification" in report and "8 fitted runs" in report
    # a second verify trains nothing and gives the same verdict
    assert cli.main(["verify", str(out), "--workers", "1"]) == 0
    again = json.loads((out / "report" / "fits.json").read_text())["mixture"]["verification"]
    assert again["beats"] == v["beats"]
