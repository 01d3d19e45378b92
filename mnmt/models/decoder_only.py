"""Decoder-only MT (Caillaut et al. 2024 §3.3-3.5): example format, packing, `DecoderOnlyModel`.

One example is `source </src> <lang_tgt> [<lang_src>] [<dom_…>] target <eos>` (§3.3); the loss is
on the target tokens (and EOS) only (§3.4); optionally also on the source-language / domain tokens,
which §3.3 treats as outputs the model may predict. Packing puts several examples in one row;
with `mask_segments=True` (default) each example gets its own segment id, so attention never
crosses examples and the relative position bias restarts — this removes the cause of Caillaut's
"<eos> issue" (§3.3.1: without masks, every packed pair except the first is preceded by the
previous pair's <eos>, so the model learns <eos> as a "start of translation" cue and degrades when
it is missing at inference). `mask_segments=False` reproduces their unmasked packing, and
`prefix_eos=True` is their fix (prefix every source with <eos>, in training and inference).
Batches use T5X's DecoderFeatureConverter names: decoder_target_tokens, decoder_input_tokens,
decoder_loss_weights, decoder_segment_ids, decoder_positions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from mnmt.models import decoding
from mnmt.models.configs import T5Config
from mnmt.models.encoder_decoder import tiled_weighted_loss, weighted_loss
from mnmt.models.losses import cross_entropy_terms
from mnmt.models.t5 import DecoderOnlyTransformer

Array = jax.Array
Batch = Mapping[str, Any]


def format_pair(source: Sequence[int], target: Sequence[int], *, sep_id: int, tgt_lang_id: int,
                eos_id: int, src_lang_id: int | None = None, domain_id: int | None = None,
                prefix_eos: bool = False, loss_on_tags: bool = False
                ) -> tuple[list[int], list[float]]:
    """Token ids and loss weights of one Caillaut-format example (§3.3).

    Returns (tokens, weights): weights are 1 on target tokens and <eos> (and on the optional
    source-language/domain tokens when `loss_on_tags`), 0 on the prompt.
    """
    prompt = ([eos_id] if prefix_eos else []) + list(source) + [sep_id, tgt_lang_id]
    tags = [t for t in (src_lang_id, domain_id) if t is not None]
    output = list(target) + [eos_id]
    tokens = prompt + tags + output
    weights = [0.0] * len(prompt) + [1.0 if loss_on_tags else 0.0] * len(tags) + [1.0] * len(output)
    return tokens, weights


def prompt_of(source: Sequence[int], *, sep_id: int, tgt_lang_id: int, eos_id: int,
              src_lang_id: int | None = None, domain_id: int | None = None,
              prefix_eos: bool = False) -> list[int]:
    """The inference prompt: everything before the target (given tags are forced)."""
    tags = [t for t in (src_lang_id, domain_id) if t is not None]
    return ([eos_id] if prefix_eos else []) + list(source) + [sep_id, tgt_lang_id] + tags


def pack_examples(examples: Iterable[tuple[Sequence[int], Sequence[float]]], length: int, *,
                  mask_segments: bool = True, labels: Sequence[int] | None = None
                  ) -> dict[str, np.ndarray]:
    """Greedy first-fit packing of (tokens, weights) examples into rows of `length`.

    Inputs are targets shifted right *within each segment* (0 at each segment start) when
    `mask_segments`, across the whole row otherwise (GPT-NeoX-style packing). Examples longer
    than `length` raise ValueError naming the example index. With `labels` (one positive int
    per example, e.g. its task) the rows also hold ``decoder_task_ids``: each position's example
    label, 0 on padding (the trainer splits the training loss by pair with it).
    """
    rows: list[list[tuple[list[int], list[float], int]]] = []
    fill: list[int] = []
    examples = list(examples)
    tags = [0] * len(examples) if labels is None else [int(k) for k in labels]
    if len(tags) != len(examples):
        raise ValueError(f"{len(examples)} examples but {len(tags)} labels")
    for i, ((tok, w), label) in enumerate(zip(examples, tags, strict=True)):
        tok, w = list(tok), list(w)
        if len(tok) != len(w):
            raise ValueError(f"example {i}: {len(tok)} tokens but {len(w)} loss weights")
        if len(tok) > length:
            raise ValueError(f"example {i} has {len(tok)} tokens > packed length {length}")
        for r, used in enumerate(fill):
            if used + len(tok) <= length:
                rows[r].append((tok, w, label))
                fill[r] += len(tok)
                break
        else:
            rows.append([(tok, w, label)])
            fill.append(len(tok))
    n = len(rows)
    out = {k: np.zeros((n, length), np.int32) for k in
           ("decoder_target_tokens", "decoder_input_tokens", "decoder_segment_ids",
            "decoder_positions", "decoder_task_ids")}
    out["decoder_loss_weights"] = np.zeros((n, length), np.float32)
    for r, row in enumerate(rows):
        pos = 0
        for s, (tok, w, label) in enumerate(row):
            sl = slice(pos, pos + len(tok))
            out["decoder_target_tokens"][r, sl] = tok
            out["decoder_loss_weights"][r, sl] = w
            out["decoder_task_ids"][r, sl] = label
            out["decoder_segment_ids"][r, sl] = s + 1 if mask_segments else 1
            out["decoder_positions"][r, sl] = np.arange(len(tok)) if mask_segments else \
                np.arange(pos, pos + len(tok))
            pos += len(tok)
        tgt = out["decoder_target_tokens"][r]
        shifted = np.concatenate([[0], tgt[:-1]])
        if mask_segments:
            starts = out["decoder_positions"][r] == 0
            shifted = np.where(starts, 0, shifted)
        out["decoder_input_tokens"][r] = shifted
    if labels is None:
        del out["decoder_task_ids"]
    return out


class DecoderOnlyModel:
    """Init, loss (target tokens only, via decoder_loss_weights), scoring and prompted decoding."""

    def __init__(self, config: T5Config) -> None:
        if config.architecture != "decoder_only":
            raise ValueError(f"DecoderOnlyModel needs a decoder_only config, got "
                             f"architecture={config.architecture!r} ({config.name or 'unnamed'})")
        self.config = config
        self.module = DecoderOnlyTransformer(config)
        self._search_jit: dict[tuple, Any] = {}

    @staticmethod
    def _check(batch: Batch) -> None:
        for k in ("decoder_input_tokens", "decoder_target_tokens"):
            if k not in batch:
                raise KeyError(f"batch is missing feature {k!r}; got {sorted(batch)} "
                               "(expected T5X DecoderFeatureConverter features)")
            if np.ndim(batch[k]) != 2:
                raise ValueError(f"batch[{k!r}] must be [batch, length], got {np.shape(batch[k])}")

    def init_boxed(self, rng: Array, batch: Batch) -> Any:
        """Params with their `nn.LogicalPartitioned` boxes (logical axis metadata)."""
        self._check(batch)
        x = jnp.zeros(np.shape(batch["decoder_input_tokens"]), jnp.int32)
        return self.module.init(rng, x, x)["params"]

    def init_params(self, rng: Array, batch: Batch) -> Any:
        """float32 parameter tree (unboxed)."""
        return nn.unbox(self.init_boxed(rng, batch))

    def params_logical_axes(self, batch: Batch | None = None) -> Any:
        """Tree of `PartitionSpec`s of logical axis names, same structure as the params."""
        if batch is None:
            batch = {k: np.zeros((1, 8), np.int32)
                     for k in ("decoder_input_tokens", "decoder_target_tokens")}
        boxed = jax.eval_shape(lambda: self.init_boxed(jax.random.PRNGKey(0), batch))
        return nn.get_partition_spec(boxed)

    def apply(self, params: Any, batch: Batch, dropout_rng: Array | None = None, *,
              return_hidden: bool = False) -> Array:
        """Teacher-forced logits [batch, length, vocab] (float32 final hidden states
        [batch, length, emb] with `return_hidden`); packed rows need decoder_segment_ids
        (no attention across pairs, Caillaut §3.3.1 without the separator issue)."""
        self._check(batch)
        rngs = {"dropout": dropout_rng} if dropout_rng is not None else None
        return self.module.apply(
            {"params": params}, batch["decoder_input_tokens"], batch["decoder_target_tokens"],
            batch.get("decoder_segment_ids"), deterministic=dropout_rng is None, rngs=rngs,
            decoder_causal_attention=batch.get("decoder_causal_attention"),
            return_hidden=return_hidden)

    def loss_fn(self, params: Any, batch: Batch, dropout_rng: Array | None, *,
                label_smoothing: float = 0.0, z_loss: float = 0.0, loss_tiles: int = 1
                ) -> tuple[Array, dict[str, Array]]:
        """Same contract as `EncoderDecoderModel.loss_fn`; weights select the target tokens."""
        if "decoder_loss_weights" not in batch:
            raise KeyError("decoder-only batches need decoder_loss_weights (loss on target "
                           "tokens only, Caillaut §3.4)")
        if loss_tiles != 1:
            hidden = self.apply(params, batch, dropout_rng, return_hidden=True)
            return tiled_weighted_loss(self.config, params, hidden, batch, tiles=loss_tiles,
                                       label_smoothing=label_smoothing, z_loss=z_loss)
        return weighted_loss(self.apply(params, batch, dropout_rng), batch,
                             label_smoothing=label_smoothing, z_loss=z_loss)

    def score_batch(self, params: Any, batch: Batch) -> tuple[Array, Array]:
        """Teacher-forced (Σ −log p over target tokens, #target tokens) per row (§3.4)."""
        logits = self.apply(params, batch, None)
        w = jnp.asarray(batch["decoder_loss_weights"], jnp.float32)
        _, nll, _ = cross_entropy_terms(logits, jnp.asarray(batch["decoder_target_tokens"]))
        return jnp.sum(nll * w, axis=1), jnp.sum(w, axis=1)

    # ------------------------------------------------------------------ decoding
    def _init_cache(self, batch_size: int, max_len: int) -> Any:
        def init():
            x = jnp.ones((batch_size, max_len), jnp.int32)
            return self.module.init(jax.random.PRNGKey(0), x, x, decode=True)["cache"]

        shapes = jax.eval_shape(init)
        return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def step_fn(self, params: Any) -> decoding.StepFn:
        """The `tokens_to_logits(ids, cache)` closure used by `mnmt.models.decoding`."""
        def tokens_to_logits(ids: Array, cache: Any) -> tuple[Array, Any]:
            logits, mutated = self.module.apply({"params": params, "cache": cache}, ids,
                                                decode=True, mutable=["cache"])
            return logits[:, -1, :], mutated["cache"]

        return tokens_to_logits

    def predict_batch(self, params: Any, prompts: np.ndarray, *, beam_size: int = 4,
                      alpha: float = 1.0, max_decode_length: int = 64, eos_id: int = 1
                      ) -> np.ndarray:
        """Continue each prompt (rows of `prompts` [batch, P], right-padded with 0; a prompt
        must not start with 0): the prompt is forced token by token, then greedy (beam 1,
        alpha 0) or beam search. Returns the generated tokens [batch, max_decode_length]."""
        prompts = np.asarray(prompts, np.int32)
        plen = (prompts > 0).sum(axis=1).astype(np.int32)
        if np.any(prompts[:, 0] == 0):
            raise ValueError("every prompt needs at least one token (row with prompt[0] == 0)")
        b, p = prompts.shape
        total = p + max_decode_length
        k = 1 if (beam_size == 1 and alpha == 0.0) else int(beam_size)
        # decoder inputs start with 0 (shifted right), so the prompt is forced from step 0
        forced = jnp.asarray(prompts)
        key = (b, total, k, float(alpha), int(eos_id))
        if key not in self._search_jit:  # one compilation per shape and setting, not per call
            def search(prm, f, n):
                cache = self._init_cache(b * k, total)
                return _dec_only_search(self, prm, cache, f, n, b, total, k, alpha, eos_id)

            self._search_jit[key] = jax.jit(search)
        seqs = np.asarray(self._search_jit[key](params, forced, jnp.asarray(plen)))
        out = np.zeros((b, max_decode_length), np.int32)
        for i in range(b):
            gen = seqs[i, plen[i]:plen[i] + max_decode_length]
            out[i, : len(gen)] = gen
        return out


def _dec_only_search(model, params, cache, forced, forced_len, b, total, k, alpha, eos_id):
    step = model.step_fn(params)
    if k == 1:
        seqs, _ = decoding.greedy_search(step, cache, b, total, eos_id=eos_id,
                                         forced_tokens=forced, forced_len=forced_len)
        return seqs
    seqs, _ = decoding.beam_search(step, cache, b, total, beam_size=k, alpha=alpha, eos_id=eos_id,
                                   forced_tokens=forced, forced_len=forced_len)
    return seqs[:, 0]
