"""WMT19 En→De and En→Zh from TFDS: the public stand-in for Fernandes et al. 2023's in-house data.

Fernandes et al. (§3) train En→XX models on 600M web-crawled sentences per pair, tokenised with a
128K-piece multilingual SentencePiece model, and prepend a target-language token (<2de>, <2zh>).
WMT19 (`wmt19_translate/de-en`, `/zh-en` in TFDS, read in the En→XX direction; validation =
newstest2018) is the closest public setting. The datasets must already be prepared in
`data_dir` or `$TFDS_DATA_DIR` (`tfds build wmt19_translate/de-en`); nothing is downloaded here.

As a study's `StudySpec.task_module`, `mnmt-study` calls `register_study_tasks` with the study's
`vocabulary_path` (the vocabulary needs the <2de>/<2zh> tokens: `mnmt-vocab --study
fernandes_en_de_zh` trains it on a balanced sample of these tasks' training splits), and the data
stage caches each training split as token shards (`mnmt.data.cache`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

TASKS = {"en-de": "wmt19_en_de", "en-zh": "wmt19_en_zh"}
DATASETS = {"en-de": "wmt19_translate/de-en", "en-zh": "wmt19_translate/zh-en"}


def register_study_tasks(vocabulary_path: str, *, data_dir: str | None = None,
                         pairs: Sequence[str] = tuple(TASKS),
                         datasets: Mapping[str, str] | None = None) -> dict[str, str]:
    """Register the SeqIO task of each pair (names in `TASKS`); returns pair → task name.

    `datasets` replaces the TFDS names per pair (e.g. a prepared subset). The registration is
    :func:`mnmt.data.sources.wmt.register_study_tasks` under this module's task names.
    """
    from mnmt.data.sources import wmt  # noqa: PLC0415

    unknown = sorted(set(pairs) - set(TASKS))
    if unknown:
        raise ValueError(f"mnmt.data.sources.wmt19: pairs {unknown} are not offered; expected some of "
                         f"{sorted(TASKS)}")
    return wmt.register_study_tasks(vocabulary_path, pairs=pairs, data_dir=data_dir,
                                    datasets={**DATASETS, **(datasets or {})},
                                    task_names=TASKS)
