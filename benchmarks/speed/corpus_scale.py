"""Token cache at WMT scale: build time, start-up, memory and throughput against today's path and seqio.

Writes a bitext TSV corpus of ``--pairs`` pairs (default 20M) of realistic length (≈ 25
SentencePiece tokens a side), registers it with :func:`mnmt.data.sources.bitext.register_bitext_task`
and measures three ways of feeding its training split to the trainer:

- top level, the token cache: :func:`mnmt.data.cache.build_cache` (a Beam pipeline on the local
  FnApiRunner over all cores) → ``cache_build_s``, ``build_pairs_per_s``, ``cache_bytes``; then
  ``TrainInputs(task, …, cache_dirs=(cache_dir,))``;
- ``"uncached"``: today's path (``TrainInputs`` without ``cache_dirs``: the whole split read and
  tokenized into Python lists) on the first ``--uncached-pairs`` pairs (default 2M), its own file;
- ``"seqio"``: the competitor, ``seqio.get_dataset(…, use_cached=True)`` with
  ``EncDecFeatureConverter(pack=True)`` on seqio's own cached TFRecord files of the first
  ``--seqio-pairs`` pairs (default: as uncached), written by seqio's own cache job
  (``seqio.scripts.cache_tasks_main``, i.e. ``beam_utils.PreprocessTask`` →
  ``WriteExampleTfRecord`` + info and stats, on the same FnApiRunner over all cores) for a twin
  task: the same files (as ``--seqio-shards`` TSV shards, so seqio's job can spread them over
  workers), the same vocabulary and preprocessors as ours plus ``seqio.CacheDatasetPlaceholder()``
  after tokenization (a task of ours has none, so seqio cannot cache it).

Every reading measurement runs in a fresh child process, the same way for all three:

- ``startup_s``: from the task's registration (``register_bitext_task`` with ``--validate``, on by
  default as today, which reads the whole file once; for seqio the twin's registration and
  ``add_global_cache_dirs``) to the first batch in hand — it includes loading the vocabulary,
  constructing the iterator (for the uncached path: reading and tokenizing the whole split; for
  seqio: building the tf.data graph and filling its shuffle buffer) and the first batch; the
  imports (TensorFlow, seqio, mnmt, Grain) are done before the clock starts. ``register_s`` and
  ``first_batch_s`` (iterator construction → first batch) split it;
- ``input_rss_mb``: the peak resident set of the child after its imports minus its resident set
  right after them (Linux: ``VmHWM`` from /proc/self/status, reset to the current RSS by writing
  5 to /proc/self/clear_refs after the imports; ``ru_maxrss`` where that is refused), plus the
  peak summed RSS of its child processes, sampled every 50 ms (0 when it starts none);
- ``tokens_per_s``: non-padding tokens (encoder input tokens ≠ 0 plus decoder loss weights, as
  benchmarks/speed/input_pipeline.py counts) per wall second over ``--batches`` batches (default 200)
  of the default study's packed batch shape widened to these sentences (48 rows, 64/64 tokens;
  cpu_default.gin has 48 rows of 36/36, too short for 25-token sentences), after 3 warm-up
  batches, iterating only (no training step). Ours run with ``TrainInputs``' defaults (no
  prefetch thread); seqio's dataset gets ``.prefetch(2)`` as in input_pipeline.py.

The corpus: a pool of ``--pool`` (default 200K) pairs, each 1 to k consecutive sentences
of the synthetic family's out-of-domain split (``--preset``, default ``base:en-de``: its
lexicon needs a real 8K-piece vocabulary, ≈ 10 tokens per sentence) joined by spaces, k chosen
so that the mean is ≈ ``--mean_tokens`` a side; the corpus samples pairs from the pool with
numpy (block b of 2^20 lines from ``default_rng([seed, b])``, so a smaller corpus is the first
lines of a larger one). ``--corpus gettext`` makes a real-text corpus instead: every distinct
``msgid<TAB>msgstr`` line of every gettext catalog under ``--locale_dir`` (≈ 1.2M lines from
~195 languages on a Debian/Ubuntu machine with language packs), shuffled once, then repeated
with the source tagged ``[r] `` for repetition r ≥ 1 up to ``--pairs`` (every line distinct; the
encoder's per-word cache hits far less often than on the synthetic pool's 8K-word lexicon);
its vocabulary is trained on the first ``--vocab_pairs`` lines at character coverage 0.9995
(task pair ``en-mul``). ``--num_parts`` sets the build's parts (the read counts per part are in
the result's ``build.index.read``). Pool, vocabulary and corpora are cached in ``--work_dir``
and reused.
Caches are rebuilt on every run unless ``--reuse_builds`` (both) or ``--reuse_seqio_build`` (seqio's
only: its job runs at a few hundred pairs/s here, so a 2M-pair cache takes about an hour).

    python benchmarks/speed/corpus_scale.py --json
    python benchmarks/speed/corpus_scale.py --corpus gettext --pairs 4000000 --skip-uncached --skip-seqio --json
    python benchmarks/speed/corpus_scale.py --pairs 2000000 --skip-cached --json
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

# the repository root (run or loaded by path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.common import machine  # noqa: E402

BLOCK = 1 << 20  # corpus lines per sampling block
RESULT_MARK = "CORPUS_SCALE_RESULT "
TARGETS = {"startup_s": 5.0, "input_rss_mb": 300.0, "build_pairs_per_s": 20_000.0}
TARGET_PAIRS = 20_000_000
TARGET_CPUS = 2
TWIN_MODULE = "corpus_scale_seqio_twin"
TWIN_ENV = "MNMT_CORPUS_SCALE_TWIN"
GETTEXT_PAIR = "en-mul"  # the real-text corpus: English into ~195 languages ("mul": multiple)

# The seqio twin's registration, as a module seqio's cache job imports (--module_import) in its
# driver and in every Beam worker process; its configuration is a JSON file named by $TWIN_ENV.
TWIN_SOURCE = '''"""The seqio twin of a benchmarks/speed/corpus_scale.py task (written by that script)."""

import functools
import json
import os

TASK_NAME = None


def parse_tsv(dataset):
    import tensorflow as tf

    def fn(line):
        cols = tf.strings.split(line, "\\t", maxsplit=1)
        return {"inputs": tf.strings.strip(cols[0]), "targets": tf.strings.strip(cols[1])}

    return dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE)


def register(config_path):
    """Register the twin task described by a JSON file; returns its name."""
    import seqio

    from mnmt.data.tasks import prepend_language_token
    from mnmt.data.vocab import get_vocabulary

    with open(config_path) as f:
        cfg = json.load(f)
    if cfg["name"] in seqio.TaskRegistry.names():
        return cfg["name"]
    vocab = get_vocabulary(cfg["vocab"])
    features = {k: seqio.Feature(vocabulary=vocab, add_eos=True, required=True)
                for k in ("inputs", "targets")}
    seqio.TaskRegistry.add(
        cfg["name"],
        source=seqio.TextLineDataSource({"train": cfg["pattern"]},
                                        num_input_examples={"train": cfg["pairs"]}),
        preprocessors=[
            parse_tsv,
            functools.partial(prepend_language_token, code=cfg["target_language"]),
            seqio.preprocessors.tokenize,
            seqio.CacheDatasetPlaceholder(),
            seqio.preprocessors.append_eos_after_trim,
        ],
        output_features=features,
    )
    return cfg["name"]


if os.environ.get("''' + TWIN_ENV + '''"):
    TASK_NAME = register(os.environ["''' + TWIN_ENV + '''"])
'''


# ---- machine, versions -----------------------------------------------------------------------


def _versions() -> dict:
    import importlib.util
    from importlib import metadata

    out = {}
    for dist in ("apache-beam", "grain", "array-record", "seqio", "tensorflow", "sentencepiece",
                 "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    try:
        out["mnmt_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
            cwd=os.path.dirname(importlib.util.find_spec("mnmt").origin),
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):  # pragma: no cover
        out["mnmt_commit"] = None
    return out


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ---- the corpus ------------------------------------------------------------------------------
def prepare_pool(args, log) -> dict:
    """The pool of pairs and the vocabulary (built once per setting in work_dir)."""
    if args.corpus == "gettext":
        return prepare_gettext_pool(args, log)
    key = (f"pool-{_slug(args.preset)}-s{args.seed}-p{args.pool}-v{args.vocab_size}"
           f"-t{args.mean_tokens:g}")
    d = os.path.join(args.work_dir, key)
    meta_path = os.path.join(d, "pool.json")
    meta = _read_json(meta_path)
    if meta is not None:
        meta["reused"] = True
        return meta
    import numpy as np
    import sentencepiece as spm

    from mnmt.data.synthetic import get_family
    from mnmt.data.vocab import train_vocabulary

    t0 = time.perf_counter()
    os.makedirs(d, exist_ok=True)
    fam = get_family(args.preset, seed=args.seed)
    pair = fam.pairs[0]
    src_lang, tgt_lang = pair.split("-")
    stream = fam.iter_texts(pair, "ood")
    single = [next(stream) for _ in range(args.vocab_pairs)]
    vocab = train_vocabulary({pair: single}, d, args.vocab_size, languages=[src_lang, tgt_lang])
    sp = spm.SentencePieceProcessor(model_file=vocab)
    probe = single[:5000]
    per_sentence = float(np.mean([len(sp.encode(s)) + len(sp.encode(t)) for s, t in probe]) / 2)
    # k uniform on 1..k_max: mean (1 + k_max) / 2 sentences per pair ≈ mean_tokens / per_sentence
    k_max = max(1, round(2 * args.mean_tokens / per_sentence - 1))
    rng = np.random.default_rng([args.seed, 7])
    ks = rng.integers(1, k_max + 1, size=args.pool)
    lines = []
    for k in ks.tolist():
        parts = [next(stream) for _ in range(k)]
        lines.append(" ".join(s for s, _ in parts) + "\t" + " ".join(t for _, t in parts) + "\n")
    with open(os.path.join(d, "pool.tsv"), "w", encoding="utf-8") as f:
        f.writelines(lines)
    sample = lines[:10_000]
    src_len = np.array([len(sp.encode(ln.split("\t")[0])) for ln in sample])
    tgt_len = np.array([len(sp.encode(ln.rstrip("\n").split("\t")[1])) for ln in sample])
    meta = {
        "dir": d, "pool_path": os.path.join(d, "pool.tsv"), "vocab": vocab,
        "vocab_pieces": sp.get_piece_size(), "vocab_requested": args.vocab_size,
        "vocab_trained_on": f"{args.vocab_pairs} single out-of-domain pairs, both sides",
        "preset": args.preset, "seed": args.seed, "pair": pair, "split": "ood",
        "pool_pairs": args.pool, "distinct_pool_pairs": len(set(lines)),
        "tokens_per_sentence": round(per_sentence, 2),
        "sentences_per_pair": f"uniform 1..{k_max} (mean {(1 + k_max) / 2:g})",
        # SentencePiece ids per side, without the <2xx> token and EOS (10K pool pairs)
        "mean_tokens": {"inputs": round(float(src_len.mean()), 2),
                        "targets": round(float(tgt_len.mean()), 2)},
        "p95_tokens": {"inputs": int(np.percentile(src_len, 95)),
                       "targets": int(np.percentile(tgt_len, 95))},
        "max_tokens": {"inputs": int(src_len.max()), "targets": int(tgt_len.max())},
        "mean_bytes_per_line": round(sum(len(ln.encode()) for ln in lines) / len(lines), 1),
        "build_s": round(time.perf_counter() - t0, 1),
    }
    _write_json(meta_path, meta)
    log(f"pool: {args.pool} pairs, {meta['mean_tokens']} tokens a side, "
        f"{meta['build_s']} s ({d})")
    meta["reused"] = False
    return meta


def _gettext_lines(locale_dir: str) -> tuple[list[str], dict]:
    """Every distinct ``msgid<TAB>msgstr`` line of every gettext catalog under ``locale_dir``
    (each catalog file once, whatever the languages it fills in), in file order."""
    from mnmt.data.sources.gettext import find_catalogs, load_catalog

    catalogs = find_catalogs(locale_dir)
    paths = sorted({path for domains in catalogs.values() for path in domains.values()})
    lines: dict[str, None] = {}
    unreadable = 0
    for path in paths:
        try:
            table = load_catalog(path)  # whitespace-normalised: no tab or newline inside
        except ValueError:
            unreadable += 1
            continue
        for source, target in table.items():
            lines[f"{source}\t{target}\n"] = None
    return list(lines), {"locale_dir": locale_dir, "languages": len(catalogs),
                         "catalog_files": len(paths), "unreadable_files": unreadable}


def prepare_gettext_pool(args, log) -> dict:
    """The real-text pool: every distinct line of every gettext catalog on the machine
    (``--locale_dir``), shuffled once, and a vocabulary trained on a sample of it (a modest
    sample at SentencePiece's default character coverage: ~195 languages' scripts at full
    coverage take minutes to train)."""
    import numpy as np
    import sentencepiece as spm

    from mnmt.data.vocab import train_vocabulary

    listing = sorted(os.listdir(args.locale_dir)) if os.path.isdir(args.locale_dir) else []
    digest = hashlib.sha1(json.dumps([args.locale_dir, listing]).encode()).hexdigest()[:8]
    d = os.path.join(args.work_dir, f"pool-gettext-{digest}-s{args.seed}-v{args.vocab_size}")
    meta_path = os.path.join(d, "pool.json")
    meta = _read_json(meta_path)
    if meta is not None:
        return meta | {"reused": True}
    t0 = time.perf_counter()
    os.makedirs(d, exist_ok=True)
    lines, found = _gettext_lines(args.locale_dir)
    if not lines:
        raise SystemExit(f"corpus_scale: no gettext catalogs under {args.locale_dir}")
    rng = np.random.default_rng([args.seed, 11])
    lines = [lines[i] for i in rng.permutation(len(lines))]
    with open(os.path.join(d, "pool.tsv"), "w", encoding="utf-8") as f:
        f.writelines(lines)
    pair = GETTEXT_PAIR
    sample = [tuple(ln.rstrip("\n").split("\t")) for ln in lines[:args.vocab_pairs]]
    vocab = train_vocabulary({pair: sample}, d, args.vocab_size, languages=pair.split("-"),
                             character_coverage=0.9995)
    sp = spm.SentencePieceProcessor(model_file=vocab)
    probe = sample[:10_000]
    src_len = np.array([len(sp.encode(s)) for s, _ in probe])
    tgt_len = np.array([len(sp.encode(t)) for _, t in probe])
    meta = {
        "kind": "gettext", "dir": d, "pool_path": os.path.join(d, "pool.tsv"), "vocab": vocab,
        "vocab_pieces": sp.get_piece_size(), "vocab_requested": args.vocab_size,
        "vocab_trained_on": f"the first {len(sample):,} pool lines, both sides, "
                            "character_coverage 0.9995",
        "preset": "gettext", "seed": args.seed, "pair": pair, "split": None, **found,
        "pool_pairs": len(lines), "distinct_pool_pairs": len(lines),
        "tokens_per_sentence": round(float((src_len.mean() + tgt_len.mean()) / 2), 2),
        "sentences_per_pair": "1 (catalog entries)",
        "mean_tokens": {"inputs": round(float(src_len.mean()), 2),
                        "targets": round(float(tgt_len.mean()), 2)},
        "p95_tokens": {"inputs": int(np.percentile(src_len, 95)),
                       "targets": int(np.percentile(tgt_len, 95))},
        "max_tokens": {"inputs": int(src_len.max()), "targets": int(tgt_len.max())},
        "mean_bytes_per_line": round(sum(len(ln.encode()) for ln in lines) / len(lines), 1),
        "build_s": round(time.perf_counter() - t0, 1),
    }
    _write_json(meta_path, meta)
    log(f"gettext pool: {len(lines):,} distinct lines from {found['catalog_files']} catalogs "
        f"({found['languages']} languages), {meta['build_s']} s ({d})")
    return meta | {"reused": False}


def _tagged_blocks(pool: dict, n: int):
    """The real-text corpus: the pool's lines in order, then again with the source tagged by
    the repetition (``[1] …``, ``[2] …``: every line distinct), up to ``n`` lines."""
    with open(pool["pool_path"], "rb") as f:
        lines = f.readlines()
    for lo in range(0, n, BLOCK):
        block = []
        for k in range(lo, min(n, lo + BLOCK)):
            rep, m = divmod(k, len(lines))
            block.append(lines[m] if rep == 0 else b"[%d] %s" % (rep, lines[m]))
        yield block


def _corpus_blocks(pool: dict, seed: int, n: int):
    """Lists of byte lines: the first ``n`` lines of the corpus, one sampling block at a time."""
    import numpy as np

    if pool.get("kind") == "gettext":
        yield from _tagged_blocks(pool, n)
        return
    with open(pool["pool_path"], "rb") as f:
        lines = np.array(f.readlines(), dtype=object)
    for b in range(-(-n // BLOCK)):
        m = min(BLOCK, n - b * BLOCK)
        idx = np.random.default_rng([seed, b]).integers(0, len(lines), size=BLOCK)[:m]
        yield lines[idx].tolist()


def write_corpus(pool: dict, seed: int, n: int, log) -> dict:
    """``corpus-n<N>.tsv`` (the first N lines of the corpus) beside the pool; reused if there."""
    path = os.path.join(pool["dir"], f"corpus-n{n}.tsv")
    meta_path = path + ".json"
    meta = _read_json(meta_path)
    if meta is not None and os.path.exists(path) and os.path.getsize(path) == meta["bytes"]:
        return meta | {"reused": True}
    t0 = time.perf_counter()
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        for block in _corpus_blocks(pool, seed, n):
            f.write(b"".join(block))
    os.replace(tmp, path)
    meta = {"path": path, "pairs": n, "bytes": os.path.getsize(path),
            "write_s": round(time.perf_counter() - t0, 1)}
    _write_json(meta_path, meta)
    log(f"corpus: {n} pairs, {meta['bytes'] / 1e9:.2f} GB in {meta['write_s']} s ({path})")
    return meta | {"reused": False}


def write_shards(pool: dict, seed: int, n: int, shards: int, log) -> dict:
    """The first ``n`` corpus lines as ``shards`` contiguous TSV files (seqio's job input)."""
    d = os.path.join(pool["dir"], f"seqio-n{n}-k{shards}")
    meta_path = os.path.join(d, "input.json")
    meta = _read_json(meta_path)
    if meta is not None:
        return meta
    in_dir = os.path.join(d, "input")
    shutil.rmtree(in_dir, ignore_errors=True)
    os.makedirs(in_dir)
    t0 = time.perf_counter()
    bounds = [n * i // shards for i in range(shards + 1)]
    files = [open(os.path.join(in_dir, f"train.tsv-{i:05d}-of-{shards:05d}"), "wb")  # noqa: SIM115
             for i in range(shards)]
    try:
        pos = 0
        for block in _corpus_blocks(pool, seed, n):
            start = pos
            for i, f in enumerate(files):
                lo, hi = max(bounds[i], start), min(bounds[i + 1], start + len(block))
                if lo < hi:
                    f.write(b"".join(block[lo - start:hi - start]))
            pos += len(block)
    finally:
        for f in files:
            f.close()
    meta = {"dir": d, "pattern": os.path.join(in_dir, "train.tsv-*"), "pairs": n,
            "shards": shards, "bytes": _dir_bytes(in_dir),
            "write_s": round(time.perf_counter() - t0, 1)}
    _write_json(meta_path, meta)
    log(f"seqio input: {n} pairs in {shards} shards ({in_dir})")
    return meta


def _task_name(pool: dict, n: int) -> str:
    src, tgt = pool["pair"].split("-")
    digest = hashlib.sha1(pool["dir"].encode()).hexdigest()[:6]
    return f"corpus_scale_{src}_{tgt}_n{n}_{digest}"


# ---- child processes -------------------------------------------------------------------------
class _Rss:
    """Peak RSS after the imports: this process (VmHWM after clear_refs) + sampled children."""

    def __init__(self) -> None:
        import gc

        gc.collect()
        self.method = "VmHWM after clear_refs"
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            self.method = "ru_maxrss (clear_refs refused: includes the imports' own peak)"
        self.base = self._status("VmRSS")
        self.children_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    @staticmethod
    def _status(field: str) -> int:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(f"{field} not in /proc/self/status")  # pragma: no cover

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(0.05):
            total = 0
            for c in me.children(recursive=True):
                try:
                    total += c.memory_info().rss
                except psutil.Error:
                    pass
            self.children_peak = max(self.children_peak, total)

    def result(self) -> dict:
        import resource

        self._stop.set()
        self._thread.join()
        peak = self._status("VmHWM")
        if not self.method.startswith("VmHWM"):
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        mb = 2**20
        return {"rss_after_imports_mb": round(self.base / mb, 1),
                "peak_rss_mb": round(peak / mb, 1),
                "children_peak_rss_mb": round(self.children_peak / mb, 1),
                "rss_end_mb": round(self._status("VmRSS") / mb, 1),
                "input_rss_mb": round((peak - self.base + self.children_peak) / mb, 1),
                "rss_method": self.method}


def _import_all(need_cache: bool) -> float:
    """The imports every reading child does before its clock starts (the same for all)."""
    t0 = time.perf_counter()
    import numpy  # noqa: F401
    import psutil  # noqa: F401
    import sentencepiece  # noqa: F401
    import seqio  # noqa: F401
    import tensorflow  # noqa: F401

    import mnmt.data.pipeline  # noqa: F401
    import mnmt.data.sources.bitext  # noqa: F401
    import mnmt.data.tasks  # noqa: F401
    import mnmt.data.vocab  # noqa: F401
    for optional in ("grain", "array_record.python.array_record_module", "mnmt.data.cache"):
        if need_cache or optional != "mnmt.data.cache":
            try:
                __import__(optional)
            except ImportError:
                if need_cache and optional == "mnmt.data.cache":
                    raise
    return time.perf_counter() - t0


def _count(batch: dict) -> tuple[int, int]:
    """(non-padding tokens, examples) of one packed batch."""
    w = batch["decoder_loss_weights"]
    tokens = int(w.sum()) + int((batch["encoder_input_tokens"] != 0).sum())
    if "decoder_segment_ids" in batch:
        examples = int(batch["decoder_segment_ids"].max(axis=1).sum())
    else:
        examples = int((w.sum(axis=1) > 0).sum())
    return tokens, examples


def _child_read(spec: dict) -> dict:
    """Registration → first batch → ``batches`` more, in this fresh process."""
    mode = spec["mode"]
    import_s = _import_all(need_cache=mode == "cached")
    if mode == "seqio":
        sys.path.insert(0, spec["twin_dir"])
        twin = __import__(TWIN_MODULE)  # defines register(); registers nothing without the env
    rss = _Rss()
    lengths = spec["lengths"]
    t0 = time.perf_counter()
    if mode == "seqio":
        import seqio

        name = twin.register(spec["twin_config"])
        seqio.add_global_cache_dirs([spec["cache_dir"]])
        t_reg = time.perf_counter()
        ds = seqio.get_dataset(name, lengths, seqio.EncDecFeatureConverter(pack=True),
                               dataset_split="train", shuffle=True, seed=spec["seed"],
                               num_epochs=None, use_cached=True, batch_size=spec["batch_size"],
                               verbose=False)
        it = ds.prefetch(2).as_numpy_iterator()
    else:
        from mnmt.data.pipeline import TrainInputs
        from mnmt.data.sources.bitext import register_bitext_task

        # cached: registration finds the cache of these files and does not read the corpus
        extra = {"cache_dirs": (spec["cache_dir"],)} if mode == "cached" else {}
        name = register_bitext_task(spec["task"], spec["pair"], spec["vocab"],
                                    {"train": spec["corpus"]}, validate=spec["validate"], **extra)
        t_reg = time.perf_counter()
        it = TrainInputs(name, lengths, spec["batch_size"], seed=spec["seed"], **extra)
    first = next(it)
    t_first = time.perf_counter()
    for _ in range(3):  # warm-up
        next(it)
    t1, c1 = time.perf_counter(), time.process_time()
    tokens = examples = 0
    for _ in range(spec["batches"]):
        tok, ex = _count(next(it))
        tokens += tok
        examples += ex
    dt, cpu = time.perf_counter() - t1, time.process_time() - c1
    out = {"import_s": round(import_s, 2), "register_s": round(t_reg - t0, 3),
           "first_batch_s": round(t_first - t_reg, 3), "startup_s": round(t_first - t0, 3),
           "batches": spec["batches"], "tokens": tokens, "examples": examples,
           "seconds": round(dt, 6), "cpu_seconds": round(cpu, 6),
           "tokens_per_s": round(tokens / dt, 1), "examples_per_s": round(examples / dt, 1),
           "tokens_per_cpu_s": round(tokens / cpu, 1) if cpu > 0 else None,
           "batch_shape": {k: list(v.shape) for k, v in first.items()
                           if k in ("encoder_input_tokens", "decoder_target_tokens")}}
    out |= rss.result()
    if hasattr(it, "shutdown"):
        it.shutdown()
    return out


def _child_build_cached(spec: dict) -> dict:
    from mnmt.data.cache import build_cache
    from mnmt.data.sources.bitext import register_bitext_task

    t0 = time.perf_counter()
    name = register_bitext_task(spec["task"], spec["pair"], spec["vocab"],
                                {"train": spec["corpus"]}, validate=spec["validate"])
    register_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    index = build_cache(name, spec["cache_dir"], num_shards=spec["num_shards"],
                        num_parts=spec.get("num_parts"), beam_args=spec["beam_args"], force=True,
                        log=lambda *a: print(*a, file=sys.stderr, flush=True))
    build_s = time.perf_counter() - t1
    summary = {}
    for field in ("examples", "num_shards", "tokens", "max_length", "dtype", "group_size",
                  "build"):
        value = getattr(index, field, None)
        if isinstance(value, int | float | str) or (
                isinstance(value, dict) and all(isinstance(v, int | float | str)
                                                for v in value.values())):
            summary[field] = value
    read = index.build.get("read") or {}
    summary["read"] = {k: read.get(k) for k in ("examples", "bytes", "plan", "parts")}
    return {"register_s": round(register_s, 3), "cache_build_s": round(build_s, 2),
            "index": summary}


def _child_build_seqio(spec: dict) -> dict:
    """seqio's cache job: ``cache_tasks_main.main`` after its flags are parsed (the same as
    running ``python -m seqio.scripts.cache_tasks_main`` with these flags, minus the
    interpreter's imports)."""
    from seqio import beam_utils
    from seqio.scripts import cache_tasks_main as ctm

    sink = __import__(SINK_MODULE)
    beam_utils.WriteExampleTfRecord.expand = sink.expand
    ctm.FLAGS(["cache_tasks_main", f"--tasks={spec['task']}",
               f"--output_cache_dir={spec['cache_dir']}", f"--module_import={TWIN_MODULE}",
               "--pipeline_options=" + ",".join(spec["beam_args"]),
               f"--min_shards={spec['min_shards']}", "--overwrite"])
    t0 = time.perf_counter()
    ctm.main(None)
    return {"cache_build_s": round(time.perf_counter() - t0, 2)}


# Beam's own TFRecord sink computes CRC32C in Python with one of python-snappy, google-crc32c or
# crcmod (apache-beam[tfrecord]); none is installed here, so seqio's job writes its TFRecord
# files through this sink instead: the same files, written by TensorFlow's C++ TFRecordWriter
# (the pattern of seqio's own _ArrayRecordSink). A module of its own so that Beam workers
# import it by name when they unpickle the sink.
SINK_MODULE = "corpus_scale_tfrecord_sink"
SINK_SOURCE = '''"""A TFRecord sink for Beam written by TensorFlow (by benchmarks/speed/corpus_scale.py)."""

import apache_beam as beam
import tensorflow as tf
from apache_beam.io.filebasedsink import FileBasedSink
from apache_beam.io.filesystem import CompressionTypes


class TFRecordSink(FileBasedSink):
    def __init__(self, file_path_prefix, num_shards):
        super().__init__(file_path_prefix, coder=beam.coders.ProtoCoder(tf.train.Example),
                         file_name_suffix="", num_shards=num_shards or 0,
                         shard_name_template=None, mime_type="application/octet-stream",
                         compression_type=CompressionTypes.UNCOMPRESSED)

    def open(self, temp_path):
        return tf.io.TFRecordWriter(temp_path)

    def write_encoded_record(self, file_handle, value):
        file_handle.write(value)

    def close(self, file_handle):
        file_handle.close()


def expand(self, pcoll):
    """seqio.beam_utils.WriteExampleTfRecord.expand with this sink."""
    import seqio

    return (pcoll | beam.Map(seqio.dict_to_tfexample) | beam.Reshuffle()
            | beam.io.iobase.Write(TFRecordSink(self._output_path, self._num_shards)))
'''


def _run_child(spec: dict, args, log) -> dict:
    """Run one measurement in a fresh interpreter; its log goes to work_dir/logs/."""
    logs = os.path.join(args.work_dir, "logs")
    os.makedirs(logs, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_path = os.path.join(logs, f"{stamp}-{spec['kind']}-{spec.get('mode', '')}.log")
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "twin_dir" in spec:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (spec["twin_dir"], env.get("PYTHONPATH")) if p)
        if spec["kind"] == "build-seqio":
            env[TWIN_ENV] = spec["twin_config"]
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", json.dumps(spec)]
    t0 = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as err:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                              timeout=args.child_timeout)
    wall = time.perf_counter() - t0
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(RESULT_MARK)),
                None)
    if proc.returncode or line is None:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = f.read()[-3000:]
        log(f"{spec['kind']} {spec.get('mode', '')}: FAILED (rc {proc.returncode}); log {log_path}")
        return {"error": f"rc {proc.returncode}: {tail}", "log": log_path}
    out = json.loads(line[len(RESULT_MARK):])
    out["process_wall_s"] = round(wall, 2)
    out["log"] = log_path
    log(f"{spec['kind']} {spec.get('mode', '')}: {json.dumps(out)}")
    return out


