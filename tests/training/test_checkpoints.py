"""Orbax checkpoints: round trip, keep-N, atomicity of an interrupted save, preemption flag."""

import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mnmt.training.checkpoints import Checkpointer, PreemptionGuard, abstract_like


def _state(x):
    return {"step": jnp.asarray(x, jnp.int32), "params": {"w": jnp.full((3, 2), float(x))},
            "rng": jax.random.PRNGKey(x)}


def test_roundtrip_and_keep_n(tmp_path):
    ck = Checkpointer(str(tmp_path / "ckpt"), keep=2)
    for s in (1, 2, 3):
        assert ck.save(s, _state(s), {"step": s, "inputs": {"0": {"pos": s}}})
    assert not ck.save(3, _state(3), {"step": 3})  # existing step: no-op
    assert ck.all_steps() == [2, 3]
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["step_2", "step_3"]
    state, meta = ck.restore(3, abstract_like(_state(0)))
    np.testing.assert_array_equal(state["params"]["w"], np.full((3, 2), 3.0))
    np.testing.assert_array_equal(state["rng"], jax.random.PRNGKey(3))
    assert int(state["step"]) == 3 and meta["inputs"] == {"0": {"pos": 3}}
    ck.close()


def test_relative_directory_is_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ck = Checkpointer(os.path.join("run", "checkpoints"), keep=1)
    assert ck.save(7, _state(7), {"step": 7})
    assert ck.directory == str(tmp_path / "run" / "checkpoints")
    assert os.listdir(tmp_path / "run" / "checkpoints") == ["step_7"]
    state, _ = ck.restore(7, abstract_like(_state(0)))
    assert float(state["params"]["w"][0, 0]) == 7.0
    ck.close()


def test_interrupted_save_leaves_previous_checkpoint_latest(tmp_path):
    ck = Checkpointer(str(tmp_path / "c"), keep=3)
    ck.save(5, _state(5), {"step": 5})
    ck.close()
    # A save killed half-way leaves only Orbax's temporary directory behind.
    tmp = tmp_path / "c" / "step_10.orbax-checkpoint-tmp-123"
    tmp.mkdir()
    (tmp / "partial").write_text("x")
    ck2 = Checkpointer(str(tmp_path / "c"), keep=3)
    assert ck2.latest_step() == 5
    state, _ = ck2.restore(5, abstract_like(_state(0)))
    assert float(state["params"]["w"][0, 0]) == 5.0
    ck2.close()


def test_preemption_guard_sets_flag_and_restores_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with PreemptionGuard() as guard:
        assert not guard.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert guard.requested and guard.signal_received == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigint_is_a_preemption_and_a_second_sigint_interrupts():
    before = signal.getsignal(signal.SIGINT)
    with PreemptionGuard() as guard:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: checkpoint and stop, no exception
        assert guard.signal_received == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C: stop at once
    assert signal.getsignal(signal.SIGINT) is before
