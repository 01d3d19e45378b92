"""Expansion of a study into its runs: the grid of sizes x mixtures x seeds as `RunSpec`s
(`expand`), each run's cool-down branches, and the groups of runs trained together.

Run ids are stable and readable (`run_id`): they name a run's directory under OUT/runs and its
row in study.json, so a resumed study finds its finished runs again.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from mnmt.study import mixture_design  # light: numpy, configuration only
from mnmt.study.spec_checks import BRANCH_FIELDS, StudyError, mixture_weights
from mnmt.training import branches  # light: configuration only

# mnmt.study.spec.StudySpec, not imported: spec.py imports this module.
StudySpec = Any


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run of a study."""

    run_id: str
    size: str
    weights: dict[str, float]  # pair -> sampling weight (sums to 1)
    seed: int
    heldout: bool = False  # trained, never fitted: the report predicts it (StudySpec.heldout)
    # How the weights were chosen: "" (explicit), "T5" (temperature), "os5", or a design's tag
    # ("only-en-de", "uniform", "unimax1", "dir0", "hold0"; mnmt.study.mixture_design).
    mixture: str = ""
    # A cool-down branch: its parent's run id, the step it leaves from and its cool-down steps.
    parent: str = ""
    branch_step: int = 0
    cooldown_steps: int = 0

    @property
    def trained_pairs(self) -> list[str]:
        return [pair for pair, w in self.weights.items() if w > 0]


def size_weights(spec: StudySpec) -> list[tuple[str, dict[str, float]]]:
    """The mixtures of `spec.design.temperatures` and `spec.design.oversampling`: (tag, pair ->
    weight), the weights computed from `spec.data_caps` (Chen et al. 2023 §4.2; Caillaut et al.
    2024 §3.1)."""
    from fitting.data.sampling import oversampling_weights, temperature_weights  # numpy only

    caps = dict(spec.data_caps)
    design = spec.design
    sizes = [float(caps[pair]) for pair in spec.pairs] \
        if design.temperatures or design.oversampling else []
    out = []
    for T in spec.design.temperatures:
        w = temperature_weights(sizes, float(T))
        out.append((f"T{float(T):g}", dict(zip(spec.pairs, map(float, w), strict=True))))
    for t in spec.design.oversampling:
        w = oversampling_weights(sizes, float(t))
        out.append((f"os{float(t):g}", dict(zip(spec.pairs, map(float, w), strict=True))))
    return out


def run_id(size: str, weights: dict[str, float], seed: int, mixture: str = "") -> str:
    """Stable, readable run id: `mini-2_p0.50_s0` for two pairs, `mini-2_w0.20-0.30-0.50_s0` for
    K, `mini-2_T5_s0` / `mini-2_dir3_s0` for a mixture named by how its weights were chosen."""
    values = list(weights.values())
    if mixture:
        tag = mixture
    elif len(values) == 2:
        tag = f"p{values[0]:.2f}"
    else:
        tag = "w" + "-".join(f"{v:.2f}" for v in values)
    return f"{size}_{tag}_s{seed}"


def mixture_count(spec: StudySpec) -> int:
    """Mixtures trained at every size and seed and fitted: explicit weights, size-based and
    design ones (held-out mixtures not included), as `expand` builds them."""
    return len(spec.weights) + len(mixture_design.fitted_mixtures(spec, size_weights))


def heldout_seeds(spec: StudySpec) -> list[int]:
    """The seeds of each `StudySpec.heldout` run: `spec.heldout_seeds` of them, the study's
    `seeds` in order, then the integers after the largest (seeds (0,) and 2 held-out seeds: 0, 1).
    From the second on they are seed replicates of the same run: the report measures its
    seed-to-seed sd from them (fitting.report.sections.heldout)."""
    seeds = list(dict.fromkeys(spec.seeds))[:spec.heldout_seeds]
    top = max(spec.seeds)
    seeds += range(top + 1, top + 1 + spec.heldout_seeds - len(seeds))
    return seeds


