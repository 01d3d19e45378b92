"""Parameter counts and training FLOPs from a `T5Config` (used by run.json, MFU and the fits).

Counting convention (Fernandes 2023 App. A, Ghorbani 2021 App. A): *embedding* parameters are the
vocab×emb tables — the input embedding(s) and the untied output projection ("softmax"); everything
else (attention, MLP, RMSNorm scales, relative-position tables) is *non-embedding*, split into the
encoder and decoder stacks. With this convention the Fernandes sizes reproduce the table's
"# Parameters" (total) and "Corrected # Parameters" (non-embedding) exactly (docs/reference/model_zoo.md).
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from mnmt.models.configs import T5Config

log = logging.getLogger(__name__)


class ParamCounts(NamedTuple):
    total: int
    embedding: int
    non_embedding: int
    encoder: int
    decoder: int

    def to_dict(self) -> dict[str, int]:
        """{total, embedding, non_embedding, encoder, decoder} (the `mnmt-zoo --json` keys)."""
        return dict(self._asdict())


def _mlp(c: T5Config) -> int:
    return len(c.mlp_activations) * c.emb_dim * c.mlp_dim + c.mlp_dim * c.emb_dim


def _attn(c: T5Config) -> int:
    return 4 * c.emb_dim * c.num_heads * c.head_dim


def encoder_layer_params(c: T5Config) -> int:
    """Self-attention + MLP + 2 RMSNorm scales."""
    return _attn(c) + _mlp(c) + 2 * c.emb_dim


def decoder_layer_params(c: T5Config) -> int:
    """Self-attention (+ cross-attention for encoder-decoder) + MLP + norms."""
    if c.is_decoder_only:
        return _attn(c) + _mlp(c) + 2 * c.emb_dim
    return 2 * _attn(c) + _mlp(c) + 3 * c.emb_dim


def param_counts(config: T5Config) -> ParamCounts:
    """Exact counts of the Flax parameter tree of `config` (tests check it against `init`)."""
    c = config
    relpos = c.relative_attention_num_buckets * c.num_heads
    table = c.vocab_size * c.emb_dim
    n_input_tables = 1 if (c.shared_embedding or c.is_decoder_only) else 2
    embedding = n_input_tables * table + (0 if c.logits_via_embedding else table)
    encoder = 0
    if c.num_encoder_layers:
        encoder = c.num_encoder_layers * encoder_layer_params(c) + c.emb_dim + relpos
    decoder = c.num_decoder_layers * decoder_layer_params(c) + c.emb_dim + relpos
    non_emb = encoder + decoder
    return ParamCounts(embedding + non_emb, embedding, non_emb, encoder, decoder)


def forward_flops_terms(config: T5Config, input_len: int, target_len: int) -> dict[str, float]:
    """Forward-pass FLOPs per example (multiply-add = 2 FLOPs), by term.

    Dense terms are 2 × (weights touched) × (tokens); attention terms are the two score/value
    einsums, 2·q·k·(heads·head_dim) each, over the full (unmasked) q×k matrix that the compiled
    step computes. Encoder-decoder: I = input_len encoder tokens, T = target_len decoder tokens.
    Decoder-only: one sequence of I + T tokens (source, separators and target).
    """
    c = config
    hk = c.num_heads * c.head_dim
    attn_proj = 4 * c.emb_dim * hk
    mlp = _mlp(c)
    logits = 2.0 * c.emb_dim * c.vocab_size
    terms: dict[str, float] = {}
    if c.is_decoder_only:
        n = input_len + target_len
        terms["decoder_dense"] = 2.0 * n * c.num_decoder_layers * (attn_proj + mlp)
        terms["decoder_self_attention"] = 4.0 * n * n * hk * c.num_decoder_layers
        terms["logits"] = n * logits
        return terms
    i, t = input_len, target_len
    terms["encoder_dense"] = 2.0 * i * c.num_encoder_layers * (attn_proj + mlp)
    terms["encoder_attention"] = 4.0 * i * i * hk * c.num_encoder_layers
    # decoder: self-attn q,k,v,o + cross q,o on T tokens; cross k,v on the I encoder tokens
    terms["decoder_dense"] = 2.0 * c.num_decoder_layers * (
        t * (attn_proj + 2 * c.emb_dim * hk + mlp) + i * 2 * c.emb_dim * hk)
    terms["decoder_self_attention"] = 4.0 * t * t * hk * c.num_decoder_layers
    terms["decoder_cross_attention"] = 4.0 * t * i * hk * c.num_decoder_layers
    terms["logits"] = t * logits
    return terms


def train_flops_per_example(config: T5Config, input_len: int, target_len: int) -> float:
    """Training FLOPs per example = 3 × forward (backward ≈ 2 × forward): the 6N-per-token rule
    (Kaplan et al. 2020) made exact for this architecture, plus the attention terms."""
    if input_len < 0 or target_len < 1:
        raise ValueError(f"need input_len >= 0 and target_len >= 1, got {input_len}, {target_len}")
    return 3.0 * sum(forward_flops_terms(config, input_len, target_len).values())


def six_n_flops_per_example(config: T5Config, input_len: int, target_len: int) -> float:
    """The plain 6·N·D estimate (N = non-embedding params + output projection, D = tokens):
    encoder params see I tokens, decoder params and logits see T tokens."""
    c = config
    pc = param_counts(c)
    logits = 0 if c.logits_via_embedding else c.vocab_size * c.emb_dim
    if c.is_decoder_only:
        return 6.0 * (pc.non_embedding + logits) * (input_len + target_len)
    return 6.0 * (pc.encoder * input_len + (pc.decoder + logits) * target_len)


def rows_per_step(batch_size: int, batch_tokens: int | None, targets_length: int,
                  divisor: int = 1) -> int:
    """Packed rows per training step: ``batch_size``, or ``batch_tokens // targets_length``.

    A batch given in tokens (Fernandes et al. §3: 500K target tokens) is turned into rows of the
    targets feature length; it must hold at least one row. ``divisor`` is the data-parallel size
    that splits every batch (the mesh's data axis, which spans every host, and the input
    shards): rows it does not divide are rounded down to a multiple of it with a warning
    (:func:`divisible_rows`), at config resolution rather than as an error from inside JAX.
    """
    if batch_tokens:
        rows = int(batch_tokens) // int(targets_length)
        if rows < 1:
            raise ValueError(f"batch_tokens={batch_tokens} is smaller than one target sequence "
                             f"({targets_length} tokens)")
        source = (f"TrainConfig.inputs.batch_tokens={batch_tokens} (StudySpec.batch_tokens in a "
                  f"study) // {targets_length} target tokens")
    else:
        if batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
        rows = int(batch_size)
        source = f"TrainConfig.inputs.batch_size={rows} (StudySpec.batch_size in a study)"
    return divisible_rows(rows, divisor, source)


def divisible_rows(rows: int, divisor: int, source: str) -> int:
    """``rows`` rounded down to a multiple of ``divisor``, warning (one line) when that changes it.

    Every device of the data axis gets the same number of rows, so the global batch must be a
    multiple of the data-parallel size. Rounding down keeps a batch given in tokens (500K
    tokens / 256 = 1,953 rows) usable on any slice, at most ``divisor - 1`` rows smaller;
    fewer rows than ``divisor`` cannot be split at all and raise. ``source`` names the setting
    the rows came from, for the messages.
    """
    if divisor < 1:
        raise ValueError(f"data-parallel size must be ≥ 1, got {divisor}")
    if rows < divisor:
        raise ValueError(f"{source} gives {rows} rows per step, fewer than the data-parallel "
                         f"size {divisor} (mesh data axis and input shards) that splits them")
    rounded = rows - rows % divisor
    if rounded != rows:
        log.warning("%s gives %d rows per step, not divisible by the data-parallel size %d "
                    "(mesh data axis and input shards): rounded down to %d rows",
                    source, rows, divisor, rounded)
    return rounded
