"""K-pair mixture designs of a study: which weightings of K language pairs are trained.

Besides explicit `StudySpec.weights`, a study of K pairs can ask for mixtures built from the
pairs' data sizes (`StudySpec.data_caps`) and from a seed:

- one single-pair run per pair, all weight on it (tag `only-<pair>`): the ends of the simplex;
- the uniform mixture (`uniform`);
- temperature sampling p_i ∝ D_i^(1/T) (`T5`; Chen et al. 2023 §4.2) and Caillaut et al. 2024
  §3.1 oversampling (`os5`): `mnmt.study.expansion.size_weights`;
- UniMax (Chung et al. 2023, Alg. 1; `unimax<E>`): uniform over the pairs, except that no pair is
  repeated more than E epochs of its D_i within the run's budget of training examples;
- M mixtures drawn from a symmetric Dirichlet with a seed (`dir0` … `dir<M-1>`): the design
  points a K-pair law is fitted on (RegMix-style);
- further Dirichlet mixtures from another seed stream (`hold0` …), trained at every size and
  seed but never fitted: the report predicts them.

Every mixture is trained at every size and seed. Runs have a *role*: "design" (explicit weights,
single-pair runs and Dirichlet mixtures: what the laws are fitted on), "baseline" (the
heuristics computed from data sizes: uniform, temperatures, oversampling, UniMax) or "held-out".
Light: numpy and `fitting.data.sampling` (numpy only), no JAX.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from mnmt.study.spec_sections import field_value

# mnmt.study.spec.StudySpec and RunSpec, not imported: spec.py imports this module.
StudySpec = Any
RunSpec = Any

ROLE_DESIGN = "design"
ROLE_BASELINE = "baseline"
ROLE_HELDOUT = "held-out"
# Tag prefixes (followed by a number) of the heuristic mixtures computed from data sizes.
BASELINE_PREFIXES = ("T", "os", "unimax")
# The held-out Dirichlet mixtures come from the seed stream [design_seed, 1], the design ones
# from [design_seed, 0]: changing one count never moves the other's mixtures.
_DESIGN_STREAM, _HELDOUT_STREAM = 0, 1
# Examples per pair whose word counts estimate the examples per packed row of synthetic data.
_PACKING_SAMPLE = 128

Mixture = tuple[str, dict[str, float]]  # (tag, pair -> weight)


class _DesignError(ValueError):
    """A design field that cannot be built (spec.py raises it as its StudyError)."""


def _error(message: str) -> Exception:
    return _DesignError(message)


def design_error(spec: StudySpec) -> str | None:
    """The first problem of `spec`'s design fields, as a message that names the field and what
    was expected (`mnmt.study.spec_checks.validate` raises it as a StudyError); None if there is none."""
    try:
        _validate_design(spec)
    except _DesignError as err:
        return str(err)
    return None


def _validate_design(spec: StudySpec) -> None:
    """The design fields' values; their types were checked before, with every StudySpec field's
    (`mnmt.study.spec` field kinds)."""
    for field in ("dirichlet_mixtures", "heldout_mixtures", "design_seed"):
        if field_value(spec, field) < 0:
            raise _error(f"StudySpec.{field}: expected a non-negative integer, got "
                         f"{field_value(spec, field)!r}")
    c = spec.design.dirichlet_concentration
    if not (math.isfinite(c) and c > 0):
        raise _error(f"StudySpec.dirichlet_concentration: expected a finite positive number, "
                     f"got {c!r}")
    _validate_unimax(spec)
    e = spec.design.examples_per_row
    if not (math.isfinite(e) and e >= 0):
        raise _error(f"StudySpec.examples_per_row: expected 0 (estimate) or a positive number, "
                     f"got {e!r}")
    if not (math.isfinite(spec.design.epoch_cap) and spec.design.epoch_cap >= 0):
        raise _error(f"StudySpec.epoch_cap: expected 0 (the largest of unimax_epochs) or a "
                     f"positive number of epochs, got {spec.design.epoch_cap!r}")
    if spec.design.epoch_cap and {pair for pair, _ in spec.data_caps} != set(spec.pairs):
        raise _error(f"StudySpec.epoch_cap: an epoch cap needs StudySpec.data_caps for every "
                     f"pair {list(spec.pairs)}")
    if (spec.design.dirichlet_mixtures or spec.design.heldout_mixtures) and len(spec.pairs) < 2:
        raise _error(f"StudySpec.dirichlet_mixtures/heldout_mixtures: Dirichlet mixtures need at "
                     f"least two pairs, got {list(spec.pairs)}")
    preferences(spec)


def preferences(spec: StudySpec) -> dict[str, float] | None:
    """`StudySpec.mixture_preferences` as {pair: importance} (pairs not named weigh 1), the
    weights π_i of the recommendation's objective Σ_i π_i L_i / Σ_i π_i; None when none are
    given. Raises the design error naming the field for an unknown pair, a negative or
    non-finite weight, or all weights zero."""
    if not spec.design.mixture_preferences:
        return None
    out = dict.fromkeys(spec.pairs, 1.0)
    for entry in spec.design.mixture_preferences:
        ok = (isinstance(entry, tuple | list) and len(entry) == 2 and entry[0] in spec.pairs
              and isinstance(entry[1], int | float) and not isinstance(entry[1], bool)
              and math.isfinite(entry[1]) and entry[1] >= 0)
        if not ok:
            raise _error(f"StudySpec.mixture_preferences: expected (pair, weight) entries with a "
                         f"pair of {list(spec.pairs)} and a finite weight >= 0, got {entry!r}")
        out[entry[0]] = float(entry[1])
    if not any(out.values()):
        raise _error("StudySpec.mixture_preferences: expected at least one pair with a positive "
                     f"weight, got {out}")
    return out


def _validate_unimax(spec: StudySpec) -> None:
    epochs = spec.design.unimax_epochs
    for value in epochs:
        if not (math.isfinite(value) and value > 0):
            raise _error(f"StudySpec.unimax_epochs: expected finite positive epoch caps, got "
                         f"{value!r}")
    if len(set(map(float, epochs))) != len(epochs):
        raise _error(f"StudySpec.unimax_epochs: expected distinct epoch caps, got {list(epochs)}")
    capped = {pair for pair, _ in spec.data_caps}
    if epochs and capped != set(spec.pairs):
        raise _error(f"StudySpec.unimax_epochs: UniMax needs StudySpec.data_caps for every pair "
                     f"{list(spec.pairs)}; caps given for {sorted(capped)}")


def role(run: RunSpec) -> str:
    """"held-out", "baseline" (a heuristic mixture computed from data sizes) or "design"."""
    if run.heldout:
        return ROLE_HELDOUT
    tag = run.mixture
    if tag == "uniform" or any(tag.startswith(prefix) and _is_number_text(tag[len(prefix):])
                               for prefix in BASELINE_PREFIXES):
        return ROLE_BASELINE
    return ROLE_DESIGN


def _is_number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def single_pair_mixtures(spec: StudySpec) -> list[Mixture]:
    """One mixture per pair with all weight on it (`only-<pair>`)."""
    if not spec.design.single_pair_runs:
        return []
    return [(f"only-{pair}", {p: float(p == pair) for p in spec.pairs}) for pair in spec.pairs]


def uniform_mixtures(spec: StudySpec) -> list[Mixture]:
    """The uniform mixture (`uniform`), if asked for."""
    if not spec.design.uniform_mixture:
        return []
    return [("uniform", {pair: 1.0 / len(spec.pairs) for pair in spec.pairs})]


def unimax_mixtures(spec: StudySpec) -> list[Mixture]:
    """UniMax mixtures, one per epoch cap E (`unimax<E>`), for the budget of `budget_examples`."""
    if not spec.design.unimax_epochs:
        return []
    from fitting.data.sampling import unimax_weights  # noqa: PLC0415 (numpy only)

    caps = dict(spec.data_caps)
    sizes = [float(caps[pair]) for pair in spec.pairs]
    budget = budget_examples(spec)
    out = []
    for epochs in spec.design.unimax_epochs:
        w = unimax_weights(sizes, budget, float(epochs))
        out.append((f"unimax{float(epochs):g}", _as_weights(spec, w)))
    return out


def dirichlet_design(spec: StudySpec) -> list[Mixture]:
    """The `dirichlet_mixtures` seeded design mixtures (`dir0` …)."""
    return _dirichlet(spec, spec.design.dirichlet_mixtures, _DESIGN_STREAM, "dir")


def heldout_design(spec: StudySpec) -> list[Mixture]:
    """The `heldout_mixtures` seeded held-out mixtures (`hold0` …), from their own seed stream."""
    return _dirichlet(spec, spec.design.heldout_mixtures, _HELDOUT_STREAM, "hold")


def _dirichlet(spec: StudySpec, count: int, stream: int, prefix: str) -> list[Mixture]:
    if not count:
        return []
    from fitting.data.sampling import dirichlet_mixtures  # noqa: PLC0415 (numpy only)

    seed = _stream_seed(spec.design.design_seed, stream)
    rows = dirichlet_mixtures(len(spec.pairs), count,
                              concentration=float(spec.design.dirichlet_concentration), seed=seed)
    return [(f"{prefix}{i}", _as_weights(spec, row)) for i, row in enumerate(rows)]


def _stream_seed(design_seed: int, stream: int) -> int:
    """One integer seed per (design_seed, stream): distinct for every pair of them."""
    return 2 * int(design_seed) + stream


def _as_weights(spec: StudySpec, values) -> dict[str, float]:
    return dict(zip(spec.pairs, (float(x) for x in values), strict=True))


def fitted_mixtures(spec: StudySpec, size_based: Callable[[StudySpec], list[Mixture]]
                    ) -> list[Mixture]:
    """The tagged mixtures that are fitted, in plan order: single-pair, uniform, the
    `size_based` ones (temperatures, oversampling), UniMax, Dirichlet."""
    return (single_pair_mixtures(spec) + uniform_mixtures(spec) + size_based(spec)
            + unimax_mixtures(spec) + dirichlet_design(spec))


def budget_examples(spec: StudySpec) -> float:
    """Training examples of one run, the UniMax budget: train_steps × packed rows per step ×
    examples per packed row (`StudySpec.examples_per_row`, or `estimated_examples_per_row`).
    One budget for the whole study (from `train_steps`, not `train_steps_by_size`), so each
    UniMax mixture has the same weights at every size."""
    from mnmt.models.accounting import rows_per_step  # noqa: PLC0415 (light: no jax)

    rows = rows_per_step(spec.schedule.batch_size, spec.schedule.batch_tokens,
                         spec.lengths["targets"])
    per_row = float(spec.design.examples_per_row) or estimated_examples_per_row(spec)
    return float(spec.schedule.train_steps) * rows * per_row


def estimated_examples_per_row(spec: StudySpec) -> float:
    """Examples per packed row: 1 for registered (real-data) tasks; for the synthetic family,
    its examples packed as the training pipeline packs them (`mnmt.data.packing`, greedily in
    windows of max(feature lengths) examples) with one token per word — a SentencePiece
    vocabulary that spells rarer words in several pieces packs fewer, so this is an upper bound."""
    if spec.tasks:
        return 1.0
    return _synthetic_examples_per_row(spec.data_preset, tuple(spec.pairs),
                                       tuple(sorted(spec.lengths.items())))


@lru_cache(maxsize=16)
def _synthetic_examples_per_row(preset: str, pairs: tuple[str, ...],
                                lengths: tuple[tuple[str, int], ...]) -> float:
    from mnmt.data.packing import pack_examples  # noqa: PLC0415 (numpy only)
    from mnmt.data.synthetic import get_family  # noqa: PLC0415 (pure Python)

    try:
        family = get_family(preset)
    except ValueError:
        return 1.0  # the data stage reports the preset
    if not set(pairs) <= set(family.pairs):
        return 1.0  # the data stage reports the unknown pairs
    lens = dict(lengths)
    per_pair = {pair: _token_counts(family, pair, lens) for pair in pairs}
    # the pairs interleaved, as a uniform mixture draws them
    examples = [ex for group in zip(*per_pair.values(), strict=True) for ex in group]
    window = max(lens.values())
    rows = sum(pack_examples(examples[i:i + window], lens)["decoder_target_tokens"].shape[0]
               for i in range(0, len(examples), window))
    return len(examples) / rows


def _token_counts(family, pair: str, lens: dict[str, int]) -> list[tuple[list[int], list[int]]]:
    """Dummy token lists as long as a pair's examples: one token per word, plus the
    target-language token and EOS of the inputs and the EOS of the targets."""
    src, tgt = (family.languages[code] for code in pair.split("-"))
    out = []
    for ex in family.sample(pair, "validation", _PACKING_SAMPLE):
        n_in = min(len(src.split_words(ex.source)) + 2, lens["inputs"])
        n_tgt = min(len(tgt.split_words(ex.target)) + 1, lens["targets"])
        out.append(([2] * n_in, [2] * n_tgt))
    return out
