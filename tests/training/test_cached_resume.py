"""Exact resume on tasks read from token caches (mnmt.data.cache): SIGKILL at a random progress
event, resume, and the metrics equal an uninterrupted run's; a cached run resumed without its
caches (the same order in memory) too."""

from __future__ import annotations

import os
import random
import signal

import pytest
from run_helpers import assert_same_metrics, run_child, small_run_config, write_child_spec

from mnmt.training import run_files

# Three trainings and a SIGKILLed child (≈ 2.5 minutes): `-m slow`. The default suite keeps the
# cached iterator's exact resume (tests/data/test_cache.py) and the SIGKILL test of the trainer.
pytestmark = pytest.mark.slow

CAP = 20  # examples per task: a 12-step run reads ~48 per task, so epochs wrap twice
PREFIX = "cachedrun"


@pytest.fixture(scope="module")
def cached_data(tiny_data, tmp_path_factory):
    """The cpu-tiny tasks capped at CAP examples, their mixture and their token caches."""
    from mnmt.data import mixtures, tasks
    from mnmt.data.cache import build_cache

    pair_tasks = tasks.register_synthetic_tasks("cpu-tiny", tiny_data["vocab"], caps=CAP,
                                                eval_size=24, prefix=PREFIX)
    mixture = mixtures.register_weighted_mixture(
        "cached_resume_p50", {t: 0.5 for t in pair_tasks.values()})
    cache_dir = str(tmp_path_factory.mktemp("token_caches"))
    for task in pair_tasks.values():
        index = build_cache(task, cache_dir, num_parts=1, num_shards=4)
        assert index.examples == CAP
    return {"vocab": tiny_data["vocab"], "tasks": pair_tasks, "mixture": mixture,
            "cache_dir": cache_dir}


def _config(data, model_dir, cache_dirs):
    return small_run_config(data, model_dir, "cached").updated(
        inputs={"cache_dirs": tuple(cache_dirs)})


@pytest.fixture(scope="module")
def cached_reference(cached_data, tmp_path_factory):
    """One uninterrupted 12-step run reading both tasks from their caches."""
    from mnmt.training.trainer import train

    config = _config(cached_data, tmp_path_factory.mktemp("cached_ref") / "ref",
                     [cached_data["cache_dir"]])
    events = []
    summary = train(config, progress=events.append)
    assert summary.status == "finished" and summary.final_step == 12
    return config, events


def _input_state(model_dir: str, step: int) -> dict:
    """The (single-shard) input state stored with checkpoint `step`."""
    from mnmt.training.checkpoints import Checkpointer

    ck = Checkpointer(os.path.join(model_dir, "checkpoints"))
    try:
        _, meta = ck.restore_raw(step)
    finally:
        ck.close()
    (state,) = meta["inputs"].values()
    return state


def test_cached_run_reads_the_caches_across_epochs(cached_reference, cached_data):
    config, _ = cached_reference
    tasks = sorted(cached_data["tasks"].values())
    first, last = _input_state(config.model_dir, 8), _input_state(config.model_dir, 12)
    assert first["cached"] == tasks and last["cached"] == tasks
    # every task's stream crossed at least one epoch boundary during the run
    assert all(c >= CAP for c in last["cursors"].values()), last["cursors"]


def test_sigkill_at_a_random_step_then_resume_matches_uninterrupted_on_cached_tasks(
        cached_reference, cached_data, tmp_path):
    """As test_trainer's SIGKILL test, on capped tasks read from token caches (epochs wrap
    during the run). MNMT_TEST_KILL_EVENT=i reproduces a failing draw."""
    from mnmt.training.trainer import train

    ref_config, ref_events = cached_reference
    points = ref_events[:-1]  # every event but the final "finished"
    index = int(os.environ.get("MNMT_TEST_KILL_EVENT") or random.randrange(len(points)))
    killed_at = points[index]
    where = f"kill_event={index} ({killed_at.kind} at step {killed_at.step})"
    print(where)  # shown by pytest when the test fails
    config = _config(cached_data, tmp_path / "killed", [cached_data["cache_dir"]])
    spec = write_child_spec(config, cached_data, tmp_path, kill_event=index, signal="KILL",
                            caps=CAP, task_prefix=PREFIX)
    res = run_child(spec)
    assert res.returncode == -signal.SIGKILL, (where, res.stderr[-2000:])
    assert run_files.read_run_json(config.model_dir)["status"] == "running", where
    rows_before = run_files.read_metrics(config.model_dir)
    assert max(r["step"] for r in rows_before) == killed_at.step, where
    summary = train(config, progress=lambda e: None)
    assert summary.status == "finished" and summary.final_step == 12, where
    assert_same_metrics(ref_config.model_dir, config.model_dir)
    assert sorted(os.listdir(os.path.join(config.model_dir, "checkpoints"))) == [
        "step_12", "step_8"], where
    assert _input_state(config.model_dir, 12) == _input_state(ref_config.model_dir, 12), where


class _Stop(Exception):
    pass


def test_a_cached_run_resumed_without_its_caches_finishes_as_the_uninterrupted_run(
        cached_reference, cached_data, tmp_path):
    """A run that read caches stops after its step-4 checkpoint and is resumed without
    cache_dirs: the in-memory path visits the same order, so it finishes as the uninterrupted
    cached run."""
    from mnmt.training.trainer import train

    ref_config, _ = cached_reference
    config = _config(cached_data, tmp_path / "stopped", [cached_data["cache_dir"]])

    def stop_after_first_checkpoint(event):
        if event.kind == "checkpoint" and event.step == 4:
            raise _Stop

    with pytest.raises(_Stop):
        train(config, progress=stop_after_first_checkpoint)
    assert _input_state(config.model_dir, 4)["cached"] == sorted(cached_data["tasks"].values())
    summary = train(config.updated(inputs={"cache_dirs": ()}), progress=lambda e: None)
    assert summary.status == "finished" and summary.final_step == 12
    assert "cached" not in _input_state(config.model_dir, 12)
    assert_same_metrics(ref_config.model_dir, config.model_dir)
