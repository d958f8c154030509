"""Chain expressions: ``col(...).image.decode()...`` hold the ops a slot chain would."""

from __future__ import annotations

import inspect
import io
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from PIL import Image

import dataio
from dataio import batch_transforms, decoders, transforms
from dataio.engine.lower import lower_chain
from dataio.plan import registry
from dataio.plan.expr import AudioNamespace, BinaryNamespace, ChainExpr, ImageNamespace, col
from dataio.testing import photo_like


def test_imagenet_chain_equals_the_slot_chain() -> None:
    expr = (
        col("jpeg")
        .image.decode(mode="rgb")
        .resize_short(256)
        .center_crop(224)
        .normalize("imagenet")
    )
    slot = dataio.slot("jpeg").decode_image(mode="rgb").resize_short(256).center_crop(h=224, w=224)
    slot = slot.normalize("imagenet")
    assert isinstance(expr, ChainExpr) and isinstance(expr, dataio.Expr)
    assert expr.op == "chain"
    base, ops = expr.args
    assert base.op == "col" and base.args == ("jpeg",)
    assert ops == slot.ops
    assert expr.base.args == ("jpeg",) and expr.ops == slot.ops
    assert ops == (
        decoders.image(),
        transforms.resize_short(256),
        transforms.center_crop(h=224, w=224),
        transforms.normalize("imagenet"),
    )


def test_audio_tensor_and_bin_namespaces() -> None:
    audio = col("wav").audio.decode(sample_rate=16000).fix_length(16000).gain(-6)
    assert audio.ops == (
        decoders.audio(sample_rate=16000),
        transforms.fix_length(16000),
        transforms.gain(-6),
    )
    assert col("t").tensor.decode_numpy().to_dtype("float32").ops == (
        decoders.numpy(),
        transforms.to_dtype("float32"),
    )
    assert col("t").tensor.decode_safetensors(key="w").ops == (decoders.safetensors(key="w"),)
    assert col("t").tensor.decode_pt().ops == (decoders.pt(),)
    assert col("b").bin.decode_text(encoding="latin-1").ops == (decoders.text(encoding="latin-1"),)
    assert col("b").bin.decode_json().ops == (decoders.json(),)
    assert col("b").bin.decode_bytes().ops == (decoders.bytes(),)


def test_then_appends_namespace_ops_and_chains_are_immutable() -> None:
    start = col("jpeg").image.decode()
    longer = start.then(transforms.resize((64, 64)), transforms.random_flip())
    assert start.ops == (decoders.image(),)
    assert longer.ops == (decoders.image(), transforms.resize(h=64, w=64), transforms.random_flip())
    assert longer.ops[-1].random


def test_names_columns_and_text() -> None:
    expr = col("jpeg").image.decode().center_crop(8)
    assert expr.output_name() == "jpeg"  # like polars, a chain keeps its column's name
    assert expr.alias("pixels").output_name() == "pixels"
    assert list(expr.columns()) == ["jpeg"]
    assert expr.describe() == "col('jpeg').decode_image(mode='rgb').center_crop(h=8, w=8)"
    assert repr(expr) == expr.describe()
    nested = col("s").field("jpeg").image.decode()
    assert list(nested.columns()) == ["s"] and nested.base.op == "field"
    with pytest.raises(dataio.PlanError, match="truth value"):
        bool(expr)


def test_namespace_methods_have_the_factory_signature_and_docs() -> None:
    pairs: list[tuple[Callable[..., Any], Callable[..., Any]]] = [
        (ImageNamespace.decode, decoders.image),
        (AudioNamespace.decode, decoders.audio),
        (BinaryNamespace.decode_text, decoders.text),
        (ChainExpr.center_crop, transforms.center_crop),
        (ChainExpr.normalize, transforms.normalize),
    ]
    for method, factory in pairs:
        params = list(inspect.signature(method).parameters.values())[1:]
        assert params == list(inspect.signature(factory).parameters.values())
        assert f"dataio.{factory.__module__.split('.')[-1]}.{factory.__name__}" in (
            inspect.getdoc(method) or ""
        )


# -- validation matches slot chains -------------------------------------------------------------

INVALID: list[tuple[Callable[[Any], Any], str]] = [
    (lambda c: c.audio.decode().center_crop(8), "center_crop needs decode_image"),
    (lambda c: c.image.decode().gain(3), "gain needs decode_audio"),
    (lambda c: c.tensor.decode_numpy().pad(top=1), "pad needs decode_image"),
    (lambda c: c.bin.decode_text().to_dtype("int8"), "to_dtype needs decode_image or"),
    (lambda c: c.image.decode().normalize("imagenet").resize(8), "cannot follow"),
    (lambda c: c.image.decode().output(dtype="uint8").output(layout="CHW"), "output appears"),
    (
        lambda c: c.image.decode().normalize("imagenet").output(dtype="uint8"),
        "normalize produces floats",
    ),
    (lambda c: c.image.decode().then(decoders.image()), "a chain holds one decoder"),
    (lambda c: c.image.decode().then(batch_transforms.shuffle()), "batch transforms go after"),
]


