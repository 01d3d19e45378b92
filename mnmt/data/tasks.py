"""SeqIO task registration: one Task per (source language, target language, corpus).

Every task shares the preprocessing of Fernandes et al. 2023 §3.1: the target-language token
``<2xx>`` (a single SentencePiece piece, see :mod:`mnmt.data.vocab`) is prepended to the source's
ids, both sides are tokenized with the shared vocabulary by the one rule every path uses
(:func:`mnmt.data.vocab.example_encoder`, :func:`tokenize_example`) and EOS is appended
(trimming and packing happen in the feature converter, :mod:`mnmt.data.pipeline`).

Besides the seqio registration, each task registered here records a :class:`TaskInfo` (pair,
splits, sizes, and for synthetic tasks a fast pure-Python example stream) that the training
iterator uses to stream examples without a TensorFlow graph; tests check that this fast path
yields exactly the tokens of the seqio task.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "TaskInfo",
    "register_synthetic_tasks",
    "register_text_task",
    "task_definition",
    "get_task_info",
    "task_infos",
    "prepend_language_token",
    "tokenize_example",
    "EVAL_SIZE",
]

EVAL_SIZE = 2000  # default size of synthetic validation / test / ood sets
log = logging.getLogger(__name__)


@dataclass
class TaskInfo:
    """What the pipeline needs to know about a registered task beyond seqio's Task."""

    name: str
    pair: str
    vocab_path: str
    splits: tuple[str, ...]
    train_size: int | None  # None = unlimited stream
    split_sizes: dict[str, int | None]
    # (split, start, seed) -> iterator of (inputs_text, targets_text); None for tf.data tasks
    text_stream: Callable[[str, int, Any], Iterator[tuple[str, str]]] | None = None
    definition: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @property
    def source_language(self) -> str:
        return self.pair.split("-")[0]

    @property
    def target_language(self) -> str:
        return self.pair.split("-")[1]


_INFOS: dict[str, TaskInfo] = {}


def get_task_info(name: str) -> TaskInfo:
    """The :class:`TaskInfo` of a task registered through this module."""
    try:
        return _INFOS[name]
    except KeyError:
        raise KeyError(
            f"task {name!r} was not registered through mnmt.data.tasks (known: {sorted(_INFOS)})"
        ) from None


def task_infos() -> dict[str, TaskInfo]:
    return dict(_INFOS)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def prepend_language_token(dataset, code: str):
    """SeqIO preprocessor: ``inputs`` ← ``"<2xx> " + inputs`` (Fernandes et al. 2023 §3.1), as
    text. The tasks registered here do not use it: :func:`tokenize_example` prepends the token
    as an id, since SentencePiece can segment ``"<2xx> " + text`` otherwise than ``text``."""
    import tensorflow as tf

    from mnmt.data.vocab import lang_token

    prefix = tf.constant(lang_token(code) + " ")

    def fn(ex):
        ex = dict(ex)
        ex["inputs"] = tf.strings.join([prefix, ex["inputs"]])
        return ex

    return dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE)


def tokenize_example(dataset, output_features: Mapping[str, Any], code: str):
    """SeqIO preprocessor: ``inputs`` ← ``[<2xx>, *ids(inputs)]``, ``targets`` ←
    ``ids(targets)`` by :func:`mnmt.data.vocab.example_encoder`, the rule of every other path
    (not seqio's ``tokenize``: tensorflow_text's SentencePiece op, over ``"<2xx> " + text``,
    segments some words otherwise). The texts are kept as ``inputs_pretokenized`` (``"<2xx> "
    + inputs``) and ``targets_pretokenized``, as seqio's ``tokenize`` keeps them."""
    import numpy as np
    import tensorflow as tf

    from mnmt.data.vocab import example_encoder, lang_token, language_token_id

    vocab = output_features["inputs"].vocabulary
    encode = example_encoder(vocab, language_token_id(vocab, code))
    prefix = tf.constant(lang_token(code) + " ")

    def ids(source: bytes, target: bytes) -> tuple[np.ndarray, np.ndarray]:
        src, tgt = encode(source.decode("utf-8"), target.decode("utf-8"))
        return np.asarray(src, np.int32), np.asarray(tgt, np.int32)

    def fn(ex):
        ex = dict(ex)
        src, tgt = tf.numpy_function(ids, [ex["inputs"], ex["targets"]], [tf.int32, tf.int32],
                                     stateful=False)
        ex["inputs_pretokenized"] = tf.strings.join([prefix, ex["inputs"]])
        ex["targets_pretokenized"] = ex["targets"]
        ex["inputs"] = tf.ensure_shape(src, [None])
        ex["targets"] = tf.ensure_shape(tgt, [None])
        return ex

    return dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE)


