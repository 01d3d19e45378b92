"""Validation of a study definition: `validate(spec)` raises `StudyError` naming the first field
of a `StudySpec` that cannot be run and what was expected.

`StudySpec.__post_init__` calls `validate`, so every StudySpec that exists is runnable. The
checks read the spec's fields only; the per-pair weights of one grid point (`mixture_weights`)
are checked and normalised here too, since `validate` and the expansion both need them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Sequence
from typing import Any

from mnmt.models import zoo  # light: configuration only
from mnmt.models.configs import (  # light: no jax
    ACTIVATION_DTYPES,
    PARTITIONING_RULES,
    REMAT_POLICIES,
)
from mnmt.study import mixture_design, train_options  # light: numpy, configuration only
from mnmt.study.spec_sections import SECTIONS, field_value, flat_names
from mnmt.training import branches  # light: configuration only
from mnmt.training.config import COOLDOWN_SHAPES, DECAYS  # light: no jax

# mnmt.study.spec.StudySpec, not imported: spec.py imports this module.
StudySpec = Any

# What branch errors call the study's fields (mnmt.training.branches names TrainConfig's).
BRANCH_FIELDS = branches.BranchFields("StudySpec.cooldown_branches",
                                      "StudySpec.branch_cooldown_fraction",
                                      "StudySpec.cooldown_fraction", "StudySpec.decay")


class StudyError(ValueError):
    """A study definition that cannot be run; the message names the field and what was expected."""


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    """Flat field name -> annotation, of a StudySpec class and its sections."""
    hints = {k: v for k, v in typing.get_type_hints(cls).items() if k not in SECTIONS}
    for section in SECTIONS.values():
        hints.update(typing.get_type_hints(section))
    return hints


def _validate_kinds(spec: StudySpec) -> None:
    """Every field's value of the kind its annotation asks for (a gin list is accepted where a
    tuple is asked), checked before the values themselves."""
    for attr, section in SECTIONS.items():
        if not isinstance(getattr(spec, attr), section):
            raise StudyError(f"StudySpec.{attr}: expected a {section.__name__} (its fields: "
                             f"{', '.join(f.name for f in dataclasses.fields(section))}), got "
                             f"{getattr(spec, attr)!r}")
    hints = _field_hints(type(spec))
    for name in flat_names(type(spec)):
        value = field_value(spec, name)
        if not train_options.conforms(hints[name], value):
            raise StudyError(f"StudySpec.{name}: expected {train_options.type_text(hints[name])}, "
                             f"got {value!r}")
    for field in ("learning_rate", "report_target_sizes"):
        values = field_value(spec, field)
        for value in values if isinstance(values, tuple | list) else [values]:
            if not (math.isfinite(value) and value > 0):
                raise StudyError(f"StudySpec.{field}: expected finite positive numbers, got "
                                 f"{value!r}")
    if not 0.0 <= spec.schedule.dropout_rate < 1.0:
        raise StudyError(f"StudySpec.dropout_rate: expected a rate in [0, 1), got "
                         f"{spec.schedule.dropout_rate!r}")
    for field in ("warmup_steps", "num_decode_examples", "cache_shards", "probe_every"):
        if field_value(spec, field) < 0:
            raise StudyError(f"StudySpec.{field}: expected a non-negative integer, got "
                             f"{field_value(spec, field)!r}")
    if not spec.evaluation.eval_sets or not all(spec.evaluation.eval_sets):
        raise StudyError(f"StudySpec.eval_sets: expected non-empty names, got "
                         f"{spec.evaluation.eval_sets!r}")


def _validate_adaptive(spec: StudySpec) -> None:
    """The adaptive section's numbers (mnmt.study.adaptive), checked whether it is on or not."""
    a = spec.adaptive
    if not 0 < a.adaptive_threshold < 1:
        raise StudyError(f"StudySpec.adaptive_threshold: expected a share of E in (0, 1), got "
                         f"{a.adaptive_threshold!r}")
    if not a.adaptive_budget > 0:
        raise StudyError(f"StudySpec.adaptive_budget: expected a positive multiple of the grid's "
                         f"FLOPs, got {a.adaptive_budget!r}")
    if not 0 < a.adaptive_round <= 1:
        raise StudyError(f"StudySpec.adaptive_round: expected a share of the budget in (0, 1], "
                         f"got {a.adaptive_round!r}")
    if a.adaptive_pair and a.adaptive_pair not in spec.pairs:
        raise StudyError(f"StudySpec.adaptive_pair: {a.adaptive_pair!r} is not a pair of the "
                         f"study ({', '.join(spec.pairs)})")
    for size in a.adaptive_sizes:
        try:
            zoo.get_config(size, spec.vocab_size)
        except ValueError as err:
            raise StudyError(f"StudySpec.adaptive_sizes: {err}") from None
    _validate_adaptive_target(spec)
    if a.adaptive and spec.early_stop.stop_fraction < 1.0:
        raise StudyError("StudySpec.adaptive: an adaptive study fits cooled-down ends; it cannot "
                         "also stop runs early (stop_fraction < 1)")


