"""`mnmt-study`: the main job — train a study's grid, export its metrics, fit the laws, report.

    mnmt-study run                          # the built-in CPU study (preset "default")
    mnmt-study run --preset ci --out DIR    # a 2-minute miniature
    mnmt-study plan fernandes_en_de_zh      # the paper-scale study file (72 runs on WMT19)
    mnmt-study plan [STUDY]                 # list the runs without training
    mnmt-study plan STUDY --mesh 16x4 --device-memory-gib 32   # per-device memory, FLOPs
    mnmt-study plan STUDY --mesh 64x1 --device-memory-gib 32 --rules fsdp   # parameters over data
    mnmt-study presets                      # list the built-in presets
    mnmt-study verify OUT                   # train the report's recommended mixture and baselines

Stages (each resumable, so re-running the same command picks up where it stopped):
1. data: the synthetic family's shared SentencePiece vocabulary, SeqIO tasks, exact L∞ per pair;
2. train: one run directory per (size, mixture weights, seed) under OUT/runs/;
3. export: OUT/metrics.csv, the tidy table of docs/reference/metrics_schema.md;
4. fit + report: OUT/report/ (Markdown, HTML, PNG figures, fits.json);
5. verification (StudySpec.verify, or `mnmt-study verify OUT` later; K-pair studies): the
   report's recommended weights and the baselines trained at one size with >= 2 seeds
   (mnmt.study.verify), then the report again with its section "Verification".

Errors in the command line or the study (unknown preset, unreadable study file, an output
directory that cannot be written or that holds a different study, a run file that is not valid
JSON) print one line and exit 2. An output directory in use by another `mnmt-study run` or
`prepare` (its lock, `mnmt.study.lock`) is refused at once in one line naming the holder, exit 75.
A run stopped by SIGINT/SIGTERM stops the study after its checkpoint (exit 130/143; the same
command resumes it); a run whose loss became NaN/inf stops the study with exit 3.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path

from mnmt.study import (
    adaptive,
    adaptive_objective,
    design_pool,
    lock,
    mesh_plan,
    mixture_design,
    train_options,
    verify,
)
from mnmt.study.loading import DEFAULT_FILE, DEFAULT_PRESET, preset, preset_file
from mnmt.study.progress import StudyProgress
from mnmt.study.runner import RunStopped, run_all, run_complete
from mnmt.study.spec import (
    PRESET_SUMMARIES,
    PRESETS,
    RunSpec,
    StudyError,
    branch_check_runs,
    branch_runs,
    expand,
    group_runs,
    mixture_count,
    progress_entries,
    stop_check_runs,
    stop_savings,
    stopped_runs,
    training_groups,
    with_branches,
)
from mnmt.study.stages import (
    UsageError,
    enable_compilation_cache,
    export_and_report,
    load_spec,
    prepare_data,
    prepare_out_dir,
    preset_names,
    study_summary,
)
from mnmt.study.workers import default_workers, queue_order, run_parallel

EXIT_USAGE = 2
EXIT_DIVERGED = 3  # as mnmt-train: a run's loss became NaN/inf
EXIT_IN_USE = 75  # sysexits' EX_TEMPFAIL: another process holds the output directory's lock
COMMAND_PLUGINS = "mnmt_study.commands"  # entry-point group of further subcommands (launch/)


def cmd_run(args: argparse.Namespace) -> int:
    spec = load_spec(args.study, args.preset, args.gin)
    out = Path(args.out)
    if spec.verification.verify:  # refused now, not after the study: the verification's size is the advice's
        verify.verification_size(spec)
    prepare_out_dir(out, spec, command="run")
    runs = expand(spec)
    progress, workers, flops = _training_progress(spec, runs, args.workers)
    log = progress.message
    start = time.monotonic()
    mixtures = mixture_count(spec)
    held = sum(r.heldout for r in runs)
    n_branches = len(with_branches(spec, runs)) - len(runs)
    design = adaptive_objective.adaptive_design(spec) if spec.adaptive.adaptive else None
    if design is not None:
        log(adaptive.plan_text(design))
    log(f"study {spec.name}: {len(runs)} runs ({len(spec.sizes)} sizes x {mixtures} "
        f"mixtures x {len(spec.seeds)} seeds" + (f" + {held} held out" if held else "")
        + ")" + (f" + {n_branches} cool-down branches" if n_branches else "")
        + f" on {spec.pairs} -> {out}"
        + (f"; {workers} worker processes" if workers > 1 else ""))
    if spec.early_stop.stop_fraction < 1.0:
        log(f"early stop at {spec.early_stop.stop_fraction:.0%} of each run's steps: "
            f"{len(stopped_runs(spec))} runs stopped, {len(stop_check_runs(spec))} checks "
            "trained to the end (StudySpec.stop_checks)")
    data = prepare_data(spec, out, log)
    rounds = None
    if design is not None:
        run_dirs, rounds = _grow(design, data, out, args.workers, log)
    else:
        run_dirs = _train(spec, runs, data, out, progress, workers, flops)
    report = export_and_report(spec, run_dirs, data, out, log, design_rounds=rounds)
    first_set = spec.evaluation.eval_sets[0]
    log(_summary(report, {pair: sets[first_set] for pair, sets in data.irreducible_loss.items()}))
    if spec.early_stop.stop_fraction < 1.0 or spec.branches.branch_checks:
        log(compute_saved(spec, runs, progress))
    if spec.verification.verify:
        report = _verify(spec, out, data, run_dirs, args.workers, log)
    log(f"study {spec.name}: finished in {time.monotonic() - start:.0f} s; report: "
        f"{getattr(report, 'markdown_path', out / 'report')}")
    return 0


def compute_saved(spec, runs, progress: StudyProgress | None) -> str:
    """One line: the run-steps an early stop left untrained (`spec.stop_savings`) of the full
    plan's, and the training-step time they would have cost at this invocation's measured step
    time of each size (`StudyProgress.cost_per_run_step`, a lower bound of the wall; not
    measured, or no `progress`: not estimated)."""
    savings = stop_savings(spec, runs)
    saved = sum(v[0] for v in savings.values())
    total = sum(v[1] for v in savings.values())
    costs = {size: progress.cost_per_run_step(size) if progress else None for size in savings}
    wall = sum(v[0] * (costs[size] or 0.0) for size, v in savings.items())
    unmeasured = sorted(size for size, v in savings.items() if v[0] and not costs[size])
    how = " and ".join(w for w, on in (("the early stop", spec.early_stop.stop_fraction < 1.0),
                                          ("fewer branches", spec.branches.branch_checks)) if on)
    text = (f"compute saved by {how or 'nothing'}: {saved:,} of {total:,} run-steps not trained "
            f"({saved / max(total, 1):.0%})")
    if wall:
        text += (f", ≥ {wall / 60:.1f} min of training-step time at this run's measured step "
                 "time (evaluations and compilation not counted)")
    if unmeasured and progress:
        text += f" (sizes {', '.join(unmeasured)} not timed in this invocation: left out)"
    sections = [s for s, on in (("Early stop", spec.early_stop.stop_fraction < 1.0),
                                ("L(N, D) across weights (points predicted)",
                                 spec.branches.branch_checks)) if on]
    return text + "; report: " + ", ".join(sections)


def _training_progress(spec, runs, workers_arg) -> tuple[StudyProgress, int, dict]:
    """(progress display, worker processes, FLOPs per step by size) for training `runs`."""
    flops = step_flops(spec, runs)
    groups = queue_order(spec, runs, flops)
    workers = default_workers(len(groups)) if workers_arg == "auto" else workers_arg
    workers = max(1, min(workers, len(groups)))
    if workers == 1:
        groups = group_runs(spec, runs)
    progress = StudyProgress(progress_entries(spec, runs), groups=training_groups(spec, groups),
                             step_flops=flops, workers=workers)
    return progress, workers, flops


def _train(spec, runs, data, out: Path, progress, workers: int, flops) -> list[Path]:
    """Train the unfinished runs of `runs` (in worker processes when `workers` > 1)."""
    if workers > 1:
        return run_parallel(spec, runs, out, progress, workers=workers, step_flops=flops)
    enable_compilation_cache(out / "cache" / "jax")
    return run_all(spec, runs, data, out / "runs", progress)


def _grow(design, data, out: Path, workers_arg, log) -> tuple[list[Path], list[dict]]:
    """An adaptive study's training (mnmt.study.adaptive): the rounds, then the held-out runs;
    (every run directory trained, with its branches', the round records)."""
    spec = design.spec

    def train(batch: list) -> None:
        progress, workers, flops = _training_progress(spec, batch, workers_arg)
        _train(spec, batch, data, out, progress, workers, flops)

    eval_set = spec.evaluation.eval_sets[0]
    held = adaptive.fixed_runs(spec)[1]
    rounds = adaptive.grow(design, out, train, design.study_measure(out / "runs", eval_set),
                           design.study_interval(out / "runs", eval_set), log)
    if held:
        train(held)  # nothing left to train where round 0 trained them
    return [out / "runs" / r.run_id for r in grown_runs(design, rounds)], rounds


def grown_runs(design: adaptive.AdaptiveDesign, rounds: Sequence[dict]) -> list[RunSpec]:
    """The runs of an adaptive study, with their branches: the seed repeats, the design runs its
    recorded rounds chose and the held-out runs (what its report fits and holds out)."""
    repeats, held = adaptive.fixed_runs(design.spec)
    return with_branches(design.spec, [*repeats, *adaptive.trained_runs(design, rounds), *held])


def _verify(spec, out: Path, data, design_dirs: list[Path], workers_arg, log, *,
            size: str | None = None, seeds: int | None = None):
    """The verification stage (mnmt.study.verify): train the report's recommendation and the
    baselines, then write the report again with them (never fitted)."""
    runs, plan = verify.plan(spec, out, size=size, seeds=seeds)
    verify.check_trained_weights(runs, out / "runs")
    train_spec = verify.training_spec(spec)
    progress, workers, flops = _training_progress(train_spec, runs, workers_arg)
    progress.message(f"verification: {len(plan['mixtures'])} mixtures "
                     f"({', '.join(plan['mixtures'])}) x {len(plan['seeds'])} seeds at "
                     f"{plan['size']}: {len(runs)} runs")
    dirs = _train(train_spec, runs, data, out, progress, workers, flops)
    report = export_and_report(spec, [*design_dirs, *dirs], data, out, log, verification=plan,
                               design_rounds=adaptive.read_rounds(out))  # [] for a fixed grid
    log(verify.summary(_fits_json(report).get("mixture", {}).get("verification")))
    return report


def _fits_json(report) -> dict:
    try:
        return json.loads(Path(report.json_path).read_text(encoding="utf-8"))
    except (OSError, ValueError, AttributeError):
        return {}


def cmd_verify(args: argparse.Namespace) -> int:
    """Train and report the verification of a finished study's recommendation."""
    out = Path(args.out)
    spec = verify.recorded_spec(out)
    prepare_out_dir(out, spec, command="verify")
    if spec.adaptive.adaptive:  # the runs its rounds chose, not the whole pool
        rounds = adaptive.read_rounds(out)
        if not rounds or not rounds[-1].get("stop"):
            raise UsageError(f"{adaptive.rounds_path(out)}: the adaptive study has not stopped "
                             "growing; finish it with `mnmt-study run` first")
        runs = grown_runs(adaptive_objective.adaptive_design(spec), rounds)
    else:
        runs = with_branches(spec, expand(spec))
    unfinished = [r.run_id for r in runs if not run_complete(spec, r, out / "runs")]
    if unfinished:
        raise UsageError(f"{out}: {len(unfinished)} of the study's runs are not finished (e.g. "
                         f"{unfinished[0]}); finish them with `mnmt-study run` first")

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    data = prepare_data(spec, out, log)
    _verify(spec, out, data, [out / "runs" / r.run_id for r in runs], args.workers, log,
            size=args.size, seeds=args.seeds)
    return 0


def step_flops(spec, runs) -> dict[str, float]:
    """Training FLOPs per step of each size of the study (for the ETA of sizes not run yet)."""
    out = {}
    for size in {run.size for run in runs}:
        try:
            out[size] = design_pool.size_step_flops(spec, size)
        except ValueError:
            continue
    return out


def cmd_run_one(args: argparse.Namespace) -> int:
    """Train one run of a study (what each host of a remote launch executes)."""
    spec = load_spec(args.study, args.preset, args.gin)
    runs = {r.run_id: r for r in expand(spec)}
    if args.run not in runs:
        raise UsageError(f"--run {args.run!r} is not a run of study {spec.name!r}; see `mnmt-study plan`")
    out = Path(args.out)
    # Shared: every host of a multi-host run and every task of a SLURM job array runs `run-one`
    # in this OUT at once; a `run` or `prepare` here is refused while they hold it.
    prepare_out_dir(out, spec, command="run-one", shared=True)

    progress = StudyProgress(progress_entries(spec, [runs[args.run]]))
    # every host reads the caches `mnmt-study prepare` built; none builds them at once
    data = prepare_data(spec, out, progress.message, build_caches=False)
    enable_compilation_cache(out / "cache" / "jax")
    run_all(spec, [runs[args.run]], data, out / "runs", progress)
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    """Prepare a study's data only (vocabulary, tasks, token caches, L∞) — once, before a
    multi-host launch."""
    spec = load_spec(args.study, args.preset, args.gin)
    out = Path(args.out)
    prepare_out_dir(out, spec, command="prepare")
    prepare_data(spec, out, lambda text: print(text, file=sys.stderr))
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
    for pair, d in sorted(report.regime.get("pairs", {}).items()):
        if "l_inf_fit" in d:
            truth = d.get("l_inf_true")
            gap = f" (true {truth:.3f}, {100 * (d['l_inf_fit'] / truth - 1):+.1f} %)" if truth else ""
            lines.append(f"  {pair}: L_inf {d['l_inf_fit']:.3f} from the "
                         f"{d.get('l_inf_source', 'fit')}{gap}")
    from fitting.report.sections.regime import CONVERGED_DROP, METHOD_BRANCHES  # noqa: PLC0415

    regime = report.regime
    if regime.get("verdict") and regime.get("method") == METHOD_BRANCHES:
        lines.append(f"  regime: {regime['verdict']} ({regime.get('n_still_dropping')} of "
                     f"{regime.get('n_curves')} cooled-down curves still dropping ≥ "
                     f"{100 * CONVERGED_DROP:g} % per doubling of D; median "
                     f"{100 * regime['median_cooled_drop_per_doubling']:.2f} %)")
    elif regime.get("verdict"):
        lines.append(f"  regime: {regime['verdict']} ({regime.get('n_still_dropping')} "
                     f"of {regime.get('n_curves')} learning curves still dropping)")
    for entry in report.heldout:
        if entry.get("primary", True):
            lines.append(f"  held out {entry['run']} {entry['pair']}: predicted "
                         f"{entry['predicted']:.4f}, measured {entry['measured']:.4f} "
                         f"({100 * entry['error']:+.1f} %, {entry['law']})")
    for section, reason in report.skipped.items():
        lines.append(f"  skipped {section}: {reason}")
    for warning in report.warnings:
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    """List the study's runs or, with `--mesh`, plan its sizes' sharding by compilation."""
    spec = load_spec(args.study, args.preset, args.gin)
    if args.mesh is not None:
        return mesh_plan.plan_command(
            spec, args.mesh, device_memory_gib=args.device_memory_gib,
            peak_tflops=args.peak_tflops, devices=args.devices, timeout_s=args.compile_timeout,
            as_json=args.json, log=lambda text: print(text, file=sys.stderr, flush=True),
            rules=args.rules)
    for option, value in (("--device-memory-gib", args.device_memory_gib),
                          ("--devices", args.devices), ("--rules", args.rules)):
        if value is not None:
            raise UsageError(f"{option}: only with --mesh DATAxMODEL (a sharding plan)")
    runs = expand(spec)
    if args.json:
        print(json.dumps(_plan_json(spec, runs), indent=1))
        return 0
    trained = {"runs": 0, "branches": 0}
    stopped = stopped_runs(spec)
    for run in with_branches(spec, runs):
        first, last = spec.run_steps(run)
        trained["branches" if run.parent else "runs"] += last - first
        print(_plan_line(run, first, last) + _stop_note(spec, run, stopped))
    n_branches = sum(len(branch_runs(spec, run)) for run in runs)
    cost = f"# {len(runs)} runs, {trained['runs']:,} steps"
    if n_branches:
        cost += (f"; {n_branches} cool-down branches, {trained['branches']:,} steps "
                 f"(+{100 * trained['branches'] / trained['runs']:.0f} % steps)")
    roles = Counter(mixture_design.role(run) for run in runs)
    cost += "; " + ", ".join(f"{roles[r]} {r}" for r in _ROLES if roles[r])
    print(cost, file=sys.stderr)
    if stopped:
        print(f"# early stop at {spec.early_stop.stop_fraction:.0%}: {len(stopped)} runs stopped, "
              f"{len(stop_check_runs(spec))} checks; "
              + compute_saved(spec, runs, None).split("; report")[0],
              file=sys.stderr)
    if spec.branches.branch_checks:
        print(f"# fewer branches: {sum(len(branch_runs(spec, r)) for r in runs)} trained (the "
              f"middle branch of {len(branch_check_runs(spec))} check runs), the other budgets "
              "predicted from each run's curve; "
              + compute_saved(spec, runs, None).split("; report")[0], file=sys.stderr)
    if spec.adaptive.adaptive:
        print(f"# {adaptive.plan_text(adaptive_objective.adaptive_design(spec))}: the grid above "
              "is what "
              "its rounds pick from, not what trains (`mnmt-study design-plan` shows the rounds)",
              file=sys.stderr)
    if spec.train_overrides:
        print(f"# training options beyond the defaults: "
              f"{train_options.describe(spec.train_overrides)}", file=sys.stderr)
    return 0


def _plan_json(spec, runs) -> dict:
    """`plan --json` without --mesh: the study's runs (with their branches) and the training
    options it sets beyond the defaults (`StudySpec.train_overrides`, by TrainConfig path)."""
    rows = []
    for run in with_branches(spec, runs):
        first, last = spec.run_steps(run)
        rows.append({"run_id": run.run_id, "size": run.size, "weights": run.weights,
                     "seed": run.seed, "first_step": first, "steps": last,
                     "heldout": run.heldout, "parent": run.parent or None,
                     "role": mixture_design.role(run)})
    return {"study": spec.name, "runs": rows,
            "train_options": dict(spec.train_overrides)}


_ROLES = (mixture_design.ROLE_DESIGN, mixture_design.ROLE_BASELINE, mixture_design.ROLE_HELDOUT)


def _stop_note(spec, run, stopped) -> str:
    """`plan`'s note on a run under an early stop: stopped (of how many steps) or a check."""
    if spec.early_stop.stop_fraction >= 1.0 or run.parent or run.heldout:
        return ""
    if run.run_id in stopped:
        return f"\tstopped early (of {spec.steps_for(run.size)} steps; end predicted)"
    return "\tcheck (trained to the end)"


def _plan_line(run, first: int, last: int) -> str:
    """One run of `plan`: id, size, weights, seed, last step, what it is and its role."""
    weights = " ".join(f"{pair}={w:.2f}" for pair, w in run.weights.items())
    if run.parent:
        what = (f"\tcool-down branch of {run.parent}: from its step {first}, "
                f"{last - first} steps trained")
    else:
        what = "\theld out (predicted, never fitted)" if run.heldout else ""
    return (f"{run.run_id}\t{run.size}\t{weights}\tseed={run.seed}\tsteps={last}{what}"
            f"\trole={mixture_design.role(run)}")


def cmd_design_pool(args: argparse.Namespace) -> int:
    """Write the study's costed candidate runs for `mnmt-fit design --pool`."""
    spec = load_spec(args.study, args.preset, args.gin)
    try:
        fractions = [float(f) for f in args.fractions.split(",") if f.strip()]
        rows = design_pool.pool_rows(spec, fractions, peak_tflops=args.peak_tflops, mfu=args.mfu)
    except ValueError as err:
        raise UsageError(f"design-pool: {err}") from None
    design_pool.write_pool(rows, args.csv)
    hours = sum(r["accelerator_hours"] for r in rows)
    print(f"{args.csv}: {len(rows)} candidate runs, {hours:,.1f} accelerator-hours in all "
          f"at {args.peak_tflops:g} TFLOP/s × MFU {args.mfu:g}", file=sys.stderr)
    return 0


def cmd_design_plan(args: argparse.Namespace) -> int:
    """Print an adaptive study's first rounds before any run: runs, FLOPs, accelerator-hours and
    the interval of E predicted after each (mnmt.study.adaptive.plan_rounds)."""
    spec = load_spec(args.study, args.preset, [*args.gin, "StudySpec.adaptive=True"])
    try:
        prior = json.loads(args.prior) if args.prior else None
        if prior is not None and not isinstance(prior, dict):
            raise ValueError("--prior: expected a JSON object such as '{\"E\": 1.6}'")
        if spec.adaptive.adaptive_target != "E":
            raise ValueError("a plan before any run is made for an 'E' study only "
                             "(StudySpec.adaptive_target = 'E'); an 'objective' study has no "
                             "prior for its mixture law")
        design = adaptive.AdaptiveDesign(spec)
        rounds = adaptive.plan_rounds(design, args.rounds, args.noise, prior)
    except (ValueError, StudyError) as err:
        raise UsageError(f"design-plan: {err}") from None
    for r in rounds:
        r["accelerator_hours"] = design_pool.accelerator_hours(r["cost"], args.peak_tflops, args.mfu)
    if args.json:
        print(json.dumps({"pair": design.pair, "budget": design.budget, "rounds": rounds},
                         indent=1))
        return 0
    print(f"{spec.name}: {design.pair}'s E, budget {design.budget:.3g} FLOPs "
          f"({design_pool.accelerator_hours(design.budget, args.peak_tflops, args.mfu):,.0f} "
          f"accelerator-hours at {args.peak_tflops:g} TFLOP/s × MFU {args.mfu:g}); prior "
          f"{args.prior or adaptive.PLAN_PRIOR}, noise {args.noise:.1%}")
    print("round\taccelerator-hours\tof budget (after)\tE's 95 % interval after (log)\truns")
    for r in rounds:
        width = "–" if r["relative"] is None else f"±{r['relative']:.1%}"
        print(f"{r['round']}\t{r['accelerator_hours']:,.0f}\t{r['spent'] / design.budget:.0%}\t"
              f"{width}\t{len(r['chosen'])}: {', '.join(r['chosen'][:6])}"
              + (", …" if len(r["chosen"]) > 6 else ""))
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    """One line per preset: name, scale, runs, sizes, mixtures, steps and what it studies (the
    study file's first comment line). The default preset is its study file: one line, `default`,
    naming the file's preset name as its alias."""
    for name in preset_names():
        if name == DEFAULT_FILE:
            continue
        spec = preset(name)
        about = PRESET_SUMMARIES.get(name) or study_summary(preset_file(name))
        if name == DEFAULT_PRESET:
            about += f" (alias: {DEFAULT_FILE})"
        scale = "paper" if spec.tasks else "cpu"
        mixtures = mixture_count(spec)
        print(f"{name}\t{scale}\t{len(expand(spec))} runs\tsizes={','.join(spec.sizes)}"
              f"\tmixtures={mixtures}\tseeds={len(spec.seeds)}"
              f"\tsteps={spec.schedule.train_steps}\t{about}")
    return 0


def add_study_arguments(parser: argparse.ArgumentParser, *,
                        out_required: bool = False) -> argparse.ArgumentParser:
    """The arguments that name a study: a gin file or `--preset`, `--gin` overrides (and `--out`
    when `out_required`: a directory visible to every host). Shared with subcommand plugins."""
    parser.add_argument("study", nargs="?", help="study gin file (t5x_configs/studies/*.gin)")
    parser.add_argument("--preset", help=f"built-in study ({', '.join(sorted(PRESETS))}) or the "
                                         "name of a shipped study file, e.g. cpu-chen-2dir "
                                         "(`mnmt-study presets` lists them; default: "
                                         f"{DEFAULT_PRESET}, the main job)")
    parser.add_argument("--gin", action="append", default=[], metavar="NAME=VALUE",
                        help="gin binding, e.g. --gin StudySpec.train_steps=100 or a training "
                             "option of every run, --gin TrainConfig.label_smoothing=0.1 "
                             "(repeatable)")
    if out_required:
        parser.add_argument("--out", required=True, help="output directory visible to every host")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mnmt-study", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_text in (
        ("run", cmd_run, "train, export, fit and report a study"),
        ("plan", cmd_plan, "list a study's runs without training"),
    ):
        p = add_study_arguments(sub.add_parser(name, help=help_text))
        if name == "plan":
            add_mesh_plan_arguments(p)
        if name == "run":
            p.add_argument("--out", default="mnmt_study_out", help="output directory (default: %(default)s)")
            p.add_argument("--workers", default="auto", type=_workers_arg,
                           help="groups trained side by side, each in a process on its own CPU "
                                "core (mnmt.study.workers); 'auto' (default): one per available "
                                "core on a CPU host, 1 on an accelerator")
        p.set_defaults(func=func)
    for name, func, help_text in (
        ("prepare", cmd_prepare, "prepare a study's data only: tasks and their token caches "
                                 "(before a multi-host launch)"),
        ("run-one", cmd_run_one, "train one run of a study (used by remote launches)"),
    ):
        p = add_study_arguments(sub.add_parser(name, help=help_text), out_required=True)
        p.set_defaults(func=func)
        if name == "run-one":
            p.add_argument("--run", required=True, help="run id (see `mnmt-study plan`)")
    p = sub.add_parser("verify", help="train the report's recommended K-pair mixture and the "
                                      "baselines, and report measured against predicted")
    p.add_argument("out", help="the study's output directory (of a finished `mnmt-study run`)")
    p.add_argument("--size", help="model size of the verification runs; it must be the size "
                                  "the recommendation is for (default: StudySpec.verify_size, "
                                  "else the study's size with N = report_target_sizes[0])")
    p.add_argument("--seeds", type=int, help="seeds per mixture, at least 2 (default: "
                                             "StudySpec.verify_seeds)")
    p.add_argument("--workers", default="auto", type=_workers_arg,
                   help="as for `run` (default: %(default)s)")
    p.set_defaults(func=cmd_verify)
    for plugin in entry_points(group=COMMAND_PLUGINS):  # e.g. `launch` from the launch package
        plugin.load()(sub)
    p = add_study_arguments(sub.add_parser(
        "design-pool", help="the study's candidate runs (sizes × weights × step fractions) "
                            "with their FLOPs and accelerator-hours, for `mnmt-fit design`"))
    p.add_argument("--fractions", default="0.25,0.5,1",
                   help="fractions of the study's steps, comma-separated (default: %(default)s)")
    add_cost_arguments(p)
    p.add_argument("--csv", required=True, help="write the pool to this CSV file")
    p.set_defaults(func=cmd_design_pool)
    p = add_study_arguments(sub.add_parser(
        "design-plan", help="an adaptive study's first rounds before any run is trained: "
                            "runs, accelerator-hours and E's predicted interval after each"))
    p.add_argument("--rounds", type=int, default=4, help="rounds after round 0 (default: %(default)s)")
    p.add_argument("--noise", type=float, default=0.01,
                   help="relative noise of a run's loss (default: %(default)g)")
    p.add_argument("--prior", help="JSON object of the law's prior point, keys E, alpha, beta, "
                                   "A, B in the design's scaled units (default: "
                                   f"{json.dumps(adaptive.PLAN_PRIOR)})")
    add_cost_arguments(p)
    p.add_argument("--json", action="store_true", help="print the rounds as JSON")
    p.set_defaults(func=cmd_design_plan)
    p = sub.add_parser("presets", help="list the built-in presets")
    p.set_defaults(func=cmd_presets)
    return parser


