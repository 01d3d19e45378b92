"""Shared tiny configs and batches for the model tests."""

from __future__ import annotations

import numpy as np

from mnmt.models.configs import T5Config


def tiny_config(**kw) -> T5Config:
    base = dict(vocab_size=37, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
                num_encoder_layers=1, num_decoder_layers=2, dropout_rate=0.0)
    base.update(kw)
    return T5Config(**base)


def make_batch(rng: np.random.Generator, b: int = 3, ilen: int = 9, tlen: int = 7,
               vocab: int = 37, pad_tail: bool = True) -> dict[str, np.ndarray]:
    enc = rng.integers(2, vocab, (b, ilen)).astype(np.int32)
    tgt = rng.integers(2, vocab, (b, tlen)).astype(np.int32)
    if pad_tail:
        for i in range(b):
            enc[i, ilen - i:] = 0
            tgt[i, tlen - i:] = 0
    dec_in = np.concatenate([np.zeros((b, 1), np.int32), tgt[:, :-1]], axis=1)
    return {"encoder_input_tokens": enc, "decoder_input_tokens": dec_in,
            "decoder_target_tokens": tgt, "decoder_loss_weights": (tgt > 0).astype(np.float32)}


