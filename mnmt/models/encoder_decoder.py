"""`EncoderDecoderModel`: T5X's models role for the T5.1.1 encoder-decoder.

Batches are dicts in T5X's `EncDecFeatureConverter` format: encoder_input_tokens,
decoder_input_tokens, decoder_target_tokens, decoder_loss_weights, and optionally
encoder_segment_ids / decoder_segment_ids / encoder_positions / decoder_positions (packed).
The training loss is normalised per target token: Σ w·loss / Σ w with w = decoder_loss_weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from mnmt.models import decoding
from mnmt.models.configs import T5Config
from mnmt.models.losses import argmax_correct, cross_entropy_terms, tiled_cross_entropy_terms
from mnmt.models.t5 import EncoderDecoderTransformer, vocab_projection

Array = jax.Array
Batch = Mapping[str, Any]
REQUIRED = ("encoder_input_tokens", "decoder_input_tokens", "decoder_target_tokens")


def check_batch(batch: Batch, required: tuple[str, ...] = REQUIRED) -> None:
    """Raise KeyError naming any missing T5X feature, ValueError for a non-[batch, length] one."""
    missing = [k for k in required if k not in batch]
    if missing:
        raise KeyError(f"batch is missing feature(s) {missing}; got {sorted(batch)} "
                       "(expected T5X EncDecFeatureConverter features)")
    for k in required:
        if np.ndim(batch[k]) != 2:
            raise ValueError(f"batch[{k!r}] must be [batch, length], got shape {np.shape(batch[k])}")


def loss_weights(batch: Batch) -> Array:
    """`decoder_loss_weights` as float32, else 1 on non-padding targets (targets > 0)."""
    if "decoder_loss_weights" in batch:
        return jnp.asarray(batch["decoder_loss_weights"], jnp.float32)
    return (jnp.asarray(batch["decoder_target_tokens"]) > 0).astype(jnp.float32)


def weighted_loss(logits: Array, batch: Batch, *, label_smoothing: float,
                  z_loss: float) -> tuple[Array, dict[str, Array]]:
    """Loss per target token and the aux sums (shared with the decoder-only model)."""
    targets = jnp.asarray(batch["decoder_target_tokens"])
    loss_tok, nll, zterm = cross_entropy_terms(logits, targets, label_smoothing=label_smoothing,
                                               z_loss=z_loss)
    return weighted_terms((loss_tok, nll, zterm, argmax_correct(logits, targets)), batch)


def tiled_weighted_loss(config: Any, params: Any, hidden: Array, batch: Batch, *, tiles: int,
                        label_smoothing: float, z_loss: float) -> tuple[Array, dict[str, Array]]:
    """`weighted_loss` of the logits of the final hidden states [batch, length, emb], projected
    and scored `tiles` slices of the sequence at a time (`losses.tiled_cross_entropy_terms`): the
    full [tokens, vocab] logits and their gradient never exist at once."""
    kernel, project = vocab_projection(config, params)
    terms = tiled_cross_entropy_terms(hidden, kernel, jnp.asarray(batch["decoder_target_tokens"]),
                                      project, tiles=tiles, label_smoothing=label_smoothing,
                                      z_loss=z_loss)
    return weighted_terms(terms, batch)


def weighted_terms(terms: tuple[Array, Array, Array, Array], batch: Batch
                   ) -> tuple[Array, dict[str, Array]]:
    """Per-token (loss, nll, z-loss term, correct) -> the mean loss per weighted target token
    and the aux sums, with the weighted per-token −log p (`cross_entropy_tokens`, [batch,
    length]) that the trainer sums per pair (XLA drops it where it is not used)."""
    loss_tok, nll, zterm, correct = terms
    w = loss_weights(batch)
    num_tokens = jnp.sum(w)
    loss = jnp.sum(loss_tok * w) / jnp.maximum(num_tokens, 1.0)
    aux = {"cross_entropy_sum": jnp.sum(nll * w), "z_loss_sum": jnp.sum(zterm * w),
           "loss_sum": jnp.sum(loss_tok * w), "num_tokens": num_tokens,
           "accuracy_sum": jnp.sum(correct * w), "cross_entropy_tokens": nll * w}
    return loss, aux


class EncoderDecoderModel:
    """Init, loss, teacher-forced scoring and beam-search prediction for a `T5Config`."""

    def __init__(self, config: T5Config) -> None:
        if config.architecture != "encoder_decoder":
            raise ValueError(f"EncoderDecoderModel needs an encoder_decoder config, got "
                             f"architecture={config.architecture!r} ({config.name or 'unnamed'})")
        self.config = config
        self.module = EncoderDecoderTransformer(config)

    # ---------------------------------------------------------------- parameters
    def _dummy(self, batch: Batch) -> dict[str, Array]:
        check_batch(batch)
        return {k: jnp.zeros(np.shape(batch[k]), jnp.int32) for k in REQUIRED}

    def init_boxed(self, rng: Array, batch: Batch) -> Any:
        """Params with their `nn.LogicalPartitioned` boxes (logical axis metadata)."""
        d = self._dummy(batch)
        return self.module.init(rng, d["encoder_input_tokens"], d["decoder_input_tokens"],
                                d["decoder_target_tokens"])["params"]

    def init_params(self, rng: Array, batch: Batch) -> Any:
        """float32 parameter tree (unboxed)."""
        return nn.unbox(self.init_boxed(rng, batch))

    def params_logical_axes(self, batch: Batch | None = None) -> Any:
        """Tree of `PartitionSpec`s of logical axis names, same structure as the params."""
        if batch is None:
            batch = {k: np.zeros((1, 8), np.int32) for k in REQUIRED}
        boxed = jax.eval_shape(lambda: self.init_boxed(jax.random.PRNGKey(0), batch))
        return nn.get_partition_spec(boxed)

    # ---------------------------------------------------------------- forward
    def apply(self, params: Any, batch: Batch, dropout_rng: Array | None = None, *,
              return_hidden: bool = False) -> Array:
        """Teacher-forced logits [batch, target_len, vocab] (dropout on iff dropout_rng); the
        decoder's float32 final hidden states [batch, target_len, emb] with `return_hidden`."""
        check_batch(batch)
        rngs = {"dropout": dropout_rng} if dropout_rng is not None else None
        return self.module.apply(
            {"params": params}, batch["encoder_input_tokens"], batch["decoder_input_tokens"],
            batch["decoder_target_tokens"], batch.get("encoder_segment_ids"),
            batch.get("decoder_segment_ids"), deterministic=dropout_rng is None, rngs=rngs,
            return_hidden=return_hidden)

    def loss_fn(self, params: Any, batch: Batch, dropout_rng: Array | None, *,
                label_smoothing: float = 0.0, z_loss: float = 0.0, loss_tiles: int = 1
                ) -> tuple[Array, dict[str, Array]]:
        """Mean training loss per target token (smoothing + z-loss) and aux sums:
        cross_entropy_sum (pure −log p), z_loss_sum, loss_sum, num_tokens, accuracy_sum, and
        cross_entropy_tokens (the weighted −log p of each target position, [batch, length]).
        `loss_tiles` > 1: the output projection and loss in that many sequence slices
        (`tiled_weighted_loss`; same values, less memory)."""
        if loss_tiles != 1:
            hidden = self.apply(params, batch, dropout_rng, return_hidden=True)
            return tiled_weighted_loss(self.config, params, hidden, batch, tiles=loss_tiles,
                                       label_smoothing=label_smoothing, z_loss=z_loss)
        logits = self.apply(params, batch, dropout_rng)
        return weighted_loss(logits, batch, label_smoothing=label_smoothing, z_loss=z_loss)

    def score_batch(self, params: Any, batch: Batch) -> tuple[Array, Array]:
        """Teacher-forced (Σ −log p over weighted target tokens, #tokens) per example."""
        logits = self.apply(params, batch, None)
        w = loss_weights(batch)
        _, nll, _ = cross_entropy_terms(logits, jnp.asarray(batch["decoder_target_tokens"]))
        return jnp.sum(nll * w, axis=1), jnp.sum(w, axis=1)

    # ---------------------------------------------------------------- decoding
    def _init_cache(self, batch_size: int, enc_len: int, max_len: int) -> Any:
        def init():
            enc = jnp.ones((batch_size, enc_len), jnp.int32)
            dec = jnp.ones((batch_size, max_len), jnp.int32)
            return self.module.init(jax.random.PRNGKey(0), enc, dec, dec, decode=True)["cache"]

        shapes = jax.eval_shape(init)
        return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def step_fn(self, params: Any, encoded: Array, encoder_input_tokens: Array
                ) -> decoding.StepFn:
        """The `tokens_to_logits(ids, cache)` closure used by `mnmt.models.decoding`."""

        def tokens_to_logits(ids: Array, cache: Any) -> tuple[Array, Any]:
            logits, mutated = self.module.apply(
                {"params": params, "cache": cache}, encoded, encoder_input_tokens, ids,
                decode=True, method=EncoderDecoderTransformer.decode, mutable=["cache"])
            return logits[:, -1, :], mutated["cache"]

        return tokens_to_logits

    def predict_batch(self, params: Any, batch: Batch, *, beam_size: int = 4, alpha: float = 1.0,
                      max_decode_length: int | None = None, eos_id: int = 1,
                      return_scores: bool = False) -> Array | tuple[Array, Array]:
        """Decode the batch's inputs: beam search (beam_size > 1) or greedy (beam_size == 1
        and alpha == 0 give identical results). Returns tokens [batch, max_decode_length]
        (the best hypothesis; zeros after EOS), and its score when `return_scores`."""
        enc_tokens = jnp.asarray(batch["encoder_input_tokens"], jnp.int32)
        if max_decode_length is None:
            if "decoder_target_tokens" not in batch:
                raise ValueError("predict_batch needs max_decode_length or decoder_target_tokens")
            max_decode_length = int(np.shape(batch["decoder_target_tokens"])[1])
        fn = _predict_jit(self, int(beam_size), float(alpha), int(max_decode_length), int(eos_id))
        tokens, scores = fn(params, enc_tokens, batch.get("encoder_segment_ids"))
        return (tokens, scores) if return_scores else tokens


