"""A token cache read by several hosts (mnmt.data.cache): each host opens only its own shards,
and the hosts' epochs are disjoint and together make the whole split.

Each host is a separate process: this file run as a script, ``python test_cache_hosts.py
SPEC.json``, reads one host's epochs through ``TaskStream`` and writes what it read and which
cache files it holds open.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

CAP = 117     # examples: 8 shards of 15 or 14 (unequal shard sizes)
SHARDS = 8
HOSTS = 2
PREFIX = "hosts"
EVAL_SIZE = 16


def _open_files_under(directory: str) -> list[str]:
    """Files under ``directory`` this process holds open (file descriptors) or mapped."""
    directory = os.path.realpath(directory) + os.sep
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith(directory):
            found.add(target)
    with open("/proc/self/maps", encoding="utf-8") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip().startswith(directory):
                found.add(parts[5].strip())
    return sorted(found)


def _host_main(spec_path: str) -> int:
    """One host: register the task, read two epochs of its examples from the cache."""
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    from mnmt.data.pipeline import TaskStream
    from mnmt.data.tasks import register_synthetic_tasks

    tasks = register_synthetic_tasks("cpu-tiny", spec["vocab"], caps=spec["cap"],
                                     eval_size=spec["eval_size"], prefix=spec["prefix"])
    name = tasks[spec["pair"]]
    task_dir = os.path.join(spec["cache_dir"], name)
    host = (spec["host"], spec["hosts"])
    stream = TaskStream(name, spec["seed"], host, 0, cache_dirs=[spec["cache_dir"]])
    assert stream.cached is not None, "the cache was not found"
    open_before = _open_files_under(task_dir)
    size = stream.cached.size
    epochs = [stream.take(size), stream.take(size)]
    out = {
        "task": name,
        "size": size,
        "paths": [os.path.realpath(p) for p in stream.cached.paths],
        "open_before_read": open_before,
        "open_after_read": _open_files_under(task_dir),
        "epochs": [[[list(map(int, a)), list(map(int, b))] for a, b in ep] for ep in epochs],
        "positions": [stream.cached.positions(0, size), stream.cached.positions(size, size)],
        "cursor": stream.cursor,
    }
    with open(spec["out"], "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


def _global_indices(index, host: int, hosts: int, positions: list[int]) -> list[int]:
    """Split indices of host-local positions: the host's shards h, h+H, … in order, shard s
    holding examples s, s+S, s+2S, … (example i in shard i % S)."""
    table = [s + j * index.num_shards for s in range(host, index.num_shards, hosts)
             for j in range(index.shard_examples[s])]
    return [table[p] for p in positions]


def test_hosts_open_only_their_shards_and_split_the_epoch(tiny_vocab, tmp_path):
    from mnmt.data.cache import CacheIndex, build_cache
    from mnmt.data.pipeline import in_memory_train_set
    from mnmt.data.tasks import get_task_info, register_synthetic_tasks

    pair, seed = "en-de", 3
    name = register_synthetic_tasks("cpu-tiny", tiny_vocab, caps=CAP, eval_size=EVAL_SIZE,
                                    prefix=PREFIX)[pair]
    cache_dir = str(tmp_path / "caches")
    built = build_cache(name, cache_dir, num_parts=1, num_shards=SHARDS)
    assert built.examples == CAP and built.num_shards == SHARDS
    task_dir = os.path.realpath(os.path.join(cache_dir, name))
    index = CacheIndex.read(os.path.join(task_dir, "index.json"))
    assert len(set(index.shard_examples)) > 1  # unequal shards exercise the index mapping

    procs, outs = [], []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    for h in range(HOSTS):
        out = tmp_path / f"host{h}.json"
        spec = tmp_path / f"spec{h}.json"
        spec.write_text(json.dumps({
            "vocab": tiny_vocab, "cap": CAP, "eval_size": EVAL_SIZE, "prefix": PREFIX,
            "pair": pair, "cache_dir": cache_dir, "host": h, "hosts": HOSTS, "seed": seed,
            "out": str(out)}))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), str(spec)],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env))
        outs.append(out)
    for h, p in enumerate(procs):
        log, _ = p.communicate(timeout=240)
        assert p.returncode == 0, f"host {h}: {log[-3000:]}"
    results = [json.loads(o.read_text()) for o in outs]

    shard_files = {s: os.path.join(task_dir, f"train.array_record-{s:05d}-of-{SHARDS:05d}")
                   for s in range(SHARDS)}
    full = in_memory_train_set(get_task_info(name), (0, 1))  # the uncached in-memory path
    assert len(full) == CAP

    def key(example):
        return json.dumps(example)

    seen_indices: list[int] = []
    union = collections.Counter()
    for h, r in enumerate(results):
        assert r["task"] == name
        mine = [shard_files[s] for s in range(SHARDS) if s % HOSTS == h]
        # the host's shards are exactly s % H == h …
        assert r["paths"] == mine, h
        # … none is opened before the first read, and afterwards only they are open
        assert r["open_before_read"] == [], (h, r["open_before_read"])
        assert sorted(r["open_after_read"]) == sorted(mine), (h, r["open_after_read"])
        assert r["size"] == sum(index.shard_examples[s] for s in range(h, SHARDS, HOSTS))
        assert r["cursor"] == 2 * r["size"]

        first, second = r["epochs"]
        pos1, pos2 = r["positions"]
        # each epoch visits every example of the host once, in a fresh order per epoch
        assert sorted(pos1) == list(range(r["size"])), h
        assert sorted(pos2) == list(range(r["size"])), h
        assert pos1 != pos2, h
        idx1 = _global_indices(index, h, HOSTS, pos1)
        idx2 = _global_indices(index, h, HOSTS, pos2)
        assert all(i % HOSTS == h for i in idx1), h  # the in-memory path's assignment
        # the examples read are the split's examples at those indices, token for token
        assert [key(e) for e in first] == [key(list(full[i])) for i in idx1], h
        assert [key(e) for e in second] == [key(list(full[i])) for i in idx2], h
        assert collections.Counter(map(key, first)) == collections.Counter(map(key, second))
        # … and as a multiset the host's share of the uncached path
        host_share = in_memory_train_set(get_task_info(name), (h, HOSTS))
        assert collections.Counter(map(key, first)) == collections.Counter(
            key(list(e)) for e in host_share), h
        seen_indices += idx1
        union.update(map(key, first))

    # the hosts are disjoint and together make the epoch (the whole split)
    assert len(seen_indices) == len(set(seen_indices)) == CAP
    assert sorted(seen_indices) == list(range(CAP))
    assert union == collections.Counter(key(list(e)) for e in full)
    # different hosts shuffle differently (their seeds include the host)
    assert results[0]["positions"][0][:20] != results[1]["positions"][0][:20]


if __name__ == "__main__":
    sys.exit(_host_main(sys.argv[1]))
