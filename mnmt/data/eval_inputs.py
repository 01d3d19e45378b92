"""Evaluation inputs: an eval split's raw (source, target) strings and its batches.

:func:`eval_batches` runs seqio's own task pipeline and ``EncDecFeatureConverter(pack=False)``
(decoder-only: the same task features in the decoder-only format of :mod:`mnmt.data.formats`,
one example per row) over a whole split once; the final batch is padded with rows of zero loss
weight. :func:`eval_examples` gives the split's strings in the same order (for BLEU / ChrF).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np

from mnmt.data.decoder_format import DecoderOptions, separator_of_tasks, task_tags
from mnmt.data.formats import example_format

__all__ = ["eval_examples", "eval_batches", "num_eval_batches"]


def eval_examples(task_name: str, split: str) -> list[tuple[str, str]]:
    """The raw (source, target) strings of an eval split, in order (for BLEU / ChrF)."""
    from mnmt.data.tasks import get_task_info

    info = get_task_info(task_name)
    if split not in info.splits:
        raise ValueError(f"task {task_name!r}: unknown split {split!r}, expected {info.splits}")
    limit = info.split_sizes.get(split)
    out = []
    for i, st in enumerate(info.text_stream(split, 0, None)):
        if limit is not None and i >= limit:
            break
        out.append(st)
    return out


def eval_batches(
    task_name: str,
    split: str,
    feature_lengths: Mapping[str, int],
    batch_size: int,
    *,
    with_targets: bool = False,
    architecture: str = "encoder_decoder",
    decoder_options: DecoderOptions | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Unpacked batches of the whole split once, through seqio's task pipeline and converter.

    The final batch is padded with all-zero rows (zero loss weights). With ``with_targets``
    each batch also carries ``targets_text`` (an object array of raw target strings, '' for
    padding rows) for BLEU / ChrF. ``architecture="decoder_only"``: the task's (trimmed,
    EOS-terminated) features in the decoder-only format of :mod:`mnmt.data.formats`, one
    example per row of ``inputs + targets`` tokens, loss weights on the target and EOS only
    (``decoder_options``' tags and prefix included, never weighted: see
    :meth:`~mnmt.data.decoder_format.DecoderOptions.for_eval`).
    """
    import seqio

    lengths = {k: int(feature_lengths[k]) for k in ("inputs", "targets")}
    if architecture != "decoder_only":
        example_format(architecture, lengths, options=decoder_options)  # raises on bad input
    task = seqio.get_mixture_or_task(task_name)
    ds = task.get_dataset(lengths, split=split, shuffle=False, num_epochs=1, use_cached=False)
    if architecture == "decoder_only":
        options = (decoder_options or DecoderOptions()).for_eval()
        fmt = example_format(architecture, lengths, separator_of_tasks([task_name]), options)
        tags = task_tags([task_name], options)[task_name]
        rows_of: Iterator[dict[str, np.ndarray]] = (
            {k: v[0] for k, v in fmt.pad([fmt.finish_task_features(
                ex["inputs"], ex["targets"], tags)]).items()}
            for ex in ds.as_numpy_iterator())
    else:
        rows_of = seqio.EncDecFeatureConverter(pack=False)(ds, lengths).as_numpy_iterator()
    texts = [t for _, t in eval_examples(task_name, split)] if with_targets else None
    buf: list[dict[str, np.ndarray]] = []
    n_seen = 0

    def emit(rows: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        batch = {k: np.stack([r[k] for r in rows]).astype(np.int32) for k in rows[0]}
        pad = batch_size - len(rows)
        if pad:
            batch = {k: np.concatenate([v, np.zeros((pad, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}
        return batch

    for ex in rows_of:
        buf.append(ex)
        if len(buf) == batch_size:
            b = emit(buf)
            if texts is not None:
                b["targets_text"] = np.array(texts[n_seen:n_seen + batch_size], dtype=object)
            n_seen += len(buf)
            buf = []
            yield b
    if not buf and n_seen == 0:
        raise ValueError(f"eval split {split!r} of task {task_name!r} is empty: expected examples")
    if buf:
        b = emit(buf)
        if texts is not None:
            t = texts[n_seen:n_seen + len(buf)] + [""] * (batch_size - len(buf))
            b["targets_text"] = np.array(t, dtype=object)
        yield b


def num_eval_batches(num_examples: int, batch_size: int) -> int:
    return math.ceil(num_examples / batch_size)
