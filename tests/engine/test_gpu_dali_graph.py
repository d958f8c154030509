"""The DALI backend's GPU pipeline (``device="cuda:N"``), defined on the CPU.

Building a GPU pipeline needs a GPU, but defining one does not: DALI checks every
operator's arguments against its schema, and the device each operator runs on, when the
graph is defined. So the graph ``run("torch", backend="dali", device="cuda:0")`` would
build is checked here, on any host: nvJPEG (``mixed``) asked for libjpeg-turbo's chroma
upsampling, everything after it on the GPU, every DALI input fed by a name the per-row
step provides. ``make gpu-check`` runs the built pipeline (tests/engine/test_dali.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dataio
from dataio.engine import dali
from dataio.engine.lower import image_spec
from dataio.testing import photo_like

pytest.importorskip("nvidia.dali", reason="DALI is a test extra")

CHAINS = {
    "imagenet": dataio.slot("image").decode_image().resize_short(64).center_crop(56)
    .random_flip().normalize("imagenet"),
    "float16": dataio.slot("image").decode_image().resize(h=40, w=48)
    .normalize("imagenet").output(dtype="float16", layout="CHW"),
    "gray-uint8": dataio.slot("image").decode_image(mode="gray").center_crop(32),
    "decode-only": dataio.slot("image").decode_image(),
}  # fmt: skip


def graph(chain: dataio.Slot, device: str) -> tuple[Any, dali.DaliChain]:
    pipe = dataio.pipeline(chain, dataio.batch(4))
    slot = pipe.slots[0]
    dtype = dali._check_slot(slot)
    spec = image_spec(slot)
    found = dali.DaliChain(spec, spec.dtype, dtype, dali.device_index(device))
    defined = dali._define(found, 4)
    defined._build_graph()  # DALI's own graph construction: no backend, no GPU
    return defined, found


def ops(defined: Any) -> list[tuple[str, str, dict[str, Any]]]:
    return [(op._op.schema.Name(), op._op.device, dict(op._op._init_args)) for op in defined._ops]


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_the_gpu_graph_decodes_with_nvjpeg_and_runs_on_the_gpu(name: str) -> None:
    defined, _ = graph(CHAINS[name], "cuda:0")
    found = ops(defined)
    decoders = [(device, args) for op, device, args in found if op == "decoders__Image"]
    assert decoders == [("mixed", decoders[0][1])]
    assert decoders[0][1]["jpeg_fancy_upsampling"] is True  # libjpeg-turbo's upsampling
    assert decoders[0][1]["adjust_orientation"] is False
    for op, device, _ in found:
        if op == "ExternalSource":
            assert device == "cpu"  # fed from host memory, as DALI argument inputs must be
        elif op != "decoders__Image":
            assert device == "gpu", (op, device)
    assert [out.device for out in defined._graph_outputs] == ["gpu"]
    assert defined.device_id == 0


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_the_cpu_graph_stays_on_the_cpu(name: str) -> None:
    defined, _ = graph(CHAINS[name], "cpu")
    found = ops(defined)
    assert {device for _, device, _ in found} == {"cpu"}
    decoder = next(args for op, _, args in found if op == "decoders__Image")
    assert "jpeg_fancy_upsampling" not in decoder  # a mixed-backend option
    assert defined.device_id is None


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_each_dali_input_is_fed_by_the_row_step(name: str, device: str) -> None:
    """feed_input names the external sources: the per-row step must give exactly those."""
    defined, chain = graph(CHAINS[name], device)
    sources = {op.name for op in defined._ops if op._op.schema.Name() == "ExternalSource"}
    image = photo_like(72, 64, np.random.default_rng(0))
    from io import BytesIO

    from PIL import Image

    buffer = BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG")
    feeds, size = dali._prepare(chain)(buffer.getvalue(), np.random.default_rng(1), None)
    assert set(feeds) == sources and size == (64, 72)


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_device_strings_pick_the_gpu(device: str) -> None:
    assert dali.device_index(device) == (0 if device == "cuda" else 1)
    with pytest.raises(dataio.PlanError, match="'cpu' or 'cuda:N'"):
        dali.device_index("mps")
