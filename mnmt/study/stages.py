"""The stages of a study that `mnmt-study` chains: load, output directory, data, export + report.

Each stage is resumable: the output directory records its study (a different one is refused),
the vocabulary and exact irreducible losses are written once, and export and report are redone
from the run directories.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import tokenize
from collections.abc import Sequence
from pathlib import Path

import gin

from fitting.data import io
from mnmt.gin_files import parse_files_and_bindings
from mnmt.study import gettext_data, lock, train_options
from mnmt.study.runner import StudyData, make_train_config
from mnmt.study.spec import PRESETS, StudySpec, expand

STUDY_FILE = "study.json"


class UsageError(Exception):
    """A problem with the command line or its inputs; reported in one line with exit status 2."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def study_files() -> dict[str, Path]:
    """The study gin files shipped in `t5x_configs/studies/`, by preset name (the file name with
    '-' for '_': `cpu_chen_2dir.gin` is the preset `cpu-chen-2dir`)."""
    folder = repo_root() / "t5x_configs" / "studies"
    return {path.stem.replace("_", "-"): path for path in sorted(folder.glob("*.gin"))}


def study_summary(path: Path) -> str:
    """The first line of a study file's leading comment (what the study is)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.lstrip("#").strip()
        if not line.startswith("#"):
            break
        if text:
            return text
    return ""


def preset_names() -> list[str]:
    """Every name `--preset` accepts: the built-in presets, then the shipped study files."""
    return sorted(PRESETS) + [name for name in study_files() if name not in PRESETS]


def load_spec(study: str | None, preset: str | None, gin_bindings: Sequence[str]) -> StudySpec:
    """The StudySpec named by a preset or a gin file, with `--gin.NAME=value` overrides applied.

    A preset is a built-in `PRESETS` entry or the name of a shipped study file (`study_files`).
    Both take `StudySpec.F` bindings and the training options of every run, `TrainConfig.F` and
    its sections' `DecodeConfig.F`, `OptimizerConfig.F`, … (`mnmt.study.train_options`: one
    that a StudySpec field owns sets that field; the others become `StudySpec.train_overrides`).
    `--gin` bindings override the study file's."""
    if study and preset:
        raise UsageError("give either a study gin file or --preset, not both")
    if study is None and preset and preset not in PRESETS:
        study = str(study_files().get(preset, "")) or None
    if study is None:
        name = preset or "default"
        if name not in PRESETS:
            close = difflib.get_close_matches(name, preset_names(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"unknown preset {name!r}{hint}; expected one of: "
                             f"{', '.join(preset_names())} (`mnmt-study presets` describes them)")
        base = PRESETS[name]
        if not gin_bindings:
            return base
        spec = dataclasses.replace(base, **_study_fields(base, [("--gin", parse_bindings(
            gin_bindings))]))
        check_train_options(spec)
        return spec
    path = Path(study)
    if not path.is_file():
        candidate = repo_root() / "t5x_configs" / "studies" / study
        path = candidate if candidate.is_file() else candidate.with_suffix(".gin")
    if not path.is_file():
        raise UsageError(f"study file not found: {study}")
    try:
        spec = StudySpec(**_study_fields(StudySpec(), _gin_layers(path, gin_bindings)))
    except ValueError as err:  # StudyError: a field's value
        raise UsageError(f"{path}: {str(err).strip().splitlines()[0]}") from err
    check_train_options(spec)
    return spec


def _gin_layers(path: Path, gin_bindings: Sequence[str]) -> list[tuple[str, dict]]:
    """The bindings of the study's configurables in a study file, then those `--gin` changes:
    [(where, configurable -> field -> value)], values resolved as gin resolves them (macros
    included, so `--gin MACRO=…` changes what the file bound to %MACRO)."""
    import mnmt.training.config  # noqa: F401  (registers TrainConfig and its sections; light)

    sources = [(str(path), [str(path)], [])]
    if gin_bindings:
        sources.append(("--gin", [], list(gin_bindings)))
    gin.clear_config()
    layers, before = [], {}
    try:
        for where, files, bindings in sources:
            try:
                parse_files_and_bindings(files, bindings)
                bound = {name: gin.get_bindings(name) for name in train_options.configurables()}
            except (ValueError, KeyError, SyntaxError, OSError, TypeError,
                    tokenize.TokenError) as err:
                # TypeError: gin calling a configurable without its arguments (an undefined %macro)
                raise UsageError(f"{where}: {_gin_error_text(err)}") from err
            layers.append((where, {name: {k: v for k, v in params.items()
                                          if not _same_value(before.get(name, {}).get(k, _UNSET), v)}
                                   for name, params in bound.items()}))
            before = bound
    finally:
        gin.clear_config()  # the spec is built; leave no study bindings behind for the runs
    return layers


_UNSET = object()


def _same_value(a: object, b: object) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001  (a value whose == does not give a truth value)
        return False


def _gin_error_text(err: Exception) -> str:
    """gin's error in one line; an unknown configurable or field gets the closest name."""
    lines = [line.strip() for line in str(err).strip().splitlines()]
    text = lines[0] if lines else type(err).__name__
    fields = [f.name for f in dataclasses.fields(StudySpec)]
    if match := re.match(r"No configurable matching '([^']+)'", text):
        text = train_options.unknown_name_hint(match.group(1), None, fields)
    elif match := re.match(r"Configurable '([^']+)' doesn't have a parameter named '([^']+)'",
                           text):
        text = train_options.unknown_name_hint(match.group(1), match.group(2), fields)
    else:
        return text
    where = next((line for line in lines[1:] if line.startswith("In ")), "")
    return f"{text} ({where[0].lower()}{where[1:]})" if where else text


def _study_fields(base: StudySpec, layers: Sequence[tuple[str, dict]]) -> dict:
    """The StudySpec field values (train_overrides included) that binding `layers` give `base`,
    later layers overriding earlier ones; UsageError naming the layer and the binding."""
    names = [f.name for f in dataclasses.fields(StudySpec)]
    fields: dict = {}
    options = dict(base.train_overrides)
    for where, layer in layers:
        try:
            study, layer_options = train_options.resolve(layer, names)
        except train_options.TrainOptionError as err:
            raise UsageError(f"{where}: {err}") from err
        if "train_overrides" in study:  # bound directly: it replaces what came before
            try:
                options = dict(study.pop("train_overrides"))
            except (TypeError, ValueError) as err:
                raise UsageError(f"{where}: StudySpec.train_overrides: expected (TrainConfig "
                                 f"path, value) pairs") from err
        fields.update(study)
        options.update(layer_options)
    if options or base.train_overrides:
        fields["train_overrides"] = tuple(sorted(options.items(), key=lambda item: item[0]))
    return fields


def check_train_options(spec: StudySpec) -> None:
    """Build the TrainConfig of one run per size when the study sets training options, so that
    a combination the trainer refuses (e.g. OptimizerConfig.b1 with Adafactor) is reported now,
    not when the run starts."""
    if not spec.train_overrides:
        return
    data = StudyData(vocabulary_path="", tasks={pair: pair for pair in spec.pairs},
                     irreducible_loss={})
    firsts = {run.size: run for run in reversed(expand(spec))}
    for run in firsts.values():
        try:
            make_train_config(spec, run, data, Path(run.run_id), mixture_name="check")
        except (ValueError, TypeError) as err:
            text = str(err).strip().splitlines()[0]
            owned = [f"{train_options.binding_name(path)} is StudySpec.{field}"
                     for path, field in train_options.STUDY_FIELDS.items()
                     if train_options.binding_name(path) in text]
            raise UsageError(f"StudySpec.train_overrides "
                             f"({train_options.describe(spec.train_overrides)}): {text}"
                             + (f" ({'; '.join(owned)})" if owned else "")) from err


def parse_bindings(bindings: Sequence[str]) -> dict:
    """`StudySpec.train_steps=100` / `TrainConfig.label_smoothing=0.1` style bindings applied to
    a preset (values parsed as gin does; a bare FIELD is StudySpec's) -> configurable -> field
    -> value."""
    fields = [f.name for f in dataclasses.fields(StudySpec)]
    accepted = ", ".join(f"{name}.FIELD" for name in train_options.configurables())
    layer: dict[str, dict] = {}
    for binding in bindings:
        name, sep, value = binding.partition("=")
        configurable, dot, field = name.strip().rpartition(".")
        configurable = configurable if dot else train_options.STUDY_CONFIGURABLE
        if not sep or not field:
            raise UsageError(f"--gin.{binding}: expected NAME=VALUE with NAME one of {accepted}")
        known = configurable in train_options.configurables()
        if not known or field not in train_options.field_names(configurable, fields):
            hint = train_options.unknown_name_hint(configurable, field if known else None, fields)
            raise UsageError(f"--gin.{binding}: {hint}")
        try:
            parsed = gin.config.parse_value(value.strip())
        except (ValueError, SyntaxError, tokenize.TokenError) as err:  # TokenError: "(" alone
            raise UsageError(f"--gin.{binding}: cannot parse value {value!r}") from err
        layer.setdefault(configurable, {})[field] = tuple(parsed) if isinstance(parsed, list) \
            else parsed
    return layer


def prepare_out_dir(out: Path, spec: StudySpec, *, command: str = "run",
                    shared: bool = False) -> None:
    """Create OUT (if needed), lock it, check it is writable, and refuse one that holds a
    different study.

    The lock (`mnmt.study.lock`, exclusive unless `shared`) is taken before anything is written
    in OUT and kept until the command ends; `lock.DirectoryInUse` when another process holds it.
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"output path is not a directory: {out}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock.acquire(out, command, shared=shared)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"cannot write to output directory {out}: {err.strerror or err}") from err
    record = out / STUDY_FILE
    current = spec_json(spec)
    if record.exists():
        try:
            previous = json.loads(record.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UsageError(f"{record}: not valid JSON ({err}); move it away or use another --out") from err
        if not isinstance(previous, dict):
            raise UsageError(f"{record}: expected a JSON object (a study record), got "
                             f"{type(previous).__name__}; move it away or use another --out")
        # a field added to StudySpec after the record was written has its default there
        defaults = spec_json(StudySpec())
        differing = sorted(k for k in set(previous) | set(current)
                           if previous.get(k, defaults.get(k)) != current.get(k))
        if differing:
            raise UsageError(
                f"{out} holds a different study (fields differ: {', '.join(differing)}); "
                "use another --out to keep both"
            )
        return
    atomic_write(record, json.dumps(current, indent=2, sort_keys=True) + "\n")


def spec_json(spec: StudySpec) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(spec)))


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


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
        with_tasks = dataclasses.replace(spec, tasks=tuple(data.tasks.items()),
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
                for eval_set in spec.eval_sets
            }
            for pair in spec.pairs
        }
        atomic_write(truth_path, json.dumps(truth, indent=2) + "\n")
    log("data: exact irreducible loss (nats/token): " + ", ".join(
        f"{pair} {sets[spec.eval_sets[0]]:.3f}" for pair, sets in truth.items()))
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
    `spec.cache_data` is off. Tasks registered outside `mnmt.data.tasks` have no text stream
    to cache and are read as SeqIO gives them."""
    from mnmt.data import cache
    from mnmt.data.tasks import task_infos

    if not spec.cache_data:
        return data
    cache_dir = spec.cache_dir or str(out / "data" / "cache")
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
                cache.build_cache(task, cache_dir, num_shards=spec.cache_shards or None,
                                  beam_args=spec.cache_beam_args, log=log)
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


def export_and_report(spec: StudySpec, run_dirs: list[Path], data, out: Path, log,
                      verification: dict | None = None):
    """Stages 3 and 4: the tidy table, the fits and the report. `verification`: the plan of
    the verification runs among `run_dirs` (`mnmt.study.verify.plan`), reported, never fitted."""
    from fitting.data.rundirs import collect_runs  # noqa: PLC0415
    from fitting.data.tables import write_table  # noqa: PLC0415
    from fitting.report.writer import write_report  # noqa: PLC0415  (matplotlib, only when reporting)

    table = collect_runs([str(d) for d in run_dirs])
    table_path = out / "metrics.csv"
    eval_set = spec.eval_sets[0]
    try:  # a full disk: one line naming the file; the previous table and report stay whole
        write_table(table, str(table_path))
        log(f"export: {len(table)} rows from {len(run_dirs)} runs -> {table_path}")
        report = write_report(
            table,
            str(out / "report"),
            ground_truth={pair: sets[eval_set]
                          for pair, sets in data.irreducible_loss.items()} or None,
            target_sizes=list(spec.report_target_sizes),
            title=f"Study {spec.name}",
            eval_set=eval_set,
            heldout_runs=[run.run_id for run in expand(spec) if run.heldout],
            mixture_constraints=mixture_constraints(spec),
            verification=verification,
        )
    except io.NoSpaceError as err:
        raise UsageError(str(err)) from err
    return report


def mixture_constraints(spec: StudySpec) -> dict | None:
    """What the K-pair recommendation (fits.json `mixture`) may not do: repeat a capped pair's
    data more often than `StudySpec.epoch_cap` (0: the largest UniMax cap) within one run's
    budget of examples (`mixture_design.budget_examples`); the same cap bounds the mixture
    laws' domain; and the pairs' importance (`StudySpec.mixture_preferences`). None without
    3 pairs or more, or without either."""
    from mnmt.study import mixture_design  # noqa: PLC0415

    cap = spec.epoch_cap or max(spec.unimax_epochs, default=0.0)
    out: dict = {"preferences": mixture_design.preferences(spec)} \
        if spec.mixture_preferences else {}
    if len(spec.pairs) < 3 or not (out or cap and spec.data_caps):
        return None
    if cap and spec.data_caps:
        out.update(budget_examples=mixture_design.budget_examples(spec), epoch_cap=float(cap))
    return out


def enable_compilation_cache(cache_dir: Path) -> None:
    """Persist XLA executables under `cache_dir`: runs of one size at different weights (and a
    re-run of the study) compile the same programs, so only the first pays for compilation."""
    import jax

    cache_dir.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
