"""Groups of a study trained side by side: one worker process per CPU core.

A tiny model's training step does not keep two cores busy from one process (XLA's thread pool
has too little work per operation), so on a CPU host the study trains several groups at once,
each in a worker process pinned to its own core with XLA's CPU thread pool limited to that core.
Every run still writes only its own run directory, so what a study writes, and its exact resume
after a kill, do not depend on the number of workers.

* The parent keeps a queue of the groups that are not finished, the costliest first (steps ×
  runs × training FLOPs per step), so the longest group does not start last; each worker takes
  the next group when it is free.
* Workers report progress to the parent (one :class:`~mnmt.study.progress.StudyProgress` with
  a study ETA over all workers).
* A worker dies with its parent (Linux ``PR_SET_PDEATHSIG``: SIGTERM, so it checkpoints first);
  SIGTERM or SIGINT to the parent is passed on to the workers, which checkpoint and stop, and
  the study stops with :class:`~mnmt.study.runner.RunStopped` as with one process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import sys
import types
from pathlib import Path
from typing import Any

from mnmt.study.progress import StudyProgress
from mnmt.study.runner import RunStopped, run_all, run_complete
from mnmt.study.spec import RunSpec, StudySpec, group_runs, with_branches

__all__ = ["available_cores", "default_workers", "run_parallel", "worker_environment"]

# XLA's CPU backend with one thread: a worker computes on its own core only.
_ONE_CORE_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
_PR_SET_PDEATHSIG = 1


def available_cores() -> list[int]:
    """The CPU cores this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def default_workers(n_groups: int) -> int:
    """Workers for `mnmt-study run --workers auto`: one per available core (at most one per group)
    when JAX computes on the CPU; 1 on an accelerator, whose device the runs would share."""
    import jax  # heavy, only when training

    if jax.default_backend() != "cpu":
        return 1
    return max(1, min(len(available_cores()), n_groups))


def worker_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: XLA's CPU thread pool limited to one core."""
    env = dict(os.environ if base is None else base)
    flags = env.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        env["XLA_FLAGS"] = (flags + " " + _ONE_CORE_XLA_FLAGS).strip()
    return env


def _group_cost(spec: StudySpec, group: list[RunSpec], step_flops: dict[str, float]) -> float:
    """Run-steps × FLOPs per step of a group and its cool-down branches (trained after it)."""
    steps = sum(last - first for first, last in map(spec.run_steps, with_branches(spec, group)))
    return steps * step_flops.get(group[0].size, 1.0)


def run_parallel(
    spec: StudySpec,
    runs: list[RunSpec],
    out: Path,
    progress: StudyProgress,
    *,
    workers: int,
    step_flops: dict[str, float] | None = None,
) -> list[Path]:
    """Train every unfinished run of `runs` in `workers` worker processes; return all run dirs.

    `out` is the study directory, whose data stage has run (each worker registers its tasks
    again from it). The groups are those of :func:`mnmt.study.spec.group_runs`; `progress` must
    have been made with the same `workers` and its groups in :func:`queue_order`. Raises
    RunStopped when a run ends unfinished (signal, divergence, a worker that failed), after
    every worker has stopped.
    """
    import multiprocessing as mp

    runs_dir = out / "runs"
    everything = [runs_dir / run.run_id for run in with_branches(spec, runs)]
    pending = [g for g in queue_order(spec, runs, step_flops or {})
               if not all(run_complete(spec, r, runs_dir) for r in with_branches(spec, g))]
    for run in with_branches(spec, runs):
        if run_complete(spec, run, runs_dir):
            progress.skip_run(run.run_id)
    if not pending:
        return everything
    ctx = mp.get_context("spawn")
    tasks, events = ctx.Queue(), ctx.Queue()
    for group in pending:
        tasks.put(list(group))  # the RunSpecs themselves: verification runs are not in expand()
    cores = available_cores()
    n = max(1, min(workers, len(pending)))
    spec_fields = spec.flat_fields()
    procs = []
    old_env = dict(os.environ)
    try:
        os.environ.update(worker_environment())  # a spawned child reads it before importing jax
        for index in range(n):
            tasks.put(None)  # one stop sentinel per worker
            proc = ctx.Process(target=_worker_main, name=f"mnmt-study-worker-{index}",
                               args=(index, cores[index % len(cores)], spec_fields, str(out),
                                     tasks, events))
            proc.start()
            procs.append(proc)
    finally:
        os.environ.clear()
        os.environ.update(old_env)
    stopped = _collect(procs, events, progress)
    if stopped is not None:
        raise stopped
    return everything


