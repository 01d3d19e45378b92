"""Flax building blocks of T5.1.1 (as in T5X's `t5_1_1` network), logical-axis annotated.

Every parameter is created through `nn.with_logical_partitioning` and every large activation is
constrained with `nn.with_logical_constraint`, using T5X's logical axis names ('vocab', 'embed',
'mlp', 'heads', 'kv', 'batch', 'length', 'relpos_buckets', ...). Without axis rules in scope the
constraints are no-ops, so the same modules run unchanged on one CPU device.

Layout choice (XLA:CPU speed): every projection is one 2-D matmul over (batch·length) rows
(`matmul_last`), q/k/v are then laid out as [batch, heads, length, kv] so both attention einsums
are plain batched matmuls with batch×heads leading; the attention bias (relative position +
masks) is built once per stack and shared by all its layers.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

NEG_INF = -1e10
Array = jax.Array


def kernel_init(in_axis: int | tuple[int, ...], out_axis: int | tuple[int, ...]) -> Callable:
    """T5X's default kernel init: variance_scaling(1.0, 'fan_in', 'truncated_normal')."""
    return jax.nn.initializers.variance_scaling(
        1.0, "fan_in", "truncated_normal", in_axis=in_axis, out_axis=out_axis)


def matmul_last(x: Array, w: Array) -> Array:
    """x[..., e] @ w[e, f] as one 2-D matmul (rows = all leading dims).

    On XLA:CPU a 3-D einsum such as 'ble,ef->blf' makes the backward pass transpose and copy the
    [f, b, l] gradient; the 2-D form needs no transposes (≈1.5× faster fwd+bwd per layer,
    docs/guides/models.md).
    """
    y = jnp.reshape(x, (-1, x.shape[-1])) @ w
    return jnp.reshape(y, x.shape[:-1] + (w.shape[-1],))


def activation_fn(name: str) -> Callable[[Array], Array]:
    """MLP activation by T5X name: linear, gelu (tanh approximation), gelu_exact, relu, …."""
    if name == "linear":
        return lambda x: x
    if name == "gelu":  # tanh approximation, as T5X's nn.gelu
        return lambda x: jax.nn.gelu(x, approximate=True)
    if name == "gelu_exact":
        return lambda x: jax.nn.gelu(x, approximate=False)
    return getattr(jax.nn, name)


class RMSNorm(nn.Module):
    """T5 layer norm: RMS normalisation with a learned scale, no bias, no mean subtraction."""

    epsilon: float = 1e-6
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        features = x.shape[-1]
        x32 = x.astype(jnp.float32)
        var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
        y = (x32 * jax.lax.rsqrt(var + self.epsilon)).astype(self.dtype)
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
                           (features,), jnp.float32)
        return y * scale.astype(self.dtype)


class Embed(nn.Module):
    """Token embedding table [vocab, embed]; tied logits use it through `t5.project_tied`."""

    num_embeddings: int
    features: int
    dtype: jnp.dtype = jnp.float32

    def setup(self) -> None:
        self.embedding = self.param(
            "embedding",
            nn.with_logical_partitioning(nn.initializers.normal(stddev=1.0), ("vocab", "embed")),
            (self.num_embeddings, self.features), jnp.float32)

    def __call__(self, ids: Array) -> Array:
        return jnp.take(self.embedding, ids, axis=0).astype(self.dtype)


