"""The plan DSL: shape validation, immutability, signatures, explain, laziness."""

from __future__ import annotations

import pytest

import dataio
from dataio import decoders, transforms


def image_slot() -> dataio.Slot:
    return (
        dataio.slot("image")
        .decode_image(mode="rgb")
        .resize_short(256)
        .center_crop(h=224, w=224)
        .normalize("imagenet")
    )


def test_pipeline_sorts_stages_by_position() -> None:
    def to_record(r: dict) -> dict:
        return r

    def to_tuple(b: dataio.Batch) -> tuple:
        return (b,)

    pipe = dataio.pipeline(
        dataio.map(to_record),
        image_slot(),
        dataio.slot("label").passthrough(),
        dataio.batch(8, drop_last=True, prefetch=3),
        dataio.map(to_tuple),
    )
    assert [m.fn for m in pipe.record_maps] == [to_record]
    assert [s.name for s in pipe.slots] == ["image", "label"]
    assert (pipe.shape.size, pipe.shape.drop_last, pipe.shape.prefetch) == (8, True, 3)
    assert [m.fn for m in pipe.batch_maps] == [to_tuple]


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ((dataio.batch(4),), "at least one slot"),
        ((dataio.slot("x").passthrough(),), "shape stage"),
        ((dataio.slot("x").passthrough(), dataio.batch(2), dataio.batch(2)), "exactly one"),
        ((dataio.batch(2), dataio.slot("x").passthrough()), "after the shape stage"),
        (
            (dataio.slot("x").passthrough(), dataio.slot("x").passthrough(), dataio.batch(2)),
            "twice",
        ),
        ((dataio.slot("x"), dataio.batch(2)), "is empty"),
        ((dataio.slot("x").passthrough(), "batch", dataio.batch(2)), "stage 1"),
    ],
)
def test_pipeline_shape_errors(stages: tuple, message: str) -> None:
    with pytest.raises(dataio.PlanError, match=message):
        dataio.pipeline(*stages)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: dataio.slot("x").resize_short(10), "must start with a decoder"),
        (lambda: dataio.slot("x").decode_image().decode_image(), "one decoder"),
        (
            lambda: dataio.slot("x").decode_image().normalize("imagenet").resize(h=2, w=2),
            "cannot follow",
        ),
        (lambda: dataio.slot("x").decode_image().passthrough(), "already has ops"),
        (lambda: dataio.slot("x").passthrough().decode_image(), "passthrough"),
        (lambda: dataio.slot("x").decode_image(mode="cmyk"), "mode"),
        (
            lambda: dataio.slot("x").decode_image().normalize("imagenet").output(dtype="uint8"),
            "float32",
        ),
        (lambda: dataio.slot(""), "non-empty"),
        (lambda: dataio.batch(0), "positive integer"),
        (lambda: dataio.batch(4, prefetch=0), "positive integer"),
        (lambda: dataio.map(42), "callable"),
    ],
)
def test_chain_errors(build, message: str) -> None:
    with pytest.raises(dataio.PlanError, match=message):
        build()


def test_slots_are_immutable_values() -> None:
    base = dataio.slot("image").decode_image()
    longer = base.resize_short(128)
    assert base.ops == (decoders.image(mode="rgb"),)
    assert len(longer.ops) == 2
    with pytest.raises(AttributeError):
        base.name = "other"  # type: ignore[misc]


def test_slot_methods_equal_namespace_factories() -> None:
    by_method = (
        dataio.slot("image")
        .decode_image(mode="gray")
        .random_resized_crop(h=32, w=32, scale=(0.5, 1.0))
        .random_flip(p=0.25)
        .normalize(mean=0.5, std=0.25, layout="HWC")
    )
    by_factory = dataio.slot("image").then(
        decoders.image(mode="gray"),
        transforms.random_resized_crop(h=32, w=32, scale=(0.5, 1.0)),
        transforms.random_flip(p=0.25),
        transforms.normalize(mean=0.5, std=0.25, layout="HWC"),
    )
    assert by_method == by_factory
    assert by_method.ops[1].random and not by_method.ops[0].random


def test_signature_is_stable_and_tracks_changes() -> None:
    a = dataio.pipeline(image_slot(), dataio.batch(64))
    b = dataio.pipeline(image_slot(), dataio.batch(64))
    assert a.signature() == b.signature()
    assert len(a.signature()) == 64
    changed = [
        dataio.pipeline(image_slot(), dataio.batch(32)),
        dataio.pipeline(dataio.slot("image").decode_image(mode="gray"), dataio.batch(64)),
        dataio.pipeline(image_slot(), dataio.slot("label").passthrough(), dataio.batch(64)),
        dataio.pipeline(dataio.map(len), image_slot(), dataio.batch(64)),
    ]
    assert len({p.signature() for p in changed} | {a.signature()}) == 5


def test_signature_is_stable_across_processes() -> None:
    import subprocess
    import sys

    code = (
        "import dataio;"
        "p = dataio.pipeline(dataio.slot('image').decode_image().resize_short(256)"
        ".center_crop(h=224, w=224).normalize('imagenet'), dataio.batch(64));"
        "print(p.signature())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    here = dataio.pipeline(image_slot(), dataio.batch(64)).signature()
    assert out.stdout.strip() == here


def test_explain_lists_every_stage() -> None:
    pipe = dataio.pipeline(image_slot(), dataio.slot("label").passthrough(), dataio.batch(64))
    text = pipe.explain()
    assert "decode_image(mode='rgb') -> resize_short(size=256) -> center_crop" in text
    assert "passthrough of field 'label'" in text
    assert "batch(64, drop_last=False, prefetch=2)" in text


def test_building_and_binding_do_no_work() -> None:
    class Exploding:
        def __iter__(self):
            raise AssertionError("the source was read before run() was iterated")

    pipe = dataio.pipeline(image_slot(), dataio.batch(2))
    bound = pipe.bind(Exploding())
    assert bound.pipeline is pipe
    loader = bound.run()  # starting a loader reads nothing either
    with pytest.raises(AssertionError, match="before run"):
        next(loader)


def test_slot_reads_another_field() -> None:
    s = dataio.slot("pixels", field="path").decode_image()
    assert s.source_field == "path"
    assert s.describe()["field"] == "path"
