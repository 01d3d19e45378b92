"""Orbax checkpoints of the training state (T5X's checkpoints role): atomic, keep-N, preemption.

A checkpoint `MODEL_DIR/checkpoints/step_N/` holds two items:
- `state`: the array pytree (parameters, optimizer state, step, RNG key), restored with the
  shardings of the running job;
- `meta`: JSON with the step, the training tokens seen and the input pipeline's position
  (`TrainInputs.get_state()`), so a resumed run continues the data stream where it stopped.

Orbax writes each step into a temporary directory and renames it when complete, so a process
killed mid-save leaves the previous checkpoint as the latest one; left-over temporaries are
removed on the next start. Saving is synchronous so that "saved" means "on disk"; a save that
fails for lack of space raises `fitting.data.io.NoSpaceError` (one line naming the step's directory)
and leaves the previous checkpoint the latest.

A complete checkpoint can still be unreadable later (a truncated or garbled file, a disk or
copy error). `restore_latest` then falls back to the newest older checkpoint that restores,
with a warning naming both steps and paths, and moves the unreadable one out of the way
(`DIR.unreadable/step_N`; deleted on remote storage) so that the step is saved afresh when the
run reaches it again. When no checkpoint restores, `CheckpointRestoreError` names each one and
why; nothing is moved.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import orbax.checkpoint as ocp

from fitting.data import io

log = logging.getLogger(__name__)

UNREADABLE_SUFFIX = ".unreadable"  # DIR.unreadable/step_N: checkpoints that failed to restore


class CheckpointRestoreError(ValueError):
    """No checkpoint of a run could be restored; the message (one line) names each one tried.
    (A ValueError, as other unusable inputs: `mnmt-train` reports it in one line, exit 2.)"""


class Checkpointer:
    """Thin wrapper over `ocp.CheckpointManager` with the two items of an mnmt checkpoint."""

    def __init__(self, directory: str, *, keep: int = 2, keep_steps: Sequence[int] = (),
                 read_only: bool = False):
        """`keep`: the newest checkpoints kept; `keep_steps`: steps never deleted (branch
        points: `mnmt.training.branches`); `read_only`: only restore (the directory is neither
        created nor cleaned of a running job's temporaries: `mnmt-translate`)."""
        if keep < 1:
            raise ValueError(f"CheckpointConfig.keep must be ≥ 1, got {keep}")
        # Orbax refuses relative paths (it fails inside its save thread): resolve local ones.
        self.directory = directory if io.is_remote(directory) else os.path.abspath(directory)
        policies = ocp.checkpoint_managers
        preserve = policies.LatestN(n=keep)
        if keep_steps:
            preserve = policies.AnyPreservationPolicy(
                [preserve, policies.CustomSteps(steps=[int(s) for s in keep_steps])])
        options = ocp.CheckpointManagerOptions(
            preservation_policy=preserve,
            step_prefix="step",
            create=not read_only,
            cleanup_tmp_directories=not read_only,
            read_only=read_only,
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

    def step_path(self, step: int) -> str:
        """The directory of checkpoint `step`."""
        return io.join(self.directory, f"step_{step}")

    def save(self, step: int, state: Any, meta: Mapping[str, Any]) -> bool:
        """Write checkpoint `step` (no-op if it already exists); True when written.

        A save that fails because the disk is full raises `fitting.data.io.NoSpaceError` naming the
        step's directory; Orbax never made the partial step the latest, so the previous
        checkpoint still restores (the temporary is removed on the next start)."""
        if step in self._manager.all_steps():
            return False
        try:
            saved = self._manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(dict(meta))
                ),
                force=True,
            )
            self._manager.wait_until_finished()
        except Exception as err:
            if io.is_no_space(err):
                raise io.NoSpaceError(self.step_path(step),
                                      f" (saving checkpoint step {step})") from err
            raise
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
        """(state, meta) of `step` as saved, without a target structure — for inspecting or
        exporting a checkpoint outside a training job. Without `step`: the latest checkpoint
        that restores (an unreadable newer one is skipped with a warning, and left in place)."""
        if step is not None:
            return self._restore_raw(step)
        steps = self.all_steps()
        if not steps:
            raise FileNotFoundError(f"{self.directory}: no checkpoint")
        failures = []
        for candidate in reversed(steps):
            try:
                restored = self._restore_raw(candidate)
            except Exception as err:  # noqa: BLE001 (corruption shows as many error types)
                failures.append((candidate, err))
                continue
            for bad, err in failures:
                log.warning("checkpoint step %d (%s) cannot be restored (%s); using step %d (%s)",
                            bad, self.step_path(bad), _describe(err), candidate,
                            self.step_path(candidate))
            return restored
        raise CheckpointRestoreError(_none_restored(self.directory, failures))

    def _restore_raw(self, step: int) -> tuple[Any, dict[str, Any]]:
        restored = self._manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                          meta=ocp.args.JsonRestore()))
        return restored["state"], dict(restored["meta"])

    def set_aside(self, step: int, *, primary: bool = True) -> str:
        """Take unreadable checkpoint `step` out of this directory, so that the previous one is
        the latest and `step` can be saved again; returns where it went.

        Local directories: moved to `DIR.unreadable/step_N` (a numbered suffix when that exists)
        by the `primary` process only; remote ones (`gs://`, where a directory cannot be
        renamed): deleted, by every process together (Orbax's delete is collective)."""
        if io.is_remote(self.directory):
            self._manager.delete(step)
            return "deleted"
        where = "set aside by the first process"
        if primary:
            aside = self.directory.rstrip(os.sep) + UNREADABLE_SUFFIX
            os.makedirs(aside, exist_ok=True)
            where, n = os.path.join(aside, f"step_{step}"), 1
            while os.path.exists(where):
                n += 1
                where = os.path.join(aside, f"step_{step}-{n}")
            os.rename(self.step_path(step), where)
        self.reload()
        return where

    def reload(self) -> None:
        """Read the directory's steps again (after another process changed them)."""
        self._manager.reload()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()


