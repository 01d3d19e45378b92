"""A NaN loss injected at a random step (mini-1 on the tiny synthetic tasks, in process).

The test-only hook `MNMT_TEST_NAN_AT_STEP=k` (`mnmt.training.fault_injection.NAN_AT_STEP_ENV`; with
`MNMT_TEST_NAN_RUN=RUN_ID` only that run of a group) multiplies the parameters going into step k
by NaN, so step k's loss is NaN as after a real divergence. The run must stop there (status
`diverged`, `mnmt-train` exit status 3, one line naming the run and the step), write no
checkpoint and no row from the NaN state, and, once the hook is unset, resume from its last good
checkpoint to exactly the rows of an uninterrupted run, none twice. The step is drawn from a
seeded generator (`MNMT_TEST_NAN_SEED` changes the seed); the test prints it.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import jax
import numpy as np
import pytest
from run_helpers import rows_by_key, small_run_config

from mnmt.training import run_files
from mnmt.training.fault_injection import NAN_AT_STEP_ENV, NAN_RUN_ENV

STEPS, PERIOD = 12, 4  # checkpoints at 4, 8, 12


def _config(tiny_data, model_dir: Path, run_id: str = "nan", seed: int = 0):
    return small_run_config(tiny_data, model_dir, run_id, seed=seed, checkpoint_period=PERIOD)


def draws(n: int) -> list[int]:
    """`n` distinct NaN steps in 2..STEPS from the seeded generator."""
    rng = random.Random(int(os.environ.get("MNMT_TEST_NAN_SEED", "0")))
    return rng.sample(range(2, STEPS + 1), n)


def _checkpoint_steps(model_dir: str) -> list[int]:
    directory = os.path.join(model_dir, "checkpoints")
    if not os.path.isdir(directory):
        return []
    return sorted(int(name[5:]) for name in os.listdir(directory) if name.startswith("step_")
                  and name[5:].isdigit())


def _assert_rows_whole(model_dir: str) -> None:
    """metrics.jsonl (if written yet): complete lines only, no key twice."""
    path = Path(model_dir, "metrics.jsonl")
    data = path.read_bytes() if path.exists() else b""
    assert data.endswith(b"\n") or not data
    keys = [(r["step"], r["task"], r["eval_set"], r["metric"])
            for r in map(json.loads, data.decode().splitlines())]
    assert len(keys) == len(set(keys))


def _assert_last_good_checkpoint(model_dir: str, nan_step: int) -> None:
    """No checkpoint from the NaN state; the latest one restores with finite parameters."""
    from mnmt.training.checkpoints import Checkpointer

    steps = _checkpoint_steps(model_dir)
    assert steps == [s for s in range(PERIOD, nan_step, PERIOD)][-2:], steps
    if steps:
        ck = Checkpointer(os.path.join(model_dir, "checkpoints"))
        try:
            state, meta = ck.restore_raw()
        finally:
            ck.close()
        assert meta["step"] == steps[-1]
        assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state["params"]))


@pytest.fixture(scope="module")
def reference(tiny_data, tmp_path_factory):
    """The run uninterrupted: its metrics rows."""
    from mnmt.training.trainer import train

    config = _config(tiny_data, tmp_path_factory.mktemp("nan_reference") / "run")
    assert train(config, progress=lambda e: None).status == "finished"
    return rows_by_key(run_files.read_metrics(config.model_dir))


def _nan_then_resume(tiny_data, reference, tmp_path, monkeypatch, nan_step: int) -> None:
    from mnmt.training.trainer import train

    print(f"{NAN_AT_STEP_ENV}={nan_step}")
    config = _config(tiny_data, tmp_path / f"run_{nan_step}")
    monkeypatch.setenv(NAN_AT_STEP_ENV, str(nan_step))
    messages = []
    summary = train(config, progress=lambda e: messages.append(e.message))
    assert summary.status == "diverged" and summary.final_step == nan_step, summary
    assert f"at step {nan_step};" in summary.message and "\n" not in summary.message
    assert any(f"at step {nan_step};" in m for m in messages)
    run = run_files.read_run_json(config.model_dir)
    assert run["status"] == "diverged" and run["final_step"] == nan_step
    rows = run_files.read_metrics(config.model_dir)  # none when the NaN comes at step 2
    assert all(r["step"] < nan_step and r["value"] is not None for r in rows)
    _assert_rows_whole(config.model_dir)
    _assert_last_good_checkpoint(config.model_dir, nan_step)
    last = _checkpoint_steps(config.model_dir)
    assert (f"last good checkpoint is step {last[-1]}" if last
            else "No checkpoint was saved yet") in summary.message

    monkeypatch.delenv(NAN_AT_STEP_ENV)  # the cause removed: the same run resumes
    messages.clear()
    summary = train(config, progress=lambda e: messages.append(e.message))
    assert summary.status == "finished" and summary.final_step == STEPS
    if last:
        assert f"resumed from checkpoint at step {last[-1]}" in messages
    rows = run_files.read_metrics(config.model_dir)
    assert all(r["value"] is not None and np.isfinite(r["value"]) for r in rows)
    assert rows_by_key(rows) == reference
    _assert_rows_whole(config.model_dir)


def test_nan_at_a_random_step_stops_there_and_resumes_to_the_same_rows(
        tiny_data, reference, tmp_path, monkeypatch):
    _nan_then_resume(tiny_data, reference, tmp_path, monkeypatch, draws(1)[0])


def test_nan_before_the_first_checkpoint_says_a_rerun_starts_from_step_0(
        tiny_data, tmp_path, monkeypatch):
    from mnmt.training.trainer import train

    monkeypatch.setenv(NAN_AT_STEP_ENV, "2")
    summary = train(_config(tiny_data, tmp_path / "run").updated(train_steps=3),
                    progress=lambda e: None)
    assert summary.status == "diverged" and "step None" not in summary.message
    assert "No checkpoint was saved yet" in summary.message and "at step 2;" in summary.message


@pytest.mark.faults
@pytest.mark.parametrize("index", range(4))
def test_nan_at_more_random_steps(tiny_data, reference, tmp_path, monkeypatch, index):
    _nan_then_resume(tiny_data, reference, tmp_path, monkeypatch, draws(5)[1 + index])


def test_bad_hook_value_is_a_one_line_error(monkeypatch):
    from mnmt.training.fault_injection import nan_injection

    monkeypatch.setenv(NAN_AT_STEP_ENV, "seven")
    with pytest.raises(ValueError, match=NAN_AT_STEP_ENV):
        nan_injection()
    monkeypatch.setenv(NAN_AT_STEP_ENV, "7")
    monkeypatch.setenv(NAN_RUN_ENV, "a,b")
    assert nan_injection() == (7, {"a", "b"})
    monkeypatch.delenv(NAN_AT_STEP_ENV)
    assert nan_injection() == (None, None)


def test_mnmt_train_exits_3_naming_the_run_and_step_then_resumes(tiny_data, tmp_path, capsys,
                                                                   monkeypatch):
    from mnmt.training import train as train_cli

    model_dir = tmp_path / "cli_nan"
    argv = ["--gin_file=runs/cpu_tiny.gin", f"--gin.MODEL_DIR='{model_dir}'",
            "--gin.MODEL_SIZE='mini-1'", "--gin.TRAIN_STEPS=5", "--gin.BATCH_SIZE=8",
            "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 16}",
            f"--gin.VOCABULARY_PATH='{tiny_data['vocab']}'", "--gin.DECODE_AT_END=False",
            "--gin.CHECKPOINT_PERIOD=2", "--gin.TrainConfig.tensorboard=False",
            "--gin.TrainConfig.run_id='cli_nan'", "--gin.setup_tasks.vocab_size=512", "--quiet"]
    monkeypatch.setenv(NAN_AT_STEP_ENV, "4")
    rc = train_cli.main(argv)
    err = capsys.readouterr().err
    assert rc == train_cli.EXIT_DIVERGED == 3, err[-2000:]
    last = [line for line in err.splitlines() if line.startswith("mnmt-train:")][-1]
    assert last.startswith("mnmt-train: cli_nan diverged at step 4 "), last
    assert "non-finite training loss (nan)" in last and "last good checkpoint is step 2" in last
    assert _checkpoint_steps(str(model_dir)) == [2]

    monkeypatch.delenv(NAN_AT_STEP_ENV)
    rc = train_cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 0, err[-2000:]
    assert "resumed from checkpoint at step 2" in err and "cli_nan finished at step 5" in err
    _assert_rows_whole(str(model_dir))
    rows = run_files.read_metrics(str(model_dir))
    assert all(r["value"] is not None for r in rows)


@pytest.fixture(scope="module")
def group_reference(tiny_data, tmp_path_factory):
    """Two runs trained as one group, uninterrupted: the rows of each."""
    from mnmt.training.trainer import train_group

    root = tmp_path_factory.mktemp("nan_group_reference")
    configs = [_config(tiny_data, root / name, run_id=name, seed=seed)
               for name, seed in (("ga", 0), ("gb", 1))]
    assert [s.status for s in train_group(configs, progress=lambda e: None)] == ["finished"] * 2
    return [rows_by_key(run_files.read_metrics(c.model_dir)) for c in configs]


@pytest.mark.faults
def test_nan_in_one_run_of_a_group_stops_the_group_and_it_resumes(
        tiny_data, group_reference, tmp_path, monkeypatch):
    from mnmt.training.trainer import train_group

    nan_step = draws(1)[0]
    print(f"{NAN_AT_STEP_ENV}={nan_step} {NAN_RUN_ENV}=gb")
    configs = [_config(tiny_data, tmp_path / name, run_id=name, seed=seed)
               for name, seed in (("ga", 0), ("gb", 1))]
    monkeypatch.setenv(NAN_AT_STEP_ENV, str(nan_step))
    monkeypatch.setenv(NAN_RUN_ENV, "gb")
    first, second = train_group(configs, progress=lambda e: None)
    assert second.status == "diverged" and f"at step {nan_step};" in second.message
    assert first.status == "preempted" and "run gb of its group diverged" in first.message
    for config in configs:
        _assert_last_good_checkpoint(config.model_dir, nan_step)
        _assert_rows_whole(config.model_dir)
        assert all(r["step"] < nan_step for r in run_files.read_metrics(config.model_dir))

    monkeypatch.delenv(NAN_AT_STEP_ENV)
    monkeypatch.delenv(NAN_RUN_ENV)
    assert [s.status for s in train_group(configs, progress=lambda e: None)] == ["finished"] * 2
    for config, expected in zip(configs, group_reference, strict=True):
        _assert_rows_whole(config.model_dir)
        assert rows_by_key(run_files.read_metrics(config.model_dir)) == expected
