"""Compose record sources: concatenate groups, expand records, shuffle with a buffer.

Nothing is read until the loader runs; the second group is opened only when the first
one is exhausted.
"""

from __future__ import annotations

import dataio

group_a = [{"key": f"a{i}", "parts": [f"a{i}-x", f"a{i}-y"]} for i in range(3)]
group_b = [{"key": f"b{i}", "parts": [f"b{i}-x"]} for i in range(2)]


def expand(record: dict):
    for index, payload in enumerate(record["parts"]):
        yield {"key": f"{record['key']}:{index}", "payload": payload}


def main() -> None:
    records = (
        dataio.records(group_a)
        .concat(group_b)
        .flat_map_records(expand)
        .shuffle(seed=7, buffer_size=4)
    )
    pipe = dataio.pipeline(dataio.slot("payload").passthrough(), dataio.batch(3))
    with pipe.bind(records).run() as loader:
        for batch in loader:
            print(batch.row_keys, batch["payload"])
    print("source signature:", records.signature()[:16])


if __name__ == "__main__":
    main()
