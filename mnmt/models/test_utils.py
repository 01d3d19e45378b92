"""Helpers for testing models, shipped with the package (as `seqio.test_utils` is).

Tiny configurations and random batches in T5X's feature format, and a parameter count of the
real Flax tree to check the analytic accounting against.
"""

from __future__ import annotations

import jax
import numpy as np

from mnmt.models.configs import T5Config


def tiny_config(**kw) -> T5Config:
    """A 1+2-layer model of width 16 over a 37-token vocabulary; `kw` overrides fields."""
    base = dict(vocab_size=37, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
                num_encoder_layers=1, num_decoder_layers=2, dropout_rate=0.0)
    base.update(kw)
    return T5Config(**base)


def make_batch(rng: np.random.Generator, b: int = 3, ilen: int = 9, tlen: int = 7,
               vocab: int = 37, pad_tail: bool = True) -> dict[str, np.ndarray]:
    """Random encoder-decoder batch of `b` rows; row i ends in i padding tokens if `pad_tail`."""
    enc = rng.integers(2, vocab, (b, ilen)).astype(np.int32)
    tgt = rng.integers(2, vocab, (b, tlen)).astype(np.int32)
    if pad_tail:
        for i in range(b):
            enc[i, ilen - i:] = 0
            tgt[i, tlen - i:] = 0
    dec_in = np.concatenate([np.zeros((b, 1), np.int32), tgt[:, :-1]], axis=1)
    return {"encoder_input_tokens": enc, "decoder_input_tokens": dec_in,
            "decoder_target_tokens": tgt, "decoder_loss_weights": (tgt > 0).astype(np.float32)}


def param_tree_counts(config: T5Config) -> dict[str, int]:
    """Parameters of the real Flax tree by part: total, embedding, encoder, decoder.

    Shapes only (`jax.eval_shape`, no allocation), so it works for paper-scale sizes; a check
    of `mnmt.models.accounting.param_counts` against the network itself.
    """
    if config.is_decoder_only:
        from mnmt.models.decoder_only import DecoderOnlyModel  # noqa: PLC0415

        model = DecoderOnlyModel(config)
        batch = {"decoder_input_tokens": np.zeros((1, 4), np.int32),
                 "decoder_target_tokens": np.zeros((1, 4), np.int32)}
    else:
        from mnmt.models.encoder_decoder import EncoderDecoderModel  # noqa: PLC0415

        model = EncoderDecoderModel(config)
        batch = {k: np.zeros((1, 4), np.int32) for k in
                 ("encoder_input_tokens", "decoder_input_tokens", "decoder_target_tokens")}
    shapes = jax.eval_shape(lambda: model.init_params(jax.random.PRNGKey(0), batch))
    flat = jax.tree_util.tree_flatten_with_path(shapes)[0]
    out = {"total": 0, "embedding": 0, "encoder": 0, "decoder": 0}
    for path, leaf in flat:
        keys = [getattr(p, "key", str(p)) for p in path]
        n = int(np.prod(leaf.shape))
        out["total"] += n
        if keys[-1] == "embedding" or keys[-1] == "logits_dense":
            out["embedding"] += n
        elif keys[0] == "encoder":
            out["encoder"] += n
        else:
            out["decoder"] += n
    return out
