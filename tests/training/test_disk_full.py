"""A full disk while a run writes metrics, run.json or a checkpoint.

Each write must fail with `fitting.data.io.NoSpaceError` (one line naming the file and "no space
left on device"), leave what was on disk intact (metrics.jsonl ends on a complete row, run.json
is the previous version, the last checkpoint restores), and a re-run once space is freed must
complete. The disk is a real tmpfs (`small_disk`, tests/conftest.py; skipped where the test
cannot mount one), filled by a filler file; a short write is also simulated at `os.write`, which
needs no mount.
"""

from __future__ import annotations

import errno
import json
import os
import random
from pathlib import Path

import jax
import numpy as np
import pytest
from run_helpers import rows_by_key, small_run_config

from fitting.data.io import NoSpaceError
from mnmt.training import run_files
from mnmt.training.run_files import MetricsWriter


def _rows(first: int, n: int) -> list[dict]:
    return [dict(step=s, tokens=100 * s, task="en-de", eval_set="validation", metric="loss",
                 value=1.0 / s) for s in range(first, first + n)]


def _assert_one_line(err: BaseException, path: str) -> None:
    text = str(err)
    assert "\n" not in text and text.startswith(f"{path}: no space left on device"), text


def test_a_short_write_then_enospc_leaves_no_partial_row(tmp_path, monkeypatch):
    """Old behaviour: half the rows' bytes stayed in the file (a torn line) and the rows counted
    as written, so a later write skipped them."""
    writer = MetricsWriter(str(tmp_path), "r")
    writer.write(_rows(1, 3))
    before = Path(writer.path).read_bytes()
    real_write, calls = os.write, []

    def short_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", short_then_full)
    with pytest.raises(NoSpaceError) as err:
        writer.write(_rows(4, 5))
    monkeypatch.setattr(os, "write", real_write)
    _assert_one_line(err.value, writer.path)
    assert len(calls) == 2 and Path(writer.path).read_bytes() == before
    assert not writer.has(4, "en-de", "validation", "loss")
    assert writer.write(_rows(4, 5)) == 5  # space freed: the same rows are written, once
    assert [r["step"] for r in run_files.read_metrics(str(tmp_path))] == list(range(1, 9))


def test_metrics_append_on_a_full_disk(small_disk):
    writer = MetricsWriter(str(small_disk.path), "r")
    writer.write(_rows(1, 3))
    before = Path(writer.path).read_bytes()
    small_disk.fill()
    with pytest.raises(NoSpaceError) as err:
        writer.write(_rows(4, 400))  # more than the slack of the file's last page
    _assert_one_line(err.value, writer.path)
    assert Path(writer.path).read_bytes() == before
    small_disk.free()
    assert writer.write(_rows(4, 400)) == 400
    assert len(run_files.read_metrics(str(small_disk.path))) == 403


def test_run_json_on_a_full_disk_keeps_the_previous_version(small_disk):
    run_files.write_run_json(str(small_disk.path), {"status": "running", "step": 1})
    path = str(small_disk.path / "run.json")
    before = Path(path).read_bytes()
    small_disk.fill()
    with pytest.raises(NoSpaceError) as err:
        run_files.write_run_json(str(small_disk.path), {"status": "finished", "x": "y" * 9000})
    _assert_one_line(err.value, path)
    assert Path(path).read_bytes() == before
    assert sorted(p.name for p in small_disk.path.iterdir()) == [".filler", "run.json"]
    small_disk.free()
    run_files.write_run_json(str(small_disk.path), {"status": "finished"})
    assert run_files.read_run_json(str(small_disk.path)) == {"status": "finished"}


def test_checkpoint_save_on_a_full_disk_keeps_the_last_one_restorable(small_disk):
    from mnmt.training.checkpoints import Checkpointer

    directory = str(small_disk.path / "checkpoints")
    state = {"w": jax.numpy.arange(64 * 1024, dtype=jax.numpy.float32)}
    ck = Checkpointer(directory)
    assert ck.save(1, state, {"step": 1})
    small_disk.fill()
    with pytest.raises(NoSpaceError) as err:
        ck.save(2, {"w": state["w"] * 2}, {"step": 2})
    _assert_one_line(err.value, ck.step_path(2))
    ck.close()
    small_disk.free()
    ck = Checkpointer(directory)  # a fresh start: Orbax removes the unfinished temporary
    assert ck.all_steps() == [1]
    restored, meta = ck.restore_raw()
    assert meta["step"] == 1 and np.array_equal(np.asarray(restored["w"]), np.asarray(state["w"]))
    assert ck.save(2, {"w": state["w"] * 2}, {"step": 2}) and ck.all_steps() == [1, 2]
    ck.close()


