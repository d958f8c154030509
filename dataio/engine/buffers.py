"""Recycled batch buffers, one pool per loader.

A batch buffer of a 64 x 3 x 224 x 224 float32 image slot is 38 MB: above glibc's
mmap threshold, so every fresh allocation is new pages the kernel must zero on first
touch. A loader therefore keeps the blocks it allocated and hands them out again, pass
after pass, once the user dropped the batch.

"Dropped" is decided by the garbage collector, not by polling reference counts: each
array handed out is a view of a small owner object (``__array_interface__``), so numpy
never collapses a slice's base past it, and ``torch.from_numpy`` or Arrow keep the array
(hence the owner) alive. When the last view dies, a ``weakref.finalize`` on the owner
returns the block to its pool. One loader's pool never hands memory to another, and
closing a loader empties only its own pool.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any

import numpy as np

__all__ = ["BufferPool"]


class _Owner:
    """Exposes one pooled block's bytes; arrays made from it keep it alive."""

    __slots__ = ("__array_interface__", "__weakref__", "block")

    def __init__(self, block: np.ndarray) -> None:
        self.block = block
        self.__array_interface__ = {
            "shape": (block.nbytes,),
            "typestr": "|u1",
            "data": (block.ctypes.data, False),
            "version": 3,
        }


class BufferPool:
    """Byte blocks of one loader, reused once every view of them was dropped."""

    def __init__(self, keep: int = 16) -> None:
        self._free: dict[int, list[np.ndarray]] = {}
        # finalizers run on whichever thread drops the last view, possibly inside a
        # garbage collection while this pool's lock is held: they only append here
        self._returned: deque[np.ndarray] = deque()
        self._keep = keep
        self._closed = False
        self._lock = threading.Lock()
        #: blocks allocated (fresh memory) and blocks reused, for tests and benchmarks
        self.allocated = 0
        self.reused = 0

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialized array of ``shape`` and ``dtype``, on recycled memory if free."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if nbytes == 0 or dtype.hasobject:
            return np.empty(shape, dtype)
        with self._lock:
            self._collect()
            free = self._free.get(nbytes)
            if free:
                block = free.pop()
                self.reused += 1
            else:
                block = np.empty(nbytes, np.uint8)
                self.allocated += 1
        owner = _Owner(block)
        weakref.finalize(owner, self._returned.append, block)
        # bytes first, then the dtype: extension dtypes (ml_dtypes' bfloat16) have no
        # array-interface type string
        return np.asarray(owner).view(dtype).reshape(shape)

    def _collect(self) -> None:
        while self._returned:
            block = self._returned.popleft()
            if self._closed:
                continue
            free = self._free.setdefault(block.nbytes, [])
            if sum(len(blocks) for blocks in self._free.values()) < self._keep:
                free.append(block)

    @property
    def free_blocks(self) -> int:
        """Blocks ready for reuse (after collecting those returned since the last call)."""
        with self._lock:
            self._collect()
            return sum(len(blocks) for blocks in self._free.values())

    def release(self) -> None:
        """Drop the free blocks; blocks still in use are dropped when they come back."""
        with self._lock:
            self._closed = True
            self._returned.clear()
            self._free.clear()
