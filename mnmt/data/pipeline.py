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

The per-task streams behind it are :mod:`mnmt.data.task_streams`, its position's checks
:mod:`mnmt.data.input_state`; evaluation batches (:func:`eval_batches`, :func:`eval_examples`)
are :mod:`mnmt.data.eval_inputs`, re-exported here.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mnmt.data.decoder_format import NO_TAGS, DecoderOptions, separator_of_tasks, task_tags
from mnmt.data.eval_inputs import eval_batches, eval_examples, num_eval_batches
from mnmt.data.formats import example_format, finish_example
from mnmt.data.input_state import STATE_VERSION, check_restorable
from mnmt.data.packing import pack_examples, pad_examples
from mnmt.data.synthetic.grammar import stable_seed
from mnmt.data.task_streams import IN_MEMORY_WARNING, TaskStream, in_memory_train_set

__all__ = ["TrainInputs", "in_memory_train_set", "eval_batches", "eval_examples",
           "pack_examples", "pad_examples", "finish_example", "separator_of_tasks",
           "TaskStream", "num_eval_batches", "STATE_VERSION", "IN_MEMORY_WARNING"]

_DRAW_BLOCK = 8192


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
    none of them); recorded in the state when set. ``task_ids``: the rows also hold
    ``decoder_task_ids``, per target position 1 + the index in :attr:`tasks` (the tasks of
    positive weight, in mixture order) of the example it belongs to, 0 on padding (the trainer
    splits the training loss by pair with it); the other features are unchanged.
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
        task_ids: bool = False,
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
        self.task_ids = bool(task_ids)
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
        check_restorable(state, self._state_now())
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
        labels = (choice + 1).tolist() if self.task_ids else None
        self._rows = (self.format.pack if self.pack else self.format.pad)(examples, labels)
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