def _validate_adaptive_target(spec: StudySpec) -> None:
    """`adaptive_target` and the fields an "objective" study cannot combine with."""
    a = spec.adaptive
    if a.adaptive_target not in ("E", "objective"):
        raise StudyError(f"StudySpec.adaptive_target: expected 'E' or 'objective', got "
                         f"{a.adaptive_target!r}")
    if a.adaptive_target != "objective":
        return
    if len(spec.pairs) < 3:
        raise StudyError(f"StudySpec.adaptive_target: 'objective' is the K-pair recommendation's "
                         f"(3 pairs or more), got pairs {list(spec.pairs)}")
    for name in ("adaptive_pair", "adaptive_initial"):
        if getattr(a, name):
            raise StudyError(f"StudySpec.{name}: names the target pair of an 'E' study; an "
                             "'objective' study has none (round 0 trains every design mixture "
                             "at the smallest size)")
    if not spec.report_target_sizes:
        raise StudyError("StudySpec.report_target_sizes: an 'objective' study needs the "
                         "recommendation's size (its first entry)")


def validate(spec: StudySpec) -> None:
    """Raise StudyError naming the first field of `spec` that cannot be run."""
    # the training options first: their own check says more than their annotation
    problem = train_options.overrides_error(spec.train_overrides, flat_names(type(spec)))
    if problem is not None:
        raise StudyError(problem)
    _validate_kinds(spec)
    if not spec.name or any(c in spec.name for c in "/\\ "):
        raise StudyError(f"StudySpec.name: expected a non-empty name without '/', '\\' or spaces, got {spec.name!r}")
    if len(spec.pairs) < 1 or len(set(spec.pairs)) != len(spec.pairs):
        raise StudyError(f"StudySpec.pairs: expected distinct language pairs, got {spec.pairs!r}")
    for pair in spec.pairs:
        parts = pair.split("-")
        if len(parts) != 2 or not all(parts):
            raise StudyError(f"StudySpec.pairs: expected pairs like 'en-de', got {pair!r}")
    if not spec.sizes:
        raise StudyError("StudySpec.sizes: expected at least one model size")
    if not spec.weights and not any(field_value(spec, f) for f in _DESIGN_FIELDS):
        raise StudyError("StudySpec.weights: expected at least one mixture (or a design: "
                         + ", ".join(_DESIGN_FIELDS) + ")")
    _validate_caps(spec)
    if (problem := mixture_design.design_error(spec)) is not None:
        raise StudyError(problem)
    for w in spec.weights:
        mixture_weights(spec.pairs, w)
    if not spec.seeds:
        raise StudyError("StudySpec.seeds: expected at least one seed")
    if spec.heldout_seeds < 1:
        raise StudyError(f"StudySpec.heldout_seeds: expected at least 1 (seeds of each held-out "
                         f"run), got {spec.heldout_seeds!r}")
    if spec.verification.verify_seeds < 2:
        raise StudyError(f"StudySpec.verify_seeds: expected at least 2 (the verification verdict "
                         f"needs a seed sd), got {spec.verification.verify_seeds!r}")
    _validate_adaptive(spec)
    if spec.verification.verify and len(spec.pairs) < 3:
        raise StudyError(f"StudySpec.verify: verifies a K-pair recommendation (3 pairs or more), "
                         f"got pairs {list(spec.pairs)}")
    for field in ("train_steps", "batch_size", "eval_every", "checkpoint_every", "vocab_size",
                  "max_group", "probe_examples"):
        value = field_value(spec, field)
        if not isinstance(value, int) or value <= 0:
            raise StudyError(f"StudySpec.{field}: expected a positive integer, got {value!r}")
    heldout_sizes = []
    for entry in spec.heldout:
        if not isinstance(entry, tuple | list) or len(entry) != 2 or not isinstance(entry[0], str):
            raise StudyError(f"StudySpec.heldout: expected (size, weights) entries, got {entry!r}")
        mixture_weights(spec.pairs, entry[1], field="heldout")
        heldout_sizes.append(entry[0])
    for entry in spec.seed_repeats:
        if (not isinstance(entry, tuple | list) or len(entry) != 3 or entry[0] not in spec.sizes
                or isinstance(entry[2], bool) or not isinstance(entry[2], int)
                or entry[2] in spec.seeds):
            raise StudyError(f"StudySpec.seed_repeats: expected (size, weight, seed) entries with "
                             f"a size of StudySpec.sizes {list(spec.sizes)} and a seed not in "
                             f"StudySpec.seeds {list(spec.seeds)}, got {entry!r}")
        mixture_weights(spec.pairs, entry[1], field="seed_repeats")
    for size, steps in spec.schedule.train_steps_by_size:
        if size not in spec.sizes and size not in heldout_sizes:
            raise StudyError(f"StudySpec.train_steps_by_size: size {size!r} is not in StudySpec.sizes "
                             f"{list(spec.sizes)} or StudySpec.heldout")
        if not isinstance(steps, int) or steps <= 0:
            raise StudyError(f"StudySpec.train_steps_by_size: expected a positive integer for {size!r}, "
                             f"got {steps!r}")
    for field, allowed in (("activation_dtype", ACTIVATION_DTYPES), ("remat_policy", REMAT_POLICIES),
                           ("partitioning_rules", PARTITIONING_RULES)):
        if field_value(spec, field) not in allowed:
            raise StudyError(f"StudySpec.{field}: expected one of {', '.join(allowed)}, got "
                             f"{field_value(spec, field)!r}")
    for field in ("gradient_accumulation_steps", "loss_tiles"):
        if field_value(spec, field) < 1:
            raise StudyError(f"StudySpec.{field}: expected a positive integer (1 = off), got "
                             f"{field_value(spec, field)!r}")
    if spec.schedule.decay not in DECAYS:
        raise StudyError(f"StudySpec.decay: expected one of {', '.join(DECAYS)}, got "
                         f"{spec.schedule.decay!r}")
    momentum = spec.schedule.momentum
    if not isinstance(momentum, int | float) or not 0.0 <= float(momentum) < 1.0:
        raise StudyError(f"StudySpec.momentum: expected a decay in [0, 1) (0 = no momentum), got "
                         f"{spec.schedule.momentum!r}")
    if not 0.0 <= float(spec.schedule.cooldown_fraction) <= 1.0:
        raise StudyError(f"StudySpec.cooldown_fraction: expected a share in [0, 1], got "
                         f"{spec.schedule.cooldown_fraction!r}")
    _validate_branches(spec)
    _validate_stop(spec)
    if not isinstance(spec.schedule.batch_tokens, int) or spec.schedule.batch_tokens < 0:
        raise StudyError(f"StudySpec.batch_tokens: expected 0 (use batch_size) or a positive integer, "
                         f"got {spec.schedule.batch_tokens!r}")
    if spec.tasks:
        named = [pair for pair, _ in spec.tasks]
        if sorted(named) != sorted(spec.pairs):
            raise StudyError(f"StudySpec.tasks: expected one task per pair {list(spec.pairs)}, got pairs {named}")
        if not spec.vocabulary_path:
            raise StudyError("StudySpec.vocabulary_path: required when StudySpec.tasks names registered tasks")
    lengths = dict(spec.schedule.feature_lengths)
    if set(lengths) != {"inputs", "targets"} or any(v <= 0 for v in lengths.values()):
        raise StudyError(
            f"StudySpec.feature_lengths: expected positive 'inputs' and 'targets' lengths, got {lengths!r}"
        )


