"""Evaluation: teacher-forced per-pair cross-entropy and beam-search BLEU / ChrF (sacrebleu).

`loss` (SPEC §5, docs/reference/metrics_schema.md) is the mean per-target-token cross-entropy in nats over
a whole eval split — Σ NLL / Σ target tokens, EOS included, padding excluded, no label smoothing
and no z-loss. It is the quantity the scaling laws describe (Fernandes et al. 2023 eq. 1;
Ghorbani et al. 2021 eq. 1–2). BLEU and ChrF are corpus-level sacrebleu scores of beam-search
output (beam 4 and a length penalty α, as in Fernandes §3.1) against the references, used for the
quality laws (Ghorbani eq. 5: BLEU = c·L^−p; Fernandes Fig. 8).

Decoder-only models are scored the same way: their eval rows weight only the target pieces and
EOS, so `loss` divides by the same target tokens; decoding continues each row's prompt
`source </src> <2xx>` (`decoder_prompts`) and the hypotheses are scored like any others.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from mnmt.training.progress import format_duration

# sacrebleu tokenizers for target languages whose text has no spaces between words.
_BLEU_TOKENIZERS = {"zh": "zh", "ja": "char", "th": "char", "ko": "char"}
# `DecodeConfig.num_examples` that decodes every example of the split.
ALL_EXAMPLES = 0


@dataclasses.dataclass(frozen=True)
class DecodeScores:
    """Corpus BLEU/ChrF of one pair and eval set, with a few examples for inspection."""

    bleu: float
    chrf: float
    num_examples: int
    examples: tuple[tuple[str, str, str], ...]   # (source, hypothesis, reference)


def target_language(pair: str) -> str:
    """`"en-de"` → `"de"` (the part after the last dash)."""
    return pair.rsplit("-", 1)[-1]


def bleu_tokenizer(pair: str) -> str:
    """sacrebleu tokenizer for the pair's target language (`zh` for Chinese, else `13a`)."""
    return _BLEU_TOKENIZERS.get(target_language(pair).split("_")[0].lower(), "13a")


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str], pair: str) -> tuple[float, float]:
    """(BLEU, ChrF) of `hypotheses` against one reference each, via sacrebleu."""
    import sacrebleu  # noqa: PLC0415

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError(f"no examples to score for {pair}")
    bleu = sacrebleu.corpus_bleu(list(hypotheses), [list(references)],
                                 tokenize=bleu_tokenizer(pair))
    chrf = sacrebleu.corpus_chrf(list(hypotheses), [list(references)])
    return float(bleu.score), float(chrf.score)


BatchPutter = Callable[[Mapping[str, np.ndarray]], Mapping[str, jax.Array]]


def evaluate_loss(
    score_fn: Callable[[Any, Mapping[str, jax.Array]], tuple[jax.Array, jax.Array]],
    params: Any,
    batches: Iterable[Mapping[str, np.ndarray]],
    put: BatchPutter,
) -> tuple[float, int]:
    """Teacher-forced mean per-token NLL over all `batches`: (Σ nll / Σ tokens, Σ tokens).

    `score_fn(params, batch) -> (nll_sum_per_example, num_tokens_per_example)` is the model's
    `score_batch` (jitted); `put` places a host batch on the mesh. Sums are accumulated in
    float64 on the host so long eval sets do not lose precision.
    """
    losses, tokens = evaluate_group_loss(score_fn, params, batches, put)
    return float(losses), tokens


def evaluate_group_loss(
    score_fn: Callable[[Any, Mapping[str, jax.Array]], tuple[jax.Array, jax.Array]],
    params: Any,
    batches: Iterable[Mapping[str, np.ndarray]],
    put: BatchPutter,
) -> tuple[np.ndarray, int]:
    """`evaluate_loss` for a score function whose outputs may carry leading axes (a group of
    runs scored on the same batch: [runs, examples]); returns the losses with those axes."""
    total_nll: Any = 0.0
    total_tokens: Any = 0
    pending = []
    for batch in batches:
        pending.append(score_fn(params, put(batch)))
        if len(pending) > 2:  # keep a couple of batches in flight
            total_nll, total_tokens = _accumulate(pending.pop(0), total_nll, total_tokens)
    for out in pending:
        total_nll, total_tokens = _accumulate(out, total_nll, total_tokens)
    tokens = np.asarray(total_tokens)
    if np.any(tokens == 0):
        raise ValueError("the eval set has no target tokens (empty split, or all padding)")
    return np.asarray(total_nll) / tokens, int(tokens.flat[0])


