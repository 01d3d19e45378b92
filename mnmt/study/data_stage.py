"""The data stage of a study (`mnmt-study prepare`, and the first stage of `run`).

`prepare_data` gives the runs their `StudyData`: for the synthetic family, a SentencePiece
vocabulary trained on the study's pairs, one SeqIO task per pair and the exact irreducible loss
of every eval set; for gettext catalogs, `mnmt.study.gettext_data`; for real data, the tasks a
task module registers. The real-data tasks' token caches (`mnmt.data.cache`) are built, or, on
one host of a multi-host launch, found. Each step is done once per output directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from fitting.data import io
from mnmt.study import gettext_data
from mnmt.study.loading import UsageError
from mnmt.study.runner import StudyData
from mnmt.study.spec import StudySpec

__all__ = ["decoder_only_sizes", "needs_separator", "prepare_caches", "prepare_data",
           "study_domains", "study_task_arguments"]


def prepare_data(spec: StudySpec, out: Path, log, *, build_caches: bool = True):
    """Stage 1: vocabulary, SeqIO tasks, the real-data tasks' token caches, and (synthetic data
    only) the exact irreducible loss. ``StudySpec.data_preset`` "gettext" ("gettext:DIR"):
    real translations from gettext catalogs (`mnmt.study.gettext_data`). ``build_caches=False``
    (one host of a multi-host launch) uses caches built by ``mnmt-study prepare`` and fails,
    saying so, where one is missing."""
    from mnmt.tensorflow_setup import start_tensorflow

    start_tensorflow()  # CPU-only data backend, without its "no CUDA here" start-up lines

    if spec.tasks:
        data = _registered_tasks(spec, log)
        return prepare_caches(spec, data, out, log, build=build_caches)
    if gettext_data.is_gettext_preset(spec.data_preset):
        try:
            data = gettext_data.prepare_gettext_data(spec, out, log,
                                                     separator=needs_separator(spec))
        except (ValueError, FileNotFoundError) as err:
            raise UsageError(f"StudySpec.data_preset {spec.data_preset!r}: "
                             f"{str(err).strip().splitlines()[0]}") from err
        with_tasks = spec.replace(tasks=tuple(data.tasks.items()),
                                  vocabulary_path=data.vocabulary_path)
        return prepare_caches(with_tasks, data, out, log, build=build_caches)
    from mnmt.data import synthetic, tasks, vocab

    data_dir = out / "data"
    data_dir.mkdir(exist_ok=True)
    family = synthetic.get_family(spec.data_preset)
    missing = sorted(set(spec.pairs) - set(family.pairs))
    if missing:
        raise UsageError(
            f"StudySpec.pairs: {missing} not in data preset {spec.data_preset!r} (has {family.pairs})"
        )
    vocab_path = data_dir / "spm.model"
    separator = needs_separator(spec)
    if not vocab_path.exists():
        log(f"data: training a {spec.vocab_size}-piece SentencePiece vocabulary on {list(spec.pairs)}"
            + (f" (with the decoder-only separator {vocab.SEPARATOR})" if separator else ""))
        trained = Path(vocab.train_vocabulary(family, str(data_dir), spec.vocab_size,
                                              separator=separator, domains=study_domains(spec),
                                              seed=spec.vocab_seed))
        if trained != vocab_path:
            for suffix in (".vocab", ".model"):
                if trained.with_suffix(suffix).exists():
                    os.replace(trained.with_suffix(suffix), vocab_path.with_suffix(suffix))
    elif separator and not vocab.has_separator(vocab.get_vocabulary(str(vocab_path))):
        raise UsageError(f"{vocab_path} has no decoder-only separator {vocab.SEPARATOR} but "
                         f"the study trains decoder-only sizes {decoder_only_sizes(spec)}: "
                         "move it away (the data stage trains a new one) or use another --out")
    task_names = tasks.register_synthetic_tasks(spec.data_preset, str(vocab_path),
                                                caps=dict(spec.data_caps))
    caps = {pair: tasks.get_task_info(task_names[pair]).train_size for pair in spec.pairs}
    if any(caps.values()):
        log("data: training examples per pair: " + ", ".join(
            f"{pair} {'unlimited' if n is None else f'{n:,}'}" for pair, n in caps.items()))
    truth_path = data_dir / "irreducible_loss.json"
    if truth_path.exists():
        truth = json.loads(truth_path.read_text())
    else:
        vocabulary = vocab.get_vocabulary(str(vocab_path))
        truth = {
            pair: {
                eval_set: float(synthetic.irreducible_loss(
                    family, pair, eval_set, vocabulary, tasks.EVAL_SIZE,
                    max_length=spec.lengths["targets"]))  # warns if targets would be trimmed
                for eval_set in spec.evaluation.eval_sets
            }
            for pair in spec.pairs
        }
        io.write_text_atomic(truth_path, json.dumps(truth, indent=2) + "\n")
    log("data: exact irreducible loss (nats/token): " + ", ".join(
        f"{pair} {sets[spec.evaluation.eval_sets[0]]:.3f}" for pair, sets in truth.items()))
    return StudyData(
        vocabulary_path=str(vocab_path),
        tasks={pair: task_names[pair] for pair in spec.pairs},
        irreducible_loss=truth,
        caps=caps,
    )


def decoder_only_sizes(spec: StudySpec) -> list[str]:
    """The study's decoder-only sizes (StudySpec.sizes and held-out runs), in order."""
    from mnmt.models import zoo  # light: no jax

    sizes = list(spec.sizes) + [entry[0] for entry in spec.heldout]
    return [size for size in dict.fromkeys(sizes) if zoo.is_decoder_only(size)]


