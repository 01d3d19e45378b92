"""`mnmt-study`: the main job — train a study's grid, export its metrics, fit the laws, report.

    mnmt-study run                          # the built-in CPU study (preset "default")
    mnmt-study run --preset ci --out DIR    # a 2-minute miniature
    mnmt-study plan fernandes_en_de_zh      # the paper-scale study file (72 runs on WMT19)
    mnmt-study plan [STUDY]                 # list the runs without training
    mnmt-study presets                      # list the built-in presets

Stages (each resumable, so re-running the same command picks up where it stopped):
1. data: the synthetic family's shared SentencePiece vocabulary, SeqIO tasks, exact L∞ per pair;
2. train: one run directory per (size, mixture weights, seed) under OUT/runs/;
3. export: OUT/metrics.csv, the tidy table of docs/metrics_schema.md;
4. fit + report: OUT/report/ (Markdown, HTML, PNG figures, fits.json).

Errors in the command line or the study (unknown preset, unreadable study file, an output
directory that cannot be written or that holds a different study) print one line and exit 2.
A run stopped by SIGINT/SIGTERM stops the study after its checkpoint (exit 130/143; the same
command resumes it); a run whose loss became NaN/inf stops the study with exit 3.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import gin

from launch.local import RunStopped
from launch.study import PRESETS, StudyError, StudySpec, expand
from mnmt.gin_files import parse_files_and_bindings

EXIT_USAGE = 2
EXIT_DIVERGED = 3  # as mnmt-train: a run's loss became NaN/inf
STUDY_FILE = "study.json"


class UsageError(Exception):
    """A problem with the command line or its inputs; reported in one line with exit status 2."""


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def load_spec(study: str | None, preset: str | None, gin_bindings: Sequence[str]) -> StudySpec:
    """The StudySpec named by a preset or a gin file, with `--gin.NAME=value` overrides applied."""
    if study and preset:
        raise UsageError("give either a study gin file or --preset, not both")
    if study is None:
        name = preset or "default"
        if name not in PRESETS:
            raise UsageError(f"unknown preset {name!r}; expected one of: {', '.join(sorted(PRESETS))}")
        base = PRESETS[name]
        if not gin_bindings:
            return base
        overrides = _parse_bindings(gin_bindings)
        try:
            return dataclasses.replace(base, **overrides)
        except TypeError as err:
            raise UsageError(f"--gin: {err}") from err
    path = Path(study)
    if not path.is_file():
        candidate = repo_root() / "t5x_configs" / "studies" / study
        path = candidate if candidate.is_file() else candidate.with_suffix(".gin")
    if not path.is_file():
        raise UsageError(f"study file not found: {study}")
    gin.clear_config()
    try:
        parse_files_and_bindings([str(path)], gin_bindings)
        return StudySpec()
    except (ValueError, KeyError, SyntaxError, OSError) as err:
        raise UsageError(f"{path}: {str(err).splitlines()[0]}") from err
    finally:
        gin.clear_config()  # the spec is built; leave no study bindings behind for the runs


def _parse_bindings(bindings: Sequence[str]) -> dict:
    """`StudySpec.train_steps=100` style bindings applied to a preset (values parsed as gin does)."""
    overrides = {}
    for binding in bindings:
        name, sep, value = binding.partition("=")
        field = name.strip().removeprefix("StudySpec.")
        if not sep or field not in {f.name for f in dataclasses.fields(StudySpec)}:
            raise UsageError(f"--gin.{binding}: expected StudySpec.FIELD=VALUE with a StudySpec field")
        try:
            parsed = gin.config.parse_value(value.strip())
        except (ValueError, SyntaxError) as err:
            raise UsageError(f"--gin.{binding}: cannot parse value {value!r}") from err
        overrides[field] = tuple(parsed) if isinstance(parsed, list) else parsed
    return overrides


def prepare_out_dir(out: Path, spec: StudySpec) -> None:
    """Create OUT (if needed), check it is writable, and refuse one that holds a different study."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"output path is not a directory: {out}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"cannot write to output directory {out}: {err.strerror or err}") from err
    record = out / STUDY_FILE
    current = _spec_json(spec)
    if record.exists():
        try:
            previous = json.loads(record.read_text())
        except json.JSONDecodeError as err:
            raise UsageError(f"{record}: not valid JSON ({err}); move it away or use another --out") from err
        # a field added to StudySpec after the record was written has its default there
        defaults = _spec_json(StudySpec())
        differing = sorted(k for k in set(previous) | set(current)
                           if previous.get(k, defaults.get(k)) != current.get(k))
        if differing:
            raise UsageError(
                f"{out} holds a different study (fields differ: {', '.join(differing)}); "
                "use another --out to keep both"
            )
        return
    _atomic_write(record, json.dumps(current, indent=2, sort_keys=True) + "\n")


