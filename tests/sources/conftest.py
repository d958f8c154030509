"""The IO tests' object servers (``tests/io/conftest.py``) for the sources' tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_io_conftest", Path(__file__).parent.parent / "io" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_io = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_io)

ACCESS_KEY, SECRET_KEY = _io.ACCESS_KEY, _io.SECRET_KEY
moto, _bucket, s3 = _io.moto, _io._bucket, _io.s3
http_server, http = _io.http_server, _io.http
gcs_emulator, gs = _io.gcs_emulator, _io.gs
azurite, az = _io.azurite, _io.az
