"""The op registry: one declaration per op, and every surface generated from it agrees."""

from __future__ import annotations

import inspect
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import dataio
from dataio import cond as c
from dataio import decoders, transforms
from dataio.engine import lower
from dataio.plan import registry
from dataio.plan.expr import ChainExpr, col
from dataio.plan.ops import Op
from dataio.testing import photo_like

ROOT = Path(__file__).resolve().parents[1]

#: one call per op: positional and keyword arguments of its factory
CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "decode_image": ((), {"mode": "gray", "exact": True}),
    "decode_numpy": ((), {}),
    "decode_safetensors": ((), {"key": "w"}),
    "decode_audio": ((), {"sample_rate": 8000, "mono": True, "resampling": "sinc"}),
    "decode_json": ((), {}),
    "decode_text": ((), {"encoding": "latin-1"}),
    "decode_bytes": ((), {}),
    "decode_pt": ((), {}),
    "resize_short": ((64,), {}),
    "resize": ((), {"h": 40, "w": 50}),
    "center_crop": ((), {"h": 20, "w": 30}),
    "random_crop": ((), {"h": 20, "w": 30}),
    "random_resized_crop": ((), {"h": 20, "w": 30, "scale": (0.5, 1.0), "ratio": (0.5, 2.0)}),
    "random_flip": ((), {"p": 0.25, "direction": "vertical"}),
    "normalize": (("imagenet",), {"layout": "HWC"}),
    "output": ((), {"dtype": "float16", "layout": "CHW"}),
    "pad": ((), {"top": 1, "bottom": 2, "left": 3, "right": 4, "value": 9}),
    "rotate90": ((3,), {}),
    "grayscale": ((), {"channels": 3}),
    "color_jitter": ((), {"brightness": 0.2, "hue": 0.1}),
    "to_dtype": (("float32",), {"scale": True}),
    "standardize": ((), {"eps": 1e-3}),
    "fix_length": ((100,), {"random_crop": True, "pad_value": 0.5}),
    "gain": ((-3.0,), {}),
}

NAMESPACES = {"decoders": decoders, "transforms": transforms}


def module_of(spec: registry.OpSpec[Any]) -> Any:
    return NAMESPACES[spec.namespace]


def decoder_for(spec: registry.OpSpec[Any]) -> registry.OpSpec[Any]:
    """The decoder a transform's test chain starts with."""
    return registry.spec(spec.applies_to[0] if spec.applies_to else "decode_image")


def test_every_op_has_a_test_call() -> None:
    assert sorted(CALLS) == sorted(s.name for s in registry.specs())


@pytest.mark.parametrize("spec", registry.specs(), ids=lambda s: s.name)
def test_slot_factory_and_expression_build_equal_ops(spec: registry.OpSpec[Any]) -> None:
    args, kwargs = CALLS[spec.name]
    op = getattr(module_of(spec), spec.factory)(*args, **kwargs)
    assert isinstance(op, Op) and op.name == spec.name and op.kind == spec.kind
    assert op == spec.op(*args, **kwargs)
    if spec.kind == "decode":
        slot_ops = getattr(dataio.slot("x"), spec.method)(*args, **kwargs).ops
        chain_ops = getattr(dataio.chain(), spec.method)(*args, **kwargs).ops
        assert spec.expr is not None
        namespace, method = spec.expr
        expr = getattr(getattr(col("x"), namespace), method)(*args, **kwargs)
        expected: tuple[Op, ...] = (op,)
    else:
        decoder = decoder_for(spec)
        first = decoder.op()
        slot_ops = getattr(dataio.slot("x").then(first), spec.method)(*args, **kwargs).ops
        chain_ops = getattr(dataio.chain().then(first), spec.method)(*args, **kwargs).ops
        assert decoder.expr is not None
        namespace, method = decoder.expr
        start = getattr(getattr(col("x"), namespace), method)()
        expr = getattr(start, spec.method)(*args, **kwargs)
        expected = (first, op)
    assert slot_ops == chain_ops == expected
    assert isinstance(expr, ChainExpr) and expr.op == "chain"
    assert expr.args[0].op == "col" and expr.args[0].args == ("x",)
    assert expr.args[1] == expected


