"""The public surface: pinned exports, docstrings, docs coverage, lazy heavy imports."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import dataio
from dataio import decoders, transforms

ROOT = Path(__file__).resolve().parents[1]

EXPECTED = [
    "AuthenticationError",
    "Batch",
    "BatchFailedError",
    "BoundPipeline",
    "CheckpointError",
    "DataLoader",
    "DataioError",
    "DecodeError",
    "DeviceError",
    "Expr",
    "FieldError",
    "FormatError",
    "GroupBy",
    "Hdf5File",
    "IndexedSource",
    "LazyFrame",
    "LimitError",
    "Loader",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "Pipeline",
    "PlanError",
    "QueryError",
    "SSEEvent",
    "SafetensorsFile",
    "ShapeMismatchError",
    "Slot",
    "Source",
    "Stream",
    "TensorView",
    "TransformError",
    "TransportError",
    "TransportTimeoutError",
    "__version__",
    "archive",
    "batch",
    "batch_transforms",
    "capabilities",
    "chain",
    "col",
    "collate",
    "cond",
    "configure_credentials",
    "configure_endpoint",
    "configure_transport",
    "count",
    "custom_op",
    "decoders",
    "delete",
    "exists",
    "fetch_into",
    "files",
    "from_callable",
    "from_iterable",
    "from_iterator",
    "from_sampler",
    "gds_available",
    "gds_info",
    "gds_open",
    "gds_read_into_tensor",
    "gds_register_buffer",
    "glob",
    "group_by",
    "head",
    "iter_tfrecord",
    "limits",
    "lit",
    "ls",
    "manifest",
    "map",
    "open_hdf5",
    "open_safetensors",
    "pipeline",
    "progress",
    "read",
    "read_feather",
    "read_hdf5",
    "read_image",
    "read_npz",
    "read_numpy",
    "read_parquet",
    "read_safetensors",
    "reader",
    "records",
    "scan",
    "scan_csv",
    "scan_feather",
    "scan_hdf5",
    "scan_json",
    "scan_npz",
    "scan_numpy",
    "scan_parquet",
    "scan_tfrecord",
    "show",
    "slot",
    "slots",
    "sql",
    "sql_context",
    "stream",
    "tensor_view",
    "testing",
    "transforms",
    "urls",
    "webdataset",
    "write",
    "write_safetensors",
    "write_webdataset_index",
    "writer",
]


def test_exports_are_pinned_and_sorted() -> None:
    assert dataio.__all__ == EXPECTED
    assert sorted(dataio.__all__) == dataio.__all__
    for name in dataio.__all__:
        assert getattr(dataio, name) is not None


def public_callables():
    for module in (
        dataio,
        decoders,
        transforms,
        dataio.testing,
        dataio.cond,
        dataio.batch_transforms,
        dataio.progress,
    ):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isfunction(value) or inspect.isclass(value):
                yield f"{module.__name__}.{name}", value


def test_every_public_callable_has_a_docstring_and_a_docs_entry() -> None:
    docs = (ROOT / "docs" / "api.md").read_text()
    for qualified, value in public_callables():
        assert inspect.getdoc(value), f"{qualified} has no docstring"
        short = qualified.removeprefix("dataio.")
        assert f"`{short}" in docs or f"`dataio.{short}" in docs, f"{qualified} not in docs/api.md"
    for method in (
        "decode_image",
        "resize",
        "resize_short",
        "center_crop",
        "random_crop",
        "random_resized_crop",
        "random_flip",
        "normalize",
        "output",
        "passthrough",
        "decode_audio",
        "decode_json",
        "decode_text",
        "decode_bytes",
        "decode_pt",
        "pad",
        "rotate90",
        "grayscale",
        "color_jitter",
        "to_dtype",
        "standardize",
        "fix_length",
        "gain",
        "active_when",
        "when",
        "otherwise",
    ):
        assert inspect.getdoc(getattr(dataio.Slot, method))
        assert f".{method}(" in docs, f"Slot.{method} not in docs/api.md"


def test_import_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, json, dataio;"
        "print(json.dumps([m for m in ('torch', 'PIL', 'datafusion', 'pyarrow', 'simplejpeg')"
        " if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_capability_report_runs_without_accelerators() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dataio", "--json"], capture_output=True, text=True, check=True
    )
    info = json.loads(out.stdout)
    assert info["dataio"] == dataio.__version__
    assert info["cpu_workers"] >= 1
    assert info["packages"]["numpy"]
    for name in ("cuda", "nvjpeg", "gds", "libfabric"):
        assert isinstance(info[name]["found"], bool)
        if not info[name]["found"]:
            assert info[name]["why"]
    text = subprocess.run(
        [sys.executable, "-m", "dataio"], capture_output=True, text=True, check=True
    ).stdout
    assert "cpu workers:" in text and "libfabric:" in text


def test_cpu_workers_follow_the_environment() -> None:
    code = "import dataio; print(dataio.capabilities()['cpu_workers'])"
    env = {**__import__("os").environ, "DATAIO_CPU_WORKERS": "3"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "3"
    env["DATAIO_CPU_WORKERS"] = "zero"
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "DATAIO_CPU_WORKERS must be a positive integer" in bad.stderr