def slot_form(build: Callable[[Any], Any]) -> Callable[[], Any]:
    """The same ops through a slot: the expression's ops replayed with ``then``."""

    class Replay:
        """Stands in for ``col("x")``: namespaces map to the slot's decoder methods."""

        def __init__(self) -> None:
            self.image = _Decoders(decode="decode_image")
            self.audio = _Decoders(decode="decode_audio")
            self.tensor = _Decoders(decode_numpy="decode_numpy")
            self.bin = _Decoders(decode_text="decode_text")

    return lambda: build(Replay())


class _Decoders:
    def __init__(self, **methods: str) -> None:
        for name, slot_method in methods.items():
            setattr(self, name, getattr(dataio.slot("x"), slot_method))


@pytest.mark.parametrize(("build", "message"), INVALID)
def test_invalid_chains_fail_like_slot_chains(build: Callable[[Any], Any], message: str) -> None:
    with pytest.raises(dataio.PlanError, match=re.escape(message)) as from_expr:
        build(col("x"))
    with pytest.raises(dataio.PlanError, match=re.escape(message)) as from_slot:
        slot_form(build)()
    expr_text = str(from_expr.value).removeprefix("expression col('x'): ")
    slot_text = str(from_slot.value).removeprefix("slot 'x': ")
    assert expr_text == slot_text
    assert str(from_expr.value).startswith("expression col('x'): ")


def test_a_chain_holds_one_decoder_even_through_a_namespace() -> None:
    with pytest.raises(dataio.PlanError, match="already decoded; a chain holds one decoder"):
        col("x").image.decode().image.decode()


def test_then_takes_ops_only() -> None:
    with pytest.raises(dataio.PlanError, match="expected an op, got 3"):
        col("x").image.decode().then(3)  # type: ignore[arg-type]


# -- the expression's ops run like the slot's ---------------------------------------------------


def test_expression_ops_lower_like_the_slot_chain() -> None:
    buffer = io.BytesIO()
    Image.fromarray(photo_like(50, 40, np.random.default_rng(2))).save(buffer, "PNG")
    data = buffer.getvalue()
    expr = col("image").image.decode().center_crop((20, 30)).rotate90(1)
    pipe = dataio.pipeline(dataio.slot("image").then(*expr.ops), dataio.batch(1))
    with pipe.bind([{"image": data}]).run() as loader:
        (batch,) = list(loader)
    pixels = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    top, left = round((40 - 20) / 2), round((50 - 30) / 2)
    expected = np.rot90(pixels[top : top + 20, left : left + 30], 1)
    np.testing.assert_array_equal(batch["image"][0], expected)
    kernel = lower_chain(expr.ops, name="image")  # what the engine runs for the expression
    assert kernel.run is not None
    value, _ = kernel.run(data, None, None)
    np.testing.assert_array_equal(value, expected)
    assert kernel.row_shape in (None, registry.chain_type(expr.ops).static_shape)


def test_branches_equal_slot_branches() -> None:
    from dataio import cond as c

    tall = c.shape(axis=0).gt(512)
    expr = (
        col("jpeg")
        .image.decode()
        .when(tall)
        .then(transforms.center_crop(512))
        .otherwise(transforms.resize((512, 512)))
        .normalize("imagenet")
    )
    slot = (
        dataio.slot("jpeg")
        .decode_image()
        .when(tall)
        .then(transforms.center_crop(h=512, w=512))
        .otherwise(transforms.resize(h=512, w=512))
        .normalize("imagenet")
    )
    assert isinstance(expr, ChainExpr) and expr.ops == slot.ops
    assert registry.chain_type(expr.ops).static_shape == (3, 512, 512)
    with pytest.raises(
        dataio.PlanError, match=r"^expression col\('jpeg'\): when\(\) takes a shape"
    ):
        col("jpeg").image.decode().when(c.col("x").is_null())
    with pytest.raises(dataio.PlanError, match=r"otherwise\(\) must follow \.when"):
        col("jpeg").image.decode().otherwise(transforms.rotate90())
    with pytest.raises(dataio.PlanError, match="a branch holds transforms"):
        col("jpeg").image.decode().when(tall).then(transforms.normalize("imagenet"))