# ---------------------------------------------------------------- a run whose disk fills up


@pytest.fixture(scope="module")
def reference(tiny_data, tmp_path_factory):
    """The run uninterrupted, on a disk with room: its metrics rows."""
    from mnmt.training.trainer import train

    config = small_run_config(tiny_data, tmp_path_factory.mktemp("full_reference") / "run", "full")
    assert train(config, progress=lambda e: None).status == "finished"
    return rows_by_key(run_files.read_metrics(config.model_dir))


def fill_steps(n: int) -> list[int]:
    """`n` distinct training steps (1..12) after whose progress event the disk fills; seeded
    (`MNMT_TEST_DISK_SEED`)."""
    return random.Random(int(os.environ.get("MNMT_TEST_DISK_SEED", "0"))).sample(range(1, 13), n)


def _fill_then_resume(tiny_data, reference, small_disk, fill_at: int) -> None:
    from mnmt.training.checkpoints import Checkpointer
    from mnmt.training.trainer import train

    print(f"disk fills after the event of step {fill_at}")
    config = small_run_config(tiny_data, small_disk.path / "run", "full")

    def progress(event):
        if event.kind != "done" and event.step >= fill_at and not small_disk.filler.exists():
            small_disk.fill()

    with pytest.raises(NoSpaceError) as err:
        train(config, progress=progress)
    text = str(err.value)
    assert "\n" not in text and "no space left on device" in text
    assert text.startswith(config.model_dir), text  # names a file of the run
    data = Path(config.model_dir, "metrics.jsonl").read_bytes()
    assert data.endswith(b"\n") and all(json.loads(line) for line in data.splitlines())
    assert run_files.read_run_json(config.model_dir)["status"] == "running"
    small_disk.free()
    ck = Checkpointer(os.path.join(config.model_dir, "checkpoints"))
    try:
        if ck.all_steps():
            _, meta = ck.restore_raw()
            assert meta["step"] == ck.all_steps()[-1]
    finally:
        ck.close()

    summary = train(config, progress=lambda e: None)  # space freed: the run completes
    assert summary.status == "finished" and summary.final_step == 12
    rows = run_files.read_metrics(config.model_dir)
    assert len(rows) == len(rows_by_key(rows)) and rows_by_key(rows) == reference


def test_a_run_whose_disk_fills_at_a_random_step_stops_cleanly_and_resumes(
        tiny_data, reference, small_disk):
    _fill_then_resume(tiny_data, reference, small_disk, fill_steps(1)[0])


@pytest.mark.faults
@pytest.mark.parametrize("index", range(4))
def test_disk_fills_at_more_random_steps(tiny_data, reference, small_disk, index):
    _fill_then_resume(tiny_data, reference, small_disk, fill_steps(5)[1 + index])


def test_mnmt_train_on_a_full_disk_is_one_line_and_exit_2(tiny_data, small_disk, capsys):
    from mnmt.training import train as train_cli

    model_dir = small_disk.path / "cli"
    argv = ["--gin_file=runs/cpu_tiny.gin", f"--gin.MODEL_DIR='{model_dir}'",
            "--gin.MODEL_SIZE='mini-1'", "--gin.TRAIN_STEPS=2", "--gin.BATCH_SIZE=8",
            "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 16}",
            f"--gin.VOCABULARY_PATH='{tiny_data['vocab']}'", "--gin.DECODE_AT_END=False",
            "--gin.TrainConfig.tensorboard=False", "--gin.setup_tasks.vocab_size=512",
            "--quiet"]
    small_disk.fill()
    rc = train_cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith(
        f"mnmt-train: error: {model_dir}/run.json: no space left on device"), err[-2000:]
    small_disk.free()
    rc = train_cli.main(argv)
    assert rc == 0, capsys.readouterr().err[-2000:]
