"""Training iterator with a checkpointable input position, and evaluation batches.

:class:`TrainInputs` yields batches in the format of T5X's ``EncDecFeatureConverter``
(``encoder_input_tokens``, ``decoder_input_tokens``, ``decoder_target_tokens``,
``decoder_loss_weights`` and, when packed, ``*_segment_ids`` / ``*_positions``). Examples are
drawn from the mixture with its weights (implicit scalarization, Fernandes et al. 2023 eq. 8),
deterministically given ``seed``, and packed exactly as seqio's ``trim_and_pack_dataset`` does
(greedy, in order, within windows of ``max(feature_lengths)`` examples). The packer is plain
numpy (a test checks it against seqio's converter token for token), so the position is exact:
``get_state()`` = (window start in the mixed stream, rows already emitted from that window,
per-task cursors), and a restored iterator continues with the very next row — nothing repeated,
nothing skipped, the same batches as an uninterrupted run.

With ``architecture="decoder_only"`` the same mixing, cursors and windows feed the
decoder-only format of :mod:`mnmt.data.formats` instead (Caillaut et al. 2024 §3.3: ``source
</src> <2xx> target <eos>``, loss on the target only, first-fit packing with one segment per
example, rows of ``inputs + targets`` tokens, windows of that many examples): the position is
exact in the same way, and the encoder-decoder batches are unchanged. ``decoder_options``
(:mod:`mnmt.data.decoder_format`, from ``InputConfig``) add Caillaut's source-language and
domain tags and the ``<eos>`` prefix to training and evaluation rows alike.

:func:`eval_batches` runs seqio's own task pipeline and ``EncDecFeatureConverter(pack=False)``
(decoder-only: the same task features in the decoder-only format, one example per row) over a
whole split once; the final batch is padded with rows of zero loss weight.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from mnmt.data.decoder_format import NO_TAGS, DecoderOptions, separator_of_tasks, task_tags
from mnmt.data.epoch_order import BlockReader, EpochOrder
from mnmt.data.formats import example_format, finish_example
from mnmt.data.packing import pack_examples, pad_examples
from mnmt.data.stream_workers import make_encoder
from mnmt.data.synthetic.grammar import stable_seed

__all__ = ["TrainInputs", "in_memory_train_set", "eval_batches", "eval_examples",
           "pack_examples", "pad_examples", "finish_example", "separator_of_tasks"]

_DRAW_BLOCK = 8192
# Finite training sets larger than this, read without a token cache, log a warning.
IN_MEMORY_WARNING = 1_000_000
log = logging.getLogger(__name__)
# 2: finite sets in EpochOrder (the same order with and without a token cache); version 1
# states were written with another order (a numpy permutation in memory, index_shuffle cached).
STATE_VERSION = 2


# ---- per-task token streams ------------------------------------------------------------------
class TaskStream:
    """Tokenized training examples (``<2xx>`` + source, target; no EOS yet) of one task from
    position ``cursor`` on (endless).

    Unlimited synthetic streams are read sequentially (re-seeded per data shard). A finite
    training set is read by index from its token cache when one of ``cache_dirs`` has it
    (:mod:`mnmt.data.cache`: only this shard's files), otherwise held in memory; either way
    this shard's examples are visited in the same seeded order
    (:class:`mnmt.data.epoch_order.EpochOrder`, keyed by task, seed, shard and epoch), so the
    cache changes no batch. What moves while reading (cursor, read-ahead) is this stream's own;
    the cache and the in-memory set behind it are shared read-only.
    """

    def __init__(self, name: str, seed: int, shard: tuple[int, int], cursor: int,
                 use_process: bool = False, cache_dirs: Sequence[str] = ()) -> None:
        from mnmt.data.tasks import get_task_info
        from mnmt.data.vocab import get_vocabulary, language_token_id

        self.name = name
        self.info = get_task_info(name)
        vocab = get_vocabulary(self.info.vocab_path)
        self.sp = vocab.tokenizer
        self.lang_id = language_token_id(vocab, self.info.target_language)
        self.seed = seed
        self.shard = shard
        self.cursor = cursor
        self._finite: list[tuple[list[int], list[int]]] | None = None
        self._reader: BlockReader | None = None
        self._gen: Iterator[tuple[str, str]] | None = None
        self._encode_text = make_encoder(self.sp, _word_cache(self.sp))
        self.use_process = use_process
        self._proc = None
        self.cached = None
        if self.info.train_size is not None or self.info.text_stream is None or (
            self.info.definition.get("kind") != "synthetic"
        ):
            from mnmt.data.cache import open_task_cache

            self.cached = open_task_cache(name, cache_dirs, shard, seed)
            if self.cached is not None:
                self._reader = self.cached.reader()
            else:
                self._finite = in_memory_train_set(self.info, shard)
                if not self._finite:
                    raise ValueError(f"task {name!r}: training split of shard {shard} is empty")
                self._order = EpochOrder(len(self._finite), (name, seed, *shard))
                self._reader = BlockReader(self._in_memory_examples)

    def encode(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        # One call per string (batched encode spawns threads per call: slower for short
        # sentences on a loaded machine), spaced text through a per-word cache.
        enc = self._encode_text
        lid = self.lang_id
        return [([lid, *enc(s)], enc(t)) for s, t in pairs]

    def _in_memory_examples(self, start: int, n: int) -> list[tuple[list[int], list[int]]]:
        """The in-memory examples at stream positions start … start+n-1 (see the class doc)."""
        finite = self._finite
        return [finite[i] for i in self._order.indices(start, n).tolist()]

    def _stream_seed(self) -> tuple:
        return ("train-stream", self.seed, *self.shard)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.close()
            self._proc = None

    def take(self, n: int) -> list[tuple[Sequence[int], Sequence[int]]]:
        """The next ``n`` examples: lists in memory, tuples from a token cache (same ids)."""
        if n == 0:
            return []
        if self._reader is not None:  # finite: cached or in memory, one order
            out = self._reader.take(self.cursor, n)
            self.cursor += n
            return out
        if self.use_process:
            if self._proc is None:
                from mnmt.data.stream_workers import ProcessStream

                fam = self.info.extra["family"]
                self._proc = ProcessStream(
                    fam.preset, fam.seed, self.info.pair, self.cursor, self._stream_seed(),
                    self.sp.serialized_model_proto(), self.lang_id,
                )
            out = self._proc.take(n)
            self.cursor += n
            return out
        if self._gen is None:
            self._gen = self.info.text_stream("train", self.cursor, self._stream_seed())
        texts = [next(self._gen) for _ in range(n)]
        self.cursor += n
        return self.encode(texts)


_FINITE_CACHE: dict[tuple, list] = {}
_WORD_CACHES: dict[int, dict[str, list[int]]] = {}


def _word_cache(sp: Any) -> dict[str, list[int]]:
    """Word → ids cache shared by all streams of one loaded vocabulary (kept alive by
    get_vocabulary's cache, so its id is not reused)."""
    return _WORD_CACHES.setdefault(id(sp), {})


def in_memory_train_set(info, shard: tuple[int, int]) -> list[tuple[list[int], list[int]]]:
    """Today's path for a finite task without a token cache: the examples ``i % count ==
    index`` of its training split, tokenized (``[<2xx>, *source]``, target), held in memory
    (memoised per task definition, vocabulary and shard)."""
    from mnmt.data.vocab import get_vocabulary, language_token_id

    vocab = get_vocabulary(info.vocab_path)
    key = (info.name, repr(sorted(info.definition.items(), key=str)), id(vocab), shard)
    if key not in _FINITE_CACHE:
        lid = language_token_id(vocab, info.target_language)
        index, count = shard
        texts = [st for i, st in enumerate(info.text_stream("train", 0, None)) if i % count == index]
        enc = vocab.tokenizer.EncodeAsIds
        _FINITE_CACHE[key] = [([lid, *enc(s)], enc(t)) for s, t in texts]
        if len(texts) > IN_MEMORY_WARNING:
            log.warning("task %s: %d training examples of shard %s held in memory; build its "
                        "token cache (mnmt.data.cache.build_cache; mnmt-study prepare does it for "
                        "a study) and pass cache_dirs to read it by index",
                        info.name, len(texts), shard)
    return _FINITE_CACHE[key]


# ---- the training iterator -------------------------------------------------------------------
class TrainInputs:
    """Deterministic, resumable iterator of training batches of a mixture or a single task.

    ``batch_size`` is the global number of rows; with ``shard_info=(index, num_shards)`` (one
    shard per host) each shard yields ``batch_size // num_shards`` rows from its own streams.
    ``architecture``: "encoder_decoder" (T5X EncDecFeatureConverter rows) or "decoder_only"
    (:class:`mnmt.data.formats.DecoderOnlyFormat` rows of ``inputs + targets`` tokens; the
    tasks' vocabulary needs the separator ``</src>``). ``cache_dirs``: directories searched for
    token caches (``<dir>/<task>/``, :mod:`mnmt.data.cache`); a finite task with one is read
    by index, with no copy of its corpus in memory. ``decoder_options``: Caillaut's tags,
    ``<eos>`` prefix and packing (:class:`mnmt.data.decoder_format.DecoderOptions`; default:
    none of them); recorded in the state when set.
    """

    def __init__(
        self,
        mixture_or_task: str,
        feature_lengths: Mapping[str, int],
        batch_size: int,
        seed: int,
        shard_info: tuple[int, int] | Any | None = None,
        pack: bool = True,
        prefetch: int = 0,
        stream_processes: bool = False,
        architecture: str = "encoder_decoder",
        cache_dirs: Sequence[str] = (),
        decoder_options: DecoderOptions | None = None,
    ) -> None:
        from mnmt.data.mixtures import mixture_weights

        if prefetch < 0:
            raise ValueError(f"prefetch: expected >= 0 batches, got {prefetch}")
        self.prefetch = int(prefetch)
        self.stream_processes = bool(stream_processes)
        self.cache_dirs = tuple(str(d) for d in cache_dirs)
        self._streams: dict[str, TaskStream] = {}
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue | None = None
        self._stop = threading.Event()
        self._consumed_state: dict | None = None

        self.name = mixture_or_task
        missing = {"inputs", "targets"} - set(feature_lengths)
        if missing:
            raise ValueError(f"feature_lengths: missing {sorted(missing)} (got {dict(feature_lengths)})")
        self.lengths = {k: int(feature_lengths[k]) for k in ("inputs", "targets")}
        if min(self.lengths.values()) < 2:
            raise ValueError(f"feature_lengths: expected lengths >= 2, got {self.lengths}")
        if shard_info is None:
            shard = (0, 1)
        elif isinstance(shard_info, tuple):
            shard = (int(shard_info[0]), int(shard_info[1]))
        else:  # seqio.ShardInfo
            shard = (int(shard_info.index), int(shard_info.num_shards))
        if not 0 <= shard[0] < shard[1]:
            raise ValueError(f"shard_info: expected 0 <= index < num_shards, got {shard}")
        if batch_size < 1 or batch_size % shard[1]:
            raise ValueError(
                f"batch_size {batch_size}: expected a positive multiple of num_shards={shard[1]}"
            )
        self.shard = shard
        self.rows_per_batch = batch_size // shard[1]
        self.batch_size = batch_size
        self.seed = int(seed)
        self.pack = bool(pack)
        weights = mixture_weights(mixture_or_task)
        self.tasks = [t for t, w in weights.items() if w > 0]
        self.weights = np.array([weights[t] for t in self.tasks], dtype=np.float64)
        self.weights /= self.weights.sum()
        self._cum = np.cumsum(self.weights)
        self._cum[-1] = 1.0
        sep = separator_of_tasks(self.tasks) if architecture == "decoder_only" else None
        self.options = decoder_options or DecoderOptions()
        self.format = example_format(architecture, self.lengths, sep, self.options)
        tags = task_tags(self.tasks, self.options) if sep is not None else {}
        self._finish = {t: self.format.finisher(tags.get(t, NO_TAGS)) for t in self.tasks}
        self.architecture = architecture
        self.window = self.format.window if self.pack else 1
        self._reset(draws=0, rows_taken=0, cursors={t: 0 for t in self.tasks}, batches=0)

    # -- state -------------------------------------------------------------------------------
    def _reset(self, draws: int, rows_taken: int, cursors: Mapping[str, int], batches: int) -> None:
        for st in self._streams.values():
            st.close()
        self._streams = {
            t: TaskStream(t, self.seed, self.shard, int(cursors[t]), self.stream_processes,
                          self.cache_dirs)
            for t in self.tasks
        }
        self._draws = draws  # mixed-stream index of the current window's first example
        self._win_cursors = {t: int(cursors[t]) for t in self.tasks}
        self._rows: dict[str, np.ndarray] | None = None
        self._rows_taken = 0
        self._batches = batches
        self._block: tuple[int, np.ndarray] | None = None
        self._load_window()
        self._rows_taken = rows_taken
        if rows_taken > self._n_rows:
            raise ValueError(f"state: rows_taken={rows_taken} exceeds the window's {self._n_rows} rows")

    def get_state(self) -> dict:
        """JSON-serialisable position of the next batch (store it with the checkpoint).

        With ``prefetch`` this is the position after the last batch *returned*, not after the
        batches already prepared in the background.
        """
        if self._consumed_state is not None:
            return dict(self._consumed_state)
        return self._state_now()

    def _state_now(self) -> dict:
        extra = {} if self.architecture == "encoder_decoder" else {"architecture": self.architecture}
        if self.options.changed_fields():
            extra["decoder_format"] = self.options.state()
        cached = self.cached_tasks()
        if cached:
            extra["cached"] = cached
            extra["cache_contents"] = {t: self._streams[t].cached.index.contents_digest()
                                       for t in cached}
        return {
            **extra,
            "version": STATE_VERSION,
            "mixture_or_task": self.name,
            "seed": self.seed,
            "shard": list(self.shard),
            "pack": self.pack,
            "feature_lengths": dict(self.lengths),
            "batch_size": self.batch_size,
            "tasks": {t: float(w) for t, w in zip(self.tasks, self.weights, strict=True)},
            "window_start": int(self._draws),
            "rows_taken": int(self._rows_taken),
            "cursors": {t: int(c) for t, c in self._win_cursors.items()},
            "batches": int(self._batches),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`get_state` dict (same mixture, seed, shard, lengths, packing)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"input state: version {state.get('version')!r}, this iterator reads version "
                f"{STATE_VERSION}" + (" (version 1 visited finite training sets in another "
                                      "order: the run cannot continue on the same examples; "
                                      "start it again, or finish it with the mnmt release "
                                      "that began it)" if state.get("version") == 1 else ""))
        expect = {
            "mixture_or_task": self.name, "seed": self.seed, "shard": list(self.shard),
            "pack": self.pack, "feature_lengths": dict(self.lengths), "batch_size": self.batch_size,
        }
        if state.get("architecture", "encoder_decoder") != self.architecture:
            raise ValueError(f"input state field 'architecture': checkpoint has "
                             f"{state.get('architecture', 'encoder_decoder')!r}, iterator has "
                             f"{self.architecture!r}")
        for k, v in expect.items():
            if state.get(k) != v:
                raise ValueError(f"input state field {k!r}: checkpoint has {state.get(k)!r}, iterator has {v!r}")
        own = self.options.state() if self.options.changed_fields() else None
        if state.get("decoder_format") != own:
            raise ValueError(f"input state field 'decoder_format': checkpoint has "
                             f"{state.get('decoder_format')!r}, iterator has {own!r} (the "
                             "InputConfig decoder-only options must stay those the run began with)")
        changed = [t for t, digest in state.get("cache_contents", {}).items()
                   if t in self._streams and self._streams[t].cached is not None
                   and self._streams[t].cached.index.contents_digest() != digest]
        if changed:
            raise ValueError(f"input state field 'cache_contents': the token caches of {changed} "
                             "were rebuilt with other contents or shards since the checkpoint "
                             "(the same stream position would be other examples): restore "
                             "that cache or start the run again")
        if set(state["cursors"]) != set(self.tasks):
            raise ValueError(
                f"input state: tasks {sorted(state['cursors'])} differ from the mixture's {sorted(self.tasks)}"
            )
        self.close()
        self._consumed_state = None
        self._reset(int(state["window_start"]), int(state["rows_taken"]), state["cursors"],
                    int(state.get("batches", 0)))

    def cached_tasks(self) -> list[str]:
        """The tasks read from token caches (sorted)."""
        return sorted(t for t, st in self._streams.items() if st.cached is not None)

    # -- sampling ----------------------------------------------------------------------------
    def _choices(self, start: int, n: int) -> np.ndarray:
        """Task indices of mixed-stream positions start … start+n-1 (counter-based, seeded)."""
        out = np.empty(n, dtype=np.int64)
        i = 0
        while i < n:
            pos = start + i
            b, off = divmod(pos, _DRAW_BLOCK)
            if self._block is None or self._block[0] != b:
                rng = np.random.default_rng(stable_seed("mixture", self.seed, *self.shard, b))
                u = rng.random(_DRAW_BLOCK)
                self._block = (b, np.searchsorted(self._cum, u, side="right").clip(0, len(self.tasks) - 1))
            m = min(n - i, _DRAW_BLOCK - off)
            out[i:i + m] = self._block[1][off:off + m]
            i += m
        return out

    def _load_window(self) -> None:
        choice = self._choices(self._draws, self.window)
        per_task = {t: self._streams[t].take(int((choice == k).sum())) for k, t in enumerate(self.tasks)}
        idx = dict.fromkeys(self.tasks, 0)
        examples = []
        for k in choice:
            t = self.tasks[k]
            examples.append(self._finish[t](*per_task[t][idx[t]]))
            idx[t] += 1
        self._window_examples = len(examples)
        self._rows = self.format.pack(examples) if self.pack else self.format.pad(examples)
        self._n_rows = next(iter(self._rows.values())).shape[0]
        self._rows_taken = 0

    def _advance_window(self) -> None:
        self._draws += self.window
        self._win_cursors = {t: s.cursor for t, s in self._streams.items()}
        self._load_window()

    # -- iteration ---------------------------------------------------------------------------
    def __iter__(self) -> TrainInputs:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if not self.prefetch:
            return self._produce()
        if self._thread is None:
            self._start_thread()
        item = self._queue.get()
        if isinstance(item, BaseException):
            self.close()
            raise item
        batch, self._consumed_state = item
        return batch

    def _start_thread(self) -> None:
        self._stop.clear()
        self._queue = queue.Queue(maxsize=self.prefetch)
        self._consumed_state = self._state_now()

        def work() -> None:
            try:
                while not self._stop.is_set():
                    item = (self._produce(), self._state_now())
                    while not self._stop.is_set():
                        try:
                            self._queue.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
            except BaseException as e:  # surfaced to the consumer by __next__
                self._queue.put(e)

        self._thread = threading.Thread(target=work, name="mnmt-train-inputs", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the background producer (if any); the iterator can be restored with set_state."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._queue = None

    def shutdown(self) -> None:
        """Stop every background thread and stream process (call when training ends)."""
        self.close()
        for st in self._streams.values():
            st.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self._stop.set()
        except Exception:
            pass

    def _produce(self) -> dict[str, np.ndarray]:
        parts: list[dict[str, np.ndarray]] = []
        need = self.rows_per_batch
        while need > 0:
            if self._rows_taken >= self._n_rows:
                self._advance_window()
            m = min(need, self._n_rows - self._rows_taken)
            a = self._rows_taken
            parts.append({k: v[a:a + m] for k, v in self._rows.items()})
            self._rows_taken += m
            need -= m
        if self._rows_taken >= self._n_rows:
            self._advance_window()
        self._batches += 1
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    @property
    def num_batches(self) -> int:
        return self._batches


# ---- evaluation ------------------------------------------------------------------------------
def eval_examples(task_name: str, split: str) -> list[tuple[str, str]]:
    """The raw (source, target) strings of an eval split, in order (for BLEU / ChrF)."""
    from mnmt.data.tasks import get_task_info

    info = get_task_info(task_name)
    if split not in info.splits:
        raise ValueError(f"task {task_name!r}: unknown split {split!r}, expected {info.splits}")
    limit = info.split_sizes.get(split)
    out = []
    for i, st in enumerate(info.text_stream(split, 0, None)):
        if limit is not None and i >= limit:
            break
        out.append(st)
    return out


def eval_batches(
    task_name: str,
    split: str,
    feature_lengths: Mapping[str, int],
    batch_size: int,
    *,
    with_targets: bool = False,
    architecture: str = "encoder_decoder",
    decoder_options: DecoderOptions | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Unpacked batches of the whole split once, through seqio's task pipeline and converter.

    The final batch is padded with all-zero rows (zero loss weights). With ``with_targets``
    each batch also carries ``targets_text`` (an object array of raw target strings, '' for
    padding rows) for BLEU / ChrF. ``architecture="decoder_only"``: the task's (trimmed,
    EOS-terminated) features in the decoder-only format of :mod:`mnmt.data.formats`, one
    example per row of ``inputs + targets`` tokens, loss weights on the target and EOS only
    (``decoder_options``' tags and prefix included, never weighted: see
    :meth:`~mnmt.data.decoder_format.DecoderOptions.for_eval`).
    """
    import seqio

    lengths = {k: int(feature_lengths[k]) for k in ("inputs", "targets")}
    if architecture != "decoder_only":
        example_format(architecture, lengths, options=decoder_options)  # raises on bad input
    task = seqio.get_mixture_or_task(task_name)
    ds = task.get_dataset(lengths, split=split, shuffle=False, num_epochs=1, use_cached=False)
    if architecture == "decoder_only":
        options = (decoder_options or DecoderOptions()).for_eval()
        fmt = example_format(architecture, lengths, separator_of_tasks([task_name]), options)
        tags = task_tags([task_name], options)[task_name]
        rows_of: Iterator[dict[str, np.ndarray]] = (
            {k: v[0] for k, v in fmt.pad([fmt.finish_task_features(
                ex["inputs"], ex["targets"], tags)]).items()}
            for ex in ds.as_numpy_iterator())
    else:
        rows_of = seqio.EncDecFeatureConverter(pack=False)(ds, lengths).as_numpy_iterator()
    texts = [t for _, t in eval_examples(task_name, split)] if with_targets else None
    buf: list[dict[str, np.ndarray]] = []
    n_seen = 0

    def emit(rows: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        batch = {k: np.stack([r[k] for r in rows]).astype(np.int32) for k in rows[0]}
        pad = batch_size - len(rows)
        if pad:
            batch = {k: np.concatenate([v, np.zeros((pad, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}
        return batch

    for ex in rows_of:
        buf.append(ex)
        if len(buf) == batch_size:
            b = emit(buf)
            if texts is not None:
                b["targets_text"] = np.array(texts[n_seen:n_seen + batch_size], dtype=object)
            n_seen += len(buf)
            buf = []
            yield b
    if not buf and n_seen == 0:
        raise ValueError(f"eval split {split!r} of task {task_name!r} is empty: expected examples")
    if buf:
        b = emit(buf)
        if texts is not None:
            t = texts[n_seen:n_seen + len(buf)] + [""] * (batch_size - len(buf))
            b["targets_text"] = np.array(t, dtype=object)
        yield b


def num_eval_batches(num_examples: int, batch_size: int) -> int:
    return math.ceil(num_examples / batch_size)