def _spec_json(spec: StudySpec) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(spec)))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def prepare_data(spec: StudySpec, out: Path, log):
    """Stage 1: vocabulary, SeqIO tasks and (synthetic data only) the exact irreducible loss."""
    from launch.local import StudyData
    from mnmt.tensorflow_setup import start_tensorflow

    start_tensorflow()  # CPU-only data backend, without its "no CUDA here" start-up lines

    if spec.tasks:
        return _registered_tasks(spec, log)
    from mnmt.data import synthetic, tasks, vocab

    data_dir = out / "data"
    data_dir.mkdir(exist_ok=True)
    family = synthetic.get_family(spec.data_preset)
    missing = sorted(set(spec.pairs) - set(family.pairs))
    if missing:
        raise UsageError(
            f"StudySpec.pairs: {missing} not in data preset {spec.data_preset!r} (has {family.pairs})"
        )
    vocab_path = data_dir / "spm.model"
    if not vocab_path.exists():
        log(f"data: training a {spec.vocab_size}-piece SentencePiece vocabulary on {list(spec.pairs)}")
        trained = Path(vocab.train_vocabulary(family, str(data_dir), spec.vocab_size))
        if trained != vocab_path:
            for suffix in (".vocab", ".model"):
                if trained.with_suffix(suffix).exists():
                    os.replace(trained.with_suffix(suffix), vocab_path.with_suffix(suffix))
    task_names = tasks.register_synthetic_tasks(spec.data_preset, str(vocab_path))
    truth_path = data_dir / "irreducible_loss.json"
    if truth_path.exists():
        truth = json.loads(truth_path.read_text())
    else:
        vocabulary = vocab.get_vocabulary(str(vocab_path))
        truth = {
            pair: {
                eval_set: float(synthetic.irreducible_loss(
                    family, pair, eval_set, vocabulary, tasks.EVAL_SIZE,
                    max_length=spec.lengths["targets"]))  # warns if targets would be trimmed
                for eval_set in spec.eval_sets
            }
            for pair in spec.pairs
        }
        _atomic_write(truth_path, json.dumps(truth, indent=2) + "\n")
    log("data: exact irreducible loss (nats/token): " + ", ".join(
        f"{pair} {sets[spec.eval_sets[0]]:.3f}" for pair, sets in truth.items()))
    return StudyData(
        vocabulary_path=str(vocab_path),
        tasks={pair: task_names[pair] for pair in spec.pairs},
        irreducible_loss=truth,
    )


def _registered_tasks(spec: StudySpec, log):
    """Real-data studies: tasks registered by `spec.task_module`; no known irreducible loss."""
    import importlib

    import seqio

    from launch.local import StudyData

    if not Path(spec.vocabulary_path).exists() and "://" not in spec.vocabulary_path:
        raise UsageError(f"StudySpec.vocabulary_path: file not found: {spec.vocabulary_path}")
    if spec.task_module:
        try:
            module = importlib.import_module(spec.task_module)
        except ImportError as err:
            raise UsageError(f"StudySpec.task_module: cannot import {spec.task_module!r}: {err}") from err
        # T5X task modules register at import; ours may instead take the study's vocabulary
        register = getattr(module, "register_study_tasks", None)
        if callable(register):
            try:
                register(spec.vocabulary_path)
            except (ValueError, FileNotFoundError) as err:
                raise UsageError(f"StudySpec.task_module {spec.task_module!r}: "
                                 f"{str(err).strip().splitlines()[0]}") from err
    for pair, task in spec.tasks:
        if task not in seqio.TaskRegistry.names():
            raise UsageError(f"StudySpec.tasks: task {task!r} for {pair} is not registered "
                             f"(set StudySpec.task_module to the module that registers it)")
    log(f"data: {len(spec.tasks)} registered tasks; irreducible loss unknown (real data)")
    return StudyData(vocabulary_path=spec.vocabulary_path, tasks=dict(spec.tasks), irreducible_loss={})


