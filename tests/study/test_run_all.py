"""mnmt.study.runner.run_all: a run that ends unfinished stops the study (no next run, no 'done')."""

import io

import pytest

from mnmt.study import cli as study
from mnmt.study import runner as local
from mnmt.study.progress import StudyProgress
from mnmt.study.spec import (
    StudyError,
    StudySpec,
    branch_runs,
    expand,
    progress_entries,
    with_branches,
)


def _run_all_with(monkeypatch, tmp_path, statuses):
    spec = StudySpec.of(sizes=("micro-1", "micro-2", "micro-3"), weights=(0.5,))
    runs = expand(spec)
    started = []

    def fake_train_group(configs, progress=None):
        summaries = []
        for config in configs:
            status, message, stop_signal = statuses[len(started)]
            started.append(config)
            summaries.append(trainer.TrainSummary(config, str(tmp_path), status, 3,
                                                  {"en-de": 1.0}, 0.1, message=message,
                                                  stop_signal=stop_signal))
        return summaries

    from mnmt.training import trainer

    monkeypatch.setattr(trainer, "train_group", fake_train_group)
    monkeypatch.setattr(local, "make_train_config", lambda spec, run, data, run_dir: run.run_id)
    stream = io.StringIO()
    progress = StudyProgress([(r.run_id, r.size, 10) for r in runs], stream=stream)
    data = local.StudyData("v.model", {"en-de": "a", "en-zh": "b"}, {})
    try:
        return local.run_all(spec, runs, data, tmp_path, progress), started, stream.getvalue()
    except local.RunStopped as stopped:
        return stopped, started, stream.getvalue()


def test_a_signal_stops_the_study_after_that_run(monkeypatch, tmp_path):
    stopped, started, text = _run_all_with(monkeypatch, tmp_path, [
        ("finished", "", None),
        ("preempted", "stopped by signal 15 at step 3; checkpoint saved, run again to resume", 15)])
    assert isinstance(stopped, local.RunStopped)
    assert started == ["micro-1_p0.50_s0", "micro-2_p0.50_s0"]  # the third never started
    assert stopped.run_id == "micro-2_p0.50_s0" and stopped.signal_number == 15
    assert "micro-1_p0.50_s0: done" in text and "micro-2_p0.50_s0: done" not in text


def test_a_diverged_run_stops_the_study(monkeypatch, tmp_path):
    stopped, started, _ = _run_all_with(monkeypatch, tmp_path, [("diverged", "loss is nan at step 3", None)])
    assert isinstance(stopped, local.RunStopped) and stopped.status == "diverged"
    assert len(started) == 1 and stopped.signal_number is None


def test_all_finished_returns_every_run_directory(monkeypatch, tmp_path):
    dirs, started, _ = _run_all_with(monkeypatch, tmp_path, [("finished", "", None)] * 3)
    assert [d.name for d in dirs] == started


@pytest.mark.parametrize("status, message, signum, code", [
    ("preempted", "stopped by signal 2 at step 5; checkpoint saved, run again to resume", 2, 130),
    ("preempted", "stopped by signal 15 at step 5; checkpoint saved, run again to resume", 15, 143),
    ("preempted", "stopped by signal (on another host) at step 5; …", None, 143),
    ("diverged", "loss is nan at step 5", None, 3),
])
def test_the_study_command_exits_with_the_stop_reason(monkeypatch, capsys, status, message, signum,
                                                      code):
    def stopped_run(args):
        raise local.RunStopped("mini-1_p0.50_s0", status, message, signum)

    monkeypatch.setattr(study, "build_parser", _parser_with(study.build_parser, stopped_run))
    assert study.main(["plan", "--preset", "ci"]) == code
    err = capsys.readouterr().err
    assert "mini-1_p0.50_s0" in err and message.split(";")[0] in err


def _parser_with(build, func):
    def patched():
        parser = build()
        for action in parser._subparsers._group_actions:
            action.choices["plan"].set_defaults(func=func)
        return parser
    return patched