def _output_features(vocab_path: str) -> dict:
    import seqio

    from mnmt.data.vocab import get_vocabulary

    vocab = get_vocabulary(vocab_path)
    return {
        "inputs": seqio.Feature(vocabulary=vocab, add_eos=True, required=True),
        "targets": seqio.Feature(vocabulary=vocab, add_eos=True, required=True),
    }


def _register(info: TaskInfo, dataset_fn: Callable, num_examples: dict[str, int] | None) -> str:
    """Add a seqio Task: a no-op for an identical definition; a different definition under the
    same name replaces the old task (with a warning); a name seqio already holds from elsewhere
    is an error."""
    import functools

    import seqio

    from mnmt.data.vocab import get_vocabulary, language_token_id

    old = _INFOS.get(info.name)
    if old is not None:
        if old.definition == info.definition and info.name in seqio.TaskRegistry.names():
            return info.name
        if old.definition != info.definition:
            # e.g. two studies in one process with their own vocabularies: the newer one wins
            diff = {
                k: (old.definition.get(k), info.definition.get(k))
                for k in set(old.definition) | set(info.definition)
                if old.definition.get(k) != info.definition.get(k)
            }
            log.warning("task %r re-registered with a different definition (old, new): %s",
                        info.name, diff)
    if info.name in seqio.TaskRegistry.names():
        if old is None:
            raise ValueError(
                f"task {info.name!r} is already in seqio.TaskRegistry but was not registered by "
                "mnmt.data.tasks: choose another name (or prefix=) instead of replacing it"
            )
        seqio.TaskRegistry.remove(info.name)
    language_token_id(get_vocabulary(info.vocab_path), info.target_language)
    seqio.TaskRegistry.add(
        info.name,
        source=seqio.FunctionDataSource(
            dataset_fn, splits=list(info.splits), num_input_examples=num_examples
        ),
        preprocessors=[
            functools.partial(tokenize_example, code=info.target_language),
            seqio.preprocessors.append_eos_after_trim,
        ],
        output_features=_output_features(info.vocab_path),
    )
    _INFOS[info.name] = info
    return info.name


def _text_dataset(gen_fn: Callable[[], Iterator[tuple[str, str]]]):
    import tensorflow as tf

    def gen():
        for s, t in gen_fn():
            yield {"inputs": s, "targets": t}

    sig = {
        "inputs": tf.TensorSpec([], tf.string),
        "targets": tf.TensorSpec([], tf.string),
    }
    return tf.data.Dataset.from_generator(gen, output_signature=sig)


