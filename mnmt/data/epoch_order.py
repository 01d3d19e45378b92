"""The order in which a finite training set is visited, epoch after epoch: one rule for every path.

Stream position ``c`` of a set of ``n`` examples is example ``π_e(c mod n)`` of epoch
``e = c // n``, where ``π_e`` is a keyed bijection of ``[0, n)`` seeded by
``stable_seed("epoch", *seed_key, e)``. The in-memory path (:mod:`mnmt.data.pipeline`) and
the token cache (:mod:`mnmt.data.cache.reader`) both use :class:`EpochOrder` with the same key
and the same host-local numbering, so a seed gives the same batches whether or not a cache is
read, and the example at a position is a pure function of the position (exact resume, any
number of concurrent readers, no permutation array held).

``π_e`` is a balanced Feistel network (Luby & Rackoff 1988) on the smallest even number of
bits ``2h`` with ``4**h >= n``: ``(L, R) → (R, L ⊕ F_k(R))`` for :data:`ROUNDS` round keys
``k`` (splitmix64 of the epoch seed), ``F`` a 64-bit multiply–xorshift mix; values ``>= n``
are mapped again until they fall in ``[0, n)`` ("cycle walking", Black & Rogaway 2002), which
keeps it a bijection of ``[0, n)``. It is computed with numpy over a block of positions at a
time (about ``4n/n ≤ 4`` passes of a few vector operations per position in the worst case).
"""

from __future__ import annotations

import numpy as np

__all__ = ["BlockReader", "EpochOrder", "ORDER_BLOCK", "ROUNDS", "feistel_permute"]

ROUNDS = 4
# Stream positions a reader computes (and, from a token cache, reads) at a time.
ORDER_BLOCK = 4096
_M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """One splitmix64 output (Steele et al. 2014) of a 64-bit state."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _round_keys(seed: int) -> list[np.uint64]:
    keys, state = [], int(seed) & _M64
    for _ in range(ROUNDS):
        state = _splitmix64(state)
        keys.append(np.uint64(state))
    return keys


def _mix(r: np.ndarray, key: np.uint64) -> np.ndarray:
    """The round function: a 64-bit multiply–xorshift mix of ``r`` under ``key``."""
    z = (r ^ key) * np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(31)
    z *= np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(29))


def feistel_permute(x: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``π(x)`` for an array ``x`` of values in ``[0, n)``: the seeded bijection of ``[0, n)``
    described in the module docstring (int64 array of the same shape)."""
    x = np.asarray(x, dtype=np.uint64)
    if n <= 1:
        return np.zeros(x.shape, dtype=np.int64)
    half = max(1, (int(n - 1).bit_length() + 1) // 2)
    mask, shift = np.uint64((1 << half) - 1), np.uint64(half)
    keys = _round_keys(seed)

    def once(v: np.ndarray) -> np.ndarray:
        left, right = v >> shift, v & mask
        for key in keys:
            left, right = right, left ^ (_mix(right, key) & mask)
        return (left << shift) | right

    y = once(x)
    out = y >= np.uint64(n)
    while out.any():  # cycle walking: at most 4n values in the domain, so few passes
        y[out] = once(y[out])
        out = y >= np.uint64(n)
    return y.astype(np.int64)


class EpochOrder:
    """Positions of an endless, epoch-shuffled stream over ``n`` examples → example indices.

    Immutable (safe to share between threads): ``indices(start, count)`` is a pure function
    of its arguments. ``seed_key``: the epoch seed is ``stable_seed("epoch", *seed_key, e)``.
    """

    def __init__(self, n: int, seed_key: tuple) -> None:
        if n < 1:
            raise ValueError(f"EpochOrder: expected at least 1 example, got {n}")
        self.n = int(n)
        self.seed_key = tuple(seed_key)

    def epoch_seed(self, epoch: int) -> int:
        """The seed of epoch ``epoch``'s permutation."""
        from mnmt.data.synthetic.grammar import stable_seed

        return stable_seed("epoch", *self.seed_key, int(epoch))

    def indices(self, start: int, count: int) -> np.ndarray:
        """Example indices (int64) at stream positions ``start … start+count-1``."""
        out = np.empty(count, dtype=np.int64)
        done = 0
        while done < count:  # one run of positions per epoch: one seed
            epoch, pos = divmod(start + done, self.n)
            m = min(count - done, self.n - pos)
            out[done:done + m] = feistel_permute(np.arange(pos, pos + m, dtype=np.uint64),
                                                 self.n, self.epoch_seed(epoch))
            done += m
        return out


class BlockReader:
    """One stream's read-ahead: ``take(start, n)`` returns ``fetch(start, n)``, fetched in blocks
    of at least :data:`ORDER_BLOCK` positions (``fetch(lo, m)``: the items at stream positions
    ``lo … lo+m-1``, a pure function of them, so reading ahead changes nothing a resume sees).

    The block is this reader's own state: give every stream (every thread) its own reader and
    share only the immutable ``fetch`` behind it.
    """

    def __init__(self, fetch, block: int = ORDER_BLOCK) -> None:
        self._fetch = fetch
        self._size = int(block)
        self._ahead: tuple[int, list] = (0, [])

    def take(self, start: int, n: int) -> list:
        """The items at stream positions ``start … start+n-1``."""
        out: list = []
        while n > 0:
            lo, block = self._ahead  # read once: locals only below, whatever other threads do
            if not lo <= start < lo + len(block):
                lo, block = start, self._fetch(start, max(n, self._size))
                self._ahead = (lo, block)
            take = block[start - lo:start - lo + n]
            out.extend(take)
            start += len(take)
            n -= len(take)
        return out