def _child_main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    kind = spec["kind"]
    if kind == "read":
        out = _child_read(spec)
    elif kind == "build-cached":
        out = _child_build_cached(spec)
    elif kind == "build-seqio":
        out = _child_build_seqio(spec)
    else:  # pragma: no cover
        raise ValueError(f"unknown child kind {kind!r}")
    print(RESULT_MARK + json.dumps(out), flush=True)
    return 0


# ---- the three parts ---------------------------------------------------------------------------
def _beam_args(args) -> list[str]:
    return ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
            f"--direct_num_workers={args.workers}"]


def _read_spec(args, mode: str, **extra) -> dict:
    return {"kind": "read", "mode": mode, "batch_size": args.batch_size, "seed": 0,
            "lengths": {"inputs": args.inputs_length, "targets": args.targets_length},
            "batches": args.batches, "validate": args.validate, **extra}


def run_uncached(args, pool, log) -> dict:
    n = min(args.uncached_pairs, args.pairs)
    corpus = write_corpus(pool, args.seed, n, log)
    res = _run_child(_read_spec(args, "uncached", task=_task_name(pool, n), pair=pool["pair"],
                                vocab=pool["vocab"], corpus=corpus["path"]), args, log)
    return {"pairs": n, "path": "TrainInputs without cache_dirs (_finite_train_set)",
            "corpus_bytes": corpus["bytes"]} | res


