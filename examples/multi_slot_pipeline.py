"""Several slots per record: an image, a caption, a label and metadata in one batch.

Shows a record map renaming input fields, an image chain with a random augmentation,
text decoding, passthrough metadata, and a batch map assembling the training tuple.
"""

from __future__ import annotations

import tempfile

import dataio
from dataio.testing import make_jpegs


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        paths = make_jpegs(folder, 12, min_side=160, max_side=400)
        raw = [
            {"path": str(p), "text": f"photo number {i}".encode(), "class_id": i % 3, "id": i}
            for i, p in enumerate(paths)
        ]
        pipe = dataio.pipeline(
            dataio.map(
                lambda r: {
                    "image": r["path"],
                    "caption": r["text"],
                    "label": r["class_id"],
                    "key": f"sample-{r['id']}",
                }
            ),
            dataio.slot("image")
            .decode_image(mode="rgb")
            .random_resized_crop(h=96, w=96, scale=(0.5, 1.0))
            .random_flip()
            .normalize("imagenet"),
            dataio.slot("caption").decode_text(),
            dataio.slot("label").passthrough(),
            dataio.batch(4, drop_last=True),
            dataio.map(lambda b: (b["image"], b["label"], b["caption"], b.row_keys)),
        )
        print(pipe.explain())
        with pipe.bind(raw).run("numpy", seed=7) as loader:
            for images, labels, captions, keys in loader:
                print(images.shape, labels, captions[0], keys[0])


if __name__ == "__main__":
    main()
