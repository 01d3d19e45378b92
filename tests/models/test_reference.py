"""The Flax model against an independent float64 NumPy implementation of T5.1.1.

Guards the forward pass against well-meant edits (e.g. performance work on the attention
layout): RMSNorm, unscaled dot-product attention with relative-position bias (T5 bucketing),
padding/segment/causal masks, gated-GELU MLP, shared embedding and untied logits must all stay
exactly what T5.1.1 specifies.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from mnmt.models.encoder_decoder import EncoderDecoderModel
from mnmt.models.test_utils import make_batch, tiny_config


def _bucket(rel: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> int:
    """T5's relative position bucket of one offset (key − query), written out scalar-wise."""
    n = -rel
    ret = 0
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            ret += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact)
                            * (num_buckets - max_exact))
    return ret + min(large, num_buckets - 1)


def _rms(x, scale):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6) * scale


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attn(p, xq, xkv, allowed, relbias):
    q = np.einsum("bld,dhk->bhlk", xq, p["query"])
    k = np.einsum("bld,dhk->bhlk", xkv, p["key"])
    v = np.einsum("bld,dhk->bhlk", xkv, p["value"])
    s = np.einsum("bhqk,bhjk->bhqj", q, k)
    if relbias is not None:
        s = s + relbias[None]
    s = np.where(allowed[:, None], s, -1e10)
    o = np.einsum("bhqj,bhjk->bhqk", _softmax(s), v)
    return np.einsum("bhqk,hkd->bqd", o, p["out"])


def _mlp(p, x):
    return (_gelu(x @ p["wi_0"]) * (x @ p["wi_1"])) @ p["wo"]


def _relbias(table, q, k, bidirectional):
    idx = np.array([[_bucket(j - i, bidirectional) for j in range(k)] for i in range(q)])
    return table[:, idx]                                    # [heads, q, k]


def reference_logits(params, config, batch):
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
    enc, dec_in, tgt = (batch[k] for k in ("encoder_input_tokens", "decoder_input_tokens",
                                           "decoder_target_tokens"))
    eseg = batch.get("encoder_segment_ids", np.ones_like(enc))
    dseg = batch.get("decoder_segment_ids", np.ones_like(tgt))
    emb = p["token_embedder"]["embedding"]
    # encoder
    x = emb[enc]
    m = enc > 0
    allowed = m[:, :, None] & m[:, None, :] & (eseg[:, :, None] == eseg[:, None, :])
    rb = _relbias(p["encoder"]["relpos_bias"]["rel_embedding"], enc.shape[1], enc.shape[1], True)
    for i in range(config.num_encoder_layers):
        lp = p["encoder"][f"layers_{i}"]
        h = _rms(x, lp["pre_attention_layer_norm"]["scale"])
        x = x + _attn(lp["attention"], h, h, allowed, rb)
        x = x + _mlp(lp["mlp"], _rms(x, lp["pre_mlp_layer_norm"]["scale"]))
    encoded = _rms(x, p["encoder"]["encoder_norm"]["scale"])
    # decoder
    y = emb[dec_in]
    t = tgt > 0
    causal = np.tril(np.ones((tgt.shape[1], tgt.shape[1]), bool))
    self_ok = t[:, :, None] & t[:, None, :] & causal[None] & (dseg[:, :, None] == dseg[:, None, :])
    cross_ok = t[:, :, None] & m[:, None, :] & (dseg[:, :, None] == eseg[:, None, :])
    rb = _relbias(p["decoder"]["relpos_bias"]["rel_embedding"], tgt.shape[1], tgt.shape[1], False)
    for i in range(config.num_decoder_layers):
        lp = p["decoder"][f"layers_{i}"]
        h = _rms(y, lp["pre_self_attention_layer_norm"]["scale"])
        y = y + _attn(lp["self_attention"], h, h, self_ok, rb)
        h = _rms(y, lp["pre_cross_attention_layer_norm"]["scale"])
        y = y + _attn(lp["encoder_decoder_attention"], h, encoded, cross_ok, None)
        y = y + _mlp(lp["mlp"], _rms(y, lp["pre_mlp_layer_norm"]["scale"]))
    y = _rms(y, p["decoder"]["decoder_norm"]["scale"])
    return y @ p["decoder"]["logits_dense"]


def test_bucket_reference_matches_t5_definition():
    # spot values of T5's scheme: exact offsets below 8 (causal: 16), log buckets up to 128
    assert [_bucket(-r, False) for r in (0, 1, 15, 16, 127, 128, 1000)] == [0, 1, 15, 16, 31,
                                                                            31, 31]
    assert _bucket(3, True) == 16 + 3 and _bucket(-3, True) == 3
    from mnmt.models.layers import relative_position_bucket
    rel = np.arange(-300, 300)
    for bidi in (True, False):
        ours = relative_position_bucket(rel, bidi, 32, 128)
        assert list(ours) == [_bucket(int(r), bidi) for r in rel]


def test_flax_model_equals_numpy_reference():
    config = tiny_config(vocab_size=29, emb_dim=12, num_heads=3, head_dim=4, mlp_dim=20,
                         num_encoder_layers=2, num_decoder_layers=2)
    model = EncoderDecoderModel(config)
    rng = np.random.default_rng(11)
    batch = make_batch(rng, b=2, ilen=40, tlen=24, vocab=29)     # offsets beyond exact buckets
    # a packed row: two segments per side
    batch["encoder_segment_ids"] = np.where(np.arange(40) < 17, 1, 2)[None].repeat(2, 0)
    batch["decoder_segment_ids"] = np.where(np.arange(24) < 10, 1, 2)[None].repeat(2, 0)
    batch["decoder_input_tokens"][:, 10] = 0
    params = jax.jit(model.init_params)(jax.random.PRNGKey(4), batch)
    # give the (zero-mean, small) relative-position tables and norms visible structure
    params = jax.tree_util.tree_map(lambda a: a, params)
    for stack in ("encoder", "decoder"):
        tab = params[stack]["relpos_bias"]["rel_embedding"]
        params[stack]["relpos_bias"]["rel_embedding"] = tab * 10.0
    got = np.asarray(jax.jit(model.apply)(params, batch), np.float64)
    want = reference_logits(params, config, batch)
    w = batch["decoder_target_tokens"] > 0
    np.testing.assert_allclose(got[w], want[w], rtol=2e-4, atol=2e-4)
