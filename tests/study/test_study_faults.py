"""A run whose files cannot be read stops `mnmt-study run` with one line naming the file and line
(exit 2), not a traceback; the trainer's own tests check that nothing was written."""

from __future__ import annotations

import pytest

from mnmt.study import cli as study
from mnmt.study import runner
from mnmt.study.spec import expand


@pytest.fixture
def study_without_training(monkeypatch):
    """`mnmt-study run` with the data stage stubbed; `fail(error)` makes training raise it."""
    from mnmt.training import trainer

    calls = []

    def fail(error):
        def train_group(configs, progress=None):
            calls.append(configs)
            raise error
        monkeypatch.setattr(trainer, "train_group", train_group)

    data = runner.StudyData("v.model", {"en-de": "a", "en-zh": "b"}, {})
    monkeypatch.setattr(study, "prepare_data", lambda spec, out, log: data)
    monkeypatch.setattr(study, "enable_compilation_cache", lambda path: None)
    monkeypatch.setattr(runner, "make_train_config", lambda spec, run, data, run_dir: run.run_id)
    return fail, calls


def test_unreadable_run_file_is_a_one_line_error(study_without_training, tmp_path, capsys):
    from mnmt.training.run_files import RunFileError

    fail, calls = study_without_training
    out = tmp_path / "study"
    run_id = expand(study.load_spec(None, "ci", []))[0].run_id
    path = out / "runs" / run_id / "metrics.jsonl"
    fail(RunFileError(f"{path}: line 7: invalid JSON: Expecting value; repair it to resume "
                      "(nothing was written)"))
    code = study.main(["run", "--preset", "ci", "--out", str(out), "--workers", "1"])
    err = capsys.readouterr().err
    assert code == study.EXIT_USAGE and len(calls) == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"mnmt-study: error: {path}: line 7: invalid JSON"), err
    assert "Traceback" not in err


def test_no_restorable_checkpoint_is_a_one_line_error(study_without_training, tmp_path, capsys):
    from mnmt.training.checkpoints import CheckpointRestoreError

    fail, _ = study_without_training
    fail(CheckpointRestoreError("/x/checkpoints: no checkpoint can be restored (step 8: "
                                "JSONDecodeError: …); move the directory away to start the run "
                                "again from step 0"))
    code = study.main(["run", "--preset", "ci", "--out", str(tmp_path / "o"), "--workers", "1"])
    err = capsys.readouterr().err
    assert code == study.EXIT_USAGE
    assert err.strip().splitlines()[-1].startswith(
        "mnmt-study: error: /x/checkpoints: no checkpoint can be restored")


def test_other_trainer_errors_are_not_swallowed(study_without_training, tmp_path):
    fail, _ = study_without_training
    fail(RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        study.main(["run", "--preset", "ci", "--out", str(tmp_path / "o"), "--workers", "1"])


def test_a_full_disk_while_training_is_a_one_line_error(study_without_training, tmp_path,
                                                        capsys):
    """Old behaviour: the trainer's OSError (ENOSPC) went up as a traceback."""
    from fitting.data.io import NoSpaceError

    fail, _ = study_without_training
    out = tmp_path / "study"
    run_id = expand(study.load_spec(None, "ci", []))[0].run_id
    path = out / "runs" / run_id / "metrics.jsonl"
    fail(NoSpaceError(path, " (appending 300 bytes)"))
    code = study.main(["run", "--preset", "ci", "--out", str(out), "--workers", "1"])
    err = capsys.readouterr().err
    assert code == study.EXIT_USAGE and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(
        f"mnmt-study: error: {path}: no space left on device (appending 300 bytes)"), err


def test_a_full_disk_while_reporting_is_a_one_line_error(monkeypatch, tmp_path, capsys):
    """Export + report on a full disk: one line naming the file, exit 2 (no traceback)."""
    from fitting.data import tables
    from fitting.data.io import NoSpaceError
    from mnmt.study import stages

    def full(table, path):
        raise NoSpaceError(path)

    monkeypatch.setattr(tables, "write_table", full)
    monkeypatch.setattr("fitting.data.rundirs.collect_runs", lambda dirs: [])
    spec = study.load_spec(None, "ci", [])
    data = runner.StudyData("v.model", {"en-de": "a", "en-zh": "b"}, {})
    with pytest.raises(stages.UsageError, match=r"metrics\.csv: no space left on device"):
        stages.export_and_report(spec, [], data, tmp_path, lambda text: None)