# Fields that add mixtures besides `weights` (mnmt.study.mixture_design).
_DESIGN_FIELDS = ("temperatures", "oversampling", "single_pair_runs", "uniform_mixture",
                  "unimax_epochs", "dirichlet_mixtures", "heldout_mixtures")


def _validate_branches(spec: StudySpec) -> None:
    if spec.schedule.cooldown_shape not in COOLDOWN_SHAPES:
        raise StudyError(f"StudySpec.cooldown_shape: expected one of {', '.join(COOLDOWN_SHAPES)},"
                         f" got {spec.schedule.cooldown_shape!r}")
    if not 0.0 <= float(spec.branches.branch_cooldown_fraction) < 1.0:
        raise StudyError(f"StudySpec.branch_cooldown_fraction: expected a share in [0, 1) (0: "
                         f"cooldown_fraction), got {spec.branches.branch_cooldown_fraction!r}")
    sizes = list(spec.sizes) + [entry[0] for entry in spec.heldout]
    for size in dict.fromkeys(sizes):
        try:
            spec.branch_steps_for(size)
        except branches.BranchError as err:
            raise StudyError(f"{err} (size {size}, {spec.steps_for(size)} steps)") from None


def _validate_stop(spec: StudySpec) -> None:
    """`stop_fraction` a share in (0, 1]; `stop_checks` strings, "all" alone (the run ids are
    checked against the study's runs by `mnmt.study.expansion.stop_check_runs`)."""
    f = spec.early_stop.stop_fraction
    if not isinstance(f, int | float) or isinstance(f, bool) or not 0.0 < float(f) <= 1.0:
        raise StudyError(f"StudySpec.stop_fraction: expected a share in (0, 1] (1: no early "
                         f"stop), got {f!r}")
    checks = spec.early_stop.stop_checks
    if not isinstance(checks, tuple | list) or not all(isinstance(c, str) for c in checks):
        raise StudyError(f"StudySpec.stop_checks: expected run ids (strings), () or ('all',), "
                         f"got {checks!r}")
    if "all" in checks and len(checks) > 1:
        raise StudyError(f"StudySpec.stop_checks: 'all' stands alone, got {checks!r}")
    if not isinstance(spec.branches.branch_checks, bool):
        raise StudyError(f"StudySpec.branch_checks: expected True or False, got "
                         f"{spec.branches.branch_checks!r}")
    if spec.branches.branch_checks and not spec.branches.cooldown_branches:
        raise StudyError("StudySpec.branch_checks: True needs cool-down branches to leave out "
                         "(StudySpec.cooldown_branches is empty)")