def study_domains(spec: StudySpec) -> list[str]:
    """The domain names of the runs' `InputConfig.domains` (a training option of the study):
    the `<dom_NAME>` pieces its vocabulary is trained with (Caillaut et al. 2024 §3.3)."""
    domains = dict(spec.train_overrides).get("inputs.domains") or {}
    return sorted({str(name) for name in dict(domains).values()})


def needs_separator(spec: StudySpec) -> bool:
    """Whether the study's vocabulary needs the decoder-only separator `</src>`: only then is it
    trained with it, so encoder-decoder studies keep the ids they always had."""
    return bool(decoder_only_sizes(spec))


def _registered_tasks(spec: StudySpec, log):
    """Real-data studies: tasks registered by `spec.task_module`; no known irreducible loss."""
    import importlib

    import seqio


    if not io.is_remote(spec.vocabulary_path) and not Path(spec.vocabulary_path).exists():
        raise UsageError(f"StudySpec.vocabulary_path: file not found: {spec.vocabulary_path}")
    if spec.task_module:
        try:
            module = importlib.import_module(spec.task_module)
        except ImportError as err:
            raise UsageError(f"StudySpec.task_module: cannot import {spec.task_module!r}: {err}") from err
        # T5X task modules register at import; ours may instead take the study's vocabulary
        register = getattr(module, "register_study_tasks", None)
        if callable(register):
            try:
                register(spec.vocabulary_path, **study_task_arguments(spec, register))
            except (ValueError, FileNotFoundError) as err:
                raise UsageError(f"StudySpec.task_module {spec.task_module!r}: "
                                 f"{str(err).strip().splitlines()[0]}") from err
    elif spec.data_caps:
        raise UsageError("StudySpec.data_caps: StudySpec.task_module must name a module whose "
                         "register_study_tasks takes caps (e.g. mnmt.data.sources.wmt)")
    for pair, task in spec.tasks:
        if task not in seqio.TaskRegistry.names():
            raise UsageError(f"StudySpec.tasks: task {task!r} for {pair} is not registered "
                             f"(set StudySpec.task_module to the module that registers it)")
    log(f"data: {len(spec.tasks)} registered tasks; irreducible loss unknown (real data)")
    caps = {pair: dict(spec.data_caps).get(pair) for pair in spec.pairs}
    return StudyData(vocabulary_path=spec.vocabulary_path, tasks=dict(spec.tasks),
                     irreducible_loss={}, caps=caps)


def prepare_caches(spec: StudySpec, data, out: Path, log, *, build: bool = True):
    """Build (or find up to date) the token cache of every real-data task with a finite
    training split (`mnmt.data.cache`) → `data` with its `cache_dir` set; unchanged when
    `spec.cache.cache_data` is off. Tasks registered outside `mnmt.data.tasks` have no text stream
    to cache and are read as SeqIO gives them."""
    from mnmt.data import cache
    from mnmt.data.tasks import task_infos

    if not spec.cache.cache_data:
        return data
    cache_dir = spec.cache.cache_dir or str(out / "data" / "cache")
    infos = task_infos()
    for pair, task in spec.tasks:
        info = infos.get(task)
        if info is None or info.text_stream is None:
            log(f"data: {task} ({pair}) is not an mnmt task: no token cache, read through SeqIO")
            continue
        if info.train_size is None and info.definition.get("kind") == "synthetic":
            continue  # an endless stream: nothing to cache
        try:
            if build:
                cache.build_cache(task, cache_dir, num_shards=spec.cache.cache_shards or None,
                                  beam_args=spec.cache.cache_beam_args, log=log)
            elif cache.open_task_cache(task, [cache_dir], (0, 1), 0) is None:
                raise cache.CacheError(f"{cache.task_cache_dir(cache_dir, task)}: no token cache "
                                       f"of {task}; build it first (mnmt-study prepare)")
        except cache.CacheError as err:
            raise UsageError(str(err)) from err
    return dataclasses.replace(data, cache_dir=cache_dir)


def study_task_arguments(spec: StudySpec, register) -> dict:
    """The keyword arguments `register_study_tasks` of a task module accepts among `pairs` and
    `caps` (the study's pairs and `StudySpec.data_caps`); caps it cannot take are an error."""
    import inspect

    accepted = inspect.signature(register).parameters
    kwargs = {}
    if "pairs" in accepted:
        kwargs["pairs"] = tuple(spec.pairs)
    if spec.data_caps:
        if "caps" not in accepted:
            raise UsageError(f"StudySpec.data_caps: {spec.task_module}.register_study_tasks takes "
                             "no caps; cap the tasks in that module or use mnmt.data.sources.wmt")
        kwargs["caps"] = dict(spec.data_caps)
    return kwargs