def queue_order(spec: StudySpec, runs: list[RunSpec],
                step_flops: dict[str, float]) -> list[list[RunSpec]]:
    """The groups of `runs`, costliest first (the order in which workers take them)."""
    groups = group_runs(spec, runs)
    return sorted(groups, key=lambda g: -_group_cost(spec, g, step_flops))


def _collect(procs: list, events, progress: StudyProgress) -> RunStopped | None:
    """Relay worker events to `progress` until every worker has exited; pass SIGTERM/SIGINT on."""
    stopped: RunStopped | None = None
    received: list[int] = []

    def forward(signum, frame):  # noqa: ARG001
        received.append(signum)
        for proc in procs:
            if proc.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            try:
                kind, worker, payload = events.get(timeout=0.5)
            except queue.Empty:
                if not any(proc.is_alive() for proc in procs):
                    break
                continue
            if kind == "start":
                progress.start_group(payload, worker)
            elif kind == "update":
                progress.update(types.SimpleNamespace(**payload), worker)
            elif kind == "finish":
                progress.finish_run(payload["run_id"], payload["summary"], payload["wall_s"],
                                    worker)
            elif kind == "message":
                progress.message(f"w{worker} {payload}")
            elif kind == "stopped" and stopped is None:
                stopped = RunStopped(**payload)
                forward(signal.SIGTERM, None)  # the others checkpoint and stop too
    finally:
        for proc in procs:
            proc.join()
        for s, handler in previous.items():
            signal.signal(s, handler)
    failed = [p for p in procs if p.exitcode not in (0, None)]
    if stopped is None and received:
        stopped = RunStopped("study", "preempted", "stopped by a signal; every worker "
                             "checkpointed", received[0])
    if stopped is None and failed:
        stopped = RunStopped(failed[0].name, "failed",
                             f"worker exited with status {failed[0].exitcode} (see its output above)")
    return stopped


class _Relay:
    """Stands in for StudyProgress in a worker: sends what happens to the parent."""

    def __init__(self, worker: int, events) -> None:
        self.worker, self.events = worker, events

    def _send(self, kind: str, payload: Any) -> None:
        self.events.put((kind, self.worker, payload))

    def start_group(self, run_ids: list[str]) -> None:
        self._send("start", list(run_ids))

    def skip_run(self, run_id: str, reason: str = "") -> None:  # noqa: ARG002 (parent skipped it)
        return

    def finish_run(self, run_id: str, summary: str = "", wall_s: float | None = None) -> None:
        self._send("finish", {"run_id": run_id, "summary": summary, "wall_s": wall_s})

    def update(self, event: Any) -> None:
        fields = ("run_id", "step", "total_steps", "loss", "tokens_per_s", "steps_per_s")
        self._send("update", {f: getattr(event, f) for f in fields if hasattr(event, f)})

    def message(self, text: str) -> None:
        self._send("message", text)


def _die_with_parent() -> None:
    """Linux: SIGTERM this process when its parent dies (it then checkpoints and stops)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _worker_main(worker: int, core: int, spec_fields: dict, out: str, tasks, events) -> None:
    """A worker: pinned to `core`, trains the groups it takes from `tasks` until a sentinel."""
    _die_with_parent()
    if os.getppid() == 1:  # the parent died before the death signal was armed
        sys.exit(1)
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {core})
    from mnmt.study.stages import enable_compilation_cache, prepare_data

    spec = StudySpec.of(**spec_fields)
    out_dir = Path(out)
    relay = _Relay(worker, events)
    data = prepare_data(spec, out_dir, lambda text: None)  # registers the tasks in this process
    enable_compilation_cache(out_dir / "cache" / "jax")
    while True:
        group = tasks.get()
        if group is None:
            break
        try:
            run_all(spec, group, data, out_dir / "runs", relay)
        except RunStopped as stop:
            events.put(("stopped", worker, {"run_id": stop.run_id, "status": stop.status,
                                            "message": stop.message,
                                            "signal_number": stop.signal_number}))
            sys.exit(3)
