"""Look at a batch of images as images: :func:`show` draws a captioned grid.

Tensors leave the loader normalized, channel-first and in any dtype; :func:`show` undoes
that (the pipeline's recorded ``normalize`` mean/std and layout, which a loader's
batches carry in ``Batch.pixels``, or the ``mean``/``std``/``layout`` given) and returns
a ``PIL.Image.Image``, which notebooks display inline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dataio.exceptions import DataioError, FieldError, PlanError

if TYPE_CHECKING:
    from PIL import Image

    from dataio.plan.pipeline import Pipeline

__all__ = ["pixel_formats", "show"]

PAD = 4  # pixels between cells and around the grid
BACKGROUND = (255, 255, 255)


def pixel_formats(plan: Pipeline) -> dict[str, dict[str, Any]]:
    """How each image slot's pixels leave ``plan``: ``{"layout", "mean", "std"}`` per slot
    (``mean``/``std`` ``None`` without ``normalize``), what :func:`show` needs to undo."""
    formats: dict[str, dict[str, Any]] = {}
    for slot in plan.slots:
        if not slot.ops or slot.ops[0].name != "decode_image":
            continue
        entry: dict[str, Any] = {"layout": "HWC", "mean": None, "std": None}
        for op in slot.ops:
            if op.name == "normalize":
                entry.update(layout=op.param("layout"), mean=op.param("mean"), std=op.param("std"))
            elif op.name == "output" and op.param("layout"):
                entry["layout"] = op.param("layout")
        formats[slot.name] = entry
    for op in plan.batch_ops:
        if op.name == "normalization":  # batch statistics, not recorded: nothing to undo
            for name in set(op.param("slots")) & formats.keys():
                formats[name].update(mean=None, std=None)
    return formats


def show(
    batch: Any,
    slot: str = "image",
    *,
    mean: float | Sequence[float] | None = None,
    std: float | Sequence[float] | None = None,
    layout: Literal["HWC", "CHW"] | None = None,
    columns: int | None = None,
    size: int | None = None,
    captions: Sequence[Any] | None = None,
    limit: int = 64,
) -> Image.Image:
    """Draw the images of a batch slot as a grid, each captioned with its row key.

    Normalization is undone with ``mean``/``std`` when given, else with the pipeline's
    own (``batch.pixels``); channel-first tensors are recognized from the recorded
    layout, ``layout=``, or the shape. Without a known normalization, floats in
    ``[0, 1]`` are scaled by 255, floats in ``[0, 255]`` kept, and others stretched
    to the image's range. torch tensors on any device and NumPy arrays of any dtype
    are accepted. ``grid.info["boxes"]`` holds each image's ``(left, top, right,
    bottom)`` in the grid and ``grid.info["captions"]`` the captions.

    Args:
        batch: a :class:`~dataio.batch.Batch`, a ``pyarrow.RecordBatch`` of
            ``run("arrow")``, a mapping of slot to column, or the column itself (an
            array ``[n, ...]`` or a list of per-image arrays).
        slot: the image slot to draw.
        mean: per-channel means ``normalize`` subtracted (in ``[0, 1]`` units).
        std: per-channel standard deviations ``normalize`` divided by.
        layout: ``"HWC"`` or ``"CHW"`` when the shape alone is ambiguous.
        columns: images per grid row (default: a near-square grid).
        size: shrink each image so its longer side is at most ``size`` pixels.
        captions: one caption per image (default: the batch's row keys, else the
            row numbers).
        limit: draw at most this many images.

    Example:
        >>> grid = dataio.show(batch, slot="image")  # doctest: +SKIP
        >>> grid.save("batch.png")  # doctest: +SKIP
    """
    from PIL import Image

    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise PlanError(f"show() limit must be a positive integer, got {limit!r}")
    rows, images = _images(_column(batch, slot), limit)
    if not images:
        raise DataioError(f"slot {slot!r} holds no images to show")
    recorded = _recorded(batch, slot)
    if mean is None and std is None:
        mean, std = recorded.get("mean"), recorded.get("std")
    elif mean is None or std is None:
        raise PlanError("show() needs both mean= and std= to undo a normalization")
    layout = layout or recorded.get("layout")
    if layout not in (None, "HWC", "CHW"):
        raise PlanError(f"show() layout must be 'HWC' or 'CHW', got {layout!r}")
    pictures = [
        _picture(_pixels(image, layout=layout, mean=mean, std=std), size) for image in images
    ]
    texts = _captions(batch, rows, captions)
    return _grid(pictures, texts, columns, Image)


def _column(batch: Any, slot: str) -> Any:
    names = getattr(getattr(batch, "schema", None), "names", None)
    if names is not None and hasattr(batch, "column"):  # run("arrow"): a RecordBatch
        if slot not in names:
            raise FieldError(f"slot {slot!r} is not in this batch; columns: {names}")
        return batch.column(slot)
    if isinstance(batch, Mapping):
        if slot not in batch:
            raise FieldError(f"slot {slot!r} is not in this batch; slots: {list(batch)}")
        return batch[slot]
    return batch


def _images(column: Any, limit: int) -> tuple[list[int], list[np.ndarray]]:
    """The batch rows of the first ``limit`` images and the images as NumPy arrays, out
    of a stacked array/tensor or a list of them (rows without an image, ``None`` in an
    optional slot, are left out); only those are copied (a GPU batch is not moved whole)."""
    if isinstance(column, list | tuple):
        kept = [(row, image) for row, image in enumerate(column) if image is not None][:limit]
        return [row for row, _ in kept], [_numpy(image) for _, image in kept]
    shape = getattr(column, "shape", None)
    if shape is not None and len(shape) not in (3, 4):
        raise DataioError(
            f"show() needs images stacked as [n, h, w], [n, h, w, c] or [n, c, h, w]; "
            f"got an array of shape {list(shape)}"
        )
    array = _numpy(column[:limit])
    if array.ndim not in (3, 4):
        raise DataioError(
            f"show() needs images stacked as [n, h, w], [n, h, w, c] or [n, c, h, w]; "
            f"got an array of shape {list(array.shape)}"
        )
    return list(range(len(array))), list(array)


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, on any device, in any dtype
        tensor = value.detach().cpu()
        if not tensor.dtype.is_floating_point or tensor.dtype.itemsize >= 4:
            return np.asarray(tensor.numpy())
        return np.asarray(tensor.float().numpy())  # float16 / bfloat16: NumPy lacks one
    if hasattr(value, "to_numpy_ndarray"):  # an Arrow fixed_shape_tensor column
        return np.asarray(value.to_numpy_ndarray())
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":  # bfloat16 from ml_dtypes and other extension types
        array = array.astype(np.float32)
    return array


def _recorded(batch: Any, slot: str) -> dict[str, Any]:
    pixels = getattr(batch, "pixels", None) or {}
    return dict(pixels.get(slot, {}))


def _pixels(image: np.ndarray, *, layout: str | None, mean: Any, std: Any) -> np.ndarray:
    """One image as ``uint8`` HWC (or HW for one channel)."""
    if image.ndim == 3 and _channel_first(image.shape, layout):
        image = np.moveaxis(image, 0, -1)
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[-1] not in (3, 4)):
        raise DataioError(
            f"show() draws gray, RGB or RGBA images; got one of shape {list(image.shape)}"
        )
    if mean is not None:
        channels = 1 if image.ndim == 2 else image.shape[-1]
        m = _per_channel(mean, channels, "mean")
        s = _per_channel(std, channels, "std")
        return _to_uint8((image.astype(np.float32) * s + m) * 255.0)
    if image.dtype == np.uint8:
        return image
    values = image.astype(np.float32)
    if image.dtype.kind == "f":
        low, high = float(np.nanmin(values)), float(np.nanmax(values))
        if low >= 0.0 and high <= 1.0:
            values = values * 255.0
        elif low < 0.0 or high > 255.0:  # unknown scale: stretch to the image's range
            values = (values - low) * (255.0 / max(high - low, 1e-12))
    return _to_uint8(values)


def _channel_first(shape: tuple[int, ...], layout: str | None) -> bool:
    if layout is not None:
        return layout == "CHW"
    return shape[0] in (1, 3, 4) and shape[-1] not in (1, 3, 4)


def _per_channel(value: Any, channels: int, what: str) -> np.ndarray:
    values = np.asarray(value, dtype=np.float32).reshape(-1)
    if values.size == 1:
        return np.full(channels, values[0], np.float32) if channels > 1 else values
    if values.size != channels:
        raise PlanError(
            f"show() {what} has {values.size} values but the images have {channels} channels"
        )
    return values


def _to_uint8(values: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(np.nan_to_num(values)), 0, 255).astype(np.uint8)


def _picture(pixels: np.ndarray, size: int | None) -> Image.Image:
    from PIL import Image

    picture = Image.fromarray(pixels)
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise PlanError(f"show() size must be a positive integer, got {size!r}")
        picture.thumbnail((size, size))
    return picture.convert("RGB")


def _captions(batch: Any, rows: list[int], given: Sequence[Any] | None) -> list[str]:
    """A caption per drawn image: ``given``, else the key of its batch row, else ``#row``."""
    count = len(rows)
    if given is not None:
        texts = [str(c) for c in given][:count]
        if len(texts) != count:
            raise PlanError(f"show() got {len(texts)} captions for {count} images")
        return texts
    keys: list[Any] = []
    try:
        keys = list(getattr(batch, "row_keys", []))
    except DataioError:  # mixed rows (mixup/cutmix) have no single key
        keys = []
    names = getattr(getattr(batch, "schema", None), "names", ())
    if "__key__" in names:  # run("arrow") carries the row keys as a column
        keys = batch.column("__key__").to_pylist()
    if rows and len(keys) > rows[-1] and any(keys[row] is not None for row in rows):
        return [_text(keys[row]) for row in rows]
    return [f"#{row}" for row in rows]