def test_a_run_gets_the_studys_schedule_steps_and_cooldown_for_its_size(monkeypatch, tmp_path):
    spec = StudySpec.of(sizes=("micro-1", "mini-1"), weights=(0.5,), train_steps=400,
                     train_steps_by_size=(("mini-1", 1000),), cooldown_fraction=0.25,
                     decay="constant", learning_rate=0.05, momentum=0.9)
    monkeypatch.setattr(local, "register_run_mixture", lambda spec, run, data: "mix")
    data = local.StudyData("v.model", {"en-de": "a", "en-zh": "b"}, {})
    configs = {run.size: local.make_train_config(spec, run, data, tmp_path / run.run_id)
               for run in expand(spec)}
    assert configs["micro-1"].train_steps == 400 and configs["micro-1"].cooldown_steps == 100
    assert configs["mini-1"].train_steps == 1000 and configs["mini-1"].cooldown_steps == 250
    assert {c.decay for c in configs.values()} == {"constant"}
    assert {c.learning_rate for c in configs.values()} == {0.05}
    assert {c.optimizer.momentum for c in configs.values()} == {0.9}
    with pytest.raises(StudyError, match="StudySpec.decay"):
        StudySpec.of(decay="linear")  # not one of config.DECAYS
    with pytest.raises(StudyError, match=r"StudySpec.momentum: expected a decay in \[0, 1\)"):
        StudySpec.of(momentum=1.0)
    plain = local.make_train_config(StudySpec(), expand(StudySpec())[0], data, tmp_path / "p")
    assert plain.optimizer is None  # no momentum: T5X's Adafactor defaults


def test_data_caps_give_temperature_and_oversampling_mixtures(monkeypatch, tmp_path):
    caps = (("en-de", 8000), ("en-zh", 500))
    spec = StudySpec.of(sizes=("micro-1",), weights=(0.5,), data_caps=caps,
                     temperatures=(1.0, 5.0, float("inf")), oversampling=(5.0,))
    runs = {run.run_id: run for run in expand(spec)}
    assert sorted(runs) == ["micro-1_T1_s0", "micro-1_T5_s0", "micro-1_Tinf_s0",
                            "micro-1_os5_s0", "micro-1_p0.50_s0"]
    # p_i ∝ D_i^(1/T) (Chen et al. 2023 §4.2): proportional at T = 1, uniform at T = ∞
    assert runs["micro-1_T1_s0"].weights["en-de"] == pytest.approx(8000 / 8500)
    assert runs["micro-1_T5_s0"].weights["en-de"] == pytest.approx(16 ** 0.2 / (16 ** 0.2 + 1))
    assert runs["micro-1_Tinf_s0"].weights == pytest.approx({"en-de": 0.5, "en-zh": 0.5})
    assert 0.5 < runs["micro-1_os5_s0"].weights["en-de"] < 8000 / 8500
    assert runs["micro-1_T5_s0"].mixture == "T5" and runs["micro-1_p0.50_s0"].mixture == ""
    # the runs' caps come from the data stage (what the tasks were registered with)
    monkeypatch.setattr(local, "register_run_mixture", lambda spec, run, data: "mix")
    data = local.StudyData("v.model", {"en-de": "a", "en-zh": "b"}, {}, caps=dict(caps))
    config = local.make_train_config(spec, runs["micro-1_T5_s0"], data, tmp_path / "r")
    assert config.mixture_caps == {"en-de": 8000, "en-zh": 500}
    assert config.mixture_weights == pytest.approx(runs["micro-1_T5_s0"].weights)


@pytest.mark.parametrize("fields, message", [
    ({"temperatures": (5.0,)}, r"StudySpec.temperatures: weights from data sizes need "
                               r"StudySpec.data_caps for every pair"),
    ({"oversampling": (5.0,), "data_caps": (("en-de", 10),)}, r"caps given for \['en-de'\]"),
    ({"data_caps": (("en-fr", 10),)}, r"StudySpec.data_caps: expected \(pair, examples\)"),
    ({"data_caps": (("en-de", 0),)}, r"positive integer number of examples for 'en-de'"),
    ({"data_caps": (("en-de", 5), ("en-zh", 5)), "temperatures": (0.0,)},
     r"StudySpec.temperatures: expected positive numbers"),
])
def test_data_caps_and_size_mixtures_are_validated(fields, message):
    with pytest.raises(StudyError, match=message):
        StudySpec.of(**fields)


def test_the_data_stage_caps_the_synthetic_tasks(tmp_path):
    from mnmt.data import tasks
    from mnmt.study.stages import prepare_data

    spec = StudySpec.of(data_caps=(("en-de", 300),))
    data = prepare_data(spec, tmp_path, lambda text: None)
    assert data.caps == {"en-de": 300, "en-zh": None}
    assert tasks.get_task_info(data.tasks["en-de"]).train_size == 300
    assert tasks.get_task_info(data.tasks["en-zh"]).train_size is None


