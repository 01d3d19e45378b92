"""TFDS translation datasets (``wmt19_translate/de-en``, ``wmt14_translate/fr-en``, …) as tasks.

A TFDS translation dataset stores one text feature per language (``{"de": …, "en": …}``), so
either direction is a task: ``pair="en-de"`` reads ``en`` as source and ``de`` as target,
``pair="de-en"`` the other way round. The dataset must already be prepared in ``data_dir``
(``tfds build`` or ``builder.download_and_prepare()`` on a machine with network access): this
module never downloads.

Fernandes et al. 2023 §3.1 train on WMT (En→De, En→Zh, En→Fr); Chen et al. 2023 App. A list
WMT10 / WMT19 subsets with newstest evaluation sets.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from typing import Any

from mnmt.data.sources.parts import ReadCount, even_ranges

__all__ = ["register_tfds_task", "read_tfds_pairs", "TfdsParts"]

_DEFAULT_SPLITS = {"train": "train", "validation": "validation", "test": "test"}


def _builder(dataset: Any, data_dir: str | None):
    import tensorflow_datasets as tfds

    if not isinstance(dataset, str):
        return dataset  # an already constructed tfds.core.DatasetBuilder
    try:
        builder = tfds.builder(dataset, data_dir=data_dir)
    except Exception as e:  # tfds raises several registry / not-found error types
        raise ValueError(f"TFDS dataset {dataset!r}: cannot load its builder ({e})") from e
    return builder


def _check_prepared(builder, dataset: Any, data_dir: str | None) -> None:
    import tensorflow as tf

    if not tf.io.gfile.exists(builder.data_dir) or not tf.io.gfile.glob(
        builder.data_dir + "/dataset_info.json"
    ):
        raise FileNotFoundError(
            f"TFDS dataset {dataset!r} is not prepared under {data_dir or builder.data_dir!r}: "
            "prepare it where the network is available (`tfds build` / download_and_prepare) "
            "and pass that data_dir; this toolkit does not download"
        )


def read_tfds_pairs(
    dataset: Any, split: str, source_key: str, target_key: str, data_dir: str | None = None
) -> Iterator[tuple[str, str]]:
    """(source, target) strings of one TFDS split, in the dataset's stored order."""
    builder = _builder(dataset, data_dir)
    _check_prepared(builder, dataset, data_dir)
    ds = builder.as_dataset(split=split, shuffle_files=False)
    for ex in ds.as_numpy_iterator():
        s, t = ex[source_key], ex[target_key]
        yield (s.decode("utf-8") if isinstance(s, bytes) else str(s)).strip(), (
            t.decode("utf-8") if isinstance(t, bytes) else str(t)
        ).strip()


def register_tfds_task(
    name: str,
    dataset: Any,
    pair: str,
    vocab_path: str,
    *,
    data_dir: str | None = None,
    splits: Mapping[str, str] | None = None,
    keys: tuple[str, str] | None = None,
) -> str:
    """Register a seqio task for one direction of a TFDS translation dataset.

    ``dataset``: a TFDS name such as ``"wmt19_translate/de-en"`` or a builder instance.
    ``splits``: our split → TFDS split (default: train / validation / test, those that exist;
    e.g. ``{"train": "train[:260000]", "newstest": "validation"}`` for a capped D_i).
    ``keys``: the (source, target) feature names (default: the pair's language codes).
    """
    from mnmt.data.sources.parts import attach
    from mnmt.data.tasks import register_text_task

    src, _, tgt = pair.partition("-")
    if not src or not tgt:
        raise ValueError(f"pair {pair!r}: expected 'src-tgt', e.g. 'en-de'")
    skey, tkey = keys or (src, tgt)
    builder = _builder(dataset, data_dir)
    _check_prepared(builder, dataset, data_dir)
    features = builder.info.features
    available = list(getattr(features, "languages", None) or features.keys())
    for role, key in (("source", skey), ("target", tkey)):
        if key not in available:
            raise ValueError(
                f"TFDS dataset {builder.info.full_name!r} has no {role} feature {key!r}; "
                f"expected one of {available} (pass keys=(source_key, target_key))"
            )
    have = set(builder.info.splits.keys())
    if splits is None:
        splits = {k: v for k, v in _DEFAULT_SPLITS.items() if v in have}
    if not splits:
        raise ValueError(f"TFDS dataset {builder.info.full_name!r}: no splits (has {sorted(have)})")
    sizes: dict[str, int | None] = {}
    for ours, theirs in splits.items():
        base = theirs.split("[")[0]
        if base not in have:
            raise ValueError(
                f"TFDS dataset {builder.info.full_name!r}: split {theirs!r} for {ours!r} not found; "
                f"expected one of {sorted(have)}"
            )
        try:
            sizes[ours] = int(builder.info.splits[theirs].num_examples)
        except Exception:  # split slicing syntax tfds cannot size
            sizes[ours] = None
        if sizes[ours] == 0:
            raise ValueError(f"TFDS dataset {builder.info.full_name!r}: split {theirs!r} is empty")

    def reader(theirs: str):
        return lambda: read_tfds_pairs(builder, theirs, skey, tkey)

    registered = register_text_task(
        name, pair, vocab_path, {ours: reader(theirs) for ours, theirs in splits.items()},
        split_sizes=sizes,
        definition={"kind": "tfds", "dataset": builder.info.full_name,
                    "data_dir": str(builder.data_dir), "splits": dict(splits),
                    "keys": [skey, tkey]},
    )
    attach(registered, TfdsParts(builder, dict(splits), sizes, (skey, tkey)))
    return registered


_SLICE = re.compile(r"^([\w.-]+)(?:\[(\d*):(\d*)\])?$")


@dataclasses.dataclass(frozen=True)
class TfdsParts:
    """The blocks of a cache build's parts (:mod:`mnmt.data.sources.parts`): absolute example
    ranges of the TFDS split (``train[lo:hi]``: TFDS's file instructions open only the shards
    that hold them). A split given with percent or other slicing is read as one block."""

    builder: Any
    splits: dict[str, str]
    sizes: dict[str, int | None]
    keys: tuple[str, str]

    def _base(self, split: str) -> tuple[str, int] | None:
        match = _SLICE.match(self.splits[split].replace(" ", ""))
        if match is None or self.sizes.get(split) is None:
            return None
        return match.group(1), int(match.group(2) or 0)

    def plan(self, split: str, num_parts: int, count: ReadCount) -> list[tuple]:
        base = self._base(split)
        if base is None:
            return [(self.splits[split], None)]
        name, start = base
        return [(f"{name}[{start + lo}:{start + hi}]", hi - lo)
                for lo, hi in even_ranges(self.sizes[split], num_parts)]

    def read(self, split: str, block: tuple, count: ReadCount) -> Iterator[tuple[str, str]]:
        theirs, _ = block
        for pair in read_tfds_pairs(self.builder, theirs, *self.keys):
            count.examples += 1
            yield pair
