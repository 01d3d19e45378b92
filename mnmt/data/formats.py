"""Per-architecture example formats of the input pipeline: tokenized pair → example → rows.

The training iterator (:class:`mnmt.data.pipeline.TrainInputs`) draws tokenized pairs
``([<2xx>, *source], target)`` from the mixture; an example format turns each pair into one
example (trimmed, EOS appended) and a window of examples into rows of features:

- :class:`EncoderDecoderFormat` — T5X's ``EncDecFeatureConverter`` features, exactly as seqio
  makes them (``append_eos_after_trim``, then :mod:`mnmt.data.packing`); rows of
  ``feature_lengths["inputs"]`` encoder and ``feature_lengths["targets"]`` decoder tokens.
- :class:`DecoderOnlyFormat` — Caillaut et al. 2024 §3.3: ``source </src> <2xx> target <eos>``
  in one sequence (:func:`mnmt.models.decoder_only.format_pair`), loss weights 1 on the target
  and EOS only (§3.4), T5X ``DecoderFeatureConverter`` features. The source is trimmed to
  ``inputs − 2`` pieces (so the prompt ``source </src> <2xx>`` fits in ``inputs`` tokens, the
  same source pieces the encoder-decoder keeps) and the target to ``targets − 1`` pieces plus
  EOS, so one row of ``inputs + targets`` tokens holds any example: the **row length** is
  ``feature_lengths["inputs"] + feature_lengths["targets"]``. Rows are packed first-fit by
  :func:`mnmt.models.decoder_only.pack_examples` with one segment id per example
  (``decoder_segment_ids``, ``decoder_positions`` restarting at 0), so packed examples never
  attend to each other.

With :class:`mnmt.data.decoder_format.DecoderOptions` (``InputConfig`` fields) the decoder-only
examples carry Caillaut's source-language and domain tags and the ``<eos>`` prefix (§3.3,
§3.3.1): ``[<eos>] source </src> <2xx> [<2src>] [<dom_…>] target <eos>``; the source is then
trimmed by as many more pieces as the options add, so the prompt still fits in ``inputs``
tokens and the row length is unchanged.

A format is deterministic and stateless, so the iterator's checkpointable position (window
start, rows taken, per-task cursors) is the same for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mnmt.data.decoder_format import NO_TAGS, DecoderOptions, TaskTags
from mnmt.data.packing import pack_examples, pad_examples

__all__ = ["ARCHITECTURES", "EncoderDecoderFormat", "DecoderOnlyFormat", "finish_example",
           "example_format"]

ARCHITECTURES = ("encoder_decoder", "decoder_only")
EOS_ID = 1


def finish_example(
    inputs: Sequence[int], targets: Sequence[int], lengths: Mapping[str, int]
) -> tuple[list[int], list[int]]:
    """seqio's ``append_eos_after_trim``: trim each side to length − 1, then append EOS (1)."""
    return [*inputs[: lengths["inputs"] - 1], EOS_ID], [*targets[: lengths["targets"] - 1], EOS_ID]


def _lengths(feature_lengths: Mapping[str, int]) -> dict[str, int]:
    return {k: int(feature_lengths[k]) for k in ("inputs", "targets")}


class EncoderDecoderFormat:
    """T5X ``EncDecFeatureConverter`` examples and rows (packed or padded)."""

    architecture = "encoder_decoder"

    def __init__(self, feature_lengths: Mapping[str, int]) -> None:
        self.lengths = _lengths(feature_lengths)
        # seqio's trim_and_pack works on windows of max(feature lengths) examples
        self.window = max(self.lengths.values())

    def finish(self, inputs: Sequence[int], targets: Sequence[int]) -> Any:
        return finish_example(inputs, targets, self.lengths)

    def finisher(self, tags: TaskTags = NO_TAGS) -> Any:
        """The `finish` of one task's pairs (encoder-decoder examples have no tags)."""
        return self.finish

    def pack(self, examples: Sequence[Any], labels: Sequence[int] | None = None
             ) -> dict[str, np.ndarray]:
        """Packed rows; with `labels` (one per example) also ``decoder_task_ids``."""
        return pack_examples(examples, self.lengths, labels)

    def pad(self, examples: Sequence[Any], labels: Sequence[int] | None = None
            ) -> dict[str, np.ndarray]:
        return pad_examples(examples, self.lengths, labels)