def _validate_caps(spec: StudySpec) -> None:
    caps = {}
    for entry in spec.data_caps:
        if not isinstance(entry, tuple | list) or len(entry) != 2 or entry[0] not in spec.pairs:
            raise StudyError(f"StudySpec.data_caps: expected (pair, examples) entries with a pair of "
                             f"{list(spec.pairs)}, got {entry!r}")
        if not isinstance(entry[1], int) or isinstance(entry[1], bool) or entry[1] < 1:
            raise StudyError(f"StudySpec.data_caps: expected a positive integer number of examples "
                             f"for {entry[0]!r}, got {entry[1]!r}")
        caps[entry[0]] = entry[1]
    for field in ("temperatures", "oversampling"):
        values = field_value(spec, field)
        if not values:
            continue
        if set(caps) != set(spec.pairs):
            raise StudyError(f"StudySpec.{field}: weights from data sizes need StudySpec.data_caps "
                             f"for every pair {list(spec.pairs)}; caps given for {sorted(caps)}")
        for value in values:
            if not isinstance(value, int | float) or not value > 0:
                raise StudyError(f"StudySpec.{field}: expected positive numbers, got {value!r}")


def mixture_weights(pairs: Sequence[str], w: float | Sequence[float],
                    field: str = "weights") -> dict[str, float]:
    """The per-pair sampling weights of one grid point (see `StudySpec.weights`); errors name
    `StudySpec.<field>`."""
    if _is_number(w):
        if len(pairs) != 2:
            raise StudyError(
                f"StudySpec.{field}: a single number p needs exactly two pairs, got {len(pairs)} pairs; "
                "give one weight per pair instead"
            )
        p = float(w)
        if not (0.0 <= p <= 1.0) or math.isnan(p):
            raise StudyError(f"StudySpec.{field}: expected p in [0, 1], got {w!r}")
        return {pairs[0]: p, pairs[1]: 1.0 - p}
    if not isinstance(w, tuple | list) or not all(_is_number(x) for x in w):
        raise StudyError(f"StudySpec.{field}: expected a number p or one number per pair "
                         f"{list(pairs)}, got {w!r}")
    values = [float(x) for x in w]
    if len(values) != len(pairs):
        raise StudyError(
            f"StudySpec.{field}: expected {len(pairs)} weights (one per pair {list(pairs)}), got {list(w)!r}"
        )
    if not all(math.isfinite(x) and x >= 0 for x in values) or not 0 < sum(values) < math.inf:
        raise StudyError(f"StudySpec.{field}: expected finite non-negative weights with a positive "
                         f"sum, got {list(w)!r}")
    total = sum(values)
    return {pair: x / total for pair, x in zip(pairs, values, strict=True)}
