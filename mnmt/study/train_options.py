"""Training options of a study: `TrainConfig` settings bound in a study file or with `--gin`.

A study (`mnmt.study.spec.StudySpec`) becomes one `TrainConfig` per run
(`mnmt.study.runner.make_train_config`). Besides `StudySpec.*`, a study file and `--gin` bind the
trainer's own configurables, T5X-style: `TrainConfig.F` and the grouped sections
`OptimizerConfig.F`, `InputConfig.F`, `EvalConfig.F`, `DecodeConfig.F`, `CheckpointConfig.F`,
`BranchConfig.F` (any section `TrainConfig` declares). Each binding names a dotted TrainConfig
path ("label_smoothing", "decode.beam_size", "optimizer.max_grad_norm"), and one rule decides
what becomes of it:

* a path the study owns under a StudySpec field sets that field: the same name for TrainConfig's
  own fields (derived from the dataclasses, so a StudySpec field added later is covered), or a
  renamed one (`STUDY_FIELDS`, e.g. "eval.period" → `eval_every`, read from the StudySpec
  field's metadata);
* a path the study sets per run (`PER_RUN`: run directory, size, seed, mixture, …) or cannot
  take as a number of steps (`cooldown_steps`: sizes train for different steps) is refused,
  naming what to use instead;
* any other path is a training option of every run: `StudySpec.train_overrides`, applied to
  each run's TrainConfig by `apply`.

This module imports no JAX: `mnmt.training.config` is configuration only.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from mnmt.study import spec_sections
from mnmt.training import config as train_config

__all__ = ["STUDY_CONFIGURABLE", "TRAIN_CONFIGURABLE", "STUDY_FIELDS", "PER_RUN",
           "TrainOptionError", "configurables", "binding_name", "unknown_name_hint",
           "field_names", "resolve", "overrides_error", "normalise", "apply", "describe", "same_name_fields",
           "conforms", "type_text"]

STUDY_CONFIGURABLE = "StudySpec"
TRAIN_CONFIGURABLE = "TrainConfig"

# TrainConfig paths whose StudySpec field has another name (same-name fields need no entry), from
# the fields' own metadata (`mnmt.study.spec_sections.TRAIN_PATH`).
STUDY_FIELDS: dict[str, str] = spec_sections.train_paths()

# TrainConfig paths the study sets itself -> what to use instead (refused when bound).
PER_RUN: dict[str, str] = {
    "model_dir": "each run's directory is OUT/runs/<run id> (mnmt-study --out)",
    "model_size": "use StudySpec.sizes",
    "vocabulary_path": "use StudySpec.vocabulary_path (with StudySpec.tasks; the synthetic "
                       "family's vocabulary is trained by the data stage)",
    "run_id": "run ids follow from StudySpec.sizes, weights and seeds",
    "study": "use StudySpec.name",
    "seed": "use StudySpec.seeds",
    "mixture_weights": "use StudySpec.weights (or a mixture design, e.g. StudySpec.temperatures)",
    "mixture_caps": "use StudySpec.data_caps",
    "extra": "the study records its own (irreducible loss, data preset, held-out role)",
    "inputs.mixture_or_task_name": "use StudySpec.pairs, StudySpec.tasks and StudySpec.weights",
    "inputs.cache_dirs": "use StudySpec.cache_dir",
    "eval.tasks": "use StudySpec.pairs and StudySpec.tasks",
    "branches.parent_dir": "use StudySpec.cooldown_branches",
    "branches.parent_step": "use StudySpec.cooldown_branches",
    "checkpoint.keep_steps": "the branch points of StudySpec.cooldown_branches are kept",
}
# Refused for another reason than being per run: the study needs a share of each run's steps.
_NEEDS_FRACTION = {"cooldown_steps": "use StudySpec.cooldown_fraction (a share of each run's "
                                     "steps: the study's sizes may train for different steps)"}


class TrainOptionError(ValueError):
    """A training option a study cannot take; the message names the binding."""


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _section_class(hint: Any) -> type | None:
    """The dataclass of a TrainConfig field's type (`X` or `X | None`), None for plain values."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