def expand(spec: StudySpec) -> list[RunSpec]:
    """The study's runs, smallest size first within each mixture (cheap results arrive early)."""
    runs = []
    for w, seed, size in itertools.product(spec.weights, spec.seeds, spec.sizes):
        weights = mixture_weights(spec.pairs, w)
        runs.append(RunSpec(run_id=run_id(size, weights, seed), size=size, weights=weights, seed=seed))
    for held, mixtures in ((False, mixture_design.fitted_mixtures(spec, size_weights)),
                           (True, mixture_design.heldout_design(spec))):
        for (tag, weights), seed, size in itertools.product(mixtures, spec.seeds, spec.sizes):
            runs.append(RunSpec(run_id=run_id(size, weights, seed, tag), size=size,
                                weights=weights, seed=seed, heldout=held, mixture=tag))
    for size, w in spec.heldout:
        weights = mixture_weights(spec.pairs, w)
        for seed in heldout_seeds(spec):
            runs.append(RunSpec(run_id=run_id(size, weights, seed), size=size, weights=weights,
                                seed=seed, heldout=True))
    for size, w, seed in spec.seed_repeats:
        weights = mixture_weights(spec.pairs, w)
        runs.append(RunSpec(run_id=run_id(size, weights, seed), size=size, weights=weights,
                            seed=seed))
    ids = [r.run_id for r in runs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise StudyError(f"StudySpec.weights/sizes/seeds/heldout/seed_repeats: the grid repeats runs "
                         f"{duplicates}")
    return runs


def _experiments(runs: list[RunSpec]) -> dict[tuple, list[RunSpec]]:
    """The design runs (not held out, not branches) by experiment: size, weights and tag; the
    seeds of one experiment together, in `expand` order."""
    out: dict[tuple, list[RunSpec]] = {}
    for run in runs:
        if not run.heldout and not run.parent:
            key = (run.size, tuple(sorted(run.weights.items())), run.mixture)
            out.setdefault(key, []).append(run)
    return out


def stop_check_runs(spec: StudySpec) -> list[str]:
    """The design runs trained to the end when the others stop early (`StudySpec.stop_checks`):
    by default one experiment per size with all its seeds — the middle of the size's
    seed-repeated experiments where it has any (they measure σ_seed, which needs their ends),
    else its middle mixture; ("all",) every design run; else the run ids given, each checked."""
    experiments = _experiments(expand(spec))
    design = [r.run_id for runs in experiments.values() for r in runs]
    if spec.early_stop.stop_checks == ("all",):
        return design
    if spec.early_stop.stop_checks:
        unknown = [r for r in spec.early_stop.stop_checks if r not in design]
        if unknown:
            raise StudyError(f"StudySpec.stop_checks: {unknown[0]!r} is not a design run of the "
                             f"study (held-out runs always train to the end); design runs: "
                             f"{', '.join(design[:12])}{', …' if len(design) > 12 else ''}")
        return list(dict.fromkeys(spec.early_stop.stop_checks))
    return _size_checks(experiments)


def _size_checks(experiments: dict[tuple, list[RunSpec]]) -> list[str]:
    """Per size, one experiment with all its seeds: the middle of the size's seed-repeated
    experiments where it has any (they measure σ_seed), else its middle mixture."""
    out = []
    for size in dict.fromkeys(key[0] for key in experiments):
        mine = [runs for key, runs in experiments.items() if key[0] == size]
        repeated = [runs for runs in mine if len(runs) > 1] or mine
        out += [r.run_id for r in repeated[len(repeated) // 2]]
    return out


_BRANCH_CHECKS: list[tuple[StudySpec, frozenset[str]]] = []  # the last spec asked


def branch_check_runs(spec: StudySpec) -> frozenset[str]:
    """The design runs whose middle branch is trained under `StudySpec.branch_checks` (one
    experiment per size with all its seeds, `_size_checks`); empty when it is False."""
    if not spec.branches.branch_checks:
        return frozenset()
    if _BRANCH_CHECKS and _BRANCH_CHECKS[0][0] is spec:
        return _BRANCH_CHECKS[0][1]
    out = frozenset(_size_checks(_experiments(expand(spec))))
    _BRANCH_CHECKS[:] = [(spec, out)]
    return out


_STOPPED: list[tuple[StudySpec, frozenset[str]]] = []  # the last spec asked: one expansion


def stopped_runs(spec: StudySpec) -> frozenset[str]:
    """The run ids that stop early at `StudySpec.stop_fraction` (none when it is 1): every design
    run but the checks (`stop_check_runs`)."""
    if spec.early_stop.stop_fraction >= 1.0:
        return frozenset()
    if _STOPPED and _STOPPED[0][0] is spec:
        return _STOPPED[0][1]
    checks = set(stop_check_runs(spec))
    out = frozenset(r.run_id for runs in _experiments(expand(spec)).values() for r in runs
                    if r.run_id not in checks)
    _STOPPED[:] = [(spec, out)]
    return out


def branch_runs(spec: StudySpec, run: RunSpec) -> list[RunSpec]:
    """The cool-down branches of `run` (`StudySpec.cooldown_branches`), by step; none for a
    held-out run when `StudySpec.heldout_branches` is False, and none after the stop of a run
    stopped early (`StudySpec.stop_fraction`: no checkpoint to leave from); with
    `StudySpec.branch_checks`, a design run's middle branch if it is a check
    (`branch_check_runs`), else none."""
    if run.parent or (run.heldout and not spec.branches.heldout_branches):
        return []
    steps = spec.branch_steps_for(run.size)
    if spec.branches.branch_checks and not run.heldout:
        steps = [steps[len(steps) // 2]] if run.run_id in branch_check_runs(spec) else []
    stop = spec.stop_step_for(run)
    planned = spec.branches
    share = branches.resolve_cooldown_share(spec.steps_for(run.size), spec.cooldown_for(run.size),
                                            planned.branch_cooldown_fraction or None,
                                            BRANCH_FIELDS) if planned.cooldown_branches else 0.0
    return [dataclasses.replace(run, run_id=branches.branch_run_id(run.run_id, step),
                                parent=run.run_id, branch_step=step,
                                cooldown_steps=branches.cooldown_steps_at(step, share))
            for step in steps if step <= stop]


def with_branches(spec: StudySpec, runs: list[RunSpec]) -> list[RunSpec]:
    """`runs`, each followed by its cool-down branches."""
    return [r for run in runs for r in (run, *branch_runs(spec, run))]


def branch_groups(spec: StudySpec, group: list[RunSpec]) -> list[list[RunSpec]]:
    """The branches of a group of runs, one group per branch step (trained after the group)."""
    by_step: dict[int, list[RunSpec]] = {}
    for run in group:
        for branch in branch_runs(spec, run):
            by_step.setdefault(branch.branch_step, []).append(branch)
    return [by_step[step] for step in sorted(by_step)]


def progress_entries(spec: StudySpec, runs: list[RunSpec]) -> list[tuple[str, str, int, int]]:
    """(run id, size, steps trained, first step) of `runs` and their branches, for
    `mnmt.study.progress.StudyProgress`."""
    out = []
    for run in with_branches(spec, runs):
        first, last = spec.run_steps(run)
        out.append((run.run_id, run.size, last - first, first))
    return out


def stop_savings(spec: StudySpec, runs: list[RunSpec]) -> dict[str, tuple[int, int]]:
    """{size: (run-steps not trained, run-steps of the full plan)} of `runs` and their branches
    under `StudySpec.stop_fraction` and `StudySpec.branch_checks`: each stopped run's steps
    after its stop and the cool-down steps of the branches not trained, against every run and
    branch trained to its end."""
    full = spec.replace(stop_fraction=1.0, branch_checks=False)
    out: dict[str, tuple[int, int]] = {}
    kept = {r.run_id: spec.run_steps(r) for r in with_branches(spec, runs)}
    for run in with_branches(full, runs):
        first, last = full.run_steps(run)
        trained = kept[run.run_id][1] - kept[run.run_id][0] if run.run_id in kept else 0
        saved, total = out.get(run.size, (0, 0))
        out[run.size] = (saved + (last - first) - trained, total + (last - first))
    return out


def training_groups(spec: StudySpec, groups: list[list[RunSpec]]) -> list[list[str]]:
    """The run ids trained together, in order: each group, then its branch groups."""
    return [[r.run_id for r in g] for group in groups
            for g in (group, *branch_groups(spec, group))]


def group_runs(spec: StudySpec, runs: list[RunSpec]) -> list[list[RunSpec]]:
    """Runs that train together (`StudySpec.max_group`): same size, steps and stop, grid
    order."""
    by_size: dict[tuple[str, int, int], list[RunSpec]] = {}
    for run in runs:
        key = (run.size, spec.steps_for(run.size), spec.stop_step_for(run))
        by_size.setdefault(key, []).append(run)
    step = max(1, spec.compute.max_group)
    return [members[i:i + step] for members in by_size.values()
            for i in range(0, len(members), step)]
