"""WMT translation directions from TFDS: the public stand-ins of the papers' paper-scale studies.

Fernandes et al. 2023 and Ghorbani et al. 2021 train on in-house web data, Caillaut et al. 2024 on
an in-house multi-domain corpus; Chen et al. 2023 train on WMT itself (En→Fr 10M, En→De 4.6M,
and 260K subsets for their low-resource directions). The closest public setting for all four is
WMT from TFDS, read in either direction:

| pairs        | TFDS dataset              | validation    |
|--------------|---------------------------|---------------|
| en-de, de-en | `wmt19_translate/de-en`   | newstest2018  |
| en-zh, zh-en | `wmt19_translate/zh-en`   | newstest2018  |
| en-fr, fr-en | `wmt14_translate/fr-en`   | newstest2013  |
| en-hi, hi-en | `wmt14_translate/hi-en`   | newsdev2014   |

Per-pair caps D_i (Chen's data-constrained settings) take the first D_i training examples
(`train[:D_i]`). The datasets must already be prepared in `data_dir` or `$TFDS_DATA_DIR`
(`tfds build wmt19_translate/de-en`); nothing is downloaded here.

As a study's `StudySpec.task_module`, `mnmt-study` calls :func:`register_study_tasks` with the
study's vocabulary, pairs and `StudySpec.data_caps`; task names are `wmt_<src>_<tgt>`
(:func:`task_name`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

DATASETS = {
    frozenset(("en", "de")): "wmt19_translate/de-en",
    frozenset(("en", "zh")): "wmt19_translate/zh-en",
    frozenset(("en", "fr")): "wmt14_translate/fr-en",
    frozenset(("en", "hi")): "wmt14_translate/hi-en",
}
PAIRS = tuple(sorted(f"{a}-{b}" for langs in DATASETS for a in langs for b in langs if a != b))


def task_name(pair: str) -> str:
    """The SeqIO task name of one direction: `wmt_en_de` for en-de."""
    return "wmt_" + pair.replace("-", "_")


def dataset_of(pair: str) -> str:
    """The TFDS dataset that holds `pair` (either direction); ValueError naming the offered pairs."""
    src, _, tgt = pair.partition("-")
    name = DATASETS.get(frozenset((src, tgt)))
    if name is None or src == tgt:
        raise ValueError(f"mnmt.data.sources.wmt: pair {pair!r} is not offered; expected one of "
                         f"{', '.join(PAIRS)}")
    return name


def register_study_tasks(vocabulary_path: str, *, pairs: Sequence[str] = ("en-de", "en-zh"),
                         caps: Mapping[str, int] | None = None, data_dir: str | None = None,
                         datasets: Mapping[str, str] | None = None,
                         task_names: Mapping[str, str] | None = None) -> dict[str, str]:
    """Register one SeqIO task per direction of `pairs`; returns pair → task name.

    `caps`: pair → D_i, the number of training examples kept (the first D_i of the split).
    `datasets`: pair → TFDS name replacing the table's (e.g. a prepared subset).
    `task_names`: pair → task name replacing :func:`task_name` (e.g. `mnmt.data.sources.wmt19`'s).
    """
    from mnmt.data.sources.tfds import register_tfds_task  # noqa: PLC0415  (tensorflow)

    caps = dict(caps or {})
    unknown = sorted(set(caps) - set(pairs))
    if unknown:
        raise ValueError(f"mnmt.data.sources.wmt: caps for pairs {unknown} that are not in "
                         f"pairs {list(pairs)}")
    names = {pair: dataset_of(pair) for pair in pairs} | dict(datasets or {})
    task_names = dict(task_names or {})
    out = {}
    for pair in pairs:
        cap = caps.get(pair)
        if cap is not None and (not isinstance(cap, int) or cap < 1):
            raise ValueError(f"mnmt.data.sources.wmt: caps[{pair!r}]: expected a positive "
                             f"number of examples, got {cap!r}")
        splits = {"train": "train" if cap is None else f"train[:{cap}]",
                  "validation": "validation"}
        out[pair] = register_tfds_task(task_names.get(pair) or task_name(pair), names[pair],
                                       pair, vocabulary_path,
                                       data_dir=data_dir, splits=splits)
    return out