@pytest.mark.parametrize("spec", registry.specs(), ids=lambda s: s.name)
def test_metadata_is_complete(spec: registry.OpSpec[Any]) -> None:
    # a kernel that exists
    assert callable(lower.kernel_function(spec)), spec.kernel
    # documented parameters, with an example, as the factory's own
    assert spec.doc and "Example:" in spec.doc
    fn = getattr(module_of(spec), spec.factory)
    assert inspect.isfunction(fn) and fn.__module__ == f"dataio.{spec.namespace}"
    assert inspect.getdoc(fn) == spec.doc
    assert inspect.signature(fn) == spec.signature
    assert spec.factory in module_of(spec).__all__
    # every parameter named in the signature reaches the op (or names its alternative)
    args, kwargs = CALLS[spec.name]
    op = spec.op(*args, **kwargs)
    for name in spec.signature.parameters:
        assert name in op.params_dict() or name in ("preset", "size"), (spec.name, name)
    # random ops say so; the lowering tables hold every non-fused op
    assert op.random == (spec.random if isinstance(spec.random, bool) else kwargs[spec.random])
    if spec.kind == "decode" and not spec.fused:
        assert spec.name in lower.DECODERS
    elif spec.kind == "array":
        assert spec.name in lower.ARRAY_OPS
    else:
        assert spec.fused and spec.kernel.startswith("dataio.udfs.image:")
    # a slot method with the factory's parameters after self
    method = getattr(dataio.Slot, spec.method)
    assert inspect.getdoc(method)
    assert list(inspect.signature(method).parameters)[1:] == list(spec.signature.parameters)


def test_lowering_tables_are_exactly_the_registry() -> None:
    specs = registry.specs()
    assert set(lower.DECODERS) == {s.name for s in specs if s.kind == "decode" and not s.fused}
    assert set(lower.ARRAY_OPS) == {s.name for s in specs if s.kind == "array"}


def test_docs_list_every_factory_slot_method_and_namespace() -> None:
    docs = (ROOT / "docs" / "api.md").read_text()
    for spec in registry.specs():
        assert f"`{spec.namespace}.{spec.factory}(" in docs, spec.name
        assert f".{spec.method}(" in docs, spec.name
        if spec.expr is not None:
            namespace, method = spec.expr
            assert f".{namespace}.{method}(" in docs, spec.name


def test_unknown_op_and_double_declaration_raise_plan_error() -> None:
    with pytest.raises(dataio.PlanError, match="unknown op 'blur'"):
        registry.spec("blur")
    with pytest.raises(dataio.PlanError, match="'resize' is declared twice"):
        registry.declare("resize", "geometry", kernel="dataio.udfs.image:run_chain")(lambda: {})


# -- plan signatures do not depend on the spelling -------------------------------------------

# computed with the code before the registry (main at a3bb979): existing pipelines keep
# their signatures, so their checkpoints keep loading
PINNED = "e86196aef30f2b21157f618f6a7fd96943aee8f28800e12429abead666af304a"


def every_op_plan(torchvision_style: bool) -> dataio.Pipeline:
    image = dataio.slot("image").decode_image(mode="rgb", exact=True)
    if torchvision_style:
        image = (
            image.resize((300, 300))
            .resize(256)
            .random_resized_crop(240, scale=(0.5, 1.0))
            .random_crop(230)
            .center_crop([224, 224])
        )
    else:
        image = (
            image.resize(h=300, w=300)
            .resize_short(256)
            .random_resized_crop(h=240, w=240, scale=(0.5, 1.0))
            .random_crop(h=230, w=230)
            .center_crop(h=224, w=224)
        )
    image = (
        image.random_flip(p=0.3, direction="vertical")
        .pad(top=1, bottom=2, left=3, right=4, value=5)
        .rotate90(3)
        .color_jitter(brightness=0.4, hue=0.1)
        .grayscale(channels=3)
        .when(c.shape(axis=0).gt(100))
        .then(transforms.center_crop(h=100, w=100))
        .otherwise(transforms.resize(h=100, w=100))
        .normalize("imagenet", layout="HWC")
        .output(dtype="float16")
    )
    return dataio.pipeline(
        image,
        dataio.slot("gray").decode_image(mode="gray").output(dtype="uint8", layout="CHW"),
        dataio.slot("audio")
        .decode_audio(sample_rate=16000, mono=True, resampling="sinc")
        .fix_length(16000, random_crop=True, pad_value=0.5)
        .gain(-3),
        dataio.slot("npy").decode_numpy().to_dtype("float32", scale=True).standardize(eps=1e-5),
        dataio.slot("st").decode_safetensors(key="w"),
        dataio.slot("js").decode_json(),
        dataio.slot("tx").decode_text(encoding="latin-1"),
        dataio.slot("raw").decode_bytes(),
        dataio.slot("pt").decode_pt(),
        dataio.batch(4),
    )


@pytest.mark.parametrize("torchvision_style", [False, True])
def test_signatures_of_existing_pipelines_are_unchanged(torchvision_style: bool) -> None:
    assert every_op_plan(torchvision_style).signature() == PINNED


