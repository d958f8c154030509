"""Progress bars: forced on, off outside a terminal, the note without tqdm, and the bars
of a loader pass, a download, a collect and make_jpegs."""

from __future__ import annotations

import io
import logging
import re
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers.object_servers import RangeServer

import dataio
from dataio import progress
from dataio.exceptions import PlanError


class Terminal(io.StringIO):
    """A captured stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def as_terminal(monkeypatch: pytest.MonkeyPatch) -> Terminal:
    """stderr replaced by a terminal whose text the test reads (called in the test body:
    pytest's capture resets sys.stderr between a fixture's setup and the test)."""
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


@pytest.fixture
def no_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    """tqdm hidden: its import raises ImportError; the once-per-process note is re-armed."""
    for name in [m for m in sys.modules if m == "tqdm" or m.startswith("tqdm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.std", None)
    monkeypatch.setattr(progress, "_noted", False)


def last_line(text: str) -> str:
    """What a terminal shows last: tqdm redraws its line after carriage returns."""
    return re.split(r"[\r\n]", text.strip())[-1]


def numbers(n: int) -> list[dict[str, object]]:
    return [{"x": i, "key": f"k{i}"} for i in range(n)]


PLAIN = dataio.pipeline(dataio.slot("x").passthrough(), dataio.batch(4))


def test_forced_bar_writes_counts_to_the_given_stream() -> None:
    out = io.StringIO()
    with progress.bar(total=5, desc="work", unit="item", enabled=True, file=out) as shown:
        assert shown.on
        for _ in range(5):
            shown.update()
    line = last_line(out.getvalue())
    assert line.startswith("work: 100%") and "5/5" in line and "item/s" in line


def test_iterate_counts_weights_and_yields_every_item(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = as_terminal(monkeypatch)
    items = [b"a" * 10, b"b" * 30]
    got = list(progress.iterate(items, total=40, desc="bytes", unit="B", weight=len))
    assert got == items
    line = last_line(terminal.getvalue())
    assert line.startswith("bytes: 100%") and "40.0/40.0" in line, line
    assert list(progress.iterate(items, desc="off", enabled=False)) == items


def test_auto_is_off_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    captured = io.StringIO()  # a redirect to a file or a log collector
    monkeypatch.setattr(sys, "stderr", captured)
    assert progress.resolve(None) is False and progress.resolve("auto") is False
    shown = progress.bar(total=3, desc="quiet")
    assert not shown.on
    shown.update(3)
    shown.close()
    assert captured.getvalue() == ""


def test_auto_is_on_in_a_terminal_and_in_a_notebook_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    as_terminal(monkeypatch)
    assert progress.resolve(None) is True
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress.resolve(None) is False
    shell = types.SimpleNamespace(kernel=object())  # what ipykernel's shell carries
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: shell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", fake)
    assert progress.resolve(None) is True
    shell.kernel = None  # a terminal IPython without a kernel, its stderr redirected
    assert progress.resolve(None) is False


def test_options_are_checked() -> None:
    assert progress.resolve(True) is True and progress.resolve(False) is False
    with pytest.raises(PlanError, match="progress must be True, False, None or 'auto'"):
        progress.resolve("yes")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="progress must be"):
        PLAIN.bind(numbers(4)).run(progress=1)  # type: ignore[arg-type]


def test_run_progress_shows_batches_samples_per_second_and_skipped_rows(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    records = numbers(10)
    records[3] = {"image": b"", "key": "bad3"}  # no "x": a row error, skipped
    records[7] = {"key": "bad7"}
    caplog.set_level(logging.DEBUG)
    with PLAIN.bind(records).run(on_failure="skip", progress=True) as loader:
        got = [int(v) for batch in loader for v in batch["x"]]
        first = capsys.readouterr().err
        assert list(loader)  # a second pass: a second bar
        second = capsys.readouterr().err
    assert got == [0, 1, 2, 4, 5, 6, 8, 9]
    line = last_line(first)
    assert line.startswith("epoch 0: 100%") and "3/3" in line and "batch/s" in line
    rate = re.search(r"([\d,]+) samples/s, skipped 2", line)
    assert rate is not None and int(rate.group(1).replace(",", "")) > 0
    assert last_line(second).startswith("epoch 1: 100%")
    assert not [r for r in caplog.records if "samples/s" in r.getMessage()]  # never a log


def test_run_without_progress_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    # pytest's capture is no terminal: the default ("auto") stays off
    with PLAIN.bind(numbers(8)).run() as loader:
        assert sum(len(b) for b in loader) == 8
    assert capsys.readouterr().err == ""


def test_run_progress_unknown_length_counts_batches(capsys: pytest.CaptureFixture[str]) -> None:
    with PLAIN.bind(dataio.from_iterator(iter(numbers(9)))).run(progress=True) as loader:
        assert sum(len(b) for b in loader) == 9
    line = last_line(capsys.readouterr().err)
    assert line.startswith("epoch 0: 3batch") or line.startswith("epoch 0: 3 batch"), line


def test_an_abandoned_pass_closes_its_bar(capsys: pytest.CaptureFixture[str]) -> None:
    with PLAIN.bind(numbers(40)).run(progress=True) as loader:
        for _ in loader:
            break
        first = capsys.readouterr().err
        assert "epoch 0" in first and "1/10" in last_line(first)
        assert sum(len(b) for b in loader) == 40
    assert last_line(capsys.readouterr().err).startswith("epoch 1: 100%")


def test_without_tqdm_a_one_line_note_once_and_loading_goes_on(
    no_tqdm: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ImportError):
        import tqdm  # noqa: F401
    shown = progress.bar(total=2, enabled=True)
    assert not shown.on
    with PLAIN.bind(numbers(8)).run(progress=True) as loader:
        assert sum(len(b) for b in loader) == 8
    err = capsys.readouterr().err
    assert err == progress.NOTE and err.count("\n") == 1
    assert "pip install tqdm" in err


def test_without_tqdm_and_progress_off_no_note(
    no_tqdm: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with PLAIN.bind(numbers(4)).run(progress=False) as loader:
        assert list(loader)
    assert capsys.readouterr().err == ""


def test_large_download_shows_a_byte_bar_in_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = as_terminal(monkeypatch)
    monkeypatch.setattr(progress, "DELAY", 0.0)
    data = np.random.default_rng(0).integers(0, 256, 6 << 20, dtype=np.uint8).tobytes()
    server = RangeServer()
    try:
        server.objects["/objects/big.bin"] = data
        server.objects["/objects/small.bin"] = data[:1000]
        assert dataio.read(server.url + "/objects/small.bin") == data[:1000]
        assert terminal.getvalue() == ""  # a small body: no bar
        assert dataio.read(server.url + "/objects/big.bin") == data
    finally:
        server.kill()
    line = last_line(terminal.getvalue())
    assert line.startswith("download big.bin: 100%"), line
    assert "6.00M/6.00M" in line


def test_collect_shows_rows_in_a_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    terminal = as_terminal(monkeypatch)
    monkeypatch.setattr(progress, "DELAY", 0.0)
    import pyarrow.parquet as pq

    for i in range(3):
        pq.write_table(
            pa.table({"v": np.arange(i * 100, i * 100 + 100)}), tmp_path / f"{i}.parquet"
        )
    table = dataio.scan_parquet(str(tmp_path / "*.parquet")).collect()
    assert table.column("v").to_pylist() == list(range(300))
    line = last_line(terminal.getvalue())
    assert line.startswith("collect: 300row") or line.startswith("collect: 300 row"), line


def test_make_jpegs_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = dataio.testing.make_jpegs(tmp_path, 3, min_side=16, max_side=24, progress=True)
    assert len(paths) == 3 and all(p.exists() for p in paths)
    line = last_line(capsys.readouterr().err)
    assert line.startswith("make_jpegs: 100%") and "3/3" in line and "img/s" in line


def test_pass_bar_is_none_when_off() -> None:
    assert progress.pass_bar(False, total=3, epoch=0) is None