def register_synthetic_tasks(
    preset: str,
    vocab_path: str,
    *,
    seed: int = 0,
    caps: Mapping[str, int] | int | None = None,
    eval_size: int = EVAL_SIZE,
    prefix: str = "synth",
) -> dict[str, str]:
    """Register one seqio Task per pair of a synthetic preset → ``{pair: task_name}``.

    Splits: ``train`` (the unlimited stream, or its first D_i examples when capped — ``caps``
    maps pair → D_i, a single int caps every pair, and a preset with data sizes (Chen's
    settings) caps by default), ``validation`` (in-domain held-out, ``eval_size`` examples),
    ``test`` (a second in-domain set) and ``ood`` (out-of-domain: flatter lexicon, longer
    sentences; it stands in for newstest). The splits use distinct random streams.
    """
    from mnmt.data.synthetic import get_family

    family = get_family(preset, seed=seed)
    if isinstance(caps, int):
        caps = {p: caps for p in family.pairs}
    caps = dict(family.train_sizes or {}) | dict(caps or {})
    unknown = sorted(set(caps) - set(family.pairs))
    if unknown:
        raise ValueError(f"caps for unknown pairs {unknown}: preset {preset!r} has {family.pairs}")
    for p, n in caps.items():
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"caps[{p!r}]: expected a positive int number of examples, got {n!r}")
    if eval_size < 1:
        raise ValueError(f"eval_size: expected >= 1, got {eval_size}")
    out: dict[str, str] = {}
    for pair in family.pairs:
        src, tgt = pair.split("-")
        cap = caps.get(pair)
        name = f"{prefix}_{_slug(preset)}_s{seed}_{src}_{tgt}" + (f"_d{cap}" if cap else "")
        if eval_size != EVAL_SIZE:
            name += f"_e{eval_size}"
        sizes: dict[str, int | None] = {
            "train": cap, "validation": eval_size, "test": eval_size, "ood": eval_size,
        }
        stream = _synthetic_text_stream(family, pair, sizes)

        def dataset_fn(split, shuffle_files=False, seed=None, _stream=stream):
            del shuffle_files, seed  # order is fixed; the pipeline shuffles by its own seed
            return _text_dataset(lambda: _stream(split, 0, None))

        info = TaskInfo(
            name=name,
            pair=pair,
            vocab_path=vocab_path,
            splits=("train", "validation", "test", "ood"),
            train_size=cap,
            split_sizes=sizes,
            text_stream=stream,
            definition={"kind": "synthetic", "preset": preset, "seed": seed, "pair": pair,
                        "cap": cap, "eval_size": eval_size, "vocab": vocab_path},
            extra={"family": family},
        )
        # seqio looks sizes up for every split it reads: give none when the train stream is endless
        num = None if cap is None else dict(sizes)
        out[pair] = _register(info, dataset_fn, num)
    return out


def _synthetic_text_stream(family, pair: str, sizes: Mapping[str, int | None]):
    """(split, start, seed) → iterator of (source, target) texts of a synthetic split.

    Eval splits and capped training sets are the first N examples of their streams; the
    unlimited train stream may be re-seeded (e.g. per data-parallel shard) with ``seed``.
    """

    def stream(split: str, start: int = 0, seed: Any = None) -> Iterator[tuple[str, str]]:
        if split not in sizes:
            raise ValueError(f"unknown split {split!r}: expected one of {sorted(sizes)}")
        limit = sizes[split]
        it = family.iter_texts(pair, split, start=start, seed=seed if limit is None else None)
        if limit is None:
            yield from it
            return
        for _, st in zip(range(max(0, limit - start)), it, strict=False):
            yield st

    return stream


def task_definition(pair: str, vocab_path: str, definition: Mapping[str, Any] | None) -> dict:
    """The definition :func:`register_text_task` records for a corpus (what identifies it)."""
    return {"kind": "text", "pair": pair, "vocab": vocab_path, **dict(definition or {})}


def register_text_task(
    name: str,
    pair: str,
    vocab_path: str,
    split_fns: Mapping[str, Callable[[], Iterator[tuple[str, str]]]],
    *,
    split_sizes: Mapping[str, int | None] | None = None,
    definition: Mapping[str, Any] | None = None,
) -> str:
    """Register a task from per-split callables returning (source, target) text iterators.

    Used by the bitext-file, TFDS and gettext sources; ``definition`` identifies the corpus so
    that re-registering the same corpus is harmless and a different one under the same name
    is an error.
    """
    from mnmt.data.vocab import lang_token

    src, _, tgt = pair.partition("-")
    lang_token(src)
    lang_token(tgt)
    if not split_fns:
        raise ValueError(f"task {name!r}: expected at least one split")
    sizes = dict(split_sizes or {k: None for k in split_fns})

    def stream(split: str, start: int = 0, seed: Any = None) -> Iterator[tuple[str, str]]:
        if split not in split_fns:
            raise ValueError(f"task {name!r}: unknown split {split!r}, expected {sorted(split_fns)}")
        for i, st in enumerate(split_fns[split]()):
            if i >= start:
                yield st

    def dataset_fn(split, shuffle_files=False, seed=None):
        del shuffle_files, seed
        return _text_dataset(lambda: stream(split))

    info = TaskInfo(
        name=name, pair=pair, vocab_path=vocab_path, splits=tuple(split_fns),
        train_size=sizes.get("train"), split_sizes=sizes, text_stream=stream,
        definition=task_definition(pair, vocab_path, definition),
    )
    num = dict(sizes) if all(v is not None for v in sizes.values()) else None
    return _register(info, dataset_fn, num)
