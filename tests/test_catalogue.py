"""The op catalogue end to end: conditions, branches, array ops, decoders, batch
transforms and custom ops inside pipelines."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import dataio
from dataio import batch_transforms as bt
from dataio import cond as c
from dataio import transforms as t
from dataio.testing import photo_like


def png(width: int, height: int, seed: int = 0) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(photo_like(width, height, np.random.default_rng(seed))).save(buffer, "PNG")
    return buffer.getvalue()


def wav(samples: np.ndarray, rate: int) -> bytes:
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype="FLOAT")
    return buffer.getvalue()


def rows(loader) -> list[dataio.Batch]:
    with loader:
        return list(loader)


# -- conditions ------------------------------------------------------------------------------


def test_field_predicates_skip_reading_and_decoding(tmp_path: Path, monkeypatch) -> None:
    import dataio.udfs.image as image_module

    decoded: list[int] = []
    real = image_module.run_chain

    def counting(data, spec, rng=None, out=None):
        decoded.append(len(data))
        return real(data, spec, rng, out)

    monkeypatch.setattr("dataio.engine.lower.run_chain", counting)
    (tmp_path / "m.png").write_bytes(png(40, 30))
    records = [
        {"image": png(40, 30, 1), "mask": str(tmp_path / "m.png"), "mask_id": 7},
        {"image": png(40, 30, 2), "mask": str(tmp_path / "missing.png"), "mask_id": None},
        {"image": png(40, 30, 3), "mask_id": None},
    ]
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=8, w=8),
        dataio.slot("mask", optional=True)
        .active_when(c.col("mask_id").is_not_null())
        .decode_image(mode="gray")
        .resize(h=8, w=8),
        dataio.batch(3),
    )
    (batch,) = rows(pipe.bind(records).run())
    assert len(decoded) == 3 + 1  # three images, one mask: the missing file was never read
    assert batch["image"].shape == (3, 8, 8, 3)
    masks = batch["mask"]
    assert isinstance(masks, list) and masks[1] is None and masks[2] is None
    expected = Image.open(tmp_path / "m.png").convert("L").resize((8, 8), Image.Resampling.BILINEAR)
    assert np.abs(masks[0][..., 0].astype(int) - np.asarray(expected)).max() <= 1


def test_optional_slot_without_predicate_and_missing_fields() -> None:
    pipe = dataio.pipeline(
        dataio.slot("caption", optional=True).decode_text(),
        dataio.slot("v").passthrough(),
        dataio.batch(3),
    )
    (batch,) = rows(
        pipe.bind([{"v": 0, "caption": b"hi"}, {"v": 1}, {"v": 2, "caption": None}]).run()
    )
    assert batch["caption"] == ["hi", None, None]
    strict = dataio.pipeline(dataio.slot("caption").decode_text(), dataio.batch(2))
    with pytest.raises(dataio.FieldError, match="'caption' is not in the record"):
        rows(strict.bind([{"v": 1}]).run())


def test_predicates_combine_and_a_missing_predicate_field_is_a_row_error() -> None:
    pred = (c.col("n").ge(2) & ~c.col("tag").is_in(["skip"])) | (c.col("n") == 0)
    assert [
        pred.evaluate({"n": n, "tag": tag})
        for n, tag in [(0, "skip"), (1, "x"), (2, "x"), (3, "skip")]
    ] == [
        True,
        False,
        True,
        False,
    ]
    pipe = dataio.pipeline(
        dataio.slot("text", optional=True).active_when(c.col("lang").eq("en")).decode_text(),
        dataio.batch(2),
    )
    batch = rows(pipe.bind([{"text": b"a", "lang": "en"}, {"text": b"b"}]).run(on_failure="skip"))[
        0
    ]
    assert batch["text"] == ["a"]
    assert isinstance(batch.errors[0], dataio.FieldError)
    assert "reads field 'lang'" in str(batch.errors[0])
    with pytest.raises(dataio.PlanError, match="truth value"):
        bool(c.col("x").is_null())
    with pytest.raises(dataio.PlanError, match="field predicate with a shape predicate"):
        c.col("x").is_null() & c.shape(axis=0).gt(1)


def test_shape_branches_pick_the_right_op() -> None:
    slot = (
        dataio.slot("image")
        .decode_image()
        .when(c.shape(axis=0).gt(50))
        .then(t.center_crop(h=20, w=20))
        .otherwise(t.resize(h=20, w=20))
    )
    tall, short = png(30, 80, 1), png(30, 40, 2)
    (batch,) = rows(
        dataio.pipeline(slot, dataio.batch(2)).bind([{"image": tall}, {"image": short}]).run()
    )
    tall_px = np.asarray(Image.open(io.BytesIO(tall)).convert("RGB"))
    np.testing.assert_array_equal(batch["image"][0], tall_px[30:50, 5:25])
    short_resized = (
        Image.open(io.BytesIO(short)).convert("RGB").resize((20, 20), Image.Resampling.BILINEAR)
    )
    assert np.abs(batch["image"][1].astype(int) - np.asarray(short_resized)).max() <= 1


def test_conditions_enter_the_signature() -> None:
    def plan(pred, branch):
        return dataio.pipeline(
            dataio.slot("m", optional=True).active_when(pred).decode_bytes(),
            dataio.slot("i").decode_image().when(branch).then(t.rotate90(1)),
            dataio.batch(2),
        ).signature()

    base = plan(c.col("x").is_not_null(), c.shape(axis=0).gt(5))
    assert base == plan(c.col("x").is_not_null(), c.shape(axis=0).gt(5))
    assert base != plan(c.col("x").is_null(), c.shape(axis=0).gt(5))
    assert base != plan(c.col("y").is_not_null(), c.shape(axis=0).gt(5))
    assert base != plan(c.col("x").is_not_null(), c.shape(axis=0).gt(6))
    assert base != plan(c.col("x").is_not_null(), c.shape(axis=1).gt(5))


def test_condition_plan_errors() -> None:
    with pytest.raises(dataio.PlanError, match="optional=True"):
        dataio.slot("m").active_when(c.col("x").is_null())
    with pytest.raises(dataio.PlanError, match="field predicate"):
        dataio.slot("m", optional=True).active_when(c.shape(axis=0).gt(1))
    with pytest.raises(dataio.PlanError, match="shape predicate"):
        dataio.slot("m").decode_image().when(c.col("x").is_null())
    with pytest.raises(dataio.PlanError, match="otherwise"):
        dataio.slot("m").decode_image().otherwise(t.rotate90())


# -- array ops and decoders in pipelines -------------------------------------------------------


def test_array_ops_after_fused_geometry_then_normalize() -> None:
    data = png(64, 48, 5)
    slot = (
        dataio.slot("image")
        .decode_image()
        .resize(h=24, w=32)
        .pad(top=2, bottom=2, left=1, right=1)
        .rotate90(1)
        .normalize(mean=0.5, std=0.25)
    )
    (batch,) = rows(dataio.pipeline(slot, dataio.batch(1)).bind([{"image": data}]).run())
    base = Image.open(io.BytesIO(data)).convert("RGB").resize((32, 24), Image.Resampling.BILINEAR)
    expected = np.rot90(np.pad(np.asarray(base), ((2, 2), (1, 1), (0, 0))), 1)
    expected = ((expected / 255.0 - 0.5) / 0.25).transpose(2, 0, 1)
    assert batch["image"].shape == (1, 3, 34, 28)
    assert np.abs(batch["image"][0] - expected).max() <= 1 / 255 / 0.25 + 1e-5


def test_grayscale_and_standardize_and_to_dtype() -> None:
    data = png(20, 10, 6)
    slot = (
        dataio.slot("image")
        .decode_image()
        .grayscale()
        .to_dtype("float32", scale=True)
        .standardize()
    )
    (batch,) = rows(dataio.pipeline(slot, dataio.batch(1)).bind([{"image": data}]).run())
    luma = np.asarray(Image.open(io.BytesIO(data)).convert("L"), np.float64) / 255
    expected = (luma - luma.mean()) / luma.std()
    assert batch["image"].shape == (1, 10, 20, 1) and batch["image"].dtype == np.float32
    np.testing.assert_allclose(batch["image"][0, ..., 0], expected, atol=1e-4)


def test_color_jitter_is_seeded_per_record() -> None:
    records = [{"image": png(16, 16, i)} for i in range(4)]
    slot = dataio.slot("image").decode_image().color_jitter(brightness=0.5, saturation=0.5)
    pipe = dataio.pipeline(slot, dataio.batch(4))
    a = rows(pipe.bind(records).run(seed=1, concurrency=1))[0]["image"]
    b = rows(pipe.bind(records).run(seed=1, concurrency=4))[0]["image"]
    other = rows(pipe.bind(records).run(seed=2))[0]["image"]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, other)


def test_audio_chain_with_resampling_and_fixed_length() -> None:
    import soundfile

    rate = 8000
    clips = [np.sin(2 * np.pi * 440 * np.arange(n) / rate).astype(np.float32) for n in (8000, 5000)]
    records = [{"audio": wav(clip, rate)} for clip in clips]
    slot = (
        dataio.slot("audio").decode_audio(sample_rate=4000, mono=True).fix_length(3000).gain(-6.0)
    )
    (batch,) = rows(dataio.pipeline(slot, dataio.batch(2)).bind(records).run())
    assert batch["audio"].shape == (2, 3000)
    assert batch.sizes["audio"] == [(rate,), (rate,)]
    decoded, _ = soundfile.read(io.BytesIO(records[1]["audio"]), dtype="float32")
    resampled = np.interp(np.arange(2500) * 2.0, np.arange(len(decoded)), decoded)
    expected = np.concatenate([resampled, np.zeros(500)]) * 10 ** (-6 / 20)
    np.testing.assert_allclose(batch["audio"][1], expected, atol=2e-2)
    assert np.all(batch["audio"][1][2500:] == 0)


def test_text_json_bytes_and_pt_decoders(tmp_path: Path) -> None:
    import torch

    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3)}, buffer)
    records = [
        {
            "j": json.dumps({"a": 1}).encode(),
            "t": "é".encode("latin-1"),
            "b": b"\x00\x01",
            "p": buffer.getvalue(),
        }
    ]
    pipe = dataio.pipeline(
        dataio.slot("j").decode_json(),
        dataio.slot("t").decode_text(encoding="latin-1"),
        dataio.slot("b").decode_bytes(),
        dataio.slot("p").decode_pt(),
        dataio.batch(1),
    )
    (batch,) = rows(pipe.bind(records).run())
    assert batch["j"] == [{"a": 1}] and batch["t"] == ["é"] and batch["b"] == [b"\x00\x01"]
    assert torch.equal(batch["p"][0]["w"], torch.arange(3))
    with pytest.raises(dataio.PlanError, match="unknown text encoding"):
        dataio.slot("t").decode_text(encoding="klingon-8")


def test_corrupt_audio_is_a_skipped_row() -> None:
    good = wav(np.zeros(100, np.float32), 8000)
    pipe = dataio.pipeline(
        dataio.slot("a").decode_audio(mono=True).fix_length(100), dataio.batch(2)
    )
    (batch,) = rows(pipe.bind([{"a": good}, {"a": b"RIFF....garbage"}]).run(on_failure="skip"))
    assert batch["a"].shape == (1, 100)
    assert isinstance(batch.errors[0], dataio.DecodeError) and batch.errors[0].index == 1


def test_ops_check_their_decoder() -> None:
    with pytest.raises(dataio.PlanError, match="fix_length needs decode_audio"):
        dataio.slot("x").decode_image().fix_length(10)
    with pytest.raises(dataio.PlanError, match="color_jitter needs decode_image"):
        dataio.slot("x").decode_audio().color_jitter(brightness=0.1)


# -- batch transforms ---------------------------------------------------------------------------


def vector_records(lengths: list[int]) -> list[dict]:
    out = []
    for i, n in enumerate(lengths):
        buffer = io.BytesIO()
        np.save(buffer, np.arange(n, dtype=np.float32) + 10 * i)
        out.append({"x": buffer.getvalue(), "label": i % 3, "key": f"r{i}"})
    return out


def test_padding_keeps_metadata_and_adds_a_mask() -> None:
    pipe = dataio.pipeline(
        dataio.slot("x").decode_numpy(),
        dataio.slot("label").passthrough(),
        dataio.batch(3),
        bt.padding("x", value=-1),
    )
    (batch,) = rows(pipe.bind(vector_records([2, 4, 1])).run())
    np.testing.assert_array_equal(batch["x"], [[0, 1, -1, -1], [10, 11, 12, 13], [20, -1, -1, -1]])
    np.testing.assert_array_equal(batch["x_mask"], [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    assert batch.row_keys == ["r0", "r1", "r2"] and batch["label"].tolist() == [0, 1, 2]


def test_shuffle_moves_metadata_with_rows_and_is_seeded() -> None:
    pipe = dataio.pipeline(
        dataio.slot("x").decode_numpy(),
        dataio.slot("label").passthrough(),
        dataio.batch(6),
        bt.shuffle(),
    )
    records = vector_records([3] * 6)
    (batch,) = rows(pipe.bind(records).run(seed=3))
    assert sorted(batch.indices) == list(range(6)) and batch.indices != list(range(6))
    for row, index in enumerate(batch.indices):
        assert batch.row_keys[row] == f"r{index}" and batch["label"][row] == index % 3
        assert batch["x"][row][0] == 10 * index
    (again,) = rows(pipe.bind(records).run(seed=3))
    assert again.indices == batch.indices


def test_normalization_uses_batch_statistics() -> None:
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=6, w=5).output(dtype="float32", layout="CHW"),
        dataio.batch(4),
        bt.normalization("image"),
    )
    records = [{"image": png(20, 16, i)} for i in range(4)]
    (raw,) = rows(dataio.pipeline(pipe.slots[0], dataio.batch(4)).bind(records).run())
    (batch,) = rows(pipe.bind(records).run())
    x = raw["image"].astype(np.float64)
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(batch["image"], (x - mean) / np.sqrt(var + 1e-5), atol=1e-4)
    assert batch.indices == [0, 1, 2, 3]


def test_mixup_by_hand_and_metadata_rules() -> None:
    pipe = dataio.pipeline(
        dataio.slot("x").decode_numpy(),
        dataio.slot("label").passthrough(),
        dataio.slot("note").passthrough(),
        dataio.batch(4),
        bt.mixup(alpha=0.4, slots="x", label="label", num_classes=3),
    )
    records = vector_records([3] * 4)
    for r in records:
        r["note"] = r["key"]
    (batch,) = rows(pipe.bind(records).run(seed=11))
    rng = np.random.default_rng([11, 0, 0, 1_000_003])
    lam = rng.beta(0.4, 0.4)
    perm = rng.permutation(4)
    x = np.stack([np.arange(3, dtype=np.float32) + 10 * i for i in range(4)])
    np.testing.assert_allclose(batch["x"], lam * x + (1 - lam) * x[perm], rtol=1e-6)
    labels = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]
    np.testing.assert_allclose(batch["label"], lam * labels + (1 - lam) * labels[perm], rtol=1e-6)
    assert len(batch) == 4 and "mixed_by=mixup" in repr(batch)
    for read in (
        lambda: batch.row_keys,
        lambda: batch.indices,
        lambda: batch.sizes,
        lambda: batch["note"],
    ):
        with pytest.raises(dataio.DataioError, match="not available after mixup"):
            read()


def test_cutmix_pastes_a_box_and_mixes_labels_by_area() -> None:
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=16, w=16).output(layout="CHW"),
        dataio.slot("label").passthrough(),
        dataio.batch(2),
        bt.cutmix(alpha=1.0, label="label", num_classes=2),
    )
    records = [{"image": png(16, 16, 1), "label": 0}, {"image": png(16, 16, 2), "label": 1}]
    (plain,) = rows(dataio.pipeline(*pipe.slots, dataio.batch(2)).bind(records).run())
    (batch,) = rows(pipe.bind(records).run(seed=5))
    x = plain["image"]
    changed = np.any(batch["image"] != x, axis=1)  # [B, H, W] pixels taken from another row
    for row in range(2):
        source = 1 - row if changed[row].any() else row
        np.testing.assert_array_equal(
            batch["image"][row][:, changed[row]], x[source][:, changed[row]]
        )
        area = changed[row].mean()
        own, other = np.eye(2)[row], np.eye(2)[1 - row]
        if changed[row].any():
            np.testing.assert_allclose(
                batch["label"][row], (1 - area) * own + area * other, atol=1e-6
            )


def test_batch_transforms_precede_batch_maps_and_name_real_slots() -> None:
    with pytest.raises(dataio.PlanError, match="must precede Python batch maps"):
        dataio.pipeline(
            dataio.slot("x").decode_numpy(), dataio.batch(2), dataio.map(len), bt.shuffle()
        )
    with pytest.raises(dataio.PlanError, match="lacks"):
        dataio.pipeline(dataio.slot("x").decode_numpy(), dataio.batch(2), bt.padding("y"))
    with pytest.raises(dataio.PlanError, match="after the shape stage"):
        dataio.pipeline(dataio.slot("x").decode_numpy(), bt.shuffle(), dataio.batch(2))


def test_batch_transforms_then_torch_and_arrow_outputs() -> None:
    import torch

    pipe = dataio.pipeline(
        dataio.slot("x").decode_numpy(),
        dataio.slot("label").passthrough(),
        dataio.batch(3),
        bt.padding("x"),
    )
    (batch,) = rows(pipe.bind(vector_records([1, 2, 3])).run("torch"))
    assert isinstance(batch["x"], torch.Tensor) and tuple(batch["x"].shape) == (3, 3)
    assert batch["x_mask"].dtype == torch.bool
    (record_batch,) = rows(pipe.bind(vector_records([1, 2, 3])).run("arrow"))
    assert record_batch.schema.names[:3] == ["x", "label", "x_mask"]


# -- custom ops ---------------------------------------------------------------------------------


def test_custom_op_runs_on_the_batch_and_its_version_enters_the_signature() -> None:
    def scale(column, factor):
        return column * factor

    v1 = dataio.custom_op(scale, version=1, factor=2.0)
    v2 = dataio.custom_op(scale, version=2, factor=2.0)
    pipe = dataio.pipeline(dataio.slot("x").decode_numpy().then(v1), dataio.batch(2))
    (batch,) = rows(pipe.bind(vector_records([2, 2])).run())
    np.testing.assert_array_equal(batch["x"], [[0, 2], [20, 22]])
    other = dataio.pipeline(dataio.slot("x").decode_numpy().then(v2), dataio.batch(2))
    assert pipe.signature() != other.signature()
    source = dataio.records([{"v": 1}]).map_records(
        dataio.custom_op(lambda r: r, name="ident", version=1)
    )
    later = dataio.records([{"v": 1}]).map_records(
        dataio.custom_op(lambda r: r, name="ident", version=2)
    )
    assert source.signature() != later.signature()


def test_custom_op_returning_the_wrong_length_is_a_clear_error() -> None:
    bad = dataio.custom_op(lambda column: column[:1], name="first_only")
    pipe = dataio.pipeline(dataio.slot("x").decode_numpy().then(bad), dataio.batch(2))
    with pytest.raises(
        dataio.ShapeMismatchError, match=r"first_only.*returned 1 rows for a batch of 2"
    ):
        rows(pipe.bind(vector_records([2, 2])).run())
    with pytest.raises(dataio.PlanError, match="name="):
        dataio.custom_op(lambda column: column)
    with pytest.raises(dataio.PlanError, match="cannot follow"):
        dataio.slot("x").decode_numpy().then(bad, t.to_dtype("float32"))
