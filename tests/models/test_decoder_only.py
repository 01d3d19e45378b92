"""Decoder-only MT (Caillaut 2024 §3.3-3.5): format, target-only loss, packing isolation,
the unmasked-packing <eos> leak, cached decoding and prompted search."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mnmt.models.decoder_only import DecoderOnlyModel, format_pair, pack_examples, prompt_of
from mnmt.models.test_utils import tiny_config

EOS, SEP, DE, EN, DOM = 1, 3, 4, 5, 6
CFG = tiny_config(vocab_size=23, architecture="decoder_only", num_encoder_layers=0,
                  num_decoder_layers=2)


@pytest.fixture(scope="module")
def setup():
    model = DecoderOnlyModel(CFG)
    x = {"decoder_input_tokens": np.zeros((1, 8), np.int32),
         "decoder_target_tokens": np.zeros((1, 8), np.int32)}
    params = jax.jit(model.init_params)(jax.random.PRNGKey(0), x)
    return model, params, jax.jit(model.apply)


def test_format_pair_layout_and_target_only_weights():
    tok, w = format_pair([10, 11, 12], [20, 21], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS,
                         src_lang_id=EN, domain_id=DOM)
    assert tok == [10, 11, 12, SEP, DE, EN, DOM, 20, 21, EOS]
    assert w == [0, 0, 0, 0, 0, 0, 0, 1, 1, 1]
    tok, w = format_pair([10], [20], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS, src_lang_id=EN,
                         prefix_eos=True, loss_on_tags=True)
    assert tok == [EOS, 10, SEP, DE, EN, 20, EOS] and w == [0, 0, 0, 0, 1, 1, 1]
    assert prompt_of([10], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS) == [10, SEP, DE]


def test_pack_examples_segments_positions_and_shift():
    ex = [format_pair([10, 11], [20], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS),
          format_pair([12], [21, 22], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS),
          format_pair([13, 14, 15, 16], [23], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)]
    b = pack_examples(ex, 12)
    assert b["decoder_target_tokens"].shape == (2, 12)
    np.testing.assert_array_equal(b["decoder_segment_ids"][0], [1] * 6 + [2] * 6)
    np.testing.assert_array_equal(b["decoder_positions"][0], list(range(6)) * 2)
    # inputs are targets shifted right inside each segment, 0 at segment starts
    assert b["decoder_input_tokens"][0, 0] == 0 and b["decoder_input_tokens"][0, 6] == 0
    assert b["decoder_input_tokens"][0, 7] == b["decoder_target_tokens"][0, 6]
    assert b["decoder_loss_weights"].sum() == 2 + 3 + 2
    with pytest.raises(ValueError, match="example 0 has 6 tokens"):
        pack_examples(ex[:1], 5)


def _masked_pair_logits(apply, params, mask_segments, first, second):
    b = pack_examples([first, second], len(first[0]) + len(second[0]),
                      mask_segments=mask_segments)
    if not mask_segments:  # GPT-NeoX style: one segment for the whole row
        b = {k: v for k, v in b.items() if k != "decoder_segment_ids"}
    return np.asarray(apply(params, b))[0], b


def test_packed_pairs_do_not_attend_to_each_other(setup):
    model, params, apply = setup
    a = format_pair([10, 11, 12], [20, 21], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)
    b1 = format_pair([13, 14], [22], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)
    b2 = format_pair([15, 16], [17], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)
    n = len(a[0])
    alone = np.asarray(apply(params, pack_examples([a], n)))[0]
    # perturbing the *first* pair leaves the second pair's outputs unchanged, and vice versa
    a2 = format_pair([18, 19, 12], [20, 21], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)
    l1, _ = _masked_pair_logits(apply, params, True, a, b1)
    l2, _ = _masked_pair_logits(apply, params, True, a, b2)
    l3, _ = _masked_pair_logits(apply, params, True, a2, b1)
    np.testing.assert_allclose(l1[:n], alone, atol=1e-5)
    np.testing.assert_allclose(l2[:n], alone, atol=1e-5)
    np.testing.assert_allclose(l3[n:], l1[n:], atol=1e-5)
    # Caillaut's unmasked packing: the second pair sees the first (the <eos> issue's cause)
    u1, _ = _masked_pair_logits(apply, params, False, a, b1)
    u3, _ = _masked_pair_logits(apply, params, False, a2, b1)
    assert np.abs(u3[n:] - u1[n:]).max() > 1e-3


def test_loss_counts_only_target_tokens(setup):
    model, params, _ = setup
    ex = [format_pair([10, 11, 12], [20, 21], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)]
    b = pack_examples(ex, 10)
    loss, aux = jax.jit(lambda p, x: model.loss_fn(p, x, None))(params, b)
    assert float(aux["num_tokens"]) == 3
    # changing a prompt *target* (never predicted) leaves nothing but the conditioning changed:
    # the loss equals the mean NLL over the three weighted positions
    logits = np.asarray(model.apply(params, b), np.float64)[0]
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    idx = np.nonzero(b["decoder_loss_weights"][0])[0]
    ref = -np.mean([logp[i, b["decoder_target_tokens"][0, i]] for i in idx])
    np.testing.assert_allclose(float(loss), ref, rtol=1e-5)


def test_cached_decoding_matches_full_forward(setup):
    model, params, apply = setup
    tok, _ = format_pair([10, 11, 12], [20, 21], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)
    b = pack_examples([tok_w for tok_w in [(tok, [1.0] * len(tok))]], len(tok))
    full = np.asarray(apply(params, b))[0]
    step = model.step_fn(params)

    @jax.jit
    def run(params):
        cache = model._init_cache(1, len(tok))
        outs = []
        for i in range(len(tok)):
            lg, cache = step(jnp.asarray(b["decoder_input_tokens"][:, i:i + 1]), cache)
            outs.append(lg[0])
        return jnp.stack(outs)

    np.testing.assert_allclose(np.asarray(run(params)), full, atol=2e-5, rtol=1e-5)


def test_prompted_greedy_matches_naive_argmax_loop(setup):
    model, params, apply = setup
    prompts = [prompt_of([10, 11, 12], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS),
               prompt_of([13], sep_id=SEP, tgt_lang_id=EN, eos_id=EOS)]
    p = np.zeros((2, 5), np.int32)
    for i, pr in enumerate(prompts):
        p[i, : len(pr)] = pr
    got = model.predict_batch(params, p, beam_size=1, alpha=0.0, max_decode_length=4)
    for i, pr in enumerate(prompts):
        seq = list(pr)
        gen = []
        for _ in range(4):
            # inputs = [0] + seq: the last position's logits predict the token after seq
            inp = np.asarray([[0] + seq], np.int32)
            lg = np.asarray(apply(params, {"decoder_input_tokens": inp,
                                           "decoder_target_tokens": np.ones_like(inp)}))[0, -1]
            nxt = int(np.argmax(lg))
            gen.append(nxt)
            seq.append(nxt)
            if nxt == EOS:
                break
        np.testing.assert_array_equal(got[i, : len(gen)], gen)
    beam = model.predict_batch(params, p, beam_size=3, alpha=1.0, max_decode_length=4)
    assert beam.shape == (2, 4)


def test_wrong_architecture_is_rejected():
    with pytest.raises(ValueError, match="decoder_only"):
        DecoderOnlyModel(tiny_config())


def test_prefix_lm_attention_is_bidirectional_only_inside_the_prompt(setup):
    """decoder_causal_attention (T5X's PrefixLM feature): prompt positions see the whole prompt,
    never the target; target positions stay causal."""
    model, params, apply = setup
    tok, w = format_pair([10, 11, 12], [20, 21], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)
    b = pack_examples([(tok, w)], len(tok))
    prefix = np.array([[1] * 6 + [0] * 2], np.int32)   # inputs 0..5 = <0> + prompt
    base = np.asarray(apply(params, {**b, "decoder_causal_attention": prefix}))[0]
    changed = {k: v.copy() for k, v in b.items()}
    changed["decoder_input_tokens"][0, 4] = 7                  # a later prompt token
    got = np.asarray(apply(params, {**changed, "decoder_causal_attention": prefix}))[0]
    assert np.abs(got[1] - base[1]).max() > 1e-4               # position 1 sees position 4
    causal = np.asarray(apply(params, b))[0]
    causal2 = np.asarray(apply(params, changed))[0]
    np.testing.assert_allclose(causal2[:4], causal[:4], atol=1e-6)   # plain causal: it doesn't
    changed["decoder_input_tokens"][0, 7] = 9                  # a target-side input
    got2 = np.asarray(apply(params, {**changed, "decoder_causal_attention": prefix}))[0]
    np.testing.assert_allclose(got2[:7], got[:7], atol=1e-6)


def test_bfloat16_activations(setup):
    """dtype='bfloat16' (Caillaut trained in bfloat16, §3.5): float32 parameters, bfloat16
    activations with float32 logits (as T5X), loss close to float32, and packed pairs stay
    isolated in bfloat16 too."""
    model, params, _ = setup
    m16 = DecoderOnlyModel(CFG.replace(dtype="bfloat16"))
    x = {"decoder_input_tokens": np.zeros((1, 8), np.int32),
         "decoder_target_tokens": np.zeros((1, 8), np.int32)}
    p16 = jax.eval_shape(lambda: m16.init_params(jax.random.PRNGKey(0), x))
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree_util.tree_leaves(p16))
    a = format_pair([10, 11, 12], [20, 21], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)
    a2 = format_pair([18, 19, 12], [20, 21], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)
    b = format_pair([13, 14], [22], sep_id=SEP, tgt_lang_id=DE, eos_id=EOS)
    n, total = len(a[0]), len(a[0]) + len(b[0])
    batch = pack_examples([a, b], total)
    apply16 = jax.jit(m16.apply)
    logits = apply16(params, batch)
    assert logits.dtype == jnp.float32
    l32 = float(model.loss_fn(params, batch, None)[0])
    l16 = float(m16.loss_fn(params, batch, None)[0])
    assert abs(l16 - l32) < 0.05 * l32
    other = np.asarray(apply16(params, pack_examples([a2, b], total)), np.float32)[0]
    np.testing.assert_array_equal(other[n:], np.asarray(logits, np.float32)[0, n:])