# -- torchvision-style sizes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("short", "keywords"),
    [
        (lambda: transforms.resize(224), lambda: transforms.resize_short(224)),
        (lambda: transforms.resize((120, 160)), lambda: transforms.resize(h=120, w=160)),
        (lambda: transforms.resize([120, 160]), lambda: transforms.resize(h=120, w=160)),
        (lambda: transforms.center_crop(224), lambda: transforms.center_crop(h=224, w=224)),
        (lambda: transforms.center_crop((20, 30)), lambda: transforms.center_crop(h=20, w=30)),
        (lambda: transforms.random_crop(32), lambda: transforms.random_crop(h=32, w=32)),
        (lambda: transforms.random_crop((8, 16)), lambda: transforms.random_crop(h=8, w=16)),
        (
            lambda: transforms.random_resized_crop(224),
            lambda: transforms.random_resized_crop(h=224, w=224),
        ),
        (
            lambda: transforms.random_resized_crop((96, 128), scale=(0.3, 0.9)),
            lambda: transforms.random_resized_crop(h=96, w=128, scale=(0.3, 0.9)),
        ),
    ],
)
def test_torchvision_forms_equal_keyword_forms(short: Any, keywords: Any) -> None:
    assert short() == keywords()
    assert short().describe() == keywords().describe()
    assert short().applies_to == keywords().applies_to


sides = st.integers(min_value=-3, max_value=5000)


@given(h=sides, w=sides)
def test_size_pairs_and_keywords_agree_on_every_value(h: int, w: int) -> None:
    for name in ("resize", "center_crop", "random_crop", "random_resized_crop"):
        factory = getattr(transforms, name)
        outcomes: list[Op | str] = []
        for args, kwargs in ((((h, w),), {}), ((), {"h": h, "w": w})):
            try:
                outcomes.append(factory(*args, **kwargs))
            except dataio.PlanError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1]
        assert isinstance(outcomes[0], Op) == (h > 0 and w > 0)


@given(size=sides)
def test_one_int_is_a_square_or_the_short_side(size: int) -> None:
    if size <= 0:
        with pytest.raises(dataio.PlanError, match=f"got {size}"):
            transforms.center_crop(size)
        return
    assert transforms.resize(size) == transforms.resize_short(size)
    assert transforms.center_crop(size) == transforms.center_crop(h=size, w=size)
    assert transforms.random_crop(size) == transforms.random_crop(h=size, w=size)


def png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(photo_like(width, height, np.random.default_rng(5))).save(buffer, "PNG")
    return buffer.getvalue()


def test_resize_int_resizes_the_short_side_like_torchvision() -> None:
    data = png(90, 60)  # landscape: the height is the short side
    pipe = dataio.pipeline(dataio.slot("image").decode_image().resize(30), dataio.batch(1))
    with pipe.bind([{"image": data}]).run() as loader:
        (batch,) = list(loader)
    # torchvision's Resize(30) on 60x90: short side 30, long side int(30 * 90 / 60) = 45
    expected = (
        Image.open(io.BytesIO(data)).convert("RGB").resize((45, 30), Image.Resampling.BILINEAR)
    )
    assert batch["image"].shape == (1, 30, 45, 3)
    assert np.abs(batch["image"][0].astype(int) - np.asarray(expected)).max() <= 1


# -- errors -----------------------------------------------------------------------------------

BAD: list[tuple[Any, str]] = [
    (lambda: transforms.resize(224, h=10), r"resize takes a size or h= and w=, not both"),
    (lambda: transforms.resize(), r"resize needs a size \(224 or \(h, w\)\) or both h= and w="),
    (lambda: transforms.resize(h=10), r"resize needs a size"),
    (lambda: transforms.resize((1, 2, 3)), r"resize size must be an int or an \(h, w\) pair"),
    (lambda: transforms.resize("224"), r"resize size must be an int or an \(h, w\) pair"),
    (lambda: transforms.resize(0), r"resize_short size must be a positive integer, got 0"),
    (lambda: transforms.resize((0, 3)), r"resize h must be a positive integer, got 0"),
    (lambda: transforms.center_crop(0), r"center_crop size must be a positive integer, got 0"),
    (lambda: transforms.center_crop((3, 2.5)), r"center_crop w must be a positive integer"),
    (lambda: transforms.center_crop(True), r"center_crop size must be an int or an \(h, w\)"),
    (lambda: transforms.random_crop(), r"random_crop needs a size"),
    (lambda: transforms.random_resized_crop(-1), r"random_resized_crop size must be a positive"),
    (lambda: transforms.fix_length(10, pad_value="x"), r"fix_length pad_value must be a number"),
    (lambda: transforms.standardize(eps=-1), r"standardize eps must be a non-negative number"),
    (lambda: decoders.audio(resampling="cubic"), r"decode_audio resampling must be one of"),
]


