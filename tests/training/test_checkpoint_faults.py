"""Unreadable checkpoints: a real Orbax checkpoint truncated or garbled on disk is skipped for the
previous one, with a warning naming both steps and paths, and set aside so it can be saved again."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mnmt.training.checkpoints import (
    UNREADABLE_SUFFIX,
    Checkpointer,
    CheckpointRestoreError,
    abstract_like,
    restore_latest,
)


def _state(x):
    return {"step": jnp.asarray(x, jnp.int32), "params": {"w": jnp.full((3, 2), float(x))},
            "rng": jax.random.PRNGKey(x)}


def _largest(directory: Path) -> Path:
    return max((p for p in directory.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, min(len(data), len(data) // 3 + 8)):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


# How a complete checkpoint becomes unreadable: a torn copy, a flipped block, a lost file.
CORRUPTIONS = {
    "truncated array metadata": lambda step: _truncate(step / "state" / "_METADATA"),
    "truncated array store manifest": lambda step: _truncate(step / "state" / "manifest.ocdbt"),
    "truncated array data": lambda step: _truncate(_largest(step / "state" / "d")),
    "garbled meta JSON": lambda step: _garble(step / "meta" / "metadata"),
    "missing meta file": lambda step: (step / "meta" / "metadata").unlink(),
}


def _saved(directory: Path, steps, keep=3) -> Checkpointer:
    ck = Checkpointer(str(directory), keep=keep)
    for s in steps:
        assert ck.save(s, _state(s), {"step": s, "inputs": {"pos": s}})
    ck.close()
    return Checkpointer(str(directory), keep=keep)  # a fresh start, as a resumed run makes


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_unreadable_latest_falls_back_to_previous_with_a_warning(tmp_path, caplog, corruption):
    directory = tmp_path / "checkpoints"
    _saved(directory, (1, 2, 3)).close()
    CORRUPTIONS[corruption](directory / "step_3")
    ck = Checkpointer(str(directory), keep=3)
    assert ck.latest_step() == 3  # Orbax sees a complete step: the damage shows on restore
    with caplog.at_level(logging.WARNING, logger="mnmt.training.checkpoints"):
        restored = restore_latest([ck], abstract_like(_state(0)))
    assert restored.step == 2
    (state, meta), = restored.items
    np.testing.assert_array_equal(state["params"]["w"], np.full((3, 2), 2.0))
    assert int(state["step"]) == 2 and meta == {"step": 2, "inputs": {"pos": 2}}
    (index, text), = restored.warnings
    aside = f"{directory}{UNREADABLE_SUFFIX}/step_3"
    assert index == 0
    for part in ("step 3", f"{directory}/step_3", "step 2", f"{directory}/step_2", aside):
        assert part in text, (part, text)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [text]
    # Set aside: step 2 is the latest now, and the run saves step 3 afresh when it gets there.
    assert ck.all_steps() == [1, 2] and sorted(os.listdir(directory)) == ["step_1", "step_2"]
    assert os.path.isdir(aside)
    assert ck.save(3, _state(3), {"step": 3})
    state, _ = ck.restore(3, abstract_like(_state(0)))
    assert float(state["params"]["w"][0, 0]) == 3.0
    ck.close()


def test_two_unreadable_checkpoints_fall_back_two_steps(tmp_path):
    directory = tmp_path / "c"
    _saved(directory, (4, 8, 12)).close()
    _truncate(directory / "step_12" / "state" / "_METADATA")
    _garble(directory / "step_8" / "meta" / "metadata")
    ck = Checkpointer(str(directory), keep=3)
    restored = restore_latest([ck], abstract_like(_state(0)))
    assert restored.step == 4
    assert [text.split(" (")[0] for _, text in restored.warnings] == [
        "checkpoint step 12", "checkpoint step 8"]
    assert all("resumed from step 4" in text for _, text in restored.warnings)
    assert ck.all_steps() == [4]
    ck.close()


def test_no_readable_checkpoint_is_an_error_naming_each_and_moves_nothing(tmp_path):
    directory = tmp_path / "c"
    _saved(directory, (4, 8), keep=2).close()
    _truncate(directory / "step_8" / "state" / "_METADATA")
    (directory / "step_4" / "meta" / "metadata").unlink()
    ck = Checkpointer(str(directory), keep=2)
    with pytest.raises(CheckpointRestoreError) as err:
        restore_latest([ck], abstract_like(_state(0)))
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{directory}: no checkpoint can be restored")
    assert "step 8: JSONDecodeError" in message and "step 4: FileNotFoundError" in message
    assert sorted(os.listdir(directory)) == ["step_4", "step_8"]
    assert not os.path.exists(f"{directory}{UNREADABLE_SUFFIX}")
    ck.close()


def test_a_group_falls_back_together_and_sets_aside_only_the_unreadable_one(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _saved(a, (1, 2)).close()
    _saved(b, (1, 2)).close()
    _truncate(b / "step_2" / "state" / "_METADATA")
    cks = [Checkpointer(str(a)), Checkpointer(str(b))]
    restored = restore_latest(cks, abstract_like(_state(0)))
    assert restored.step == 1 and len(restored.items) == 2
    assert [float(s["params"]["w"][0, 0]) for s, _ in restored.items] == [1.0, 1.0]
    assert [i for i, _ in restored.warnings] == [1]
    assert cks[0].all_steps() == [1, 2] and cks[1].all_steps() == [1]
    for ck in cks:
        ck.close()


def test_no_checkpoint_yet_and_a_readable_latest_need_no_fallback(tmp_path):
    empty = Checkpointer(str(tmp_path / "none"))
    assert restore_latest([empty], abstract_like(_state(0))).step is None
    empty.close()
    ck = _saved(tmp_path / "ok", (1, 2))
    restored = restore_latest([ck], abstract_like(_state(0)))
    assert restored.step == 2 and restored.warnings == [] and ck.all_steps() == [1, 2]
    ck.close()


def test_restore_raw_skips_an_unreadable_latest_and_leaves_it_in_place(tmp_path, caplog):
    directory = tmp_path / "c"
    _saved(directory, (5, 10)).close()
    _garble(directory / "step_10" / "meta" / "metadata")
    ck = Checkpointer(str(directory))
    with caplog.at_level(logging.WARNING, logger="mnmt.training.checkpoints"):
        state, meta = ck.restore_raw()
    assert meta["step"] == 5 and float(np.asarray(state["params"]["w"])[0, 0]) == 5.0
    warning, = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "step 10" in warning and "step 5" in warning and f"{directory}/step_10" in warning
    assert ck.all_steps() == [5, 10]  # inspecting never moves a checkpoint
    with pytest.raises(Exception):  # noqa: B017 (an explicit step is restored as asked)
        ck.restore_raw(10)
    ck.close()
