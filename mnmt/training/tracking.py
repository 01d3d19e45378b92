"""Experiment tracking beside TensorBoard: optional Weights & Biases runs and profiler traces.

TensorBoard event files (`MODEL_DIR/events`) and `metrics.jsonl` are always written as before;
this module adds what `TrackingConfig` (mnmt.training.config) turns on, nothing by default:

- **W&B** (`TrackingConfig.wandb_project` set): one W&B run per training run, so a group trained
  as one program (`trainer.train_group`) opens one W&B run per member (`reinit="create_new"`).
  Its config is the run's `TrainConfig`; it receives the scalars the trainer writes to
  TensorBoard, under the same tags (`train/loss`, `train/learning_rate`, `train/mfu`,
  `eval/<set>/<pair>/loss`, `eval/<set>/<pair>/bleu`, …) at their step, for the steps whose
  rows are new in `metrics.jsonl` (a resumed run does not log the steps it trains again). The W&B
  run id is kept in `MODEL_DIR/wandb_run.json`, so a resumed run continues the same W&B run; the
  run is finished with the exit status of `mnmt-train` (0 finished or stopped early, 143 preempted, 3 diverged;
  1 when the trainer stopped on an error). Only process 0 of a multi-host job logs.
- **Profiles** (`TrackingConfig.profile_steps = (A, B)`): `jax.profiler` traces steps A to B
  (both included) into `MODEL_DIR/events/plugins/profile/<time>/<host>.xplane.pb`, where
  TensorBoard's profile plugin finds it. A group's single program is traced into its first
  member's directory.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any

from fitting.data import io
from mnmt.training import run_files
from mnmt.training.config import TrackingConfig, TrainConfig

log = logging.getLogger("mnmt.training.train")

__all__ = ["TrackingError", "EXIT_CODES", "WANDB_RUN_FILE", "INSTALL_HINT", "WANDB_MODES",
           "check_tracking", "parse_profile_steps", "WandbRun", "start_wandb", "Profiler"]

# The exit status each end of a run is marked with in W&B (mnmt-train's exit statuses).
EXIT_CODES = {"finished": 0, "stopped": 0, "preempted": 143, "diverged": 3}
EXIT_ERROR = 1  # the trainer stopped on an exception
# The W&B run id of a run directory, read back when the run resumes.
WANDB_RUN_FILE = "wandb_run.json"
INSTALL_HINT = 'pip install "mnmt-scaling[tracking]"'
WANDB_MODES = ("online", "offline")


class TrackingError(ValueError):
    """A tracking setting that cannot be honoured (the message names the field)."""


def check_tracking(config: TrainConfig) -> None:
    """Raise TrackingError naming the `TrackingConfig` field that is wrong for `config`: an
    unknown W&B mode, profile steps outside 1 ≤ A ≤ B ≤ train_steps, or W&B on without wandb."""
    t = config.tracking
    if t.wandb_mode not in WANDB_MODES:
        raise TrackingError(f"TrackingConfig.wandb_mode: expected one of {', '.join(WANDB_MODES)}"
                            f", got {t.wandb_mode!r}")
    if t.profile_steps is not None and not config.branches.parent_dir:  # branches trace nothing
        _check_profile_steps(t.profile_steps, config.train_steps)
    if t.wandb_project:
        _import_wandb(t)


def _check_profile_steps(steps: Any, train_steps: int) -> None:
    ok = (isinstance(steps, tuple | list) and len(steps) == 2
          and all(isinstance(s, int) and not isinstance(s, bool) for s in steps))
    if not ok:
        raise TrackingError(f"TrackingConfig.profile_steps: expected None or two step numbers "
                            f"(A, B), got {steps!r}")
    first, last = steps
    if not 1 <= first <= last <= train_steps:
        raise TrackingError(f"TrackingConfig.profile_steps: expected 1 ≤ A ≤ B ≤ train_steps "
                            f"({train_steps}), got ({first}, {last})")


def parse_profile_steps(text: str, flag: str = "--profile_steps") -> tuple[int, int]:
    """`"A:B"` → (A, B), 1 ≤ A ≤ B; ValueError naming `flag` and the expected form otherwise."""
    first, sep, last = text.strip().partition(":")
    try:
        if not sep:
            raise ValueError
        steps = int(first), int(last)
    except ValueError:
        raise ValueError(f"{flag}: expected A:B, the first and last step traced (e.g. 10:12), "
                         f"got {text!r}") from None
    if not 1 <= steps[0] <= steps[1]:
        raise ValueError(f"{flag}: expected 1 ≤ A ≤ B in A:B, got {text!r}")
    return steps


def _import_wandb(tracking: TrackingConfig):
    try:
        return importlib.import_module("wandb")
    except ImportError as e:
        raise TrackingError(f"TrackingConfig.wandb_project is set ({tracking.wandb_project!r}) "
                            f"but wandb cannot be imported ({e}): {INSTALL_HINT}, or leave "
                            "TrackingConfig.wandb_project empty to train without W&B") from e


class WandbRun:
    """The W&B run of one training run (see the module docstring); inert when not started."""

    def __init__(self, run=None):
        self._run = run

    @property
    def active(self) -> bool:
        return self._run is not None

    def log(self, step: int, values: Mapping[str, float | None]) -> None:
        """Log `values` (tag → number; None and non-finite values are left out) at `step`."""
        if self._run is None:
            return
        numbers = {k: float(v) for k, v in values.items()
                   if v is not None and float(v) == float(v) and abs(float(v)) != float("inf")}
        if numbers:
            self._run.log(numbers, step=int(step))

    def finish(self, status: str) -> None:
        """Finish the run with the exit code of `status` (EXIT_CODES; others: EXIT_ERROR)."""
        if self._run is None:
            return
        run, self._run = self._run, None
        run.summary["status"] = status
        run.finish(exit_code=EXIT_CODES.get(status, EXIT_ERROR))


def start_wandb(config: TrainConfig, run_id: str, *, primary: bool = True) -> WandbRun:
    """Start (or resume) the W&B run of `config`; an inert WandbRun when W&B is off or this is
    not process 0. The W&B run id is read from, or first written to, MODEL_DIR/wandb_run.json."""
    t = config.tracking
    if not t.wandb_project or not primary:
        return WandbRun()
    wandb = _import_wandb(t)
    wandb_id = _wandb_run_id(config.model_dir)
    directory = t.wandb_dir or (None if io.is_remote(config.model_dir) else config.model_dir)
    if directory:
        os.makedirs(directory, exist_ok=True)
    try:
        run = wandb.init(
            project=t.wandb_project, entity=t.wandb_entity or None, dir=directory, id=wandb_id,
            name=t.wandb_name or run_id, group=t.wandb_group or config.study or None,
            tags=list(t.wandb_tags) or None, config=config.to_dict(), mode=t.wandb_mode,
            resume="allow", reinit="create_new")
    except wandb.errors.Error as e:  # not logged in, server unreachable, bad entity, ...
        raise TrackingError(f"W&B could not start run {run_id} in project "
                            f"{t.wandb_project!r} ({e}); log in with `wandb login`, or set "
                            "TrackingConfig.wandb_mode = 'offline' and `wandb sync` later") from e
    return WandbRun(run)


def _wandb_run_id(model_dir: str) -> str:
    """The W&B run id stored in `model_dir`, or a new one stored there first (atomically)."""
    path = run_files.join(model_dir, WANDB_RUN_FILE)
    if io.exists(path):
        with io.open_file(path, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        try:
            stored = json.loads(text)
        except json.JSONDecodeError:
            stored = None
        if isinstance(stored, dict) and isinstance(stored.get("wandb_run_id"), str) \
                and stored["wandb_run_id"]:
            return stored["wandb_run_id"]
        raise TrackingError(f"{path}: expected a JSON object with a non-empty \"wandb_run_id\"; "
                            "repair or delete the file (deleting starts a new W&B run)")
    wandb_id = uuid.uuid4().hex[:16]
    io.makedirs(model_dir)
    run_files.write_json_atomic(path, {"wandb_run_id": wandb_id})
    return wandb_id


class Profiler:
    """A `jax.profiler` trace of steps A..B (`TrackingConfig.profile_steps`) under `log_dir`.

    `before_step(n)` before the step that makes the step count n, `after_step(n, outputs)` after
    it; the trace stops once step B's outputs are ready (or at `close`). A run resumed inside the
    window traces the rest of it; one resumed after B traces nothing."""

    def __init__(self, steps: tuple[int, int] | None, log_dir: str):
        self.steps, self.log_dir = steps, log_dir
        self.running = False

    def before_step(self, step: int) -> None:
        if self.steps is None or self.running or not self.steps[0] <= step <= self.steps[1]:
            return
        import jax  # noqa: PLC0415  (this module stays light for configuration checks)

        jax.profiler.start_trace(self.log_dir)
        self.running = True
        log.info("profiling steps %d to %d into %s", step, self.steps[1], self.log_dir)

    def after_step(self, step: int, outputs: Any) -> None:
        if self.running and step >= self.steps[1]:
            import jax  # noqa: PLC0415

            jax.block_until_ready(outputs)
            self.close()

    def close(self) -> None:
        if not self.running:
            return
        import jax  # noqa: PLC0415

        self.running = False
        self.steps = None  # one trace per run
        jax.profiler.stop_trace()
        log.info("profile written under %s/plugins/profile", self.log_dir)
