"""Where the main job's time goes: its stages timed in CPU and wall seconds, on this processor.

`mnmt-study run` (the default preset, or a study given by `--preset`/`--gin`) run in this
process with one worker, its XLA CPU pool limited to one core as a study worker's is
(`mnmt.study.workers.worker_environment`), so every stage is timed on its own:

- ``data``: the data stage (vocabulary, tasks, the exact irreducible loss);
- ``train <size>`` and ``branches <size>``: each size's groups and their cool-down branches,
  split into ``steps`` (the training loop: input batches, the step, its host sync and log rows),
  ``eval`` (loss rows), ``decode`` (beam search and BLEU/chrF at the end), ``checkpoint``
  (saves), ``restore`` (init or a checkpoint restore, the step function built) and, inside
  those, ``compile_wall`` (XLA compilations, wall seconds, from `jax.monitoring`);
- ``report``: the export of metrics.csv and the report.

CPU seconds are this process's user + system time (`resource.getrusage`), which a shared
machine's load changes far less than the wall. The study's own layout trains the groups in one
worker per core: its wall is about the training CPU over the cores plus the data and report
stages (`estimated_study_wall_s`, an estimate, not a measurement). The processor's model and
its vector ISA flags (AVX2, AVX-512) and threads per core are printed with the result; `--max-isa AVX2` sets
`XLA_FLAGS=--xla_cpu_max_isa=AVX2` (XLA emits no newer instructions: an AVX2-only x86 seen
from this machine; the Eigen and oneDNN kernels XLA calls pick their own code paths).

    python benchmarks/speed/main_job_stages.py --out /tmp/stages --json
    python benchmarks/speed/main_job_stages.py --out /tmp/stages_avx2 --max-isa AVX2 --json
    python benchmarks/speed/main_job_stages.py --out /tmp/slice --gin "StudySpec.sizes=('mini-1',)" \
        --gin "StudySpec.heldout=()" --gin "StudySpec.seed_repeats=()" --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import time
from collections import defaultdict

# the repository root (run or loaded by path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.common import machine  # noqa: E402

#: GroupLoop methods timed as their own part of a training stage (the rest of `run` is steps)
LOOP_PARTS = {"_eval_rows": "eval", "_probe_rows": "eval", "_decode_rows": "decode",
              "_save": "checkpoint", "_restore_or_init": "restore",
              "_build_functions": "restore"}
#: the x86 vector ISA flags worth naming (from /proc/cpuinfo)
ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
             "avx512_fp16", "avx_vnni", "amx_tile")


def cpu_seconds() -> float:
    """This process's user + system CPU seconds so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def isa_flags() -> list[str]:
    """The `ISA_FLAGS` this processor reports (Linux; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:  # pragma: no cover - not Linux
        return []
    return [flag for flag in ISA_FLAGS if flag in flags]


def threads_per_core() -> int | None:
    """How many of the machine's CPUs share CPU 0's physical core (2: SMT, two "cores" of a
    2-CPU virtual machine may be one core's two hyperthreads); None where Linux does not say."""
    path = "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return None
    count = 0
    for part in text.split(","):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count


class StageClock:
    """CPU and wall seconds per (stage, part), each second counted once: a part entered inside
    another is taken out of the outer one (a stack of open parts)."""

    def __init__(self) -> None:
        self.cpu: dict[tuple[str, str], float] = defaultdict(float)
        self.wall: dict[tuple[str, str], float] = defaultdict(float)
        self.compile_wall: dict[str, float] = defaultdict(float)
        self.stage = "setup"
        self._stack: list[list] = []  # [key, cpu at entry, wall at entry, inner cpu, inner wall]

    @contextlib.contextmanager
    def part(self, name: str, stage: str | None = None):
        key = (stage or self.stage, name)
        entry = [key, cpu_seconds(), time.perf_counter(), 0.0, 0.0]
        self._stack.append(entry)
        try:
            yield
        finally:
            self._stack.pop()
            cpu, wall = cpu_seconds() - entry[1], time.perf_counter() - entry[2]
            self.cpu[key] += cpu - entry[3]
            self.wall[key] += wall - entry[4]
            if self._stack:
                self._stack[-1][3] += cpu
                self._stack[-1][4] += wall

    def on_duration(self, event: str, seconds: float, **_kw) -> None:
        """`jax.monitoring` listener: XLA backend compilations, wall seconds per stage."""
        if event.endswith("backend_compile_duration"):
            self.compile_wall[self.stage] += seconds

    def table(self) -> dict:
        """{stage: {part: {"cpu_s", "wall_s"}, "cpu_s", "wall_s", "compile_wall_s"}}."""
        out: dict = {}
        for (stage, name), cpu in self.cpu.items():
            row = out.setdefault(stage, {"cpu_s": 0.0, "wall_s": 0.0})
            row[name] = {"cpu_s": round(cpu, 2), "wall_s": round(self.wall[(stage, name)], 2)}
            row["cpu_s"] = round(row["cpu_s"] + cpu, 2)
            row["wall_s"] = round(row["wall_s"] + self.wall[(stage, name)], 2)
        for stage, wall in self.compile_wall.items():
            out.setdefault(stage, {"cpu_s": 0.0, "wall_s": 0.0})["compile_wall_s"] = round(wall, 2)
        return out


def _instrument(clock: StageClock) -> None:
    """Time the training loop's parts and name each group's stage (size, main or branches)."""
    import jax

    from mnmt.training import branches, loop

    jax.monitoring.register_event_duration_secs_listener(clock.on_duration)
    cls = loop.GroupLoop
    for method, part in LOOP_PARTS.items():
        original = getattr(cls, method)

        def timed(self, *args, _original=original, _part=part, **kwargs):
            with clock.part(_part):
                return _original(self, *args, **kwargs)

        setattr(cls, method, timed)
    run = cls.run

    def timed_run(self, *args, **kwargs):
        size = self.config.run_id.split("_", 1)[0]
        kind = "branches" if branches.is_branch(self.config) else "train"
        clock.stage = f"{kind} {size}"
        with clock.part("steps"):
            return run(self, *args, **kwargs)

    cls.run = timed_run


def run_study(args, clock: StageClock) -> None:
    """The main job's stages, as `mnmt-study run --workers 1` runs them, each timed."""
    from pathlib import Path

    from mnmt.study.progress import StudyProgress
    from mnmt.study.runner import run_all
    from mnmt.study.spec import expand, group_runs, progress_entries, training_groups
    from mnmt.study.stages import (
        enable_compilation_cache,
        export_and_report,
        load_spec,
        prepare_data,
        prepare_out_dir,
    )

    spec = load_spec(None, args.preset, args.gin)
    out = Path(args.out)
    prepare_out_dir(out, spec, command="run")
    runs = expand(spec)
    progress = StudyProgress(progress_entries(spec, runs),
                             groups=training_groups(spec, group_runs(spec, runs)))
    with clock.part("all", "data"):
        data = prepare_data(spec, out, progress.message)
    enable_compilation_cache(out / "cache" / "jax")
    run_dirs = run_all(spec, runs, data, out / "runs", progress)
    clock.stage = "report"
    with clock.part("all", "report"):
        export_and_report(spec, run_dirs, data, out, progress.message)


def summary(clock: StageClock, cores: int) -> dict:
    """The stage table with totals and the estimated wall of the study's worker layout."""
    stages = clock.table()
    train_cpu = sum(v["cpu_s"] for k, v in stages.items() if k.split()[0] in ("train", "branches"))
    serial = sum(stages.get(k, {}).get("wall_s", 0.0) for k in ("data", "report"))
    total_cpu = sum(v["cpu_s"] for v in stages.values())
    return {"stages": stages, "total_cpu_s": round(total_cpu, 1),
            "training_cpu_s": round(train_cpu, 1),
            "estimated_study_wall_s": round(serial + train_cpu / max(1, cores), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="the study's output directory (fresh)")
    parser.add_argument("--preset", default=None, help="study preset (default: the main job)")
    parser.add_argument("--gin", action="append", default=[], help="StudySpec binding")
    parser.add_argument("--max-isa", default="", help="XLA's --xla_cpu_max_isa (e.g. AVX2)")
    parser.add_argument("--cores", type=int, default=2,
                        help="cores of the study's layout for estimated_study_wall_s")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from mnmt.study.workers import worker_environment

    os.environ.update(worker_environment())  # one core, as a study worker (before jax)
    if args.max_isa:
        os.environ["XLA_FLAGS"] += f" --xla_cpu_max_isa={args.max_isa}"
    clock = StageClock()
    _instrument(clock)
    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    run_study(args, clock)
    result = {"machine": {**machine(), "isa": isa_flags(), "threads_per_core": threads_per_core()},
              "xla_flags": os.environ.get("XLA_FLAGS", ""), "gin": args.gin,
              "wall_s": round(time.perf_counter() - wall0, 1),
              "cpu_s": round(cpu_seconds() - cpu0, 1), **summary(clock, args.cores)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for stage, row in result["stages"].items():
            parts = ", ".join(f"{k} {v['cpu_s']:.1f}" for k, v in row.items() if isinstance(v, dict))
            print(f"{stage:>20}: cpu {row['cpu_s']:8.1f} s  wall {row['wall_s']:8.1f} s  "
                  f"compile {row.get('compile_wall_s', 0):6.1f} s  ({parts})")
        print(f"total cpu {result['cpu_s']} s, wall {result['wall_s']} s; estimated study wall "
              f"on {args.cores} cores {result['estimated_study_wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
