"""The data stage of a study on real human translations: gettext catalogs.

``StudySpec.data_preset = "gettext"`` reads the catalogs under ``/usr/share/locale``
(``"gettext:DIR"`` another directory); ``StudySpec.pairs`` names the directions (``en-de``,
``en-zh_cn``: languages are written varieties, see :mod:`mnmt.data.sources.gettext`) and
``StudySpec.data_caps`` caps each pair's training split (a fixed, machine-independent subset; a
cap above what the catalogs give is an error naming the pair, the cap and what is available).

What the stage does, as the synthetic one (`mnmt.study.stages.prepare_data`) does:

1. the catalog manifest (:func:`~mnmt.data.sources.gettext.catalog_manifest`) of the pairs is
   compared with ``OUT/data/gettext_manifest.json``. Identical digests: go on. Different (a
   package upgrade, another machine): refused, naming the pairs whose catalogs changed — the
   vocabulary and every finished run came from the recorded catalogs, and a study that mixes two
   corpora cannot be fitted. To go on with the new catalogs, use another ``--out`` or remove the
   manifest (the explicit override; ``spm.model`` is kept unless removed too). No manifest: the
   current one is recorded once the tasks are registered;
2. the shared SentencePiece vocabulary (``StudySpec.vocab_size``) is trained, once, on a seeded
   pair-balanced sample of the capped training splits of all pairs
   (:func:`mnmt.data.vocab_sample.sample_task_texts`) into ``OUT/data/spm.model``;
3. one task per pair (``validation`` / ``test`` chosen by a hash of the source, 5 % each;
   ``train`` the rest, capped).

The irreducible loss of real text is unknown: ``StudyData.irreducible_loss`` is empty. Errors are
``ValueError`` with one line naming the field or file; the study turns them into usage errors.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from fitting.data import io
from mnmt.data.sources.gettext import (
    DEFAULT_LOCALE_DIR,
    canonical_pair,
    catalog_manifest,
    manifest_changes,
    register_gettext_task,
)
from mnmt.study.runner import StudyData
from mnmt.study.spec import StudySpec

__all__ = ["PRESET", "MANIFEST_FILE", "is_gettext_preset", "locale_dir_of", "task_name",
           "check_manifest", "prepare_gettext_data"]

PRESET = "gettext"
MANIFEST_FILE = "gettext_manifest.json"
VOCAB_SAMPLE_PER_PAIR = 20_000  # examples per pair, balanced to the smallest pair
# The rarest 0.05 % of characters (CJK) are UNK instead of taking a piece each.
CHARACTER_COVERAGE = 0.9995


def is_gettext_preset(name: str) -> bool:
    """Whether ``StudySpec.data_preset`` names gettext catalogs (``gettext`` / ``gettext:DIR``)."""
    return name == PRESET or name.startswith(PRESET + ":")


def locale_dir_of(preset: str) -> str:
    """The catalogs' directory of a gettext data preset."""
    return preset.partition(":")[2] or DEFAULT_LOCALE_DIR


def task_name(pair: str, cap: int | None) -> str:
    """``gettext_en_zh_cn_d30000``: the study's task of a pair and its cap."""
    return "gettext_" + re.sub(r"[^a-z0-9]+", "_", pair) + (f"_d{cap}" if cap else "")


def _check_pairs(spec: StudySpec) -> None:
    for pair in spec.pairs:
        canonical = canonical_pair(pair)
        if canonical != pair:
            raise ValueError(f"StudySpec.pairs: {pair!r}: write {canonical!r} (gettext codes are "
                             "lower case, '@' as '_': they are the language tokens <2xx>)")


def check_manifest(path: Path, current: dict) -> bool:
    """Compare the catalogs with the manifest recorded at ``path``: True when it exists and
    agrees, False when there is none; a ValueError naming the pairs that changed otherwise."""
    if not path.exists():
        return False
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err}); remove it to record the current "
                         "catalogs") from err
    if not isinstance(recorded, dict) or "pairs" not in recorded:
        raise ValueError(f"{path}: expected a gettext catalog manifest (with 'pairs'); remove "
                         "it to record the current catalogs")
    changes = manifest_changes(recorded, current)
    if changes:
        raise ValueError(
            f"{path}: the gettext catalogs under {current['locale_dir']} differ from those this "
            f"study was prepared with — {'; '.join(changes)}. The vocabulary and finished runs "
            "come from the recorded catalogs: use another --out for these catalogs, or remove "
            f"{path.name} (and spm.model to retrain the vocabulary) to accept them")
    return True


