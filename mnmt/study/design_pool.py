"""A study's candidate runs, costed, for ``mnmt-fit design``: what could be trained next.

One row per zoo size of the study × mixture weights × a fraction of the study's steps: the
size's non-embedding parameters ``n``, the target tokens it would train on (``tokens``, and each
pair's share ``d_<pair>``), its training FLOPs from the zoo's exact per-example count
(:func:`mnmt.models.accounting.train_flops_per_example`, the cost ``mnmt-study plan`` uses) and the
accelerator-hours those take at a peak rate and a model-FLOPs utilisation. ``mnmt-fit design
TABLE --pool POOL.csv --columns d=d_en-de`` reads it as it is.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from mnmt.study.expansion import RunSpec, branch_runs, expand
from mnmt.study.spec import StudySpec

__all__ = ["accelerator_hours", "non_embedding", "pool_rows", "rows_per_step", "run_flops",
           "size_step_flops", "tokens_per_step", "write_pool"]

#: Model-FLOPs utilisation assumed for accelerator-hours (a T5X-scale TPU run reaches 0.3–0.5).
DEFAULT_MFU = 0.4


def pool_rows(spec: StudySpec, fractions: Sequence[float] = (0.25, 0.5, 1.0), *,
              peak_tflops: float, mfu: float = DEFAULT_MFU) -> list[dict]:
    """The candidate runs of ``spec`` (its sizes × its weights × ``fractions`` of its steps)."""
    if not fractions or any(not 0 < f <= 4 for f in fractions):
        raise ValueError(f"step fractions must lie in (0, 4], got {list(fractions)}")
    if peak_tflops <= 0 or not 0 < mfu <= 1:
        raise ValueError(f"need peak_tflops > 0 and 0 < mfu <= 1, got {peak_tflops}, {mfu}")
    step_tokens = tokens_per_step(spec)
    mixtures = {tuple(sorted(run.weights.items())) for run in expand(spec) if not run.heldout}
    out = []
    for size in spec.sizes:
        n = non_embedding(spec, size)
        step_flops = size_step_flops(spec, size)
        for weights in sorted(mixtures):
            for fraction in fractions:
                steps = max(1, round(fraction * spec.steps_for(size)))
                tokens = steps * step_tokens
                flops = steps * step_flops
                row = {"size": size, "n": n, "steps": steps, "tokens": tokens}
                row.update({f"w_{pair}": w for pair, w in weights})
                row.update({f"d_{pair}": w * tokens for pair, w in weights})
                row.update({"flops": flops, "cost": flops,
                            "accelerator_hours": accelerator_hours(flops, peak_tflops, mfu)})
                out.append(row)
    return out


def accelerator_hours(flops: float, peak_tflops: float, mfu: float = DEFAULT_MFU) -> float:
    """Device-hours that ``flops`` take at ``peak_tflops`` per device and utilisation ``mfu``."""
    return flops / (peak_tflops * 1e12 * mfu) / 3600


def rows_per_step(spec: StudySpec) -> int:
    """Packed rows of one training step of the study (:func:`mnmt.models.accounting.rows_per_step`)."""
    from mnmt.models import accounting  # light: no jax

    return accounting.rows_per_step(spec.schedule.batch_size, spec.schedule.batch_tokens,
                                    spec.lengths["targets"])


def tokens_per_step(spec: StudySpec) -> int:
    """Target tokens of one training step (rows × the targets' feature length)."""
    return rows_per_step(spec) * spec.lengths["targets"]


def non_embedding(spec: StudySpec, size: str) -> int:
    """Non-embedding parameters of the zoo's ``size`` at the study's vocabulary."""
    from mnmt.models import accounting, zoo  # light: no jax

    return accounting.param_counts(zoo.get_config(size, spec.vocab_size)).non_embedding


def size_step_flops(spec: StudySpec, size: str) -> float:
    """Training FLOPs of one step of a run of ``size``: rows per step × the zoo's exact
    per-example count (:func:`mnmt.models.accounting.train_flops_per_example`). ValueError for a
    size the zoo does not know."""
    from mnmt.models import accounting, zoo  # light: no jax

    lengths = spec.lengths
    return rows_per_step(spec) * accounting.train_flops_per_example(
        zoo.get_config(size, spec.vocab_size), lengths["inputs"], lengths["targets"])


def run_flops(spec: StudySpec, run: RunSpec, step_flops: float) -> float:
    """Training FLOPs of ``run`` with its cool-down branches (a branch costs its cool-down
    steps only: it leaves from the parent's checkpoint)."""
    steps = spec.steps_for(run.size) + sum(b.cooldown_steps for b in branch_runs(spec, run))
    return steps * step_flops


def write_pool(rows: list[dict], path: str | Path) -> Path:
    """The rows as a CSV at ``path`` (written to a temporary name, then renamed)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)
    return path
