"""Packing and padding of tokenized examples, equivalent to seqio's feature converters.

:func:`pack_examples` reproduces ``seqio.utils.trim_and_pack_dataset`` (tf-ops variant: greedy,
in order, over one window of examples) followed by ``EncDecFeatureConverter(pack=True)``;
:func:`pad_examples` reproduces ``EncDecFeatureConverter(pack=False)``. Plain numpy, so the
training iterator can checkpoint its exact position; tests compare both with seqio row by row.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["pack_examples", "pad_examples"]


def _shift_right(tgt: np.ndarray, seg: np.ndarray | None) -> np.ndarray:
    out = np.zeros_like(tgt)
    out[:, 1:] = tgt[:, :-1]
    if seg is not None:
        first = np.ones_like(seg, dtype=bool)
        first[:, 1:] = seg[:, 1:] != seg[:, :-1]
        out[first] = 0
    return out


def pack_examples(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]], lengths: Mapping[str, int],
    labels: Sequence[int] | None = None,
) -> dict[str, np.ndarray]:
    """Pack (inputs, targets) token lists greedily in order, like seqio's tf-ops packer.

    Each example is trimmed to the feature length; a new row starts when the next example does
    not fit. Returns converted features (EncDecFeatureConverter, pack=True), one row per pack.
    With `labels` (one positive int per example, e.g. its task) the rows also hold
    ``decoder_task_ids``: each target position's example label, 0 on padding (not a seqio
    feature; the trainer reads it to split the training loss by pair).
    """
    li, lt = int(lengths["inputs"]), int(lengths["targets"])
    trimmed = [(inp[:li], tgt[:lt]) for inp, tgt in examples]
    row_of = []
    off_i: list[int] = []
    off_t: list[int] = []
    r = ni = nt = 0
    first = True
    for inp, tgt in trimmed:
        a, b = len(inp), len(tgt)
        if not first and (ni + a > li or nt + b > lt):
            r += 1
            ni = nt = 0
        first = False
        row_of.append(r)
        off_i.append(ni)
        off_t.append(nt)
        ni += a
        nt += b
    n = r + 1 if trimmed else 0
    enc, epos = _scatter([x for x, _ in trimmed], row_of, off_i, n, li)
    dec, dpos = _scatter([y for _, y in trimmed], row_of, off_t, n, lt)
    # seqio: segment ids count positions == 0 along the row and are zeroed on padding.
    eseg = (np.cumsum(epos == 0, axis=1) * (enc != 0)).astype(np.int32)
    dseg = (np.cumsum(dpos == 0, axis=1) * (dec != 0)).astype(np.int32)
    out = {
        "encoder_input_tokens": enc,
        "decoder_target_tokens": dec,
        "decoder_input_tokens": _shift_right(dec, dseg),
        "decoder_loss_weights": (dec != 0).astype(np.int32),
        "encoder_segment_ids": eseg,
        "decoder_segment_ids": dseg,
        "encoder_positions": epos,
        "decoder_positions": dpos,
    }
    if labels is not None:
        spans = [[int(k)] * len(y) for (_, y), k in zip(trimmed, labels, strict=True)]
        out["decoder_task_ids"] = _scatter(spans, row_of, off_t, n, lt)[0]
    return out


def _scatter(
    seqs: Sequence[Sequence[int]], rows: Sequence[int], offsets: Sequence[int], n: int, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and positions of variable-length sequences placed at (row, offset) in an array."""
    tokens = np.zeros((n, length), np.int32)
    positions = np.zeros((n, length), np.int32)
    lens = np.fromiter((len(x) for x in seqs), np.int64, len(seqs))
    total = int(lens.sum())
    if total:
        flat = np.fromiter(itertools.chain.from_iterable(seqs), np.int32, total)
        starts = np.cumsum(lens) - lens
        pos = np.arange(total) - np.repeat(starts, lens)
        r = np.repeat(np.asarray(rows, np.int64), lens)
        c = np.repeat(np.asarray(offsets, np.int64), lens) + pos
        tokens[r, c] = flat
        positions[r, c] = pos
    return tokens, positions


def pad_examples(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]], lengths: Mapping[str, int],
    labels: Sequence[int] | None = None,
) -> dict[str, np.ndarray]:
    """One row per example, trimmed and zero-padded (EncDecFeatureConverter, pack=False);
    `labels` as in :func:`pack_examples`."""
    li, lt = int(lengths["inputs"]), int(lengths["targets"])
    n = len(examples)
    enc = np.zeros((n, li), np.int32)
    dec = np.zeros((n, lt), np.int32)
    for r, (inp, tgt) in enumerate(examples):
        inp, tgt = inp[:li], tgt[:lt]
        enc[r, : len(inp)] = inp
        dec[r, : len(tgt)] = tgt
    out = {
        "encoder_input_tokens": enc,
        "decoder_target_tokens": dec,
        "decoder_input_tokens": _shift_right(dec, None),
        "decoder_loss_weights": (dec != 0).astype(np.int32),
    }
    if labels is not None:
        ids = np.asarray(labels, np.int32).reshape(n, 1)
        out["decoder_task_ids"] = np.where(dec != 0, ids, 0).astype(np.int32)
    return out