def _text(key: Any) -> str:
    text = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
    return text if len(text) <= 40 else text[:37] + "..."


def _grid(pictures: list[Any], texts: list[str], columns: int | None, image_module: Any) -> Any:
    from PIL import ImageDraw, ImageFont

    count = len(pictures)
    if columns is None:
        columns = math.ceil(math.sqrt(count))
    elif isinstance(columns, bool) or not isinstance(columns, int) or columns <= 0:
        raise PlanError(f"show() columns must be a positive integer, got {columns!r}")
    columns = min(columns, count)
    rows = math.ceil(count / columns)
    font = ImageFont.load_default()
    caption = _text_height(font) + 2 * PAD
    cell_w = max(p.width for p in pictures)
    cell_h = max(p.height for p in pictures)
    grid = image_module.new(
        "RGB",
        (PAD + columns * (cell_w + PAD), PAD + rows * (cell_h + caption)),
        BACKGROUND,
    )
    draw = ImageDraw.Draw(grid)
    boxes = []
    for i, (picture, text) in enumerate(zip(pictures, texts, strict=True)):
        left = PAD + (i % columns) * (cell_w + PAD)
        top = PAD + (i // columns) * (cell_h + caption)
        grid.paste(picture, (left, top))
        boxes.append((left, top, left + picture.width, top + picture.height))
        shown = _fit(text, font, cell_w)
        draw.text((left, top + picture.height + PAD // 2), shown, fill=(0, 0, 0), font=font)
    grid.info["boxes"] = boxes
    grid.info["captions"] = texts
    return grid


def _fit(text: str, font: Any, width: int) -> str:
    """``text`` cut (with ``...``) to at most ``width`` pixels, so captions never overlap."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "...") > width:
        text = text[:-1]
    return text + "..."


def _text_height(font: Any) -> int:
    _, top, _, bottom = font.getbbox("Ag")
    return int(bottom - top) + 2
