"""Transform op factories (``dataio/transforms.py``): parameters, reprs and validation."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

import dataio
from dataio import transforms
from dataio.plan.ops import IMAGENET_MEAN, IMAGENET_STD, Op


@pytest.mark.parametrize(
    ("op", "text"),
    [
        (transforms.resize(h=224, w=200), "resize(h=224, w=200)"),
        (transforms.resize_short(256), "resize_short(size=256)"),
        (transforms.center_crop(h=224, w=224), "center_crop(h=224, w=224)"),
        (transforms.random_crop(h=32, w=48), "random_crop(h=32, w=48)"),
        (
            transforms.random_resized_crop(h=224, w=224, scale=(0.5, 1.0)),
            "random_resized_crop(h=224, ratio=(0.75, 1.3333333333333333), scale=(0.5, 1.0), w=224)",
        ),
        (transforms.random_flip(), "random_flip(direction='horizontal', p=0.5)"),
        (
            transforms.normalize(mean=0.5, std=0.25, layout="HWC"),
            "normalize(layout='HWC', mean=(0.5,), std=(0.25,))",
        ),
        (transforms.output(dtype="uint8", layout="CHW"), "output(dtype='uint8', layout='CHW')"),
        (transforms.output(layout="HWC"), "output(dtype=None, layout='HWC')"),
    ],
)
def test_repr(op: Op, text: str) -> None:
    assert repr(op) == text


@pytest.mark.parametrize(
    ("op", "name", "kind", "random"),
    [
        (transforms.resize(h=1, w=2), "resize", "geometry", False),
        (transforms.resize_short(3), "resize_short", "geometry", False),
        (transforms.center_crop(h=1, w=2), "center_crop", "geometry", False),
        (transforms.random_crop(h=1, w=2), "random_crop", "geometry", True),
        (transforms.random_resized_crop(h=1, w=2), "random_resized_crop", "geometry", True),
        (transforms.random_flip(), "random_flip", "geometry", True),
        (transforms.normalize("imagenet"), "normalize", "normalize", False),
        (transforms.output(dtype="float32"), "output", "output", False),
    ],
)
def test_name_kind_and_randomness(op: Op, name: str, kind: str, random: bool) -> None:
    assert (op.name, op.kind, op.random) == (name, kind, random)


def test_params_are_stored_as_given() -> None:
    op = transforms.random_resized_crop(h=96, w=128, scale=(1, 1), ratio=[0.5, 2])
    assert op.param("h") == 96 and op.param("w") == 128
    assert op.param("scale") == (1.0, 1.0)  # ints become floats, lists become tuples
    assert op.param("ratio") == (0.5, 2.0)
    assert transforms.random_flip(p=1, direction="vertical").params == (
        ("direction", "vertical"),
        ("p", 1.0),
    )
    assert transforms.resize_short(size=7).param("size") == 7


def test_random_resized_crop_defaults_match_torchvision() -> None:
    op = transforms.random_resized_crop(h=224, w=224)
    assert op.param("scale") == (0.08, 1.0)
    assert op.param("ratio") == pytest.approx((3 / 4, 4 / 3))


def test_normalize_imagenet_preset() -> None:
    op = transforms.normalize("imagenet")
    assert op == transforms.normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD)
    assert op.param("mean") == pytest.approx((0.485, 0.456, 0.406))
    assert op.param("std") == pytest.approx((0.229, 0.224, 0.225))
    assert op.param("layout") == "CHW"


@pytest.mark.parametrize(
    ("mean", "std", "means", "stds"),
    [
        (0.5, 0.25, (0.5,), (0.25,)),
        (1, 2, (1.0,), (2.0,)),
        ([0.1, 0.2, 0.3], (0.4, 0.5, 0.6), (0.1, 0.2, 0.3), (0.4, 0.5, 0.6)),
    ],
)
def test_normalize_channel_values(mean: Any, std: Any, means: tuple, stds: tuple) -> None:
    op = transforms.normalize(mean=mean, std=std)
    assert op.param("mean") == means and op.param("std") == stds


def test_output_keeps_unset_options_open() -> None:
    assert transforms.output(dtype="float32").param("layout") is None
    assert transforms.output(layout="CHW").param("dtype") is None


def test_ops_are_values() -> None:
    assert transforms.resize(w=2, h=1) == transforms.resize(h=1, w=2)
    assert hash(transforms.center_crop(h=3, w=4)) == hash(transforms.center_crop(w=4, h=3))
    assert transforms.resize(h=1, w=2) != transforms.resize(h=2, w=1)
    assert transforms.random_crop(h=1, w=2) != transforms.center_crop(h=1, w=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        transforms.resize(h=1, w=2).params = ()


def test_describe_is_json_ready() -> None:
    op = transforms.random_resized_crop(h=8, w=16, scale=(0.25, 1.0), ratio=(0.5, 2.0))
    assert json.loads(json.dumps(op.describe())) == {
        "op": "random_resized_crop",
        "h": 8,
        "w": 16,
        "scale": [0.25, 1.0],
        "ratio": [0.5, 2.0],
    }


@pytest.mark.parametrize(
    ("method", "args", "op"),
    [
        ("resize", {"h": 5, "w": 6}, transforms.resize(h=5, w=6)),
        ("resize_short", {"size": 9}, transforms.resize_short(9)),
        ("center_crop", {"h": 3, "w": 4}, transforms.center_crop(h=3, w=4)),
        ("random_crop", {"h": 3, "w": 4}, transforms.random_crop(h=3, w=4)),
        (
            "random_resized_crop",
            {"h": 3, "w": 4, "scale": (0.5, 1.0)},
            transforms.random_resized_crop(h=3, w=4, scale=(0.5, 1.0)),
        ),
        ("random_flip", {"p": 0.25}, transforms.random_flip(p=0.25)),
        ("normalize", {"mean": 0.5, "std": 0.5}, transforms.normalize(mean=0.5, std=0.5)),
        ("output", {"layout": "CHW"}, transforms.output(layout="CHW")),
    ],
)
def test_slot_methods_build_the_same_op(method: str, args: dict[str, Any], op: Op) -> None:
    decoded = dataio.slot("image").decode_image()
    assert getattr(decoded, method)(**args).ops[-1] == op


@pytest.mark.parametrize(
    "call",
    [
        lambda: transforms.resize(224, 224),
        lambda: transforms.center_crop(224, 224),
        lambda: transforms.random_crop(32, 32),
        lambda: transforms.random_resized_crop(224, 224),
        lambda: transforms.random_flip(0.5),
        lambda: transforms.output("uint8"),
    ],
)
def test_options_are_keyword_only(call: Callable[[], Op]) -> None:
    with pytest.raises(TypeError):
        call()


BAD_PARAMS: list[tuple[Callable[[], Op], str]] = [
    (lambda: transforms.resize(h=0, w=10), r"resize h must be a positive integer, got 0"),
    (lambda: transforms.resize(h=10, w=-3), r"resize w must be a positive integer, got -3"),
    (lambda: transforms.resize(h=224.0, w=10), r"resize h .* got 224\.0"),
    (lambda: transforms.resize(h=True, w=10), r"resize h .* got True"),
    (lambda: transforms.resize(h="224", w=10), r"resize h .* got '224'"),
    (lambda: transforms.resize_short(0), r"resize_short size must be a positive integer, got 0"),
    (lambda: transforms.resize_short(None), r"resize_short size .* got None"),
    (lambda: transforms.center_crop(h=0, w=1), r"center_crop h must be a positive integer"),
    (lambda: transforms.random_crop(h=1, w=2.5), r"random_crop w .* got 2\.5"),
    (lambda: transforms.random_resized_crop(h=0, w=1), r"random_resized_crop h .* got 0"),
    (
        lambda: transforms.random_resized_crop(h=1, w=1, scale=(0.5, 1.5)),
        r"random_resized_crop scale must lie in \(0, 1\], got \(0\.5, 1\.5\)",
    ),
    (
        lambda: transforms.random_resized_crop(h=1, w=1, scale=(0.9, 0.1)),
        r"random_resized_crop scale must satisfy 0 < low <= high, got \(0\.9, 0\.1\)",
    ),
    (
        lambda: transforms.random_resized_crop(h=1, w=1, scale=(0, 1)),
        r"scale must satisfy 0 < low <= high, got \(0, 1\)",
    ),
    (
        lambda: transforms.random_resized_crop(h=1, w=1, scale=0.5),
        r"random_resized_crop scale must be a \(low, high\) pair of numbers, got 0\.5",
    ),
    (
        lambda: transforms.random_resized_crop(h=1, w=1, ratio=(1, 2, 3)),
        r"random_resized_crop ratio must be a \(low, high\) pair .* got \(1, 2, 3\)",
    ),
    (
        lambda: transforms.random_resized_crop(h=1, w=1, ratio=("a", "b")),
        r"ratio must be a \(low, high\) pair of numbers, got \('a', 'b'\)",
    ),
    (
        lambda: transforms.random_resized_crop(h=1, w=1, ratio=(2.0, 1.0)),
        r"ratio must satisfy 0 < low <= high, got \(2\.0, 1\.0\)",
    ),
    (
        lambda: transforms.random_flip(p=1.5),
        r"random_flip p must be a number in \[0, 1\], got 1\.5",
    ),
    (lambda: transforms.random_flip(p=-0.1), r"random_flip p .* got -0\.1"),
    (lambda: transforms.random_flip(p=True), r"random_flip p .* got True"),
    (lambda: transforms.random_flip(p="0.5"), r"random_flip p .* got '0\.5'"),
    (
        lambda: transforms.random_flip(direction="diagonal"),
        r"random_flip direction must be one of \['horizontal', 'vertical'\], got 'diagonal'",
    ),
    (lambda: transforms.normalize(), r'normalize needs a preset \("imagenet"\) or both mean='),
    (lambda: transforms.normalize(mean=0.5), r"needs a preset .* or both mean= and std="),
    (lambda: transforms.normalize("imagenet", mean=0.5), r"a preset name or mean=/std=, not both"),
    (
        lambda: transforms.normalize("cifar"),
        r"unknown normalize preset 'cifar'; known presets: \['imagenet'\]",
    ),
    (
        lambda: transforms.normalize(mean=(0.5, 0.5), std=(0.5,)),
        r"normalize mean and std differ in length: \(0\.5, 0\.5\) vs \(0\.5,\)",
    ),
    (
        lambda: transforms.normalize(mean=0.5, std=0),
        r"normalize std must be positive, got \(0\.0,\)",
    ),
    (
        lambda: transforms.normalize(mean=(0.5,) * 3, std=(0.2, -0.1, 0.3)),
        r"std must be positive, got \(0\.2, -0\.1, 0\.3\)",
    ),
    (
        lambda: transforms.normalize(mean="abc", std=1),
        r"normalize mean must be a number or a sequence of numbers, got 'abc'",
    ),
    (lambda: transforms.normalize(mean=[], std=[]), r"normalize mean .* got \[\]"),
    (lambda: transforms.normalize(mean=0.5, std=None), r"or both mean= and std="),
    (lambda: transforms.normalize(mean=0.5, std=[True]), r"normalize std .* got \[True\]"),
    (
        lambda: transforms.normalize(mean=0.5, std=0.5, layout="NCHW"),
        r"layout must be one of \['HWC', 'CHW'\], got 'NCHW'",
    ),
    (lambda: transforms.output(), r"output needs dtype= or layout="),
    (
        lambda: transforms.output(dtype="bool"),
        r"output dtype must be one of \['uint8', 'int16', .*'float64'\], got 'bool'",
    ),
    (
        lambda: transforms.output(layout="chw"),
        r"output layout must be one of \['HWC', 'CHW'\], got 'chw'",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD_PARAMS)
def test_bad_params_raise_plan_error(call: Callable[[], Op], message: str) -> None:
    with pytest.raises(dataio.PlanError, match=message) as caught:
        call()
    assert isinstance(caught.value, ValueError)
