"""ArrayRecord group size for token caches: write time, file size, reader index memory, random reads.

    python benchmarks/speed/array_record_group_size.py [--records 2000000] [--tokens 52] [--json]

Writes the same records (random uint16 ids, ``--tokens`` per record: about one cached example of
25 tokens a side) with ``group_size:1`` (what Grain's ``ArrayRecordDataSource`` asks for) and
with larger groups, then, in a fresh process per file, opens it with Grain's
``ArrayRecordDataSource`` and reads 20,000 random records in batches of 500 (``__getitems__``,
as ``mnmt.data.cache`` reads) and 2,000 one at a time (``__getitem__``). The RSS growth of that
process is the reader's index plus buffers. The choice of ``mnmt.data.cache.build
.DEFAULT_GROUP_SIZE`` rests on these numbers (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# the repository root (run or loaded by path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.common import machine  # noqa: E402


def write(path: str, records: int, tokens: int, group_size: int) -> dict:
    import numpy as np
    from array_record.python.array_record_module import ArrayRecordWriter

    data = np.random.default_rng(0).integers(3, 32000, size=(records, tokens)).astype(np.uint16)
    start = time.perf_counter()
    writer = ArrayRecordWriter(path, f"group_size:{group_size}")
    for row in data:
        writer.write(row.tobytes())
    writer.close()
    return {"write_s": round(time.perf_counter() - start, 2), "mb": round(os.path.getsize(path) / 1e6, 1)}


def read(path: str) -> dict:
    import logging

    import numpy as np
    import psutil
    from grain.sources import ArrayRecordDataSource

    logging.getLogger("absl").setLevel(logging.CRITICAL)  # the group-size complaint
    proc = psutil.Process()
    before = proc.memory_info().rss
    source = ArrayRecordDataSource([path])
    keys = np.random.default_rng(1).integers(0, len(source), 20_000).tolist()
    start = time.perf_counter()
    for k in range(0, len(keys), 500):
        source.__getitems__(keys[k:k + 500])
    batched = len(keys) / (time.perf_counter() - start)
    start = time.perf_counter()
    for key in keys[:2000]:
        source[key]
    single = 2000 / (time.perf_counter() - start)
    return {"reader_rss_mb": round((proc.memory_info().rss - before) / 1e6, 1),
            "batched_reads_per_s": round(batched), "single_reads_per_s": round(single)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--tokens", type=int, default=52)
    ap.add_argument("--group_sizes", default="1,32,128")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--_read", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._read:
        print(json.dumps(read(args._read)))
        return 0
    out = {"records": args.records, "tokens_per_record": args.tokens,
           **machine({"load_avg": "load_average", "cpus": "cpus"}), "group_sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in args.group_sizes.split(",")):
            path = os.path.join(tmp, f"gs{size}.array_record")
            row = write(path, args.records, args.tokens, size)
            child = subprocess.run([sys.executable, __file__, "--_read", path], check=True,
                                   capture_output=True, text=True)
            row.update(json.loads(child.stdout.strip().splitlines()[-1]))
            out["group_sizes"][size] = row
            os.remove(path)
    print(json.dumps(out, indent=None if args.json else 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