def test_branches_train_after_their_group_and_are_skipped_once_finished(monkeypatch, tmp_path):
    spec = StudySpec.of(sizes=("micro-1", "micro-2"), weights=(0.3, 0.5), train_steps=400,
                     cooldown_fraction=0.25, cooldown_branches=(0.25, 100), max_group=2)
    runs = expand(spec)
    started: list[list[str]] = []

    def fake_train_group(configs, progress=None):
        started.append(list(configs))
        return [trainer.TrainSummary(c, str(tmp_path), "finished", 3, {}, 0.1) for c in configs]

    from mnmt.training import trainer

    monkeypatch.setattr(trainer, "train_group", fake_train_group)
    monkeypatch.setattr(local, "make_train_config", lambda spec, run, data, run_dir: run.run_id)
    monkeypatch.setattr(local, "branch_train_configs",
                        lambda spec, branches, data, runs_dir: [b.run_id for b in branches])
    (tmp_path / "micro-2_p0.30_s0_cd100").mkdir()
    (tmp_path / "micro-2_p0.30_s0_cd100" / "run.json").write_text('{"status": "finished"}')
    progress = StudyProgress(progress_entries(spec, runs), stream=io.StringIO())
    data = local.StudyData("v.model", {"en-de": "a", "en-zh": "b"}, {})
    dirs = local.run_all(spec, runs, data, tmp_path, progress)
    assert started == [
        ["micro-1_p0.30_s0", "micro-1_p0.50_s0"],
        ["micro-1_p0.30_s0_cd100", "micro-1_p0.50_s0_cd100"],  # one group per branch step
        ["micro-2_p0.30_s0", "micro-2_p0.50_s0"],
        ["micro-2_p0.50_s0_cd100"],  # its finished sibling is skipped
    ]
    assert [d.name for d in dirs] == [r.run_id for r in with_branches(spec, runs)]
    # 0.25 of 400 steps is step 100 as well: one branch, cooling down 100·0.25/0.75 ≈ 33 steps
    assert progress_entries(spec, runs[:1]) == [("micro-1_p0.30_s0", "micro-1", 400, 0),
                                                ("micro-1_p0.30_s0_cd100", "micro-1", 33, 100)]


def test_plan_lists_the_branches_with_the_steps_they_add(capsys):
    assert study.main(["plan", "--preset", "ci", "--gin", "StudySpec.cooldown_fraction=0.4",
                       "--gin", "StudySpec.cooldown_branches=(0.5,)"]) == 0
    out, err = capsys.readouterr()
    assert ("mini-1_p0.50_s0_cd150\tmini-1\ten-de=0.50 en-zh=0.50\tseed=0\tsteps=250\t"
            "cool-down branch of mini-1_p0.50_s0: from its step 150, 100 steps trained") in out
    assert "4 runs, 1,200 steps; 4 cool-down branches, 400 steps (+33 % steps)" in err


@pytest.mark.parametrize("fields, message", [
    ({"cooldown_branches": (0.5,)}, r"StudySpec.cooldown_branches: a branch needs a "
                                    r"cool-down share.*StudySpec.cooldown_fraction"),
    ({"cooldown_fraction": 0.4, "cooldown_branches": (0.7,)},
     r"StudySpec.cooldown_branches: branch step 490 .* outside \[1, 420\)"),
    ({"cooldown_fraction": 0.4, "cooldown_branches": (2.5,)}, "expected a fraction in"),
    ({"cooldown_shape": "cosine"}, "StudySpec.cooldown_shape: expected one of linear, 1-sqrt"),
])
def test_branch_fields_are_validated(fields, message):
    with pytest.raises(StudyError, match=message):
        StudySpec.of(**fields)


def test_a_branch_run_gets_its_parents_config_branched(monkeypatch, tmp_path):
    spec = StudySpec.of(sizes=("micro-1",), weights=(0.5,), train_steps=400, cooldown_fraction=0.25,
                     cooldown_branches=(0.5,), cooldown_shape="1-sqrt", decay="constant")
    monkeypatch.setattr(local, "register_run_mixture", lambda spec, run, data: "mix")
    data = local.StudyData("v.model", {"en-de": "a", "en-zh": "b"}, {})
    (run,) = expand(spec)
    parent = local.make_train_config(spec, run, data, tmp_path / run.run_id)
    assert parent.branches.points == (0.5,) and parent.cooldown_shape == "1-sqrt"
    (branch,) = local.branch_train_configs(spec, branch_runs(spec, run), data, tmp_path)
    assert branch.model_dir == str(tmp_path / "micro-1_p0.50_s0_cd200")
    assert (branch.train_steps, branch.cooldown_steps) == (267, 67)
    assert branch.branches.parent_dir == str(tmp_path / run.run_id)
    assert branch.run_id == "micro-1_p0.50_s0_cd200" and branch.cooldown_shape == "1-sqrt"