def add_mesh_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """`plan`'s sharding-plan options (mnmt.study.mesh_plan)."""
    parser.add_argument("--mesh", metavar="DATAxMODEL",
                        help="plan each size's sharding on a (data, model) mesh, e.g. 16x4: "
                             "compile one training step on DATA*MODEL simulated CPU devices and "
                             "report per-device memory, FLOPs and a step-time bound")
    parser.add_argument("--device-memory-gib", type=float, metavar="G",
                        help="memory of one device in GiB, what `fits` compares against "
                             "(required with --mesh)")
    parser.add_argument("--peak-tflops", type=float, default=mesh_plan.DEFAULT_PEAK_TFLOPS,
                        metavar="T",
                        help="peak TFLOP/s of one device for the step-time bound and MFU "
                             "(default: %(default)g, a TPU v4 chip's bf16 peak)")
    parser.add_argument("--devices", type=int, metavar="N",
                        help="check that the mesh uses exactly N devices (default: DATA*MODEL)")
    parser.add_argument("--compile-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="stop compiling a size after this long and report it as not "
                             "planned (default: %(default)g)")
    parser.add_argument("--rules", metavar="standard|fsdp",
                        help="logical-axis rule set to plan with, overriding the study's "
                             "StudySpec.partitioning_rules: 'standard' (T5X's 1-D model "
                             "parallelism, parameters replicated over data) or 'fsdp' "
                             "(parameters and optimizer slots also split over data)")
    parser.add_argument("--json", action="store_true",
                        help="print JSON: the sharding plans as one list (with --mesh), "
                             "else the runs and the training options the study sets")


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """--peak-tflops and --mfu: the rate accelerator-hours are counted at."""
    parser.add_argument("--peak-tflops", type=float, default=mesh_plan.DEFAULT_PEAK_TFLOPS,
                        help="peak TFLOP/s of one device (default: %(default)g, a TPU v4 chip)")
    parser.add_argument("--mfu", type=float, default=design_pool.DEFAULT_MFU,
                        help="model-FLOPs utilisation for accelerator-hours (default: %(default)g)")


def _workers_arg(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a positive integer, got {text!r}")
    return value


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
    except lock.DirectoryInUse as err:
        print(f"mnmt-study: error: {err}", file=sys.stderr)
        return EXIT_IN_USE
    except RunStopped as stopped:
        if stopped.status == "unreadable":  # a run file that is not valid JSON: one line
            print(f"mnmt-study: error: {stopped.message}", file=sys.stderr)
            return EXIT_USAGE
        if stopped.status == "failed":  # a worker process failed; its traceback is above
            print(f"mnmt-study: error: {stopped}", file=sys.stderr)
            return 1
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
    finally:
        lock.release_all()  # a process exiting releases its locks anyway; this is for callers


if __name__ == "__main__":
    sys.exit(main())