def _train_vocabulary(spec: StudySpec, vocab_path: Path, locale_dir: str, separator: bool,
                      log: Callable[[str], None]) -> None:
    """The shared vocabulary from a pair-balanced sample of the capped training splits, written
    at ``vocab_path`` (and its .json) only once complete."""
    from mnmt.data import vocab
    from mnmt.data.tasks import get_task_info
    from mnmt.data.vocab_sample import placeholder_vocabulary, sample_task_texts

    caps = dict(spec.data_caps)
    codes = sorted({code for pair in spec.pairs for code in pair.split("-")})
    with tempfile.TemporaryDirectory(prefix="mnmt-gettext-vocab-") as tmp:
        placeholder = placeholder_vocabulary(codes, tmp)
        names = [register_gettext_task("vocab_" + task_name(pair, caps.get(pair)), pair,
                                       placeholder, locale_dir=locale_dir, cap=caps.get(pair))
                 for pair in spec.pairs]
        stats: dict[str, dict[str, int]] = {}
        samples = sample_task_texts(names, VOCAB_SAMPLE_PER_PAIR, stats=stats)
    n = len(next(iter(samples.values())))
    log(f"data: training a {spec.vocab_size}-piece SentencePiece vocabulary on {n:,} examples "
        f"of each of {len(names)} gettext pairs" + (f" (with {vocab.SEPARATOR})" if separator else ""))
    stem = f"spm.tmp-{os.getpid()}"
    trained = Path(vocab.train_vocabulary(
        samples, str(vocab_path.parent), spec.vocab_size, languages=codes, name=stem,
        character_coverage=CHARACTER_COVERAGE, separator=separator,
        sample={"tasks": {t: {"pair": get_task_info(t).pair, **stats[t]} for t in samples},
                "split": "train", "n_per_task": VOCAB_SAMPLE_PER_PAIR}))
    os.replace(trained.with_suffix(".json"), vocab_path.with_suffix(".json"))
    os.replace(trained, vocab_path)


def prepare_gettext_data(spec: StudySpec, out: Path, log: Callable[[str], None], *,
                         separator: bool = False) -> StudyData:
    """The data stage of a gettext study (module docstring) → its :class:`StudyData`.
    ``separator``: the vocabulary needs the decoder-only separator."""
    from mnmt.data import vocab
    from mnmt.data.tasks import get_task_info

    locale_dir = locale_dir_of(spec.data_preset)
    _check_pairs(spec)
    data_dir = out / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = data_dir / MANIFEST_FILE
    manifest = catalog_manifest(spec.pairs, locale_dir)
    recorded = check_manifest(manifest_path, manifest)
    vocab_path = data_dir / "spm.model"
    if not vocab_path.exists():
        _train_vocabulary(spec, vocab_path, locale_dir, separator, log)
    elif separator and not vocab.has_separator(vocab.get_vocabulary(str(vocab_path))):
        raise ValueError(f"{vocab_path} has no decoder-only separator {vocab.SEPARATOR}, which "
                         "the study's decoder-only sizes need: move it away (the data stage "
                         "trains a new one) or use another --out")
    caps = dict(spec.data_caps)
    tasks = {pair: register_gettext_task(task_name(pair, caps.get(pair)), pair, str(vocab_path),
                                         locale_dir=locale_dir, cap=caps.get(pair))
             for pair in spec.pairs}
    sizes = {pair: get_task_info(name).train_size for pair, name in tasks.items()}
    if not recorded:
        io.write_text_atomic(manifest_path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    log(f"data: gettext catalogs under {locale_dir} (digest {manifest['digest'][:12]}, "
        + ("as recorded" if recorded else f"recorded in {manifest_path}") + "); training pairs: "
        + ", ".join(f"{pair} {n:,}" + (" (capped)" if pair in caps else "")
                    for pair, n in sizes.items())
        + "; irreducible loss unknown (real data)")
    return StudyData(vocabulary_path=str(vocab_path), tasks=tasks, irreducible_loss={},
                     caps=sizes)