@dataclasses.dataclass
class Restored:
    """What `restore_latest` found: the step (None: no checkpoint yet), each checkpointer's
    (state, meta), and one warning per unreadable checkpoint skipped: (index, text)."""

    step: int | None
    items: list[tuple[Any, dict[str, Any]]]
    warnings: list[tuple[int, str]]


def restore_latest(checkpointers: Sequence[Checkpointer], abstract_state: Any, *,
                   agree: Callable[[bool], bool] = bool, primary: bool = True,
                   barrier: Callable[[], None] | None = None) -> Restored:
    """Restore the newest step that every checkpointer (the runs of a group) can restore.

    Steps are tried from the newest one the checkpointers share down to the oldest. A step
    fails when any checkpointer's restore raises (truncated or garbled files show as JSON, value
    or file errors); the group then goes back to the next older step together. `agree(ok)`
    combines the local outcome over processes (multi-host: True only when every process
    restored). Once a step restores, each unreadable newer checkpoint is set aside
    (`Checkpointer.set_aside`, by the `primary` process, after which `barrier` is called and
    every process reloads its step list) and a warning naming both steps and paths is logged.
    Raises `CheckpointRestoreError` when no step restores (nothing is set aside then).
    """
    if not any(c.all_steps() for c in checkpointers):
        return Restored(None, [], [])
    shared = set.intersection(*(set(c.all_steps()) for c in checkpointers))
    failures: list[tuple[int, int, BaseException | None]] = []  # (checkpointer, step, error)
    for step in sorted(shared, reverse=True):
        items, failed = [], []
        for i, c in enumerate(checkpointers):
            try:
                items.append(c.restore(step, abstract_state))
            except Exception as err:  # noqa: BLE001 (corruption shows as many error types)
                failed.append((i, step, err))
        if agree(not failed):
            return Restored(step, items, _set_aside(checkpointers, failures, step, primary,
                                                    barrier))
        failures += failed or [(0, step, None)]  # None: another process failed
    tried = [(step, err) for _, step, err in failures]
    directory = checkpointers[failures[0][0]].directory if failures else checkpointers[0].directory
    if not shared:
        raise CheckpointRestoreError(f"{directory}: the runs of this group share no checkpoint "
                                     "step; resume them one at a time")
    raise CheckpointRestoreError(_none_restored(directory, tried))


def _set_aside(checkpointers, failures, step, primary, barrier) -> list[tuple[int, str]]:
    """Set aside the unreadable checkpoints newer than `step`; one warning each."""
    errors = {(i, bad): err for i, bad, err in failures if err is not None}
    if barrier is None:  # one process: exactly the checkpoints that failed here, newest first
        unreadable = list(errors)
    else:  # every process sets aside the same ones: every member's copy of each failed step
        unreadable = [(i, bad) for bad in sorted({bad for _, bad, _ in failures}, reverse=True)
                      for i in range(len(checkpointers))]
    warnings = []
    for i, bad in unreadable:
        c = checkpointers[i]
        where = c.set_aside(bad, primary=primary)
        why = _describe(errors[(i, bad)]) if (i, bad) in errors else "failed on another process"
        fate = "deleted" if where == "deleted" else f"moved to {where}"
        text = (f"checkpoint step {bad} ({c.step_path(bad)}) cannot be restored ({why}); "
                f"resumed from step {step} ({c.step_path(step)}) instead; the unreadable "
                f"checkpoint was {fate}")
        log.warning(text)
        warnings.append((i, text))
    if unreadable and barrier is not None:
        barrier()  # the first process has moved them: every process reads its steps again
        for c in checkpointers:
            c.reload()
    return warnings


def _describe(err: BaseException) -> str:
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {first[:200]}" if first else type(err).__name__


def _none_restored(directory: str, failures) -> str:
    tried = "; ".join(f"step {step}: {_describe(err) if err else 'failed on another process'}"
                      for step, err in failures)
    return (f"{directory}: no checkpoint can be restored ({tried}); move the directory away "
            "to start the run again from step 0")


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