def export_and_report(spec: StudySpec, run_dirs: list[Path], data, out: Path, log):
    """Stages 3 and 4: the tidy table, the fits and the report."""
    from fitting.report import write_report
    from fitting.tables import collect_runs, write_table

    table = collect_runs([str(d) for d in run_dirs])
    table_path = out / "metrics.csv"
    write_table(table, str(table_path))
    log(f"export: {len(table)} rows from {len(run_dirs)} runs -> {table_path}")
    eval_set = spec.eval_sets[0]
    report = write_report(
        table,
        str(out / "report"),
        ground_truth={pair: sets[eval_set] for pair, sets in data.irreducible_loss.items()} or None,
        target_sizes=list(spec.report_target_sizes),
        title=f"Study {spec.name}",
        eval_set=eval_set,
    )
    return report


def enable_compilation_cache(cache_dir: Path) -> None:
    """Persist XLA executables under `cache_dir`: runs of one size at different weights (and a
    re-run of the study) compile the same programs, so only the first pays for compilation."""
    import jax

    cache_dir.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def cmd_run(args: argparse.Namespace) -> int:
    spec = load_spec(args.study, args.preset, args.gin)
    out = Path(args.out)
    prepare_out_dir(out, spec)
    runs = expand(spec)
    from launch.local import run_all
    from launch.progress import StudyProgress

    progress = StudyProgress([(r.run_id, r.size, spec.steps_for(r.size)) for r in runs])
    log = progress.message
    start = time.monotonic()
    log(f"study {spec.name}: {len(runs)} runs ({len(spec.sizes)} sizes x {len(spec.weights)} "
        f"mixtures x {len(spec.seeds)} seeds) on {spec.pairs} -> {out}")
    data = prepare_data(spec, out, log)
    enable_compilation_cache(out / "cache" / "jax")
    run_dirs = run_all(spec, runs, data, out / "runs", progress)
    report = export_and_report(spec, run_dirs, data, out, log)
    log(_summary(report, {pair: sets[spec.eval_sets[0]] for pair, sets in data.irreducible_loss.items()}))
    log(f"study {spec.name}: finished in {time.monotonic() - start:.0f} s; report: "
        f"{getattr(report, 'markdown_path', out / 'report')}")
    return 0


def cmd_run_one(args: argparse.Namespace) -> int:
    """Train one run of a study (what each host of a remote launch executes)."""
    spec = load_spec(args.study, args.preset, args.gin)
    runs = {r.run_id: r for r in expand(spec)}
    if args.run not in runs:
        raise UsageError(f"--run {args.run!r} is not a run of study {spec.name!r}; see `mnmt-study plan`")
    out = Path(args.out)
    prepare_out_dir(out, spec)
    from launch.local import run_all
    from launch.progress import StudyProgress

    progress = StudyProgress([(args.run, runs[args.run].size, spec.steps_for(runs[args.run].size))])
    data = prepare_data(spec, out, progress.message)
    enable_compilation_cache(out / "cache" / "jax")
    run_all(spec, [runs[args.run]], data, out / "runs", progress)
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    """Prepare a study's data only (vocabulary, tasks, L∞) — once, before a multi-host launch."""
    spec = load_spec(args.study, args.preset, args.gin)
    out = Path(args.out)
    prepare_out_dir(out, spec)
    prepare_data(spec, out, lambda text: print(text, file=sys.stderr))
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    """Write a Cloud TPU or SLURM script that trains every run of the study."""
    from launch import remote

    spec = load_spec(args.study, args.preset, args.gin)
    runs = expand(spec)
    study_args = [args.study] if args.study else ["--preset", args.preset or "default"]
    study_args += [f"--gin.{binding}" for binding in args.gin]
    if args.target == "tpu":
        if not args.tpu_name or not args.zone:
            raise UsageError("--target tpu needs --tpu-name and --zone")
        text = remote.cloud_tpu_script(study_args, runs, args.out, tpu_name=args.tpu_name,
                                       zone=args.zone, project=args.project)
    else:
        text = remote.slurm_script(study_args, runs, args.out, nodes=args.nodes,
                                   gpus_per_node=args.gpus_per_node, partition=args.partition,
                                   time_limit=args.time)
    script = Path(args.script)
    try:
        _atomic_write(script, text)
    except OSError as err:
        raise UsageError(f"cannot write launch script {script}: {err.strerror or err}") from err
    script.chmod(0o755)
    print(f"wrote {script}: {len(runs)} runs on {args.target}; run it with: bash {script}")
    return 0