def probe_batches(batches: Iterable[Mapping[str, np.ndarray]], num_examples: int
                  ) -> list[dict[str, np.ndarray]]:
    """The fixed probe set of a pair: its first `num_examples` real examples (rows with a loss
    weight) of `batches`, in their batches, every row after them zeroed (a padding row: zero
    loss weight, as at the end of a split) and the batches after them left out; the whole
    split when it has fewer. The batches keep their shape, so the eval scoring program scores
    them as it is; `targets_text` is dropped (only `loss` is computed on a probe).

    ValueError when `num_examples` < 1 or the batches hold no real example."""
    if isinstance(num_examples, bool) or not isinstance(num_examples, int) or num_examples < 1:
        raise ValueError(f"EvalConfig.probe_examples must be a positive int, got {num_examples!r}")
    out: list[dict[str, np.ndarray]] = []
    left = num_examples
    for batch in batches:
        if left <= 0:
            break
        arrays = {k: np.array(v) for k, v in batch.items() if k != "targets_text"}
        real = np.asarray(arrays["decoder_loss_weights"]).sum(axis=1) > 0
        keep = real & (np.cumsum(real) <= left)
        left -= int(keep.sum())
        if not keep.any():
            continue
        for v in arrays.values():
            v[~keep] = 0
        out.append(arrays)
    if not out:
        raise ValueError("the eval split has no example with target tokens to probe")
    return out


def _accumulate(out, total_nll, total_tokens):
    nll, ntok = out
    nll = np.asarray(jax.device_get(nll), np.float64)
    ntok = np.asarray(jax.device_get(ntok))
    return total_nll + nll.sum(axis=-1), total_tokens + np.rint(ntok.sum(axis=-1)).astype(np.int64)


def _strip(ids: Sequence[int], eos_id: int) -> list[int]:
    out = []
    for t in ids:
        t = int(t)
        if t == eos_id:
            break
        if t > 0:
            out.append(t)
    return out


def detokenize(ids: Sequence[int], vocabulary: Any) -> str:
    """The text of one decoded row: the tokens before the first EOS, padding (0) dropped,
    decoded with the vocabulary (the hypotheses `decode_and_score` scores and `mnmt-translate`
    writes)."""
    return vocabulary.decode(_strip(ids, int(getattr(vocabulary, "eos_id", 1))))


class DecodeProgress:
    """Progress lines of a long decode: sentences done / total, sentences/s and ETA.

    `report(line)` is called at most every `interval_s` seconds, the first time only once
    `interval_s` have passed (a short decode prints nothing), and once more by `finish()` when
    anything was reported. `total` None: an unknown number of sentences (no ETA)."""

    def __init__(self, report: Callable[[str], None], total: int | None, *, label: str = "",
                 interval_s: float = 10.0, clock: Callable[[], float] = time.perf_counter):
        self.report, self.total, self.label = report, total, label
        self.interval_s, self.clock = float(interval_s), clock
        self.start = self.last = clock()
        self.done, self.reported = 0, False

    def line(self) -> str:
        """`label: 512/2,000 sentences, 35.1 sentences/s, ETA 0:42`."""
        elapsed = max(self.clock() - self.start, 1e-9)
        rate = self.done / elapsed
        of = "" if self.total is None else f"/{self.total:,}"
        eta = None if self.total is None or rate <= 0 else (self.total - self.done) / rate
        head = f"{self.label}: " if self.label else ""
        return (f"{head}{self.done:,}{of} sentences, {rate:.1f} sentences/s, "
                f"ETA {format_duration(eta)}")

    def update(self, done: int, total: int | None = None) -> None:
        """`done` sentences decoded so far (and the `total`, when it is known only now)."""
        self.done = int(done)
        if total is not None:
            self.total = int(total)
        now = self.clock()
        if now - self.last >= self.interval_s:
            self.last, self.reported = now, True
            self.report(self.line())

    def finish(self) -> None:
        """The last line (only when a line was reported before)."""
        if self.reported:
            self.report(self.line())


def prompt_lengths(loss_weights: np.ndarray) -> np.ndarray:
    """Tokens before the first one with a loss weight, per decoder-only row (the prompt
    `[<eos>] source </src> <2xx> [<2src>] [<dom_…>]`: eval rows never weight the tags, so they
    are forced); 0 for a row without any (padding)."""
    weights = np.atleast_2d(np.asarray(loss_weights)) > 0
    return np.where(weights.any(axis=1), weights.argmax(axis=1), 0)


