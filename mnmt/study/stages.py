"""The stages of a study that `mnmt-study` chains: load, output directory, data, export + report.

Each stage is resumable: the output directory records its study (a different one is refused),
the vocabulary and exact irreducible losses are written once, and export and report are redone
from the run directories. Loading a study is `mnmt.study.loading`, the data stage
`mnmt.study.data_stage`; their public names are importable from here too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fitting.data import io
from fitting.data.io import write_text_atomic as atomic_write  # the one atomic text write
from mnmt.study import lock
from mnmt.study.data_stage import (
    decoder_only_sizes,
    needs_separator,
    prepare_caches,
    prepare_data,
    study_domains,
    study_task_arguments,
)
from mnmt.study.loading import (
    UsageError,
    check_train_options,
    load_spec,
    parse_bindings,
    preset_names,
    repo_root,
    study_files,
    study_summary,
)
from mnmt.study.spec import StudySpec, expand

__all__ = [
    "STOP_FIELDS", "STUDY_FILE", "UsageError", "atomic_write", "check_train_options", "decoder_only_sizes",
    "enable_compilation_cache", "export_and_report", "load_spec", "mixture_constraints",
    "needs_separator", "parse_bindings", "prepare_caches", "prepare_data", "prepare_out_dir",
    "preset_names", "repo_root", "spec_json", "study_domains", "study_files", "study_summary",
    "study_task_arguments",
]

STUDY_FILE = "study.json"
#: StudySpec fields that may change between invocations in one OUT: an early stop only decides
#: how far each run trains (a stopped run is a prefix of the full run, and resumes to its end),
#: and fewer branches only which branches train (the others can be trained later)
STOP_FIELDS = ("stop_fraction", "stop_checks", "branch_checks")


def prepare_out_dir(out: Path, spec: StudySpec, *, command: str = "run",
                    shared: bool = False) -> None:
    """Create OUT (if needed), lock it, check it is writable, and refuse one that holds a
    different study (`STOP_FIELDS` may differ: the record is rewritten).

    The lock (`mnmt.study.lock`, exclusive unless `shared`) is taken before anything is written
    in OUT and kept until the command ends; `lock.DirectoryInUse` when another process holds it.
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"output path is not a directory: {out}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock.acquire(out, command, shared=shared)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"cannot write to output directory {out}: {err.strerror or err}") from err
    record = out / STUDY_FILE
    current = spec_json(spec)
    if record.exists():
        try:
            previous = json.loads(record.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UsageError(f"{record}: not valid JSON ({err}); move it away or use another --out") from err
        if not isinstance(previous, dict):
            raise UsageError(f"{record}: expected a JSON object (a study record), got "
                             f"{type(previous).__name__}; move it away or use another --out")
        # a field added to StudySpec after the record was written has its default there
        defaults = spec_json(StudySpec())
        differing = sorted(k for k in set(previous) | set(current)
                           if previous.get(k, defaults.get(k)) != current.get(k))
        if any(k not in STOP_FIELDS for k in differing):
            raise UsageError(
                f"{out} holds a different study (fields differ: {', '.join(differing)}); "
                "use another --out to keep both"
            )
        if not differing:
            return  # else: the same study, stopped at another point: recorded anew
    atomic_write(record, json.dumps(current, indent=2, sort_keys=True) + "\n")


def spec_json(spec: StudySpec) -> dict:
    """The study as the JSON object `STUDY_FILE` records."""
    return json.loads(json.dumps(spec.flat_fields()))


def export_and_report(spec: StudySpec, run_dirs: list[Path], data, out: Path, log,
                      verification: dict | None = None, design_rounds: list[dict] | None = None):
    """Stages 3 and 4: the tidy table, the fits and the report. `verification`: the plan of
    the verification runs among `run_dirs` (`mnmt.study.verify.plan`), reported, never fitted;
    `design_rounds`: an adaptive study's round records (`mnmt.study.adaptive`), reported."""
    from fitting.data.rundirs import collect_runs  # noqa: PLC0415
    from fitting.data.tables import write_table  # noqa: PLC0415
    from fitting.report.predicted_budgets import BudgetPlan  # noqa: PLC0415
    from fitting.report.writer import (  # noqa: PLC0415  (matplotlib, only when reporting)
        ReportOptions,
        write_report,
    )

    table = collect_runs([str(d) for d in run_dirs])
    table_path = out / "metrics.csv"
    eval_set = spec.evaluation.eval_sets[0]
    try:  # a full disk: one line naming the file; the previous table and report stay whole
        write_table(table, str(table_path))
        log(f"export: {len(table)} rows from {len(run_dirs)} runs -> {table_path}")
        report = write_report(table, str(out / "report"), ReportOptions(
            ground_truth={pair: sets[eval_set]
                          for pair, sets in data.irreducible_loss.items()} or None,
            target_sizes=list(spec.report_target_sizes),
            title=f"Study {spec.name}",
            eval_set=eval_set,
            heldout_runs=[run.run_id for run in expand(spec) if run.heldout],
            mixture_constraints=mixture_constraints(spec),
            verification=verification,
            design_rounds=tuple(design_rounds or ()),
            branch_plan=BudgetPlan(tuple(spec.branches.cooldown_branches),
                                   spec.branches.branch_cooldown_fraction
                                   or spec.schedule.cooldown_fraction)
            if spec.branches.branch_checks else None))
    except io.NoSpaceError as err:
        raise UsageError(str(err)) from err
    return report


def mixture_constraints(spec: StudySpec) -> dict | None:
    """What the K-pair recommendation (fits.json `mixture`) may not do: repeat a capped pair's
    data more often than `StudySpec.epoch_cap` (0: the largest UniMax cap) within one run's
    budget of examples (`mixture_design.budget_examples`); the same cap bounds the mixture
    laws' domain; and the pairs' importance (`StudySpec.mixture_preferences`). None without
    3 pairs or more, or without either."""
    from mnmt.study import mixture_design  # noqa: PLC0415

    cap = spec.design.epoch_cap or max(spec.design.unimax_epochs, default=0.0)
    out: dict = {"preferences": mixture_design.preferences(spec)} \
        if spec.design.mixture_preferences else {}
    if len(spec.pairs) < 3 or not (out or cap and spec.data_caps):
        return None
    if cap and spec.data_caps:
        out.update(budget_examples=mixture_design.budget_examples(spec), epoch_cap=float(cap))
    return out


def enable_compilation_cache(cache_dir: Path) -> None:
    """Persist XLA executables under `cache_dir`: runs of one size at different weights (and a
    re-run of the study) compile the same programs, so only the first pays for compilation.
    A ``JAX_COMPILATION_CACHE_DIR`` set in the environment wins (one cache for several studies;
    the test suite shares one this way)."""
    import jax

    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        cache_dir.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
