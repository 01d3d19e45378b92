"""Greedy and beam search with a key/value cache; batched and jit-compiled.

Both searches drive a `tokens_to_logits(ids [n, 1], cache) -> (logits [n, vocab], cache)` step
function (the model's incremental decoder, see `mnmt.models.t5.Decoder(decode=True)`). Sequences
start from id 0 (T5's shifted-right BOS) and end at `eos_id`.

Beam search keeps `beam_size` live hypotheses and `beam_size` finished ones per example and scores
a finished hypothesis of n tokens (EOS included) by log p / lp(n) with the GNMT length penalty
lp(n) = ((5 + n) / 6) ** alpha (Wu et al. 2016; Ghorbani 2021 App. F uses beam 4, alpha 1.0).
It stops early when no live hypothesis can still beat the worst finished one. A hypothesis that
ends (EOS) is kept only when it ranks among the step's top `beam_size` candidates, so beam 1 with
alpha = 0 is exactly greedy search (with alpha > 0 a longer hypothesis may still outscore the
greedy one after length normalisation); with beam_size ≥ V^L the search is exhaustive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array
Cache = Any
StepFn = Callable[[Array, Cache], tuple[Array, Cache]]
NEG_INF = -1.0e7


def length_penalty(length: Array | int, alpha: float) -> Array:
    """GNMT length penalty ((5 + n) / 6) ** alpha (Wu et al. 2016 §7; Ghorbani 2021 App. F
    decodes with alpha = 1.0)."""
    return jnp.power((5.0 + jnp.asarray(length, jnp.float32)) / 6.0, alpha)


def _forced(forced_tokens: Array | None, forced_len: Array | None, batch_size: int, i: Array
            ) -> tuple[Array, Array]:
    """(is_forced [batch], forced token [batch]) at step i (prompt forcing for decoder-only)."""
    if forced_tokens is None:
        return jnp.zeros((batch_size,), bool), jnp.zeros((batch_size,), jnp.int32)
    flen = forced_len if forced_len is not None else jnp.full((batch_size,),
                                                              forced_tokens.shape[1])
    col = jnp.minimum(i, forced_tokens.shape[1] - 1)
    tok = jax.lax.dynamic_slice_in_dim(forced_tokens, col, 1, axis=1)[:, 0].astype(jnp.int32)
    return i < flen, tok


def _log_probs(logits: Array, pad_id: int | None) -> Array:
    lp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    if pad_id is not None:  # never generate padding (it would read as an early end)
        lp = lp.at[..., pad_id].set(NEG_INF)
    return lp


def greedy_search(tokens_to_logits: StepFn, cache: Cache, batch_size: int, max_decode_length: int,
                  *, eos_id: int = 1, pad_id: int | None = 0, forced_tokens: Array | None = None,
                  forced_len: Array | None = None) -> tuple[Array, Array]:
    """Argmax decoding. Returns (tokens [batch, max_len] with 0 after EOS, log-prob sums [batch]).

    `forced_tokens` [batch, P] with `forced_len` [batch]: the first forced_len tokens of each row
    are imposed (a decoder-only prompt); they add no log-prob and cannot end the sequence.
    `pad_id` (default 0) is never generated.
    """

    def cond(state):
        i, _, _, _, done, _ = state
        return (i < max_decode_length) & ~jnp.all(done)

    def body(state):
        i, prev, seqs, logp, done, cache = state
        logits, cache = tokens_to_logits(prev[:, None], cache)
        lp = _log_probs(logits, pad_id)
        is_forced, ftok = _forced(forced_tokens, forced_len, batch_size, i)
        tok = jnp.where(is_forced, ftok, jnp.argmax(lp, axis=-1).astype(jnp.int32))
        tok_lp = jnp.take_along_axis(lp, tok[:, None], axis=-1)[:, 0]
        tok = jnp.where(done, 0, tok)
        logp = logp + jnp.where(done | is_forced, 0.0, tok_lp)
        seqs = jax.lax.dynamic_update_slice_in_dim(seqs, tok[:, None], i, axis=1)
        done = done | ((tok == eos_id) & ~is_forced)
        return i + 1, tok, seqs, logp, done, cache

    state = (jnp.array(0, jnp.int32), jnp.zeros((batch_size,), jnp.int32),
             jnp.zeros((batch_size, max_decode_length), jnp.int32),
             jnp.zeros((batch_size,), jnp.float32), jnp.zeros((batch_size,), bool), cache)
    _, _, seqs, logp, _, _ = jax.lax.while_loop(cond, body, state)
    return seqs, logp


def _take_beams(x: Array, beam_idx: Array) -> Array:
    """x [batch, old_beams, ...] → [batch, new_beams, ...] picking beam_idx [batch, new_beams]."""
    return jnp.take_along_axis(x, beam_idx.reshape(beam_idx.shape + (1,) * (x.ndim - 2)), 1)


def _gather_cache(cache: Any, beam_idx: Array, batch_size: int, old_beams: int) -> Any:
    """Reorder cache leaves whose leading dim is batch*beam; leave the others (indices) alone."""

    def gather(x):
        if x.ndim == 0 or x.shape[0] != batch_size * old_beams:
            return x
        y = _take_beams(x.reshape((batch_size, old_beams) + x.shape[1:]), beam_idx)
        return y.reshape((-1,) + x.shape[1:])

    return jax.tree_util.tree_map(gather, cache)


def beam_search(tokens_to_logits: StepFn, cache: Cache, batch_size: int, max_decode_length: int,
                *, beam_size: int = 4, alpha: float = 1.0, eos_id: int = 1,
                pad_id: int | None = 0, forced_tokens: Array | None = None, forced_len: Array | None = None
                ) -> tuple[Array, Array]:
    """Batched beam search. `cache` leaves have leading dim batch*beam_size (beam-major inside
    each example). Returns (sequences [batch, beam, max_len] best first, scores [batch, beam]).
    `forced_tokens`/`forced_len` as in `greedy_search` (the length penalty then counts only
    the generated tokens)."""
    B, K, L = batch_size, beam_size, max_decode_length
    flen = (jnp.zeros((B,), jnp.int32) if forced_tokens is None else
            (forced_len if forced_len is not None else jnp.full((B,), forced_tokens.shape[1])))

    def cond(state):
        i, _, alive_logp, _, fin_scores, _, _ = state
        best_alive = alive_logp[:, 0] / length_penalty(L - flen, alpha)
        worst_fin = jnp.min(fin_scores, axis=1)
        # finished scores stay NEG_INF until K hypotheses finished
        can_improve = jnp.any(best_alive > worst_fin)
        return (i < L) & can_improve

    def body(state):
        i, alive_seqs, alive_logp, fin_seqs, fin_scores, fin_flags, cache = state
        prev = jax.lax.dynamic_slice_in_dim(alive_seqs, i, 1, axis=2).reshape(B * K, 1)
        logits, cache = tokens_to_logits(prev, cache)
        lp = _log_probs(logits, pad_id)
        V = lp.shape[-1]
        lp = lp.reshape(B, K, V)
        is_forced, ftok = _forced(forced_tokens, forced_len, B, i)
        forced_lp = jnp.where(jnp.arange(V)[None, :] == ftok[:, None], 0.0, NEG_INF)
        lp = jnp.where(is_forced[:, None, None], forced_lp[:, None, :], lp)
        cand = alive_logp[:, :, None] + lp
        flat = cand.reshape(B, K * V)
        top_logp, top_idx = jax.lax.top_k(flat, 2 * K)
        beam_idx = top_idx // V
        tok = (top_idx % V).astype(jnp.int32)
        seqs = _take_beams(alive_seqs, beam_idx)                   # [B, 2K, L+1]
        seqs = jax.lax.dynamic_update_slice_in_dim(seqs, tok[:, :, None], i + 1, axis=2)
        is_eos = (tok == eos_id) & ~is_forced[:, None]
        # live hypotheses: best K that did not just end
        live_logp = jnp.where(is_eos, NEG_INF, top_logp)
        new_alive_logp, keep = jax.lax.top_k(live_logp, K)
        new_alive = jnp.take_along_axis(seqs, keep[:, :, None], axis=1)
        src_beam = jnp.take_along_axis(beam_idx, keep, axis=1)
        cache = _gather_cache(cache, src_beam, B, K)
        # finished: merge with the old finished set and keep the best K
        gen_len = (i + 1 - flen)[:, None]
        # an ended hypothesis is kept only if it ranks among the top K candidates of this step
        # (fairseq/HF convention): with K = 1 this makes beam search exactly greedy search
        finish = is_eos & (jnp.arange(2 * K) < K)[None, :]
        new_fin_scores = jnp.where(finish, top_logp / length_penalty(gen_len, alpha), NEG_INF)
        all_seqs = jnp.concatenate([fin_seqs, seqs], axis=1)
        all_scores = jnp.concatenate([fin_scores, new_fin_scores], axis=1)
        all_flags = jnp.concatenate([fin_flags, finish], axis=1)
        fin_scores, pick = jax.lax.top_k(all_scores, K)
        fin_seqs = jnp.take_along_axis(all_seqs, pick[:, :, None], axis=1)
        fin_flags = jnp.take_along_axis(all_flags, pick, axis=1)
        return i + 1, new_alive, new_alive_logp, fin_seqs, fin_scores, fin_flags, cache

    alive_seqs = jnp.zeros((B, K, L + 1), jnp.int32)
    alive_logp = jnp.tile(jnp.array([0.0] + [NEG_INF] * (K - 1), jnp.float32), (B, 1))
    fin_seqs = jnp.zeros((B, K, L + 1), jnp.int32)
    fin_scores = jnp.full((B, K), NEG_INF, jnp.float32)
    fin_flags = jnp.zeros((B, K), bool)
    state = (jnp.array(0, jnp.int32), alive_seqs, alive_logp, fin_seqs, fin_scores, fin_flags, cache)
    _, alive_seqs, alive_logp, fin_seqs, fin_scores, fin_flags, _ = jax.lax.while_loop(
        cond, body, state)
    # examples without any finished hypothesis fall back to their live ones
    none_done = ~jnp.any(fin_flags, axis=1)
    seqs = jnp.where(none_done[:, None, None], alive_seqs, fin_seqs)
    scores = jnp.where(none_done[:, None],
                       alive_logp / length_penalty((L - flen)[:, None], alpha), fin_scores)
    return seqs[:, :, 1:], scores


def repeat_for_beams(x: Array, beam_size: int) -> Array:
    """[batch, ...] → [batch*beam, ...], each example repeated beam_size times (beam-minor)."""
    return jnp.repeat(x, beam_size, axis=0)