@functools.cache
def _sections() -> dict[str, tuple[str, type]]:
    """Configurable name -> (TrainConfig field, dataclass) of each grouped section."""
    out = {}
    for field in dataclasses.fields(train_config.TrainConfig):
        cls = _section_class(_hints(train_config.TrainConfig)[field.name])
        if cls is not None:
            out[cls.__name__] = (field.name, cls)
    return out


def configurables() -> list[str]:
    """The gin configurables a study binds: StudySpec, TrainConfig and TrainConfig's sections."""
    return [STUDY_CONFIGURABLE, TRAIN_CONFIGURABLE, *_sections()]


def _class_of(configurable: str) -> type:
    if configurable == TRAIN_CONFIGURABLE:
        return train_config.TrainConfig
    return _sections()[configurable][1]


def _path(configurable: str, param: str) -> str:
    if configurable == TRAIN_CONFIGURABLE:
        return param
    return f"{_sections()[configurable][0]}.{param}"


def binding_name(path: str) -> str:
    """The gin binding of a TrainConfig path: "decode.beam_size" -> "DecodeConfig.beam_size"."""
    section, _, param = path.rpartition(".")
    if not section:
        return f"{TRAIN_CONFIGURABLE}.{param}"
    names = {field: name for name, (field, _) in _sections().items()}
    return f"{names.get(section, section)}.{param}"


def field_names(configurable: str, study_fields: Collection[str]) -> list[str]:
    """The fields a study may name on `configurable` (StudySpec's are `study_fields`)."""
    if configurable == STUDY_CONFIGURABLE:
        return list(study_fields)
    return [f.name for f in dataclasses.fields(_class_of(configurable))]


def unknown_name_hint(configurable: str, param: str | None,
                      study_fields: Collection[str]) -> str:
    """What to say about an unknown `configurable` (param None) or an unknown `param` of a known
    one: the closest name, and what is accepted."""
    if configurable not in configurables():
        close = difflib.get_close_matches(configurable, configurables(), n=1)
        hint = f"did you mean {close[0]}?" if close else "not a configurable of a study"
        return (f"unknown configurable {configurable!r} ({hint}); a study binds "
                + ", ".join(f"{name}.FIELD" for name in configurables()))
    # a field of another configurable first (StudySpec.beam_size: DecodeConfig.beam_size), then
    # the closest field of this one
    close = [binding_name(path) for path in _all_paths() if path.rpartition(".")[2] == param]
    close += [f"{configurable}.{name}" for name in difflib.get_close_matches(
        param or "", field_names(configurable, study_fields), n=1)]
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{configurable} has no field {param!r}{hint}"


def _study_field(path: str, study_fields: Collection[str]) -> str | None:
    """The StudySpec field that owns TrainConfig path `path`, if any."""
    if path in STUDY_FIELDS:
        return STUDY_FIELDS[path]
    if "." not in path and path in study_fields and path not in PER_RUN:
        return path
    return None


def _refusal(path: str, study_fields: Collection[str]) -> str | None:
    """Why `path` cannot be a training option of a study (None: it can)."""
    name = binding_name(path)
    if path in PER_RUN:
        return f"{name}: the study sets it per run; {PER_RUN[path]}"
    if path in _NEEDS_FRACTION:
        return f"{name}: {_NEEDS_FRACTION[path]}"
    if "." not in path:
        cls = _section_class(_hints(train_config.TrainConfig).get(path))
        if cls is not None:
            return f"{name}: bind the section's fields, {cls.__name__}.FIELD = VALUE, instead"
    return None


_NAMES = {float: "a number", int: "an integer", bool: "True or False", str: "a string",
          type(None): "None", dict: "a dict", tuple: "a tuple"}
_PLURALS = {float: "numbers", int: "integers", bool: "True or False values", str: "strings"}


