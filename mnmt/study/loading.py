"""Loading a study: a StudySpec from a preset or a study gin file, with `--gin` overrides.

A preset is a built-in `mnmt.study.spec.PRESETS` entry or a study file shipped in
`t5x_configs/studies/`; the `default` preset (the main job) is the study file cpu_default.gin,
its one definition. The study's own configurables (`StudySpec.F`) and the training options
of every run (`TrainConfig.F` and its sections', `mnmt.study.train_options`) are read layer by
layer (the file, then `--gin`), so a later layer overrides an earlier one and every error names
its layer and binding in one line (`UsageError`, exit status 2). Training options are checked by
building one run's TrainConfig per size, before anything is written.
"""

from __future__ import annotations

import difflib
import functools
import re
import tokenize
from collections.abc import Sequence
from pathlib import Path

import gin

from mnmt.gin_files import parse_files_and_bindings
from mnmt.study import train_options
from mnmt.study.runner import StudyData, make_train_config
from mnmt.study.spec import PRESETS, StudySpec, expand, field_names

__all__ = ["DEFAULT_PRESET", "UsageError", "check_train_options", "load_spec", "parse_bindings",
           "preset", "preset_file", "preset_names", "repo_root", "study_files", "study_summary"]

#: the preset `mnmt-study` takes without a study file or --preset: the main job, defined once,
#: in the shipped study file of the preset name `DEFAULT_FILE` (cpu_default.gin)
DEFAULT_PRESET = "default"
DEFAULT_FILE = "cpu-default"


class UsageError(Exception):
    """A problem with the command line or its inputs; reported in one line with exit status 2."""


def repo_root() -> Path:
    """The repository (or installed source tree) root, which holds `t5x_configs/`."""
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
    """Every name `--preset` accepts: the built-in presets and `default`, then the shipped study
    files."""
    return sorted([*PRESETS, DEFAULT_PRESET]) + [name for name in study_files()
                                                  if name not in PRESETS]


def preset_file(name: str) -> Path | None:
    """The study file of preset `name` (`default`: cpu_default.gin), None if it has none."""
    return study_files().get(DEFAULT_FILE if name == DEFAULT_PRESET else name)


@functools.cache
def preset(name: str) -> StudySpec:
    """The StudySpec of preset `name` (a built-in `PRESETS` entry or a shipped study file;
    `default`: the main job), as `mnmt-study --preset NAME` trains it."""
    return load_spec(None, name, [])


def load_spec(study: str | None, preset: str | None, gin_bindings: Sequence[str]) -> StudySpec:
    """The StudySpec named by a preset or a gin file, with `--gin.NAME=value` overrides applied.

    A preset is a built-in `PRESETS` entry or the name of a shipped study file (`study_files`;
    none given: `DEFAULT_PRESET`, the study file cpu_default.gin).
    Both take `StudySpec.F` bindings and the training options of every run, `TrainConfig.F` and
    its sections' `DecodeConfig.F`, `OptimizerConfig.F`, … (`mnmt.study.train_options`: one
    that a StudySpec field owns sets that field; the others become `StudySpec.train_overrides`).
    `--gin` bindings override the study file's."""
    if study and preset:
        raise UsageError("give either a study gin file or --preset, not both")
    if study is None and (preset or DEFAULT_PRESET) not in PRESETS:
        path = preset_file(preset or DEFAULT_PRESET)
        study = str(path) if path else None
    if study is None:
        name = preset or DEFAULT_PRESET
        if name not in PRESETS:
            close = difflib.get_close_matches(name, preset_names(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"unknown preset {name!r}{hint}; expected one of: "
                             f"{', '.join(preset_names())} (`mnmt-study presets` describes them)")
        base = PRESETS[name]
        if not gin_bindings:
            return base
        spec = base.replace(**_study_fields(base, [("--gin", parse_bindings(
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
        spec = StudySpec.of(**_study_fields(StudySpec(), _gin_layers(path, gin_bindings)))
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
    fields = field_names()
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
    names = field_names()
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
    fields = field_names()
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
