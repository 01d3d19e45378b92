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
    steps: int  # steps the run trains
    size: str
    start: int = 0  # the step it starts from (a cool-down branch: its branch step)


class StudyProgress:
    """Tracks a study's runs and prints progress; the trainer's progress events feed `update`.

    `runs` holds (run id, size, steps trained) or (run id, size, steps trained, first step): a
    cool-down branch trains from its branch step b to b + c_b.

    Runs are trained in groups (`groups`: lists of run ids trained together; default one run
    each). The study ETA sums, over the groups not yet finished, their steps times their number
    of runs times a cost per run-step of their model size: the wall time of a finished group of
    that size (evaluation, decoding, compilation and checkpoints included) over its steps and
    runs, or, before one has finished, the trainer's measured step time per run scaled by the
    wall/step-time ratio of the finished groups; a size never seen yet is priced from its
    training FLOPs per run-step when `step_flops` (size -> FLOPs per step of one run) is given
    (`_by_flops`), else at the slowest seen size's cost. Costs are per run because a group's
    runs are stepped one after another in one program: a group of five costs about five single
    runs' compute, and a held-out run trained alone costs one.

    With `workers` > 1 (`mnmt.study.workers`: groups trained side by side in worker processes)
    every method takes the `worker` that reports, each worker has its own current group, and the
    ETA is the time until the busiest worker is done: the groups not started yet are handed, in
    the order of `groups`, to whichever worker is free first (as the worker queue does).
    """

    def __init__(
        self,
        runs: list[tuple],
        *,
        groups: list[list[str]] | None = None,
        step_flops: dict[str, float] | None = None,
        stream: TextIO | None = None,
        log_interval_s: float = 10.0,
        clock=time.monotonic,
        workers: int = 1,
    ) -> None:
        self._runs = {entry[0]: _RunCost(entry[2], entry[1], *entry[3:]) for entry in runs}
        self._order = [entry[0] for entry in runs]
        self._groups = [list(g) for g in groups] if groups else [[r] for r in self._order]
        self._flops = dict(step_flops or {})
        self._done: set[str] = set()
        self._wall_per_step: dict[str, float] = {}   # size -> seconds per run-step, all in
        self._train_per_step: dict[str, float] = {}  # size -> trainer's seconds per run-step
        self._ratios: list[float] = []               # wall / trainer step time, finished groups
        self._workers = max(1, int(workers))
        self._current: dict[int, list[str]] = {}  # worker -> run ids of its current group
        self._step: dict[int, int] = {}           # worker -> step of its current group
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

    def start_group(self, run_ids: list[str], worker: int = 0) -> None:
        self._current[worker] = list(run_ids)
        self._step[worker] = 0

    def start_run(self, run_id: str, worker: int = 0) -> None:
        self.start_group([run_id], worker)

    def skip_run(self, run_id: str, reason: str = "finished earlier") -> None:
        self._done.add(run_id)
        self._emit(f"[{self.done}/{self.total}] {run_id}: skipped ({reason})", force=True)

    def finish_run(self, run_id: str, summary: str = "", wall_s: float | None = None,
                   worker: int = 0) -> None:
        """`wall_s`: the run's (for a group: the whole group's) wall time, all stages included."""
        self._done.add(run_id)
        cost = self._runs[run_id]
        current = self._current.get(worker, [])
        if current and all(r in self._done for r in current):
            if wall_s and wall_s > 0:
                self._wall_per_step[cost.size] = wall_s / (cost.steps * len(current))
                train = self._train_per_step.get(cost.size)
                if train:
                    self._ratios.append(max(1.0, self._wall_per_step[cost.size] / train))
            self._current.pop(worker, None)
        took = f" in {format_duration(wall_s)}" if wall_s is not None else ""
        self._emit(
            f"[{self.done}/{self.total}] {self._who(worker)}{run_id}: done{took}"
            f"{' — ' + summary if summary else ''} | study ETA {format_duration(self.eta_s())}",
            force=True,
        )

    def _who(self, worker: int) -> str:
        return f"w{worker} " if self._workers > 1 else ""

    def update(self, event: Any, worker: int = 0) -> None:
        """Consume one trainer progress event (fields: step, total_steps, loss, tokens_per_s, ...)."""
        current = self._current.get(worker)
        if not current:
            return
        run_id = getattr(event, "run_id", None)
        if run_id is not None and run_id in self._runs and run_id not in current:
            return
        label = current[0] if len(current) == 1 else f"{current[0]} +{len(current) - 1}"
        step = int(getattr(event, "step", 0))
        total = int(getattr(event, "total_steps", self._runs[current[0]].steps))
        self._step[worker] = step
        speed = getattr(event, "steps_per_s", None)
        if speed:  # steps of the whole group per second
            self._train_per_step[self._runs[current[0]].size] = 1.0 / (float(speed) * len(current))
        loss = getattr(event, "loss", None)
        tok_s = getattr(event, "tokens_per_s", None)
        parts = [f"[{self.done}/{self.total}] {self._who(worker)}{label}", f"step {step}/{total}"]
        if loss is not None:
            parts.append(f"loss {loss:.3f}")
        if tok_s:
            parts.append(f"{tok_s:,.0f} tok/s")
        parts.append(f"run ETA {format_duration(self._current_eta(worker))}")
        parts.append(f"study ETA {format_duration(self.eta_s())}")
        self._emit(" | ".join(parts))

    def cost_per_run_step(self, size: str) -> float | None:
        """Seconds one training step of one run of `size` took in this study (the trainer's
        measured step time of its last group over its runs; evaluations, compilation and
        checkpoints excluded: a lower bound of the wall); None before any measurement."""
        return self._train_per_step.get(size)

    def _ratio(self) -> float:
        return sorted(self._ratios)[len(self._ratios) // 2] if self._ratios else 1.0

    def _cost_per_step(self, size: str, current: bool = False) -> float | None:
        train = self._train_per_step.get(size)
        if current and train:
            return train * self._ratio()
        if size in self._wall_per_step:
            return self._wall_per_step[size]
        if train:
            return train * self._ratio()
        known = list(self._wall_per_step.items()) + [
            (other, t * self._ratio()) for other, t in self._train_per_step.items()]
        if not known:
            return None
        if size not in self._flops:
            return max(cost for _, cost in known)
        return self._by_flops(size, known)

    def _by_flops(self, size: str, known: list[tuple[str, float]]) -> float:
        """Cost per step of an unmeasured size from its FLOPs: a + b·FLOPs fitted through the
        measured sizes (small models pay a fixed per-step cost that FLOPs do not show), or,
        with one measured size, that size's cost scaled by the square root of the FLOPs ratio.
        Beyond the largest measured size the fit is capped by that square-root rule: a slope
        fitted through two close, noisy sizes would otherwise put the ETA hours off."""
        points = {}
        for other, cost in known:
            if self._flops.get(other):
                points[self._flops[other]] = max(points.get(self._flops[other], 0.0), cost)
        if not points:
            return max(cost for _, cost in known)
        target = self._flops[size]
        if len(points) == 1:
            (flops, cost), = points.items()
            return cost * max(1.0, target / flops) ** 0.5 if target >= flops else cost
        xs, ys = zip(*sorted(points.items()), strict=True)
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mean_x) ** 2 for x in xs)
        slope = max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var)
        intercept = max(0.0, mean_y - slope * mean_x)
        estimate = intercept + slope * target
        if target > xs[-1]:
            estimate = min(estimate, ys[-1] * (target / xs[-1]) ** 0.5)
        return max(estimate, min(ys))

    def _current_eta(self, worker: int = 0) -> float | None:
        current = self._current.get(worker)
        if not current:
            return None
        cost = self._runs[current[0]]
        per_step = self._cost_per_step(cost.size, current=True)
        if per_step is None:
            return None
        done = max(self._step.get(worker, 0) - cost.start, 0)
        return max(cost.steps - done, 0) * per_step * len(current)

    def eta_s(self) -> float | None:
        """Seconds left in the study (see the class docstring); None before any measurement."""
        loads = [0.0] * self._workers
        running = {group[0]: worker for worker, group in self._current.items() if group}
        for group in self._groups:  # the groups under way first: each on its worker
            if group[0] in running and not all(r in self._done for r in group):
                eta = self._current_eta(running[group[0]])
                if eta is None:
                    return None
                loads[running[group[0]] % self._workers] += eta
        for group in self._groups:  # then the rest, each to the worker free first
            if group[0] in running or all(r in self._done for r in group):
                continue
            per_step = self._cost_per_step(self._runs[group[0]].size)
            if per_step is None:
                return None
            loads[loads.index(min(loads))] += self._runs[group[0]].steps * per_step * len(group)
        return max(loads)

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
