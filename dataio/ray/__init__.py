"""dataio on Ray Data: frames as datasets, pipelines in actor pools, feeds for trainers.

Install with ``pip install 'dataio[ray]'``. ``import dataio`` never imports Ray; this
package imports it when one of its functions runs.

* :func:`from_frame` (``LazyFrame.to_ray()``): a dataset whose read tasks run the frame's
  partition-wise plan on their files or runs of Parquet row groups, in order, with a
  ``__position__`` column (each row's position in the frame, as a local loader numbers
  its records).
* :func:`from_source`: a record source's records (``files``, ``manifest``, shuffles)
  with their stream positions; WebDataset shards are read by per-shard read tasks.
* :func:`map_pipeline`: a pipeline's slots in ``map_batches`` actor pools, one dataio CPU
  pool per actor, order kept, tensor columns out; values equal a local loader's. Batches
  are sized by output bytes (:func:`batch_rows`); ``normalize="feed"`` sends ``uint8``.
* :func:`train_feed`: one rank's share of a dataset (``streaming_split``) as dataio
  :class:`~dataio.batch.Batch` objects.
"""

from __future__ import annotations

from dataio.ray.datasets import from_frame, from_source, from_table
from dataio.ray.feed import TrainFeed, train_feed
from dataio.ray.pipeline import batch_rows, map_pipeline

__all__ = [
    "POSITION",
    "TrainFeed",
    "batch_rows",
    "from_frame",
    "from_source",
    "from_table",
    "map_pipeline",
    "train_feed",
]

#: the column of each row's stream position that datasets made here carry
POSITION = "__position__"