def relative_position_bucket(relative_position: np.ndarray, bidirectional: bool,
                             num_buckets: int, max_distance: int) -> np.ndarray:
    """Bucket of (key − query) offsets, T5's scheme (Raffel et al. 2020 §2.1).

    Half of the buckets are exact small offsets, the rest log-spaced up to `max_distance`; in the
    bidirectional case the buckets are split between negative and positive offsets.
    """
    n = -np.asarray(relative_position, dtype=np.int64)
    ret = np.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0).astype(np.int64) * num_buckets
        n = np.abs(n)
    else:
        n = np.maximum(n, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    with np.errstate(divide="ignore"):
        large = max_exact + (np.log(np.maximum(n, 1) / max_exact + np.finfo(np.float32).eps)
                             / np.log(max_distance / max_exact) * (num_buckets - max_exact))
    large = np.minimum(large.astype(np.int64), num_buckets - 1)
    return (ret + np.where(is_small, n, large)).astype(np.int32)


class RelativePositionBias(nn.Module):
    """One table per stack: rel_embedding [heads, buckets]; returns bias [1, heads, q, k]."""

    num_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, qlen: int, klen: int, query_offset: Array | None = None) -> Array:
        table = self.param(
            "rel_embedding",
            nn.with_logical_partitioning(nn.initializers.normal(stddev=0.1),
                                         ("heads", "relpos_buckets")),
            (self.num_heads, self.num_buckets), jnp.float32)
        if query_offset is None:
            rel = np.arange(klen)[None, :] - np.arange(qlen)[:, None]
            buckets = relative_position_bucket(rel, self.bidirectional, self.num_buckets,
                                               self.max_distance)            # [q, k] constant
            if qlen * klen * self.num_buckets <= (1 << 20):
                # small: one-hot matmul (its gradient is a plain matmul, no scatter-add)
                onehot = np.eye(self.num_buckets, dtype=np.float32)[buckets]  # [q, k, buckets]
                bias = jnp.einsum("hn,qkn->hqk", table, jnp.asarray(onehot))
            else:
                bias = jnp.take(table, jnp.asarray(buckets), axis=1)       # [h, q, k]
        else:
            # incremental decoding: query positions query_offset .. query_offset+qlen-1 (traced)
            full = relative_position_bucket(
                np.arange(klen)[None, :] - np.arange(klen)[:, None], self.bidirectional,
                self.num_buckets, self.max_distance)                        # [klen, klen]
            rows = jax.lax.dynamic_slice_in_dim(jnp.asarray(full), query_offset, qlen, axis=0)
            bias = jnp.take(table, rows, axis=1)                             # [h, q, k]
        return bias[None].astype(self.dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head dot-product attention without biases (T5X: no 1/sqrt(d) at run time — the
    scaling is folded into the query initialiser).

    Params: query/key/value kernels [embed, heads, kv], out kernel [heads, kv, embed].
    With `decode=True` keys/values are appended to a cache ('cache' collection:
    cached_key/cached_value [batch, heads, max_len, kv], cache_index); cross-attention
    (`static_kv=True`) caches the encoder's projected keys/values once (cached_cross_*).
    """

    num_heads: int
    head_dim: int
    dropout_rate: float = 0.0
    dtype: jnp.dtype = jnp.float32

    def _kernel(self, name: str, features: int, scale: float = 1.0) -> Array:
        init = kernel_init(0, (1, 2))
        if scale != 1.0:
            base = init
            init = lambda *a: base(*a) * scale  # noqa: E731
        return self.param(name, nn.with_logical_partitioning(init, ("embed", "heads", "kv")),
                          (features, self.num_heads, self.head_dim), jnp.float32)

    def _project(self, kernel: Array, x: Array) -> Array:
        b, length, e = x.shape
        y = matmul_last(x, kernel.astype(self.dtype).reshape(e, self.num_heads * self.head_dim))
        y = y.reshape(b, length, self.num_heads, self.head_dim).transpose(0, 2, 1, 3)
        return nn.with_logical_constraint(y, ("batch", "heads", "length", "kv"))

    @nn.compact
    def __call__(self, inputs_q: Array, inputs_kv: Array, bias: Array | None,
                 *, deterministic: bool = True, decode: bool = False,
                 static_kv: bool = False) -> Array:
        """`decode` + `static_kv` (cross-attention while decoding): the keys/values of the fixed
        encoder output are projected once, on the first step, and then read from the cache."""
        wq = self._kernel("query", inputs_q.shape[-1], scale=self.head_dim ** -0.5)
        wk = self._kernel("key", inputs_kv.shape[-1])
        wv = self._kernel("value", inputs_kv.shape[-1])
        q = self._project(wq, inputs_q)
        if decode and static_kv:
            k, v = self._static_kv(wk, wv, inputs_kv)
        else:
            k, v = self._project(wk, inputs_kv), self._project(wv, inputs_kv)
            if decode:
                k, v = self._update_cache(k, v)
        logits = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        if bias is not None:
            logits = logits + bias.astype(logits.dtype)
        weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(self.dtype)
        if not deterministic and self.dropout_rate > 0.0:
            weights = nn.Dropout(self.dropout_rate, broadcast_dims=())(weights, deterministic=False)
        out = jnp.einsum("bhqk,bhkd->bhqd", weights, v)
        out = nn.with_logical_constraint(out, ("batch", "heads", "length", "kv"))
        wo = self.param("out", nn.with_logical_partitioning(kernel_init((0, 1), 2),
                                                            ("heads", "kv", "embed")),
                        (self.num_heads, self.head_dim, inputs_q.shape[-1]), jnp.float32)
        b, _, qlen, _ = out.shape
        out = out.transpose(0, 2, 1, 3).reshape(b, qlen, self.num_heads * self.head_dim)
        y = matmul_last(out, wo.astype(self.dtype).reshape(-1, wo.shape[-1]))
        return nn.with_logical_constraint(y, ("batch", "length", "embed"))

    def _static_kv(self, wk: Array, wv: Array, x: Array) -> tuple[Array, Array]:
        shape = (x.shape[0], self.num_heads, x.shape[1], self.head_dim)
        is_init = not self.has_variable("cache", "cached_cross_key")
        ck = self.variable("cache", "cached_cross_key", jnp.zeros, shape, self.dtype)
        cv = self.variable("cache", "cached_cross_value", jnp.zeros, shape, self.dtype)
        filled = self.variable("cache", "cross_filled", lambda: jnp.array(False))
        if is_init:
            return self._project(wk, x), self._project(wv, x)

        def compute(_):
            return self._project(wk, x), self._project(wv, x)

        k, v = jax.lax.cond(filled.value, lambda _: (ck.value, cv.value), compute, None)
        ck.value, cv.value, filled.value = k, v, jnp.array(True)
        return k, v

    def _update_cache(self, k: Array, v: Array) -> tuple[Array, Array]:
        is_init = not self.has_variable("cache", "cached_key")
        ck = self.variable("cache", "cached_key", jnp.zeros, k.shape, k.dtype)
        cv = self.variable("cache", "cached_value", jnp.zeros, v.shape, v.dtype)
        ci = self.variable("cache", "cache_index", lambda: jnp.array(0, dtype=jnp.int32))
        if is_init:  # initialisation call: full-length shapes define the cache
            return k, v
        step = k.shape[2]
        idx = ci.value
        ck.value = jax.lax.dynamic_update_slice_in_dim(ck.value, k.astype(ck.value.dtype), idx, 2)
        cv.value = jax.lax.dynamic_update_slice_in_dim(cv.value, v.astype(cv.value.dtype), idx, 2)
        ci.value = idx + step
        return ck.value, cv.value


class MlpBlock(nn.Module):
    """Gated MLP of T5.1.1: wo(act_0(x wi_0) * act_1(x wi_1)); one activation = ungated (wi)."""

    mlp_dim: int
    activations: tuple[str, ...] = ("gelu", "linear")
    dropout_rate: float = 0.0
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: Array, *, deterministic: bool = True) -> Array:
        emb = x.shape[-1]
        h = None
        for i, act in enumerate(self.activations):
            name = "wi" if len(self.activations) == 1 else f"wi_{i}"
            w = self.param(name, nn.with_logical_partitioning(kernel_init(0, 1), ("embed", "mlp")),
                           (emb, self.mlp_dim), jnp.float32)
            y = activation_fn(act)(matmul_last(x, w.astype(self.dtype)))
            h = y if h is None else h * y
        h = nn.with_logical_constraint(h, ("batch", "length", "mlp"))
        if not deterministic and self.dropout_rate > 0.0:
            h = nn.Dropout(self.dropout_rate, broadcast_dims=(-2,))(h, deterministic=False)
        wo = self.param("wo", nn.with_logical_partitioning(kernel_init(0, 1), ("mlp", "embed")),
                        (self.mlp_dim, emb), jnp.float32)
        out = matmul_last(h, wo.astype(self.dtype))
        return nn.with_logical_constraint(out, ("batch", "length", "embed"))


def attention_mask_bias(query_mask: Array, key_mask: Array, *, causal: bool = False,
                        query_segment_ids: Array | None = None,
                        key_segment_ids: Array | None = None,
                        dtype: jnp.dtype = jnp.float32) -> Array:
    """Additive bias [batch, 1, q, k]: 0 where attention is allowed, −1e10 elsewhere.

    Allowed = both tokens are real (non-padding), same packed segment, and (if causal) key ≤ query.
    """
    allowed = query_mask[:, :, None] & key_mask[:, None, :]
    if query_segment_ids is not None and key_segment_ids is not None:
        allowed = allowed & (query_segment_ids[:, :, None] == key_segment_ids[:, None, :])
    if causal:
        q, k = query_mask.shape[1], key_mask.shape[1]
        allowed = allowed & jnp.asarray(np.tril(np.ones((q, k), dtype=bool)))[None]
    return jnp.where(allowed, 0.0, NEG_INF).astype(dtype)[:, None]
