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


def grow_killed_in_round(design, out: Path, law, round_number: int) -> list[dict]:
    """Grow an adaptive study (`mnmt.study.adaptive.grow`) into ``out`` with ``law.train`` and
    ``law.measure``, killed (KeyboardInterrupt) once round ``round_number`` is recorded, while
    its batch trains; the records left. AssertionError if the study ends before."""
    from mnmt.study import adaptive  # noqa: PLC0415

    def killed(runs: list) -> None:
        if len(adaptive.read_rounds(out)) == round_number + 1:
            raise KeyboardInterrupt
        law.train(runs)

    try:
        adaptive.grow(design, out, killed, law.measure, log=lambda _: None)
    except KeyboardInterrupt:
        return adaptive.read_rounds(out)
    raise AssertionError(f"the study ended before round {round_number}")


class KnownOutcomes:
    """An adaptive study's `train` and `measure` (`mnmt.study.adaptive.grow`) on a known law:
    each run measures `clean(run)` (its losses, one array) times 1 + relative noise drawn once
    per run (the same run always measures the same); `trained` lists what was trained, in
    order. Subclasses say what `clean` is."""

    def __init__(self, noise: float, seed: int = 0) -> None:
        self.noise, self.seed = noise, seed
        self.trained: list[str] = []

    def clean(self, run: Any) -> Any:
        raise NotImplementedError

    def train(self, runs: list) -> None:
        self.trained += [r.run_id for r in runs]

    def measure(self, runs: list) -> dict[str, Any]:
        import zlib  # noqa: PLC0415

        import numpy as np  # noqa: PLC0415

        out = {}
        for run in runs:
            clean = self.clean(run)
            rng = np.random.default_rng([self.seed, zlib.crc32(run.run_id.encode())])
            out[run.run_id] = clean * (1 + rng.normal(0.0, self.noise, clean.shape))
        return out
