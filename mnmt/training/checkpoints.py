"""Orbax checkpoints of the training state (T5X's checkpoints role): atomic, keep-N, preemption.

A checkpoint `MODEL_DIR/checkpoints/step_N/` holds two items:
- `state`: the array pytree (parameters, optimizer state, step, RNG key), restored with the
  shardings of the running job;
- `meta`: JSON with the step, the training tokens seen and the input pipeline's position
  (`TrainInputs.get_state()`), so a resumed run continues the data stream where it stopped.

Orbax writes each step into a temporary directory and renames it when complete, so a process
killed mid-save leaves the previous checkpoint as the latest one; left-over temporaries are
removed on the next start. Saving is synchronous so that "saved" means "on disk".
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Mapping
from typing import Any

import jax
import orbax.checkpoint as ocp

from fitting import io

log = logging.getLogger(__name__)


class Checkpointer:
    """Thin wrapper over `ocp.CheckpointManager` with the two items of an mnmt checkpoint."""

    def __init__(self, directory: str, *, keep: int = 2):
        if keep < 1:
            raise ValueError(f"CheckpointConfig.keep must be ≥ 1, got {keep}")
        # Orbax refuses relative paths (it fails inside its save thread): resolve local ones.
        self.directory = directory if io.is_remote(directory) else os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            step_prefix="step",
            create=True,
            cleanup_tmp_directories=True,
            enable_async_checkpointing=False,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, item_names=("state", "meta"), options=options
        )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    @classmethod
    def latest_in(cls, directory: str) -> int | None:
        """The latest complete checkpoint step under `directory` (None: no checkpoint yet)."""
        checkpointer = cls(directory)
        try:
            return checkpointer.latest_step()
        finally:
            checkpointer.close()

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def save(self, step: int, state: Any, meta: Mapping[str, Any]) -> bool:
        """Write checkpoint `step` (no-op if it already exists); True when written."""
        if step in self._manager.all_steps():
            return False
        saved = self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(dict(meta))
            ),
            force=True,
        )
        self._manager.wait_until_finished()
        return bool(saved)

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict[str, Any]]:
        """Restore (state, meta) of `step` into the shapes/shardings of `abstract_state`."""
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()
            ),
        )
        return restored["state"], dict(restored["meta"])

    def restore_raw(self, step: int | None = None) -> tuple[Any, dict[str, Any]]:
        """(state, meta) of `step` (default: latest) as saved, without a target structure —
        for inspecting or exporting a checkpoint outside a training job."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"{self.directory}: no checkpoint")
        restored = self._manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                          meta=ocp.args.JsonRestore()))
        return restored["state"], dict(restored["meta"])

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()


def abstract_like(tree: Any) -> Any:
    """`jax.ShapeDtypeStruct`s (with shardings) describing `tree`, the target of a restore."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        tree,
    )


class PreemptionGuard:
    """Turns SIGTERM / SIGINT into a flag the training loop polls, so it can checkpoint and stop.

    A second SIGINT while the flag is already set raises `KeyboardInterrupt` at once. Handlers
    are only installed from the main thread; elsewhere the guard is inert.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signal_received: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signal_received is not None

    def _handle(self, signum, frame) -> None:  # noqa: ARG002
        if self.signal_received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_received = signum
        log.warning("received %s: will checkpoint and stop after this step",
                    signal.Signals(signum).name)

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
