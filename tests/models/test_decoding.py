"""KV-cached decoding == full forward; beam search == exhaustive search; beam 1 == greedy."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mnmt.models import decoding
from mnmt.models.encoder_decoder import EncoderDecoderModel
from mnmt.models.test_utils import make_batch, tiny_config


@pytest.fixture(scope="module")
def small():
    config = tiny_config(vocab_size=6, num_encoder_layers=1, num_decoder_layers=2)
    model = EncoderDecoderModel(config)
    batch = make_batch(np.random.default_rng(3), b=2, ilen=5, tlen=4, vocab=6, pad_tail=False)
    params = jax.jit(model.init_params)(jax.random.PRNGKey(1), batch)
    # sharpen the output distribution so the search problem is not trivially flat
    params = jax.tree_util.tree_map(lambda x: x, params)
    params["decoder"]["logits_dense"] = params["decoder"]["logits_dense"] * 4.0
    return model, params, batch


def test_cached_decoding_matches_full_forward(small):
    model, params, batch = small
    full = np.asarray(jax.jit(model.apply)(params, batch))
    enc = jnp.asarray(batch["encoder_input_tokens"])
    b, t = batch["decoder_input_tokens"].shape
    encoded = jax.jit(lambda p: model.module.apply({"params": p}, enc,
                                                    method=type(model.module).encode))(params)
    step = jax.jit(lambda p, ids, cache: model.step_fn(p, encoded, enc)(ids, cache))
    cache = model._init_cache(b, enc.shape[1], t)
    outs = []
    for i in range(t):   # one compiled step, called t times with a growing cache
        logits, cache = step(params, jnp.asarray(batch["decoder_input_tokens"][:, i:i + 1]), cache)
        outs.append(np.asarray(logits))
    np.testing.assert_allclose(np.stack(outs, axis=1), full, atol=2e-5, rtol=1e-5)
    assert int(cache["decoder"]["decoder_index"]) == t
    cross = cache["decoder"]["layers_0"]["encoder_decoder_attention"]
    assert bool(cross["cross_filled"]) and float(jnp.abs(cross["cached_cross_key"]).max()) > 0


def _all_logprobs(model, params, enc, seqs, max_len):
    """Teacher-forced Σ log p(seq) of many sequences for one source, in one padded batch."""
    n = len(seqs)
    tgt = np.zeros((n, max_len), np.int32)
    for i, s in enumerate(seqs):
        tgt[i, : len(s)] = s
    batch = {"encoder_input_tokens": np.repeat(enc[None], n, 0), "decoder_target_tokens": tgt,
             "decoder_input_tokens": np.concatenate([np.zeros((n, 1), np.int32), tgt[:, :-1]], 1),
             "decoder_loss_weights": (tgt > 0).astype(np.float32)}
    nll, _ = jax.jit(model.score_batch)(params, batch)
    return -np.asarray(nll)


def test_beam_search_finds_exhaustive_optimum(small):
    """With beam ≥ V^L every hypothesis is kept, so beam search (alpha 1.0, the paper's setting)
    must return the best EOS-terminated sequence under log p / lp(n) over all lengths ≤ L."""
    model, params, batch = small
    vocab, max_len, eos, alpha = model.config.vocab_size, 3, 1, 1.0
    toks, scores = model.predict_batch(params, batch, beam_size=vocab ** max_len, alpha=alpha,
                                       max_decode_length=max_len, return_scores=True)
    others = list(range(2, vocab))   # the searches never emit the padding id 0
    seqs = [list(p) + [eos] for n in range(1, max_len + 1)
            for p in itertools.product(others, repeat=n - 1)]
    lp = np.array([float(decoding.length_penalty(len(s), alpha)) for s in seqs])
    for i in range(batch["encoder_input_tokens"].shape[0]):
        total = _all_logprobs(model, params, batch["encoder_input_tokens"][i], seqs, max_len)
        best = int(np.argmax(total / lp))
        got = [int(x) for x in np.asarray(toks[i])]
        assert got == seqs[best] + [0] * (max_len - len(seqs[best]))
        np.testing.assert_allclose(float(scores[i]), total[best] / lp[best], rtol=1e-4,
                                   atol=1e-4)


def test_beam_one_without_length_penalty_equals_greedy(small):
    model, params, _ = small
    batch = make_batch(np.random.default_rng(5), b=4, ilen=5, tlen=6, vocab=6)
    enc = jnp.asarray(batch["encoder_input_tokens"])
    L = 6

    @jax.jit
    def both(params):
        encoded = model.module.apply({"params": params}, enc, method=type(model.module).encode)
        step = model.step_fn(params, encoded, enc)
        g, glp = decoding.greedy_search(step, model._init_cache(4, 5, L), 4, L)
        bm, bs = decoding.beam_search(step, model._init_cache(4, 5, L), 4, L, beam_size=1,
                                      alpha=0.0)
        return g, glp, bm[:, 0], bs[:, 0]

    g, glp, bm, bs = both(params)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(bm))
    finished = np.any(np.asarray(g) == 1, axis=1)
    np.testing.assert_allclose(np.asarray(glp)[finished], np.asarray(bs)[finished], rtol=1e-5)


def test_batched_beam_search_equals_one_by_one(small):
    model, params, _ = small
    batch = make_batch(np.random.default_rng(7), b=3, ilen=5, tlen=5, vocab=6)
    together = np.asarray(model.predict_batch(params, batch, beam_size=3, max_decode_length=5))
    for i in range(3):
        one = {k: v[i:i + 1] for k, v in batch.items()}
        alone = np.asarray(model.predict_batch(params, one, beam_size=3, max_decode_length=5))
        np.testing.assert_array_equal(together[i], alone[0])


def test_length_penalty_values():
    assert float(decoding.length_penalty(1, 1.0)) == pytest.approx(1.0)
    assert float(decoding.length_penalty(7, 1.0)) == pytest.approx(2.0)
    assert float(decoding.length_penalty(7, 0.0)) == pytest.approx(1.0)
