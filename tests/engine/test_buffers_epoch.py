"""Batch buffers belong to their loader, last from pass to pass, come back when dropped."""

from __future__ import annotations

import gc

import numpy as np

import dataio


def image_pipe(prefetch: int = 2) -> dataio.Pipeline:
    chain = dataio.slot("image").decode_image().resize(h=16, w=16).normalize("imagenet")
    return dataio.pipeline(chain, dataio.batch(2, prefetch=prefetch))


def test_later_passes_reuse_the_first_passes_buffers(records) -> None:
    loader = image_pipe().bind(records * 4).run()
    first = [batch["image"].copy() for batch in loader]
    fresh = loader._pool.allocated
    assert fresh <= 2 + 3  # prefetched jobs plus the batch in the user's hands
    for _ in range(3):
        again = [batch["image"].copy() for batch in loader]
        for a, b in zip(first, again, strict=True):
            np.testing.assert_array_equal(a, b)  # reused memory, same values
    assert loader._pool.allocated == fresh  # no new memory after the first pass
    assert loader._pool.reused >= 3 * len(first)


def test_a_kept_batch_survives_later_epochs(records) -> None:
    loader = image_pipe().bind(records * 3).run()
    kept = next(iter(loader))["image"]
    expected = kept.copy()
    tensors = []
    import torch

    for _ in range(2):
        for batch in loader:
            tensors.append(torch.from_numpy(batch["image"]))  # torch keeps the memory too
    np.testing.assert_array_equal(kept, expected)
    held = [t.clone() for t in tensors]
    for _ in loader:
        pass
    for tensor, copy in zip(tensors, held, strict=True):
        assert torch.equal(tensor, copy)
    addresses = {t.data_ptr() for t in tensors} | {kept.ctypes.data}
    assert len(addresses) == len(tensors) + 1  # nothing held was handed out twice


def test_closing_one_loader_leaves_another_loaders_pool(records) -> None:
    a = image_pipe().bind(records * 2).run()
    b = image_pipe().bind(records * 2).run()
    for _ in a:
        pass
    for _ in b:
        pass
    gc.collect()
    assert a._pool.free_blocks > 0 and b._pool.free_blocks > 0
    allocated = b._pool.allocated
    a.close()
    assert a._pool.free_blocks == 0
    assert b._pool.free_blocks > 0
    for _ in b:
        pass
    assert b._pool.allocated == allocated


def test_a_partly_failed_batch_keeps_its_rows(records, tmp_path) -> None:
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not a jpeg")
    rows = [*records[:3], {"image": str(bad)}, *records[3:6]]
    loader = image_pipe().bind(rows).run(on_failure="skip")
    epochs = [[batch["image"].copy() for batch in loader] for _ in range(3)]
    for later in epochs[1:]:
        for a, b in zip(epochs[0], later, strict=True):
            np.testing.assert_array_equal(a, b)