@pytest.mark.parametrize(("call", "message"), BAD)
def test_bad_params_raise_plan_error_naming_the_op(call: Any, message: str) -> None:
    with pytest.raises(dataio.PlanError, match=message):
        call()


@pytest.mark.parametrize("spec", registry.specs(), ids=lambda s: s.name)
def test_a_bad_value_for_each_parameter_names_the_op(spec: registry.OpSpec[Any]) -> None:
    args, kwargs = CALLS[spec.name]
    for name in kwargs:
        bad = {**kwargs, name: object()}
        with pytest.raises(dataio.PlanError) as caught:
            spec.op(*args, **bad)
        assert spec.name in str(caught.value) or name in str(caught.value), str(caught.value)


# -- output types -----------------------------------------------------------------------------


def wav(frames: int, channels: int) -> bytes:
    import soundfile

    buffer = io.BytesIO()
    samples = np.random.default_rng(1).uniform(-0.5, 0.5, (frames, channels)).astype(np.float32)
    soundfile.write(buffer, samples, 8000, format="WAV", subtype="FLOAT")
    return buffer.getvalue()


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


TYPED_CHAINS = [
    ("image", dataio.chain().decode_image().resize_short(40)),
    ("image", dataio.chain().decode_image().center_crop(32)),
    ("image", dataio.chain().decode_image(mode="gray").resize((20, 24)).rotate90(1)),
    ("image", dataio.chain().decode_image().center_crop(20).pad(top=1, bottom=2, left=3)),
    ("image", dataio.chain().decode_image().random_crop(16).grayscale(channels=3).standardize()),
    ("image", dataio.chain().decode_image().center_crop(16).normalize("imagenet")),
    ("image", dataio.chain().decode_image().random_resized_crop(16).output(dtype="int16")),
    (
        "image",
        dataio.chain()
        .decode_image()
        .center_crop(16)
        .normalize(mean=0.5, std=0.5, layout="HWC")
        .output(dtype="float16", layout="CHW"),
    ),
    ("image", dataio.chain().decode_image().center_crop(16).to_dtype("float32", scale=True)),
    ("audio", dataio.chain().decode_audio(mono=True).fix_length(300).gain(2)),
    ("audio", dataio.chain().decode_audio().fix_length(300)),
    ("image", dataio.chain().decode_image(mode="rgba").center_crop(16).output(layout="CHW")),
    ("npy", dataio.chain().decode_numpy().to_dtype("int32")),
]


@pytest.mark.parametrize(("field", "chain"), TYPED_CHAINS, ids=repr)
def test_chain_type_matches_what_the_kernel_yields(field: str, chain: dataio.Chain) -> None:
    record = {"image": png(48, 40), "audio": wav(500, 2), "npy": npy(np.arange(6.0).reshape(2, 3))}
    pipe = dataio.pipeline(dataio.slot(field).then(chain), dataio.batch(1))
    with pipe.bind([record]).run() as loader:
        (batch,) = list(loader)
    value = np.asarray(batch[field][0])
    typed = registry.chain_type(chain.ops)
    assert typed.dtype is None or np.dtype(typed.dtype) == value.dtype, typed
    if typed.shape is not None:  # else the data decides the rank (NPY files)
        assert len(typed.shape) == value.ndim, typed
        for want, got in zip(typed.shape, value.shape, strict=True):
            assert want is None or want == got, (typed, value.shape)
    (kernel,) = lower.lower(pipe)
    if kernel.row_shape is not None:  # where lowering knows a static shape, they agree
        assert kernel.row_shape == typed.static_shape


def test_chain_type_of_branches_and_objects() -> None:
    branchy = (
        dataio.chain()
        .decode_image()
        .when(c.shape(axis=0).gt(10))
        .then(transforms.center_crop(8))
        .otherwise(transforms.resize((8, 8)))
    )
    assert registry.chain_type(branchy.ops).static_shape == (8, 8, 3)
    uneven = (
        dataio.chain()
        .decode_image()
        .when(c.shape(axis=0).gt(10))
        .then(transforms.center_crop(8))
        .otherwise(transforms.resize((8, 6)))
    )
    assert registry.chain_type(uneven.ops).shape == (8, None, 3)
    assert registry.chain_type(dataio.chain().decode_json().ops).objects
    assert registry.chain_type(dataio.chain().decode_numpy().ops).shape is None


def test_docstrings_of_generated_methods_point_to_the_factory() -> None:
    for spec in registry.specs():
        doc = inspect.getdoc(getattr(dataio.Slot, spec.method)) or ""
        assert re.search(rf"dataio\.{spec.namespace}\.{spec.factory}\b", doc), spec.name
