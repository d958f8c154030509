"""NPY headers parsed on many threads at once (CPython 3.11's AST constructor is not
thread-safe: ``ast.literal_eval`` raced into "SystemError: AST constructor recursion
depth mismatch" for a valid header, seen as a rejected row under the whole suite)."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from dataio.udfs.tensor import decode_npy


def test_headers_decode_on_eight_threads_at_once() -> None:
    arrays = [np.full((i % 7 + 1, 3), i, dtype=np.float32) for i in range(64)]
    blobs = []
    for array in arrays:
        out = io.BytesIO()
        np.save(out, array)
        blobs.append(out.getvalue())

    def decode_all(seed: int) -> int:
        for _ in range(300):
            for i in range(seed, len(blobs), 8):
                np.testing.assert_array_equal(decode_npy(blobs[i]), arrays[i])
        return seed

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(decode_all, range(8))) == list(range(8))