def decoder_prompts(batch: Mapping[str, np.ndarray], width: int, *, eos_id: int = 1
                    ) -> np.ndarray:
    """The prompts of unpacked decoder-only rows (`source </src> <2xx>`, every token before
    the first one with a loss weight), right-padded with 0 to `width` tokens: [rows, width].
    With `InputConfig`'s decoder-only options the rows' prompts carry the training examples'
    `<eos>` prefix and tags (Caillaut et al. 2024 §3.3, §3.3.1), the same tokens as
    `mnmt.models.decoder_only.prompt_of` (`DecoderOnlyFormat.prompt`) gives for the pair.

    Rows without a prompt (the all-zero padding rows of an eval batch) get the prompt `[eos]`
    so that the prompted search can run on the whole batch; their output is ignored.
    """
    targets = np.asarray(batch["decoder_target_tokens"])
    lengths = prompt_lengths(batch["decoder_loss_weights"])
    if np.any(lengths > width):
        raise ValueError(f"a prompt has {int(lengths.max())} tokens, more than the {width} "
                         "the inputs feature length allows")
    prompts = np.where(np.arange(width)[None, :] < lengths[:, None], targets[:, :width], 0)
    prompts = prompts.astype(np.int32)
    prompts[lengths == 0, 0] = eos_id
    return prompts


def source_tokens(batch: Mapping[str, np.ndarray], row: int, *, eos_id: int = 1) -> np.ndarray:
    """The source side of one row, for display: the encoder input (encoder-decoder) or the
    prompt `source </src> <2xx> [tags]` (decoder-only; without its `<eos>` prefix, if any)."""
    if "encoder_input_tokens" in batch:
        return np.asarray(batch["encoder_input_tokens"][row])
    end = int(prompt_lengths(batch["decoder_loss_weights"][row])[0])
    tokens = np.asarray(batch["decoder_target_tokens"][row][:end])
    return tokens[1:] if len(tokens) and tokens[0] == eos_id else tokens


def decode_and_score(
    predict_fn: Callable[[Any, Mapping[str, jax.Array]], jax.Array],
    params: Any,
    batches: Iterable[Mapping[str, np.ndarray]],
    put: BatchPutter,
    vocabulary: Any,
    pair: str,
    *,
    num_examples: int,
    keep_examples: int = 3,
    progress: Callable[[int, int | None], None] | None = None,
) -> DecodeScores:
    """Beam-search the first `num_examples` real examples (`ALL_EXAMPLES`, 0: the whole split)
    and score them with sacrebleu.

    `predict_fn(params, batch) -> tokens [batch, length]` (e.g. the model's `predict_batch` with
    beam size and α bound; for decoder-only rows, the prompted search on `decoder_prompts`,
    with a `put` that leaves the host batch as it is). References are the batch's raw `targets_text` when present (else
    `decoder_target_tokens` decoded with the vocabulary); sources are decoded for display.
    `progress(done, total)` is called after each decoded batch; `total` is known (else None)
    when `batches` is a sequence (e.g. the list of a split's batches).
    """
    if num_examples < 0:
        raise ValueError(f"DecodeConfig.num_examples must be ≥ 0 (0: the whole split), "
                         f"got {num_examples}")
    limit = num_examples if num_examples != ALL_EXAMPLES else None
    total = _real_examples(batches, limit) if isinstance(batches, Sequence) else None
    eos = int(getattr(vocabulary, "eos_id", 1))
    hyps: list[str] = []
    refs: list[str] = []
    srcs: list[str] = []
    for batch in batches:
        if limit is not None and len(hyps) >= limit:
            break
        real = np.asarray(batch["decoder_loss_weights"]).sum(axis=1) > 0
        if not real.any():
            continue
        tokens = np.asarray(jax.device_get(predict_fn(params, put(batch))))
        for i in np.flatnonzero(real):
            if limit is not None and len(hyps) >= limit:
                break
            hyps.append(detokenize(tokens[i], vocabulary))
            if "targets_text" in batch:  # the raw reference, as sacrebleu expects
                refs.append(str(batch["targets_text"][i]))
            else:
                refs.append(vocabulary.decode(_strip(batch["decoder_target_tokens"][i], eos)))
            srcs.append(vocabulary.decode(_strip(source_tokens(batch, i, eos_id=eos), eos)))
        if progress is not None:
            progress(len(hyps), total)
    bleu, chrf = corpus_scores(hyps, refs, pair)
    examples = tuple(zip(srcs[:keep_examples], hyps[:keep_examples], refs[:keep_examples],
                         strict=True))
    return DecodeScores(bleu=bleu, chrf=chrf, num_examples=len(hyps), examples=examples)


def _real_examples(batches: Sequence[Mapping[str, np.ndarray]], limit: int | None) -> int:
    """Real (non-padding) rows of `batches`, at most `limit`."""
    n = sum(int((np.asarray(b["decoder_loss_weights"]).sum(axis=1) > 0).sum()) for b in batches)
    return n if limit is None else min(n, limit)