def type_text(hint: Any) -> str:
    """What an annotation asks for, in words: "an integer", "a tuple of strings", "a tuple of
    (str, int) pairs", "a number or None"."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(type_text(a) for a in args)
    origin = typing.get_origin(hint) or hint
    text = _NAMES.get(origin, getattr(origin, "__name__", str(origin)))
    if origin is tuple and args and args[-1] is Ellipsis:
        entry, entry_args = args[0], typing.get_args(args[0])
        if entry in _PLURALS:
            text += f" of {_PLURALS[entry]}"
        elif typing.get_origin(entry) is tuple and len(entry_args) == 2 and \
                Ellipsis not in entry_args:
            names = ", ".join(getattr(a, "__name__", str(a)) for a in entry_args)
            text += f" of ({names}) pairs"
        else:
            text += f" of ({type_text(entry)}) entries"
    elif origin is tuple and args:
        text += f" of {len(args)} entries"
    return text


class _Mismatch(Exception):
    pass


def _conform(hint: Any, value: Any) -> Any:
    """`value` as the annotation `hint` wants it (ints as floats, lists as tuples), or
    _Mismatch. Light: containers' entries are checked, anything else passes."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            try:
                return _conform(arg, value)
            except _Mismatch:
                continue
        raise _Mismatch
    checks = {type(None): lambda v: v is None, bool: lambda v: isinstance(v, bool),
              str: lambda v: isinstance(v, str),
              int: lambda v: isinstance(v, int) and not isinstance(v, bool),
              float: lambda v: isinstance(v, int | float) and not isinstance(v, bool)}
    if hint in checks:
        if not checks[hint](value):
            raise _Mismatch
        return float(value) if hint is float else value
    if (origin or hint) is tuple:
        if not isinstance(value, tuple | list):
            raise _Mismatch
        if args and args[-1] is Ellipsis:
            return tuple(_conform(args[0], v) for v in value)
        if args and len(args) != len(value):
            raise _Mismatch
        return tuple(_conform(a, v) for a, v in zip(args, value, strict=True)) if args \
            else tuple(value)
    if (origin or hint) is dict:
        if not isinstance(value, dict):
            raise _Mismatch
        if not args:
            return dict(value)
        return {_conform(args[0], k): _conform(args[1], v) for k, v in value.items()}
    if _section_class(hint) is not None:
        raise _Mismatch
    return value


def conforms(hint: Any, value: Any) -> bool:
    """Whether `value` is of the kind annotation `hint` asks for (a list where a tuple is asked,
    an int where a float is; containers' entries checked, no bool for a number)."""
    try:
        _conform(hint, value)
    except _Mismatch:
        return False
    return True


def _owner(path: str) -> tuple[type | None, str]:
    """(the dataclass that declares TrainConfig path `path`'s field, the field's name); None for
    a section TrainConfig does not have."""
    section, _, param = path.rpartition(".")
    if not section:
        return train_config.TrainConfig, param
    return {field: cls for field, cls in _sections().values()}.get(section), param


def _hint(path: str) -> Any:
    cls, param = _owner(path)
    return _hints(cls)[param]


def _known(path: str) -> bool:
    cls, param = _owner(path)
    return cls is not None and param in {f.name for f in dataclasses.fields(cls)}


def normalise(path: str, value: Any) -> Any:
    """`value` of TrainConfig path `path`, checked lightly against its annotation (TrainOptionError
    naming the binding otherwise); ints become floats and lists tuples where the field wants."""
    hint = _hint(path)
    try:
        return _conform(hint, value)
    except _Mismatch:
        raise TrainOptionError(f"{binding_name(path)}: expected {type_text(hint)}, got "
                               f"{value!r}") from None


def _to_study(path: str, value: Any) -> Any:
    """A TrainConfig value as its StudySpec field holds it (None → 0, a dict → pairs)."""
    if value is None and path in ("inputs.batch_tokens", "optimizer.momentum",
                                  "branches.cooldown_fraction"):
        return 0.0 if path != "inputs.batch_tokens" else 0
    if isinstance(value, dict):
        return tuple(value.items())
    return value


def _canonical(value: Any) -> Any:
    """`value` with lists as tuples and dicts as their items, for comparing two spellings."""
    if isinstance(value, dict):
        value = tuple(value.items())
    if isinstance(value, tuple | list):
        return tuple(_canonical(v) for v in value)
    return value