class DecoderOnlyFormat:
    """Caillaut-format examples ``[<eos>] source </src> <2xx> [<2src>] [<dom_…>] target <eos>``
    in rows of ``inputs + targets`` tokens (see the module docstring)."""

    architecture = "decoder_only"

    def __init__(self, feature_lengths: Mapping[str, int], separator_id: int,
                 eos_id: int = EOS_ID, options: DecoderOptions | None = None) -> None:
        self.lengths = _lengths(feature_lengths)
        self.separator_id = int(separator_id)
        self.eos_id = int(eos_id)
        self.options = options or DecoderOptions()
        self.row_length = self.lengths["inputs"] + self.lengths["targets"]
        self.window = self.row_length
        # source pieces kept: the prompt (source, </src>, <2xx>, options' tokens) fits `inputs`
        self.source_length = self.lengths["inputs"] - 2 - self.options.extra_prompt_tokens
        if self.source_length < 1:
            raise ValueError(
                f"feature_lengths['inputs'] = {self.lengths['inputs']} leaves no source piece "
                f"for a prompt of </src>, <2xx> and {self.options.extra_prompt_tokens} more "
                f"tokens ({', '.join(self.options.changed_fields())}): expected at least "
                f"{3 + self.options.extra_prompt_tokens}")

    def _parts(self, inputs: Sequence[int], tags: TaskTags) -> dict[str, Any]:
        if not len(inputs):
            raise ValueError("decoder-only example without a target-language token: the task's "
                             "inputs must start with <2xx> (mnmt.data.tasks prepends it)")
        src_lang, domain = tags
        if self.options.source_language_tags and src_lang is None:
            raise ValueError("InputConfig.source_language_tags is set but the task's "
                             "source-language tag id was not given (decoder_format.task_tags)")
        if bool(self.options.domains) != (domain is not None):
            raise ValueError("InputConfig.domains: a domain tag id is needed exactly when "
                             f"domains are set (domains {dict(self.options.domains)}, tag "
                             f"{domain})")
        return {"sep_id": self.separator_id, "tgt_lang_id": int(inputs[0]), "eos_id": self.eos_id,
                "src_lang_id": src_lang if self.options.source_language_tags else None,
                "domain_id": domain, "prefix_eos": self.options.prefix_eos}

    def finish(self, inputs: Sequence[int], targets: Sequence[int], tags: TaskTags = NO_TAGS
               ) -> tuple[list[int], list[float]]:
        """(tokens, loss weights) of a pair given as ``([<2xx>, *source], target)`` (no EOS),
        with the task's `tags` (:func:`mnmt.data.decoder_format.task_tags`)."""
        from mnmt.models.decoder_only import format_pair  # noqa: PLC0415  (jax/flax)

        parts = self._parts(inputs, tags)
        source = inputs[1:][: self.source_length]
        return format_pair(source, targets[: self.lengths["targets"] - 1],
                           loss_on_tags=self.options.loss_on_tags, **parts)

    def finisher(self, tags: TaskTags = NO_TAGS) -> Any:
        """`finish` with one task's tags bound."""
        return lambda inputs, targets: self.finish(inputs, targets, tags)

    def prompt(self, inputs: Sequence[int], tags: TaskTags = NO_TAGS) -> list[int]:
        """The inference prompt of ``[<2xx>, *source]``: the training example's tokens before
        the target, tags forced (:func:`mnmt.models.decoder_only.prompt_of`)."""
        from mnmt.models.decoder_only import prompt_of  # noqa: PLC0415  (jax/flax)

        return prompt_of(inputs[1:][: self.source_length], **self._parts(inputs, tags))

    def finish_task_features(self, inputs: Sequence[int], targets: Sequence[int],
                             tags: TaskTags = NO_TAGS) -> tuple[list[int], list[float]]:
        """The example of a seqio task's features (EOS-terminated, as ``get_dataset`` yields
        them after ``append_eos_after_trim``): the same tokens as :meth:`finish`."""
        inputs, targets = list(inputs), list(targets)
        if inputs and inputs[-1] == self.eos_id:
            inputs = inputs[:-1]
        if targets and targets[-1] == self.eos_id:
            targets = targets[:-1]
        return self.finish(inputs, targets, tags)

    def pack(self, examples: Sequence[Any], labels: Sequence[int] | None = None
             ) -> dict[str, np.ndarray]:
        """First-fit packing; one segment per example unless ``options.mask_segments`` is off;
        with `labels` (one per example) also ``decoder_task_ids``."""
        from mnmt.models.decoder_only import pack_examples as pack_decoder  # noqa: PLC0415

        return pack_decoder(examples, self.row_length, mask_segments=self.options.mask_segments,
                            labels=labels)

    def pad(self, examples: Sequence[Any], labels: Sequence[int] | None = None
            ) -> dict[str, np.ndarray]:
        """One example per row (segment id 1, positions from 0), zero-padded."""
        from mnmt.models.decoder_only import pack_examples as pack_decoder  # noqa: PLC0415

        each = [None] * len(examples) if labels is None else [[int(k)] for k in labels]
        rows = [pack_decoder([ex], self.row_length, labels=lab)
                for ex, lab in zip(examples, each, strict=True)]
        if not rows:
            return pack_decoder([], self.row_length, labels=None if labels is None else [])
        return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}


def example_format(architecture: str, feature_lengths: Mapping[str, int],
                   separator_id: int | None = None, options: DecoderOptions | None = None
                   ) -> EncoderDecoderFormat | DecoderOnlyFormat:
    """The format of `architecture` ("encoder_decoder" or "decoder_only"; the latter needs the
    vocabulary's separator id, :func:`mnmt.data.vocab.separator_id`, and takes Caillaut's
    `options`; encoder-decoder refuses options set away from their defaults, naming them)."""
    if architecture == "encoder_decoder":
        changed = options.changed_fields() if options is not None else []
        if changed:
            raise ValueError(f"InputConfig.{changed[0]} applies to decoder-only models only "
                             f"(Caillaut's format); this is an encoder-decoder run: unset "
                             f"{', '.join('InputConfig.' + f for f in changed)}")
        return EncoderDecoderFormat(feature_lengths)
    if architecture == "decoder_only":
        if separator_id is None:
            raise ValueError("the decoder-only format needs the vocabulary's separator id")
        return DecoderOnlyFormat(feature_lengths, separator_id, options=options)
    raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {architecture!r}")
