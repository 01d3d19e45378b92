"""The T5.1.1 networks in Flax: encoder, decoder, encoder-decoder and decoder-only transformers.

Structure and parameter names follow T5X's `t5_1_1` network (token_embedder, encoder/layers_i,
decoder/layers_i, relpos_bias, *_layer_norm, attention, mlp, logits_dense): pre-norm RMSNorm,
gated-GELU MLP, no biases, one relative position bias table per stack (32 buckets, max distance
128; bidirectional in the encoder, causal in the decoder), one input embedding shared by encoder
and decoder, untied logits, dropout after embeddings, sub-layers and final norm.

Packed inputs: `*_segment_ids` keep packed examples from attending to each other. Positions are
not needed by the relative bias (offsets inside a segment equal offsets of the row indices).

Mixed precision (`T5Config.dtype="bfloat16"`): activations and matmuls in bfloat16, parameters
float32 (cast at use), the logits projection in float32 as T5X's `logits_dense` and
`Embed.attend` do (`project_untied`, `project_tied`), so the softmax and the loss see float32
logits. Rematerialisation (`T5Config.remat_policy`) wraps each encoder/decoder layer in
`nn.remat` with a `jax.checkpoint` policy, as T5X's scalable_t5 and MaxText do; it is used for
training only (incremental decoding has no backward pass).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from mnmt.models.configs import REMAT_POLICIES, T5Config
from mnmt.models.layers import (
    Embed,
    MlpBlock,
    MultiHeadAttention,
    RelativePositionBias,
    RMSNorm,
    attention_mask_bias,
    kernel_init,
    matmul_last,
)

Array = jax.Array


def _dtype(config: T5Config) -> jnp.dtype:
    return jnp.dtype(config.dtype)


def checkpoint_policy(name: str):
    """The `jax.checkpoint` policy of a `T5Config.remat_policy` other than "none"."""
    policies = jax.checkpoint_policies
    table = {"full": policies.nothing_saveable,
             "minimal": policies.checkpoint_dots_with_no_batch_dims,
             "dots_saveable": policies.checkpoint_dots}
    if name not in table:
        raise ValueError(f"remat_policy must be one of {REMAT_POLICIES}, got {name!r}")
    return table[name]


@functools.cache
def _rematted(layer: type, policy: str, static_argnums: tuple[int, ...]) -> type:
    return nn.remat(layer, policy=checkpoint_policy(policy), static_argnums=static_argnums)


def layer_class(layer: type, config: T5Config, static_argnums: tuple[int, ...],
                decode: bool = False) -> type:
    """`layer` itself, or wrapped in `nn.remat` with the config's policy (training only).

    `static_argnums` index the Python-bool arguments of `layer.__call__` (self is 0). The
    wrapped layer has the same name and parameters, so checkpoints do not depend on the policy.
    """
    if config.remat_policy == "none" or decode:
        return layer
    return _rematted(layer, config.remat_policy, tuple(static_argnums))


class EncoderLayer(nn.Module):
    config: T5Config

    @nn.compact
    def __call__(self, x: Array, bias: Array, deterministic: bool) -> Array:
        c, dt = self.config, _dtype(self.config)
        drop = nn.Dropout(c.dropout_rate, broadcast_dims=(-2,))
        h = RMSNorm(dtype=dt, name="pre_attention_layer_norm")(x)
        h = MultiHeadAttention(c.num_heads, c.head_dim, c.dropout_rate, dt, name="attention")(
            h, h, bias, deterministic=deterministic)
        x = x + drop(h, deterministic=deterministic)
        h = RMSNorm(dtype=dt, name="pre_mlp_layer_norm")(x)
        h = MlpBlock(c.mlp_dim, c.mlp_activations, c.dropout_rate, dt, name="mlp")(
            h, deterministic=deterministic)
        x = x + drop(h, deterministic=deterministic)
        return nn.with_logical_constraint(x, ("batch", "length", "embed"))


class DecoderLayer(nn.Module):
    config: T5Config
    cross_attention: bool = True

    @nn.compact
    def __call__(self, x: Array, self_bias: Array, encoded: Array | None, cross_bias: Array | None,
                 deterministic: bool, decode: bool = False) -> Array:
        c, dt = self.config, _dtype(self.config)
        drop = nn.Dropout(c.dropout_rate, broadcast_dims=(-2,))
        h = RMSNorm(dtype=dt, name="pre_self_attention_layer_norm")(x)
        h = MultiHeadAttention(c.num_heads, c.head_dim, c.dropout_rate, dt, name="self_attention")(
            h, h, self_bias, deterministic=deterministic, decode=decode)
        x = x + drop(h, deterministic=deterministic)
        if self.cross_attention:
            h = RMSNorm(dtype=dt, name="pre_cross_attention_layer_norm")(x)
            h = MultiHeadAttention(c.num_heads, c.head_dim, c.dropout_rate, dt,
                                   name="encoder_decoder_attention")(
                h, encoded, cross_bias, deterministic=deterministic, decode=decode,
                static_kv=True)
            x = x + drop(h, deterministic=deterministic)
        h = RMSNorm(dtype=dt, name="pre_mlp_layer_norm")(x)
        h = MlpBlock(c.mlp_dim, c.mlp_activations, c.dropout_rate, dt, name="mlp")(
            h, deterministic=deterministic)
        x = x + drop(h, deterministic=deterministic)
        return nn.with_logical_constraint(x, ("batch", "length", "embed"))


class Encoder(nn.Module):
    config: T5Config
    shared_embedding: nn.Module

    @nn.compact
    def __call__(self, tokens: Array, segment_ids: Array | None = None,
                 deterministic: bool = True) -> Array:
        c, dt = self.config, _dtype(self.config)
        length = tokens.shape[1]
        mask = tokens > 0
        bias = attention_mask_bias(mask, mask, query_segment_ids=segment_ids,
                                   key_segment_ids=segment_ids, dtype=dt)
        rel = RelativePositionBias(c.num_heads, c.relative_attention_num_buckets,
                                   c.relative_attention_max_distance, True, dt,
                                   name="relpos_bias")(length, length)
        bias = nn.with_logical_constraint(bias + rel, ("batch", "heads", "length", None))
        x = self.shared_embedding(tokens.astype(jnp.int32))
        x = nn.Dropout(c.dropout_rate, broadcast_dims=(-2,))(x, deterministic=deterministic)
        x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
        layer = layer_class(EncoderLayer, c, static_argnums=(3,))   # (self, x, bias, deterministic)
        for i in range(c.num_encoder_layers):
            x = layer(c, name=f"layers_{i}")(x, bias, deterministic)
        x = RMSNorm(dtype=dt, name="encoder_norm")(x)
        return nn.Dropout(c.dropout_rate, broadcast_dims=(-2,))(x, deterministic=deterministic)


class Decoder(nn.Module):
    """Causal decoder stack; with `encoded` it cross-attends (encoder-decoder), else decoder-only.

    `decode=True`: incremental decoding with a KV cache; the first call (during `init`) with the
    full-length input creates the cache, later calls take a [batch, n] chunk of new tokens.
    """

    config: T5Config
    shared_embedding: nn.Module | None = None

    @nn.compact
    def __call__(self, tokens: Array, encoded: Array | None = None,
                 encoder_mask: Array | None = None, segment_ids: Array | None = None,
                 encoder_segment_ids: Array | None = None, *, deterministic: bool = True,
                 decode: bool = False, target_mask: Array | None = None,
                 prefix_mask: Array | None = None, return_hidden: bool = False) -> Array:
        """Logits [batch, len, vocab]; `return_hidden`: the float32 final hidden states
        [batch, len, emb] instead, for a loss that projects them itself (`vocab_projection`)."""
        c, dt = self.config, _dtype(self.config)
        qlen = tokens.shape[1]
        cross = encoded is not None
        relpos = RelativePositionBias(c.num_heads, c.relative_attention_num_buckets,
                                      c.relative_attention_max_distance, False, dt,
                                      name="relpos_bias")
        if decode:
            is_init = not self.has_variable("cache", "decoder_index")
            index = self.variable("cache", "decoder_index", lambda: jnp.array(0, jnp.int32))
            marker = self.variable("cache", "length_marker", jnp.zeros, (1, qlen), jnp.int8)
            klen = marker.value.shape[1]
            offset = jnp.array(0, jnp.int32) if is_init else index.value
            rel = relpos(qlen, klen, query_offset=offset)
            qpos = offset + jnp.arange(qlen)
            allowed = jnp.arange(klen)[None, :] <= qpos[:, None]
            self_bias = jnp.where(allowed, 0.0, -1e10).astype(dt)[None, None] + rel
            if not is_init:
                index.value = offset + qlen
        else:
            # decoder inputs start with id 0 (shifted right), so padding comes from the targets
            mask = jnp.ones(tokens.shape, bool) if target_mask is None else target_mask
            self_bias = attention_mask_bias(mask, mask, causal=True, query_segment_ids=segment_ids,
                                            key_segment_ids=segment_ids, dtype=dt)
            if prefix_mask is not None:  # prefix-LM: bidirectional attention inside the prefix
                both = prefix_mask[:, :, None] & prefix_mask[:, None, :]
                if segment_ids is not None:
                    both = both & (segment_ids[:, :, None] == segment_ids[:, None, :])
                self_bias = jnp.where(both[:, None], 0.0, self_bias)
            self_bias = self_bias + relpos(qlen, qlen)
        self_bias = nn.with_logical_constraint(self_bias, ("batch", "heads", "length", None))
        cross_bias = None
        if cross:
            qmask = jnp.ones(tokens.shape, bool) if (decode or target_mask is None) else target_mask
            cross_bias = attention_mask_bias(
                qmask, encoder_mask, query_segment_ids=None if decode else segment_ids,
                key_segment_ids=None if decode else encoder_segment_ids, dtype=dt)
        if self.shared_embedding is not None:
            embed = self.shared_embedding
        else:
            embed = Embed(c.vocab_size, c.emb_dim, dt, name="token_embedder")
        x = embed(tokens.astype(jnp.int32))
        x = nn.Dropout(c.dropout_rate, broadcast_dims=(-2,))(x, deterministic=deterministic)
        x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
        # (self, x, self_bias, encoded, cross_bias, deterministic, decode)
        layer = layer_class(DecoderLayer, c, static_argnums=(5, 6), decode=decode)
        for i in range(c.num_decoder_layers):
            x = layer(c, cross_attention=cross, name=f"layers_{i}")(
                x, self_bias, encoded, cross_bias, deterministic, decode)
        x = RMSNorm(dtype=dt, name="decoder_norm")(x)
        x = nn.Dropout(c.dropout_rate, broadcast_dims=(-2,))(x, deterministic=deterministic)
        # The logits in float32 whatever the activation dtype, as T5X's logits_dense and
        # Embed.attend compute them (project_untied, project_tied): the softmax over the
        # vocabulary and the loss never see bfloat16 logits.
        x = x.astype(jnp.float32)
        if return_hidden:
            return nn.with_logical_constraint(x, ("batch", "length", "embed"))
        if c.logits_via_embedding:
            return project_tied(float(c.emb_dim), x, embed.embedding)
        w = self.param("logits_dense", nn.with_logical_partitioning(
            kernel_init(0, 1), ("embed", "vocab")), (c.emb_dim, c.vocab_size), jnp.float32)
        return project_untied(x, w)


class EncoderDecoderTransformer(nn.Module):
    """T5.1.1 encoder-decoder (T5X `t5_1_1` network)."""

    config: T5Config

    def setup(self) -> None:
        c = self.config
        self.token_embedder = Embed(c.vocab_size, c.emb_dim, _dtype(c))
        self.encoder = Encoder(c, self.token_embedder)
        self.decoder = Decoder(c, self.token_embedder if c.shared_embedding else None)

    def encode(self, encoder_input_tokens: Array, encoder_segment_ids: Array | None = None,
               deterministic: bool = True) -> Array:
        """Encoder output [batch, input_len, emb] (final RMSNorm applied)."""
        return self.encoder(encoder_input_tokens, encoder_segment_ids, deterministic)

    def decode(self, encoded: Array, encoder_input_tokens: Array, decoder_input_tokens: Array,
               decoder_target_tokens: Array | None = None,
               encoder_segment_ids: Array | None = None,
               decoder_segment_ids: Array | None = None, *, deterministic: bool = True,
               decode: bool = False, return_hidden: bool = False) -> Array:
        """Decoder logits [batch, len, vocab] (or its final hidden states, `return_hidden`);
        `decode=True` runs one step with the KV cache."""
        target_mask = None if decoder_target_tokens is None else decoder_target_tokens > 0
        return self.decoder(decoder_input_tokens, encoded, encoder_input_tokens > 0,
                            decoder_segment_ids, encoder_segment_ids,
                            deterministic=deterministic, decode=decode, target_mask=target_mask,
                            return_hidden=return_hidden)

    def __call__(self, encoder_input_tokens: Array, decoder_input_tokens: Array,
                 decoder_target_tokens: Array, encoder_segment_ids: Array | None = None,
                 decoder_segment_ids: Array | None = None, *, deterministic: bool = True,
                 decode: bool = False, return_hidden: bool = False) -> Array:
        encoded = self.encode(encoder_input_tokens, encoder_segment_ids, deterministic)
        return self.decode(encoded, encoder_input_tokens, decoder_input_tokens,
                           decoder_target_tokens, encoder_segment_ids, decoder_segment_ids,
                           deterministic=deterministic, decode=decode,
                           return_hidden=return_hidden)


class DecoderOnlyTransformer(nn.Module):
    """Causal decoder-only LM built from the same T5.1.1 layers (no cross-attention)."""

    config: T5Config

    def setup(self) -> None:
        self.decoder = Decoder(self.config, None)

    def __call__(self, decoder_input_tokens: Array, decoder_target_tokens: Array | None = None,
                 decoder_segment_ids: Array | None = None, *, deterministic: bool = True,
                 decode: bool = False, decoder_causal_attention: Array | None = None,
                 return_hidden: bool = False) -> Array:
        target_mask = None if decoder_target_tokens is None else decoder_target_tokens > 0
        prefix = None if decoder_causal_attention is None else decoder_causal_attention > 0
        return self.decoder(decoder_input_tokens, segment_ids=decoder_segment_ids,
                            deterministic=deterministic, decode=decode, target_mask=target_mask,
                            prefix_mask=prefix, return_hidden=return_hidden)


def vocab_projection(config: T5Config, params: Any) -> tuple[Array, Callable[[Array, Array], Array]]:
    """(kernel, project) of the decoder's output projection in a parameter tree of
    `EncoderDecoderTransformer` or `DecoderOnlyTransformer`: `project(hidden, kernel)` gives the
    float32 logits with the functions `Decoder` itself uses (`project_tied`, `project_untied`).
    For losses that project slices of the hidden states themselves."""
    decoder = params["decoder"]
    if not config.logits_via_embedding:
        return decoder["logits_dense"], project_untied
    # a decoder-only model, or an encoder-decoder without a shared embedding, has its own table
    table = decoder["token_embedder"] if "token_embedder" in decoder else params["token_embedder"]
    return table["embedding"], functools.partial(project_tied, float(config.emb_dim))


def project_untied(x: Array, kernel: Array) -> Array:
    """Untied logits x·W [batch, len, vocab] in float32 (T5X's `logits_dense`), W [emb, vocab]."""
    logits = matmul_last(x.astype(jnp.float32), kernel)
    return nn.with_logical_constraint(logits, ("batch", "length", "vocab"))


def project_tied(emb_dim: float, x: Array, embedding: Array) -> Array:
    """Tied logits x·Eᵀ/√emb_dim [batch, len, vocab] in float32 with the embedding table
    E [vocab, emb] (T5X's `Embed.attend` with `attend_dtype=float32`, then its rescaling)."""
    logits = jnp.einsum("ble,ve->blv", x.astype(jnp.float32), embedding) / \
        jnp.sqrt(jnp.asarray(emb_dim, jnp.float32))
    return nn.with_logical_constraint(logits, ("batch", "length", "vocab"))