def run_seqio(args, pool, log) -> dict:
    n = min(args.seqio_pairs if args.seqio_pairs is not None else args.uncached_pairs, args.pairs)
    shards = write_shards(pool, args.seed, n, args.seqio_shards, log)
    twin_dir = os.path.join(shards["dir"], "twin")
    os.makedirs(twin_dir, exist_ok=True)
    with open(os.path.join(twin_dir, TWIN_MODULE + ".py"), "w", encoding="utf-8") as f:
        f.write(TWIN_SOURCE)
    with open(os.path.join(twin_dir, SINK_MODULE + ".py"), "w", encoding="utf-8") as f:
        f.write(SINK_SOURCE)
    name = "seqio_twin_" + _task_name(pool, n)
    config = os.path.join(twin_dir, "config.json")
    _write_json(config, {"name": name, "pattern": shards["pattern"], "pairs": n,
                         "vocab": pool["vocab"], "target_language": pool["pair"].split("-")[1]})
    cache_root = os.path.join(shards["dir"], "cache")
    task_dir = os.path.join(cache_root, name)
    build_meta = os.path.join(shards["dir"], "build.json")
    common = {"twin_dir": twin_dir, "twin_config": config, "cache_dir": cache_root, "task": name}
    out = {"pairs": n, "method": (
        "seqio.scripts.cache_tasks_main (PreprocessTask, WriteExampleTfRecord, GetInfo, "
        f"GetStats) on {' '.join(_beam_args(args))}, --min_shards={args.seqio_min_shards}, "
        "its TFRecord files written by tf.io.TFRecordWriter in a Beam FileBasedSink (Beam's "
        "own TFRecord sink needs a crc32c package, not installed); "
        f"twin task: TextLineDataSource over {shards['shards']} TSV shards, parse_tsv, "
        "prepend_language_token, tokenize, CacheDatasetPlaceholder, append_eos_after_trim; "
        "read with seqio.get_dataset(use_cached=True, shuffle=True, num_epochs=None) + "
        "EncDecFeatureConverter(pack=True), .prefetch(2)"),
        "input_shards": shards["shards"]}
    previous = _read_json(build_meta)
    complete = os.path.exists(os.path.join(task_dir, "COMPLETED"))
    if (args.reuse_builds or args.reuse_seqio_build) and complete and previous is not None:
        build = previous | {"reused": True}
    else:
        shutil.rmtree(task_dir, ignore_errors=True)
        started, load0 = _now(), [round(x, 2) for x in os.getloadavg()]
        build = _run_child({"kind": "build-seqio", **common, "beam_args": _beam_args(args),
                            "min_shards": args.seqio_min_shards}, args, log)
        if "error" in build:
            return out | {"build_error": build["error"], "build_log": build["log"]}
        build |= {"reused": False, "date": started, "load_avg_start": load0,
                  "load_avg_end": [round(x, 2) for x in os.getloadavg()]}
        _write_json(build_meta, build)
    out |= {"cache_build_s": build["cache_build_s"],
            "build_pairs_per_s": round(n / build["cache_build_s"], 1),
            "cache_bytes": _dir_bytes(task_dir), "build_reused": build["reused"],
            "build_date": build.get("date"),
            "build_load_avg": [build.get("load_avg_start"), build.get("load_avg_end")],
            "cached_examples": (_read_json(os.path.join(task_dir, "stats.train.json"))
                                or {}).get("examples"),
            "build_log": build.get("log")}
    return out | _run_child(_read_spec(args, "seqio", **common), args, log)


