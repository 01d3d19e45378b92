"""Caillaut et al. 2024's options of the decoder-only format (§3.3, §3.3.1) and their tag ids.

One decoder-only example is ``[<eos>] source </src> <2tgt> [<2src>] [<dom_…>] target <eos>``:

- ``source_language_tags``: the source language's token (the project's ``<2xx>`` piece of the
  source language, Caillaut's ``<lang_src>``) after the target-language token;
- ``domains``: task or pair → domain name; the tag ``<dom_name>`` (a vocabulary piece,
  :func:`mnmt.data.vocab.domain_token_id`) follows the language tokens;
- ``prefix_eos``: Caillaut's fix of "the <eos> issue" (§3.3.1): every source, in training and
  at inference, is preceded by ``<eos>``;
- ``loss_on_tags``: the tags get loss weight 1 in *training* rows (§3.3 treats them as outputs
  the model may predict). Evaluation rows never weight them, so ``loss`` stays the
  per-target-token cross-entropy and decoding forces the tags (:meth:`DecoderOptions.for_eval`);
- ``mask_segments``: ``False`` packs without segment masks (one segment per row, positions
  running on), Caillaut's flash-attention packing that causes the issue.

The defaults are the format without any of them (``source </src> <2tgt> target <eos>``, masked
packing). :class:`DecoderOptions` is built from ``InputConfig`` (:meth:`DecoderOptions.of`);
:func:`task_tags` resolves each task's tag ids in its vocabulary.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mnmt.data.vocab import (
    domain_token,
    domain_token_id,
    get_vocabulary,
    language_token_id,
    separator_id,
)

__all__ = ["DecoderOptions", "TaskTags", "task_tags", "check_domain_keys", "domain_names",
           "separator_of_tasks", "NO_TAGS"]

# (source-language tag id, domain tag id) of one task; None where the option is off.
TaskTags = tuple[int | None, int | None]
NO_TAGS: TaskTags = (None, None)
_FIELDS = ("source_language_tags", "domains", "prefix_eos", "loss_on_tags", "mask_segments")


@dataclasses.dataclass(frozen=True)
class DecoderOptions:
    """The decoder-only format's options (module docstring); defaults = no tags, masked packing."""

    source_language_tags: bool = False
    # (key, domain) pairs sorted by key: the InputConfig.domains mapping, hashable.
    domains: tuple[tuple[str, str], ...] = ()
    prefix_eos: bool = False
    loss_on_tags: bool = False
    mask_segments: bool = True

    @classmethod
    def of(cls, inputs: Any) -> DecoderOptions:
        """The options an ``InputConfig`` (or any object with its fields) sets."""
        domains = getattr(inputs, "domains", None) or {}
        if not isinstance(domains, Mapping):
            raise ValueError(f"InputConfig.domains: expected a mapping task or pair → domain "
                             f"name, got {type(domains).__name__} {domains!r}")
        return cls(source_language_tags=bool(getattr(inputs, "source_language_tags", False)),
                   domains=tuple(sorted((str(k), str(v)) for k, v in domains.items())),
                   prefix_eos=bool(getattr(inputs, "prefix_eos", False)),
                   loss_on_tags=bool(getattr(inputs, "loss_on_tags", False)),
                   mask_segments=bool(getattr(inputs, "mask_segments", True)))

    @property
    def extra_prompt_tokens(self) -> int:
        """Tokens the options add to the prompt (``<eos>`` prefix and tags)."""
        return int(self.prefix_eos) + int(self.source_language_tags) + int(bool(self.domains))

    def changed_fields(self) -> list[str]:
        """The ``InputConfig`` fields set away from their defaults."""
        default = DecoderOptions()
        return [f for f in _FIELDS if getattr(self, f) != getattr(default, f)]

    def state(self) -> dict[str, Any]:
        """JSON form recorded in the pipeline state (only when an option is set)."""
        return {f: ([list(kv) for kv in self.domains] if f == "domains" else getattr(self, f))
                for f in _FIELDS}

    def for_eval(self) -> DecoderOptions:
        """Evaluation rows: the same tokens, loss weights on the target and EOS only."""
        return dataclasses.replace(self, loss_on_tags=False)

    def domain_of(self, task: str, pair: str) -> str | None:
        """The domain name of a task (looked up by task name, then by pair); None without
        domains; a ValueError naming the task when the mapping has neither."""
        if not self.domains:
            return None
        mapping = dict(self.domains)
        for key in (task, pair):
            if key in mapping:
                return mapping[key]
        raise ValueError(f"InputConfig.domains has no entry for task {task!r} (pair {pair!r}): "
                         f"every task needs one, keyed by task or pair name (keys: "
                         f"{sorted(mapping)})")


def domain_names(options: DecoderOptions) -> list[str]:
    """The distinct domain names (sorted): the tags a vocabulary needs."""
    return sorted({d for _, d in options.domains})


def check_domain_keys(options: DecoderOptions, names: Iterable[str]) -> None:
    """Every ``InputConfig.domains`` key must be one of `names` (the run's task and pair
    names); otherwise a ValueError naming the key and the closest name."""
    known = sorted(set(names))
    for key, domain in options.domains:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"InputConfig.domains key {key!r} is not a task or pair of this "
                             f"run{hint}: expected one of {known}")
        domain_token(domain)  # validates the name


def task_tags(task_names: Iterable[str], options: DecoderOptions) -> dict[str, TaskTags]:
    """Tag ids of each task in its own vocabulary: the source language's ``<2xx>`` piece when
    ``source_language_tags``, the ``<dom_…>`` piece of its domain when ``domains`` is set. A
    vocabulary without the piece → ValueError naming the token, the vocabulary file and the
    field."""
    from mnmt.data.tasks import get_task_info  # noqa: PLC0415

    out: dict[str, TaskTags] = {}
    for name in task_names:
        info = get_task_info(name)
        vocab = get_vocabulary(info.vocab_path)
        src = None
        if options.source_language_tags:
            try:
                src = language_token_id(vocab, info.source_language)
            except ValueError as err:
                raise ValueError(f"InputConfig.source_language_tags: task {name!r}, vocabulary "
                                 f"{info.vocab_path}: {err}") from err
        domain = options.domain_of(name, info.pair)
        dom = None if domain is None else domain_token_id(vocab, domain, info.vocab_path)
        out[name] = (src, dom)
    return out


def separator_of_tasks(task_names: Sequence[str]) -> int:
    """The decoder-only separator id of the tasks' vocabulary (one vocabulary for all of them);
    a one-line ValueError naming the vocabulary when it has no separator."""
    from mnmt.data.tasks import get_task_info  # noqa: PLC0415

    ids = {}
    for name in task_names:
        path = get_task_info(name).vocab_path
        if path not in ids:
            ids[path] = separator_id(get_vocabulary(path), path)
    if len(set(ids.values())) > 1:
        raise ValueError(f"tasks {list(task_names)} use vocabularies with different separator "
                         f"ids {ids}: a mixture needs one shared vocabulary")
    return next(iter(ids.values()))
