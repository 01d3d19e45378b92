"""A gettext study's data stage caches its tasks' training splits (cpu-gettext reads through the
token cache): every capped split is built once, holds exactly the task's pairs, and a second
data stage finds it up to date."""

from __future__ import annotations

import os

WORDS = [f"Open the file number {i} now" for i in range(160)]


def test_the_gettext_data_stage_builds_and_reuses_every_tasks_cache(tmp_path):
    from mnmt.data.cache import find_task_cache
    from mnmt.data.cache.build import read_complete_index
    from mnmt.data.pipeline import in_memory_train_set
    from mnmt.data.sources.gettext import write_catalog
    from mnmt.data.tasks import get_task_info
    from mnmt.study import stages
    from mnmt.study.spec import StudySpec

    root = tmp_path / "locale"
    for loc, fmt in (("de", "Datei {} öffnen"), ("fr", "Ouvrir le fichier {}")):
        write_catalog(str(root / loc / "LC_MESSAGES" / "app.mo"), {w: fmt.format(w) for w in WORDS})
    spec = StudySpec.of(
        name="gt-cache", data_preset=f"gettext:{root}", pairs=("en-de", "en-fr"),
        data_caps=(("en-de", 90), ("en-fr", 60)), vocab_size=120, cache_data=True,
        sizes=("micro-1",), weights=((0.5, 0.5),))
    lines: list[str] = []
    data = stages.prepare_data(spec, tmp_path / "out", lines.append)
    assert data.cache_dir == str(tmp_path / "out" / "data" / "cache")
    for pair, cap in (("en-de", 90), ("en-fr", 60)):
        path = find_task_cache(data.tasks[pair], [data.cache_dir])
        index = read_complete_index(path)
        assert index.examples == cap and index.source["definition"]["kind"] == "gettext"
        assert sum(p["examples"] for p in index.build["read"]["parts"]) == cap
        memory = in_memory_train_set(get_task_info(data.tasks[pair]), (0, 1))
        assert index.tokens["targets"] == sum(len(t) for _, t in memory)
    assert sum("cache: building" in line for line in lines) == 2
    lines.clear()
    stages.prepare_data(spec, tmp_path / "out", lines.append)
    assert sum("up to date" in line for line in lines) == 2
    assert not [n for n in os.listdir(data.cache_dir) if ".tmp-" in n]