def run_cached(args, pool, corpus, log) -> dict:
    n = corpus["pairs"]
    task = _task_name(pool, n)
    cache_dir = os.path.join(pool["dir"], "mnmt-cache")
    task_dir = os.path.join(cache_dir, task)
    build_meta = os.path.join(pool["dir"], f"mnmt-cache-{task}.json")
    common = {"task": task, "pair": pool["pair"], "vocab": pool["vocab"],
              "corpus": corpus["path"], "cache_dir": cache_dir}
    previous = _read_json(build_meta)
    complete = os.path.exists(os.path.join(task_dir, "COMPLETED"))
    if args.reuse_builds and complete and previous is not None:
        build = previous | {"reused": True}
    else:
        shutil.rmtree(task_dir, ignore_errors=True)
        beam = list(args.beam_arg) if args.beam_arg else []
        started, load0 = _now(), [round(x, 2) for x in os.getloadavg()]
        build = _run_child({"kind": "build-cached", **common, "validate": args.validate,
                            "num_shards": args.num_shards, "num_parts": args.num_parts,
                            "beam_args": beam}, args, log)
        if "error" in build:
            return {"pairs": n, "build_error": build["error"], "build_log": build["log"]}
        build |= {"reused": False, "date": started, "load_avg_start": load0,
                  "load_avg_end": [round(x, 2) for x in os.getloadavg()]}
        _write_json(build_meta, build)
    out = {"pairs": n, "task": task,
           "cache_build_s": build["cache_build_s"],
           "build_pairs_per_s": round(n / build["cache_build_s"], 1),
           "cache_bytes": _dir_bytes(task_dir),
           "build": {k: build.get(k) for k in ("register_s", "index", "process_wall_s", "log",
                                                 "reused", "date", "load_avg_start",
                                                 "load_avg_end")}}
    read = _run_child(_read_spec(args, "cached", **common), args, log)
    return out | read