def resolve(bindings: Mapping[str, Mapping[str, Any]], study_fields: Collection[str]
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """One layer of bindings (configurable -> field -> value: a study file, or the `--gin`
    bindings given with it) -> (StudySpec field values, training options by TrainConfig path).

    A binding of a path a StudySpec field owns sets that field; given both ways with different
    values in one layer, the two disagree (TrainOptionError naming both). Per-run paths and
    unknown names are refused with what to use instead."""
    study = dict(bindings.get(STUDY_CONFIGURABLE, {}))
    options: dict[str, Any] = {}
    for name, params in bindings.items():
        if name == STUDY_CONFIGURABLE:
            continue
        if name not in configurables():
            raise TrainOptionError(unknown_name_hint(name, None, study_fields))
        for param, raw in params.items():
            if param not in field_names(name, study_fields):
                raise TrainOptionError(unknown_name_hint(name, param, study_fields))
            path = _path(name, param)
            if (problem := _refusal(path, study_fields)) is not None:
                raise TrainOptionError(problem)
            value = normalise(path, raw)
            field = _study_field(path, study_fields)
            if field is None:
                options[path] = value
                continue
            value = _to_study(path, value)
            if field in study and _canonical(study[field]) != _canonical(value):
                raise TrainOptionError(
                    f"{STUDY_CONFIGURABLE}.{field} = {study[field]!r} and {binding_name(path)} = "
                    f"{raw!r} set the same option differently: it is the study's field "
                    f"{STUDY_CONFIGURABLE}.{field}, bind that one only")
            study[field] = value
    return study, options


def overrides_error(overrides: Any, study_fields: Collection[str]) -> str | None:
    """What is wrong with a `StudySpec.train_overrides` value (None: nothing): it must be
    (path, value) pairs of TrainConfig paths that are neither the study's nor per run."""
    label = f"{STUDY_CONFIGURABLE}.train_overrides"
    if not isinstance(overrides, tuple | list):
        return f"{label}: expected a tuple of (TrainConfig path, value) pairs, got {overrides!r}"
    for entry in overrides:
        if not (isinstance(entry, tuple | list) and len(entry) == 2 and isinstance(entry[0], str)):
            return f"{label}: expected (TrainConfig path, value) pairs, got {entry!r}"
        path, value = entry
        if not _known(path):
            close = difflib.get_close_matches(path, _all_paths(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return f"{label}: {path!r} is not a TrainConfig path{hint}"
        if (problem := _refusal(path, study_fields)) is not None:
            return f"{label}: {problem}"
        if (field := _study_field(path, study_fields)) is not None:
            return f"{label}: {path!r} is {STUDY_CONFIGURABLE}.{field}; set that field instead"
        try:
            normalise(path, value)
        except TrainOptionError as err:
            return f"{label}: {err}"
    return None


def _all_paths() -> list[str]:
    paths = [f.name for f in dataclasses.fields(train_config.TrainConfig)]
    for field, cls in _sections().values():
        paths += [f"{field}.{f.name}" for f in dataclasses.fields(cls)]
    return paths


def apply(config: train_config.TrainConfig, overrides: Iterable[tuple[str, Any]]
          ) -> train_config.TrainConfig:
    """`config` with the training options `overrides` ((TrainConfig path, value) pairs) set; a
    section that is None (`optimizer`: the defaults) starts from its defaults."""
    top: dict[str, Any] = {}
    by_section: dict[str, dict[str, Any]] = {}
    for path, value in overrides:
        section, _, param = path.rpartition(".")
        if section:
            by_section.setdefault(section, {})[param] = normalise(path, value)
        else:
            top[param] = normalise(path, value)
    for section, values in by_section.items():
        current = getattr(config, section)
        if current is None:
            current = _owner(f"{section}.")[0]()  # e.g. optimizer None: OptimizerConfig()
        top[section] = dataclasses.replace(current, **values)
    return dataclasses.replace(config, **top)


def describe(overrides: Iterable[tuple[str, Any]]) -> str:
    """The training options as one line: "label_smoothing=0.1, decode.beam_size=8"."""
    return ", ".join(f"{path}={value!r}" for path, value in overrides)


def same_name_fields(study_fields: Collection[str]) -> list[str]:
    """TrainConfig's own fields that a StudySpec field of the same name sets (not per run)."""
    return [f.name for f in dataclasses.fields(train_config.TrainConfig)
            if f.name in study_fields and f.name not in PER_RUN
            and _section_class(_hints(train_config.TrainConfig)[f.name]) is None]