def _summary(report, ground_truth: dict[str, float] | None) -> str:
    """The fitted exponents and L∞ per pair and weight, next to the true L∞ where known."""
    lines = ["fitted L(N) = beta * N^-alpha + L_inf (Fernandes eq. 6), per pair and weight p:"]
    for pair, by_weight in sorted(report.power_fits.items()):
        truth = (ground_truth or {}).get(pair)
        for weight, fit in sorted(by_weight.items()):
            err = fit.stderr or {}
            alpha, l_inf = fit.params["alpha"], fit.params["l_inf"]
            text = (f"  {pair} p={weight:.2f}: alpha {alpha:.3f} ± {err.get('alpha', float('nan')):.3f}, "
                    f"L_inf {l_inf:.3f} ± {err.get('l_inf', float('nan')):.3f}")
            if truth is not None:
                text += f" (true {truth:.3f})"
            lines.append(text)
    for section, reason in report.skipped.items():
        lines.append(f"  skipped {section}: {reason}")
    for warning in report.warnings:
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    spec = load_spec(args.study, args.preset, args.gin)
    for run in expand(spec):
        weights = " ".join(f"{pair}={w:.2f}" for pair, w in run.weights.items())
        print(f"{run.run_id}\t{run.size}\t{weights}\tseed={run.seed}\tsteps={spec.steps_for(run.size)}")
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    for name, spec in sorted(PRESETS.items()):
        print(f"{name}\t{len(expand(spec))} runs\tsizes={','.join(spec.sizes)}\tweights={list(spec.weights)}"
              f"\tsteps={spec.train_steps}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mnmt-study", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_text in (
        ("run", cmd_run, "train, export, fit and report a study"),
        ("plan", cmd_plan, "list a study's runs without training"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("study", nargs="?", help="study gin file (t5x_configs/studies/*.gin)")
        p.add_argument("--preset", help=f"built-in study: {', '.join(sorted(PRESETS))} (default: default)")
        p.add_argument("--gin", action="append", default=[], metavar="NAME=VALUE",
                       help="gin binding, e.g. --gin StudySpec.train_steps=100 (repeatable)")
        if name == "run":
            p.add_argument("--out", default="mnmt_study_out", help="output directory (default: %(default)s)")
        p.set_defaults(func=func)
    for name, func, help_text in (
        ("prepare", cmd_prepare, "prepare a study's data only (before a multi-host launch)"),
        ("run-one", cmd_run_one, "train one run of a study (used by remote launches)"),
        ("launch", cmd_launch, "write a Cloud TPU or SLURM script for a study"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("study", nargs="?", help="study gin file (t5x_configs/studies/*.gin)")
        p.add_argument("--preset", help="built-in study preset")
        p.add_argument("--gin", action="append", default=[], metavar="NAME=VALUE")
        p.add_argument("--out", required=True, help="output directory visible to every host")
        p.set_defaults(func=func)
        if name == "run-one":
            p.add_argument("--run", required=True, help="run id (see `mnmt-study plan`)")
        elif name == "launch":
            p.add_argument("--target", choices=("tpu", "slurm"), required=True)
            p.add_argument("--script", required=True, help="where to write the launch script")
            p.add_argument("--tpu-name")
            p.add_argument("--zone")
            p.add_argument("--project")
            p.add_argument("--nodes", type=int, default=1)
            p.add_argument("--gpus-per-node", type=int, default=8)
            p.add_argument("--partition")
            p.add_argument("--time", default="24:00:00",
                           help="SLURM time limit of each array task (default %(default)s); a run "
                                "that reaches it checkpoints and is requeued")
    p = sub.add_parser("presets", help="list the built-in presets")
    p.set_defaults(func=cmd_presets)
    return parser


def _normalise_gin_flags(argv: list[str]) -> list[str]:
    """Accept T5X-style `--gin.NAME=value` as well as `--gin NAME=value`."""
    out = []
    for arg in argv:
        if arg.startswith("--gin."):
            out.extend(["--gin", arg[len("--gin."):]])
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    # TensorFlow (SeqIO's data backend) and XLA log start-up chatter that hides our progress lines.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(_normalise_gin_flags(list(sys.argv[1:] if argv is None else argv)))
    try:
        return args.func(args)
    except (UsageError, StudyError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"mnmt-study: error: {first_line}", file=sys.stderr)
        return EXIT_USAGE
    except RunStopped as stopped:
        if stopped.status == "diverged":
            print(f"mnmt-study: error: {stopped}", file=sys.stderr)
            return EXIT_DIVERGED
        print(f"mnmt-study: {stopped}", file=sys.stderr)  # the trainer's message says how to resume
        return 128 + (stopped.signal_number or signal.SIGTERM)  # 130 for Ctrl-C, 143 for SIGTERM
    except KeyboardInterrupt:
        print("mnmt-study: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `mnmt-study plan | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