def _corpus_method(pool: dict, args) -> str:
    if pool.get("kind") == "gettext":
        return (f"every distinct msgid<TAB>msgstr line ({pool['pool_pairs']:,}) of the "
                f"{pool['catalog_files']} gettext catalog files under {pool['locale_dir']} "
                f"({pool['languages']} languages; {pool['unreadable_files']} unreadable files "
                "skipped), shuffled once (default_rng([seed, 11])), then repeated with the "
                "source tagged '[r] ' for repetition r >= 1")
    return (f"pool of {pool['pool_pairs']:,} pairs ({pool['distinct_pool_pairs']:,} "
            "distinct), each 1..k consecutive "
            f"'{pool['split']}' sentences of synthetic family {pool['preset']!r} "
            f"({pool['pair']}) joined by spaces ({pool['sentences_per_pair']}); corpus "
            "lines sampled from the pool with numpy (block b of 2^20 lines: "
            f"default_rng([{args.seed}, b]))")


def _targets(result: dict, args) -> dict:
    at_scale = result.get("pairs", 0) >= TARGET_PAIRS and (os.cpu_count() or 0) == TARGET_CPUS
    out = {"at_target_scale": at_scale,
           "note": f"targets are for {TARGET_PAIRS:,} pairs on {TARGET_CPUS} cores"}
    for key, limit in TARGETS.items():
        value = result.get(key)
        ok = None if value is None else (value >= limit if key == "build_pairs_per_s"
                                         else value <= limit)
        out[key] = {"value": value, "target": (">= " if key == "build_pairs_per_s" else "<= ")
                    + f"{limit:g}", "pass": ok}
    theirs = result.get("seqio", {}).get("tokens_per_s")
    ours = result.get("tokens_per_s")
    out["tokens_per_s"] = {"value": ours, "target": f">= seqio's ({theirs})",
                           "pass": None if ours is None or theirs is None else ours >= theirs}
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=TARGET_PAIRS)
    ap.add_argument("--uncached-pairs", "--uncached_pairs", dest="uncached_pairs", type=int,
                    default=2_000_000)
    ap.add_argument("--seqio-pairs", "--seqio_pairs", dest="seqio_pairs", type=int, default=None,
                    help="pairs in seqio's cache (default: --uncached-pairs)")
    ap.add_argument("--work_dir", "--work-dir", dest="work_dir",
                    default=os.path.join(tempfile.gettempdir(), "mnmt-corpus-scale"))
    ap.add_argument("--corpus", choices=("synthetic", "gettext"), default="synthetic",
                    help="synthetic: pairs sampled from a synthetic pool (--preset, --pool); "
                         "gettext: every distinct line of the machine's gettext catalogs "
                         "(--locale_dir), repeated with a line tag up to --pairs")
    ap.add_argument("--locale_dir", "--locale-dir", dest="locale_dir",
                    default="/usr/share/locale", help="gettext catalogs of --corpus gettext")
    ap.add_argument("--preset", default="base:en-de",
                    help="synthetic family whose first pair's 'ood' split makes the corpus")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pool", type=int, default=200_000, help="pairs the corpus samples from")
    ap.add_argument("--mean_tokens", "--mean-tokens", type=float, default=25.0,
                    help="target mean SentencePiece tokens a side")
    ap.add_argument("--vocab_size", "--vocab-size", type=int, default=8000)
    ap.add_argument("--vocab_pairs", "--vocab-pairs", type=int, default=20_000)
    ap.add_argument("--inputs_length", type=int, default=64)
    ap.add_argument("--targets_length", type=int, default=64)
    ap.add_argument("--batch_size", type=int, default=48)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--no-validate", "--no_validate", dest="validate", action="store_false",
                    help="register_bitext_task(validate=False) (default: validate, as today)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="Beam workers of both cache jobs (FnApiRunner multi_processing)")
    ap.add_argument("--num_shards", "--num-shards", type=int, default=None)
    ap.add_argument("--num_parts", "--num-parts", type=int, default=None,
                    help="build_cache's parts (default: its own, one per core)")
    ap.add_argument("--beam_arg", "--beam-arg", action="append", default=None,
                    help="Beam option for build_cache (repeatable; default: its own)")
    ap.add_argument("--seqio-shards", "--seqio_shards", dest="seqio_shards", type=int, default=16)
    ap.add_argument("--seqio-min-shards", "--seqio_min_shards", dest="seqio_min_shards", type=int,
                    default=16, help="seqio cache job's --min_shards (output files)")
    ap.add_argument("--skip-cached", "--skip_cached", dest="skip_cached", action="store_true")
    ap.add_argument("--skip-uncached", "--skip_uncached", dest="skip_uncached",
                    action="store_true")
    ap.add_argument("--skip-seqio", "--skip_seqio", dest="skip_seqio", action="store_true")
    ap.add_argument("--reuse_builds", "--reuse-builds", action="store_true",
                    help="reuse complete caches of an earlier run (and its build times)")
    ap.add_argument("--reuse_seqio_build", "--reuse-seqio-build", action="store_true",
                    help="reuse seqio's complete cache of an earlier run (and its build time)")
    ap.add_argument("--child_timeout", type=float, default=None)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    args.work_dir = os.path.abspath(args.work_dir)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--_child"]:
        return _child_main(argv[1])
    args = parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)

    def log(msg: str) -> None:
        print(f"[corpus_scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    result: dict = {
        "benchmark": "corpus_scale",
        "command": "python benchmarks/speed/corpus_scale.py " + shlex.join(argv),
        "date": _now(),
        "machine": machine(),
        "versions": _versions(),
    }
    pool = prepare_pool(args, log)
    corpus = write_corpus(pool, args.seed, args.pairs, log)
    result["corpus"] = {
        "kind": pool.get("kind", "synthetic"),
        "method": _corpus_method(pool, args),
        "path": corpus["path"], "pairs": corpus["pairs"], "bytes": corpus["bytes"],
        "write_s": corpus["write_s"], "reused": corpus["reused"],
        "pool_pairs": pool["pool_pairs"], "distinct_pool_pairs": pool["distinct_pool_pairs"],
        "mean_tokens": pool["mean_tokens"], "p95_tokens": pool["p95_tokens"],
        "max_tokens": pool["max_tokens"], "tokens_per_sentence": pool["tokens_per_sentence"],
        "vocabulary": {"path": pool["vocab"], "pieces": pool["vocab_pieces"],
                       "trained_on": pool["vocab_trained_on"]},
    }
    result["shape"] = {"feature_lengths": {"inputs": args.inputs_length,
                                           "targets": args.targets_length},
                       "batch_size": args.batch_size, "pack": True, "batches": args.batches,
                       "validate": args.validate}
    if not args.skip_cached:
        result |= run_cached(args, pool, corpus, log)
    else:
        result["pairs"] = corpus["pairs"]
        result["cached_skipped"] = True
    if not args.skip_uncached:
        result["uncached"] = run_uncached(args, pool, log)
    if not args.skip_seqio:
        result["seqio"] = run_seqio(args, pool, log)
    result["targets"] = _targets(result, args)
    result["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    errors = [k for k, v in [("cached", result), *((k, result.get(k) or {})
                                                   for k in ("uncached", "seqio"))]
              if "error" in v or "build_error" in v]
    if errors:
        result["errors"] = errors
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {json.dumps(v) if isinstance(v, dict | list) else v}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