def _predict_impl(model: EncoderDecoderModel, beam_size: int, alpha: float, max_len: int,
                  eos_id: int, params: Any, enc_tokens: Array, enc_segments: Array | None):
    b, enc_len = enc_tokens.shape
    encoded = model.module.apply({"params": params}, enc_tokens, enc_segments,
                                 method=EncoderDecoderTransformer.encode)
    if beam_size == 1 and alpha == 0.0:
        cache = model._init_cache(b, enc_len, max_len)
        step = model.step_fn(params, encoded, enc_tokens)
        return decoding.greedy_search(step, cache, b, max_len, eos_id=eos_id)
    enc_rep = decoding.repeat_for_beams(encoded, beam_size)
    tok_rep = decoding.repeat_for_beams(enc_tokens, beam_size)
    cache = model._init_cache(b * beam_size, enc_len, max_len)
    step = model.step_fn(params, enc_rep, tok_rep)
    seqs, scores = decoding.beam_search(step, cache, b, max_len, beam_size=beam_size,
                                        alpha=alpha, eos_id=eos_id)
    return seqs[:, 0], scores[:, 0]


_JIT_CACHE: dict[tuple, Any] = {}


def _predict_jit(model: EncoderDecoderModel, beam_size: int, alpha: float, max_len: int,
                 eos_id: int):
    key = (model.config, beam_size, alpha, max_len, eos_id)
    if key not in _JIT_CACHE:
        def fn(params, enc_tokens, enc_segments):
            return _predict_impl(model, beam_size, alpha, max_len, eos_id, params, enc_tokens,
                                 enc_segments)
        _JIT_CACHE[key] = jax.jit(fn)
    return _JIT_CACHE[key]
