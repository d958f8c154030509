"""Recycled batch buffers are never handed out while a batch still uses them."""

from __future__ import annotations

import numpy as np

import dataio
from dataio.engine.buffers import BufferPool


def test_a_block_is_reused_only_after_every_view_is_gone() -> None:
    pool = BufferPool()
    first = pool.empty((4, 3), np.float32)
    address = first.ctypes.data
    second = pool.empty((4, 3), np.float32)
    assert second.ctypes.data != address  # first is alive
    view = first[1:]
    del first
    assert pool.empty((4, 3), np.float32).ctypes.data != address  # a view still holds it
    del view
    assert pool.empty((4, 3), np.float32).ctypes.data == address


def test_torch_tensors_keep_their_buffer() -> None:
    import torch

    pool = BufferPool()
    array = pool.empty((8,), np.float32)
    array[:] = 7
    tensor = torch.from_numpy(array)
    address = array.ctypes.data
    del array
    other = pool.empty((8,), np.float32)
    assert other.ctypes.data != address
    other[:] = 0
    assert torch.all(tensor == 7)


def test_batches_kept_by_the_user_are_never_overwritten(records) -> None:
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=16, w=16).normalize("imagenet"),
        dataio.batch(2, prefetch=3),
    )
    kept = [batch["image"] for batch in pipe.bind(records * 3).run()]
    copied = [batch["image"].copy() for batch in pipe.bind(records * 3).run()]
    for a, b in zip(kept, copied, strict=True):
        np.testing.assert_array_equal(a, b)
    assert len({a.ctypes.data for a in kept}) == len(kept)


def test_release_drops_free_blocks_and_later_returns() -> None:
    pool = BufferPool()
    alive = pool.empty((4,), np.float32)
    pool.empty((2,), np.float32)  # dropped at once: a free block
    assert pool.free_blocks == 1
    pool.release()
    assert pool.free_blocks == 0
    alive[:] = 3  # still usable after release
    del alive
    assert pool.free_blocks == 0  # a closed pool keeps nothing that comes back
