"""``mnmt-cache``: look into and check token caches (a study's data stage builds them).

    mnmt-cache info CACHE_DIR [--task NAME] [--json]   what each cache holds and was built from
    mnmt-cache verify CACHE_DIR [--task NAME]          SHA-256 of every shard, every record read

``mnmt-study prepare STUDY --out OUT`` builds the caches of a study's tasks (``mnmt.data.cache``
``build_cache`` from Python for tasks registered by your own code).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from mnmt.data.cache import layout
from mnmt.data.cache.build import read_complete_index
from mnmt.data.cache.layout import CacheError, CacheIndex

__all__ = ["main", "verify_cache", "task_directories"]


def task_directories(cache_dir: str, task: str | None = None) -> list[str]:
    """The task caches under ``cache_dir`` (or ``cache_dir`` itself when it is one), complete or
    not, without build temporaries."""
    if task:
        path = layout.task_cache_dir(cache_dir, task)
        if not os.path.isdir(path):
            raise CacheError(f"{path}: no cache of task {task!r} here")
        return [path]
    if os.path.exists(os.path.join(cache_dir, layout.INDEX_FILE)):
        return [cache_dir]
    if not os.path.isdir(cache_dir):
        raise CacheError(f"{cache_dir}: not a directory")
    found = [os.path.join(cache_dir, d) for d in sorted(os.listdir(cache_dir))
             if ".tmp-" not in d and ".old-" not in d
             and os.path.isdir(os.path.join(cache_dir, d))]
    if not found:
        raise CacheError(f"{cache_dir}: no task caches (expected <cache_dir>/<task>/index.json)")
    return found


def _index_or_error(path: str) -> CacheIndex:
    index = read_complete_index(path)
    if index is None:
        raise CacheError(f"{path}: no {layout.COMPLETED_FILE} marker (an incomplete build); "
                         f"{layout.rebuild_hint(os.path.basename(path))}")
    return index


def verify_cache(path: str) -> list[str]:
    """Problems of one task cache (empty when sound): shard sizes and SHA-256 against
    index.json, and every record decoded (counts per shard)."""
    from array_record.python.array_record_module import ArrayRecordReader

    index = _index_or_error(path)
    problems = []
    for shard in range(index.num_shards):
        file = os.path.join(path, layout.shard_name(index.split, shard, index.num_shards))
        if not os.path.exists(file):
            problems.append(f"{file}: missing")
            continue
        if os.path.getsize(file) != index.shard_bytes[shard]:
            problems.append(f"{file}: {os.path.getsize(file)} bytes, index.json records "
                            f"{index.shard_bytes[shard]}")
            continue
        if layout.file_sha256(file) != index.shard_sha256[shard]:
            problems.append(f"{file}: SHA-256 differs from index.json (corrupt or replaced)")
            continue
        try:
            reader = ArrayRecordReader(file)
            count = reader.num_records()
            for start in range(0, count, 4096):
                for record in reader.read(start, min(count, start + 4096)):
                    layout.decode_example(record, index.dtype)
            reader.close()
        except Exception as err:  # riegeli chunk errors and malformed records alike
            problems.append(f"{file}: unreadable records ({err})")
            continue
        if count != index.shard_examples[shard]:
            problems.append(f"{file}: {count} records, index.json records "
                            f"{index.shard_examples[shard]}")
    return problems


def _describe(index: CacheIndex, path: str) -> str:
    sizes = sum(index.shard_bytes)
    mean = {k: v / max(index.examples, 1) for k, v in index.tokens.items()}
    hist = index.length_histogram["targets"]
    edges = layout.LENGTH_BINS
    bins = ", ".join(f"{edges[i]}{'+' if i == len(edges) - 1 else f'-{edges[i + 1] - 1}'}: {n:,}"
                     for i, n in enumerate(hist) if n)
    return "\n".join([
        f"{index.task} ({index.pair}, split {index.split}): {path}",
        f"  {index.examples:,} examples in {index.num_shards} shards, {sizes / 1e6:,.1f} MB "
        f"({index.dtype} ids, group size {index.group_size})",
        f"  tokens: inputs {index.tokens['inputs']:,} (mean {mean['inputs']:.1f}, max "
        f"{index.max_length['inputs']}), targets {index.tokens['targets']:,} (mean "
        f"{mean['targets']:.1f}, max {index.max_length['targets']})",
        f"  target lengths: {bins}",
        f"  vocabulary: {index.vocabulary['path']} ({index.vocabulary['size']} pieces, sha256 "
        f"{index.vocabulary['sha256'][:12]}…)",
        f"  source: {json.dumps(index.source['definition'], sort_keys=True)[:200]}",
        f"  built: {index.build['created']} by {index.build['engine']} ({index.build['runner']}, "
        f"{index.build['parts']} parts, {index.build['seconds']:.1f} s{_read_text(index)})",
    ])


def _read_text(index: CacheIndex) -> str:
    """What the build read from the source (builds since parts read only their share)."""
    read = index.build.get("read")
    if not read:
        return ""
    return f"; read {read['examples']:,} source lines or records, {read['bytes'] / 1e6:,.1f} MB"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mnmt-cache", description=__doc__.splitlines()[0].replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("info", "what each cache holds and was built from"),
                       ("verify", "check every shard's digest and records")):
        p = sub.add_parser(name, help=text)
        p.add_argument("cache_dir", help="a cache directory (or one task's cache in it)")
        p.add_argument("--task", help="only this task")
        if name == "info":
            p.add_argument("--json", action="store_true", help="print index.json objects")
    args = parser.parse_args(argv)
    try:
        paths = task_directories(args.cache_dir, args.task)
        if args.command == "info":
            indexes = [(p, _index_or_error(p)) for p in paths]
            if args.json:
                print(json.dumps([json.loads(i.to_json()) for _, i in indexes], indent=1))
            else:
                print("\n".join(_describe(i, p) for p, i in indexes))
            return 0
        bad = 0
        for path in paths:
            problems = verify_cache(path)
            bad += bool(problems)
            print(f"{path}: " + ("OK" if not problems else
                                 f"{len(problems)} problem(s); {layout.rebuild_hint(os.path.basename(path))}"))
            for problem in problems:
                print(f"  {problem}")
        return 1 if bad else 0
    except CacheError as err:
        print(f"mnmt-cache: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
