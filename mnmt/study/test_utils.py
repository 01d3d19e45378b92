"""Helpers for tests of studies, shipped with the package (as `seqio.test_utils`): the trainer
configurations a study's runs get, without reading data, and study files written from gin lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mnmt.study.runner import StudyData, make_train_config
from mnmt.study.spec import StudySpec, expand


def placeholder_data(spec: StudySpec) -> StudyData:
    """A data stage's result that names a task per pair and reads nothing."""
    return StudyData(vocabulary_path="v.model", tasks={p: f"t_{p}" for p in spec.pairs},
                     irreducible_loss={}, caps={})


def run_configs(spec: StudySpec) -> list[Any]:
    """The `TrainConfig` of every run of `spec` (`expand` order), as the study would train them,
    with placeholder data and no mixture registered."""
    data = placeholder_data(spec)
    return [make_train_config(spec, run, data, Path("/r") / run.run_id, mixture_name="mix")
            for run in expand(spec)]


def write_study_file(directory: str | Path, *lines: str, name: str = "test-study",
                     sizes: tuple[str, ...] = ("micro-1",), weights: str = "(0.5,)") -> str:
    """A study gin file in `directory` (`study.gin`) with a name, sizes, weights and `lines`."""
    path = Path(directory) / "study.gin"
    header = [f'StudySpec.name = "{name}"', f"StudySpec.sizes = {tuple(sizes)!r}",
              f"StudySpec.weights = {weights}"]
    path.write_text("\n".join([*header, *lines]) + "\n")
    return str(path)
