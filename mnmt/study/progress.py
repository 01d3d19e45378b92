"""Study-level progress display: runs done/total, current run's step, loss, tokens/s and ETA.

On a terminal the current line is rewritten in place; in a log (not a TTY) one line is printed
per update at most every `log_interval_s` seconds, plus one line per finished run.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, TextIO

from mnmt.training.progress import format_duration


@dataclasses.dataclass
class _RunCost:
    steps: int
    size: str


class StudyProgress:
    """Tracks a study's runs and prints progress; the trainer's progress events feed `update`.

    The study ETA adds, for every run not yet finished, its steps divided by the steps/s measured
    for the same model size (or, before a size has been measured, by the slowest speed seen so far
    scaled by nothing smarter than that — a conservative guess that tightens as runs finish).
    """

    def __init__(
        self,
        runs: list[tuple[str, str, int]],
        *,
        stream: TextIO | None = None,
        log_interval_s: float = 10.0,
        clock=time.monotonic,
    ) -> None:
        self._runs = {run_id: _RunCost(steps=steps, size=size) for run_id, size, steps in runs}
        self._order = [run_id for run_id, _, _ in runs]
        self._done: set[str] = set()
        self._speed: dict[str, float] = {}  # size -> steps/s
        self._current: str | None = None
        self._current_step = 0
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._interval = log_interval_s
        self._clock = clock
        self._last_print = -float("inf")
        self._start = clock()

    @property
    def done(self) -> int:
        return len(self._done)

    @property
    def total(self) -> int:
        return len(self._order)

    def start_run(self, run_id: str) -> None:
        self._current = run_id
        self._current_step = 0

    def skip_run(self, run_id: str, reason: str = "finished earlier") -> None:
        self._done.add(run_id)
        self._emit(f"[{self.done}/{self.total}] {run_id}: skipped ({reason})", force=True)

    def finish_run(self, run_id: str, summary: str = "", wall_s: float | None = None) -> None:
        self._done.add(run_id)
        cost = self._runs[run_id]
        if wall_s and wall_s > 0 and cost.size not in self._speed:
            self._speed[cost.size] = cost.steps / wall_s
        self._current = None
        took = f" in {format_duration(wall_s)}" if wall_s is not None else ""
        self._emit(
            f"[{self.done}/{self.total}] {run_id}: done{took}{' — ' + summary if summary else ''}"
            f" | study ETA {format_duration(self.eta_s())}",
            force=True,
        )

    def update(self, event: Any) -> None:
        """Consume one trainer progress event (fields: step, total_steps, loss, tokens_per_s, ...)."""
        if self._current is None:
            return
        step = int(getattr(event, "step", 0))
        total = int(getattr(event, "total_steps", self._runs[self._current].steps))
        self._current_step = step
        speed = getattr(event, "steps_per_s", None)
        size = self._runs[self._current].size
        if speed:
            self._speed[size] = float(speed)
        loss = getattr(event, "loss", None)
        tok_s = getattr(event, "tokens_per_s", None)
        run_eta = getattr(event, "eta_s", None)
        parts = [f"[{self.done}/{self.total}] {self._current}", f"step {step}/{total}"]
        if loss is not None:
            parts.append(f"loss {loss:.3f}")
        if tok_s:
            parts.append(f"{tok_s:,.0f} tok/s")
        parts.append(f"run ETA {format_duration(run_eta)}")
        parts.append(f"study ETA {format_duration(self.eta_s())}")
        self._emit(" | ".join(parts))

    def eta_s(self) -> float | None:
        """Seconds left in the study, from measured per-size speeds; None before any measurement."""
        if not self._speed:
            return None
        slowest = min(self._speed.values())
        remaining = 0.0
        for run_id in self._order:
            if run_id in self._done:
                continue
            cost = self._runs[run_id]
            steps_left = cost.steps - (self._current_step if run_id == self._current else 0)
            remaining += max(steps_left, 0) / self._speed.get(cost.size, slowest)
        return remaining

    def message(self, text: str) -> None:
        self._emit(text, force=True)

    def _emit(self, text: str, force: bool = False) -> None:
        now = self._clock()
        if self._tty:
            end = "\n" if force else ""
            self._stream.write("\r\033[K" + text + end)
            self._stream.flush()
            return
        if force or now - self._last_print >= self._interval:
            self._last_print = now
            self._stream.write(text + "\n")
            self._stream.flush()
