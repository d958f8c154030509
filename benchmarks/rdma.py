"""RDMA transport throughput on loopback: dataio.rdma over two providers vs a plain TCP copy.

For each transfer size, one table row per way of moving the bytes, in GB/s (median of
interleaved rounds: the ways alternate round by round, so load that comes and goes
slows all of them alike). Run from the repository root::

    .venv/bin/python benchmarks/rdma.py [--sizes 1M,16M,256M,1G] [--rounds 3]
        [--settings 256K/4,1M/8,4M/8,16M/4] [--providers "tcp;ofi_rxm,sockets"]

* ``tcp socket``: the baseline, the same bytes through one plain TCP connection on
  127.0.0.1 (``sendall`` from a helper thread, ``recv_into`` a preallocated buffer);
  "read" moves them server to client, "write" client to server;
* ``<provider> <chunk>/<inflight>``: ``rdma.read_into`` / ``rdma.write`` between a
  client and a server in this process, one transfer split into ``chunk_size`` segments
  with up to ``max_inflight`` posted at once.

On loopback both providers are software (sockets under the hood), so this measures
dataio's pipelining and the providers' overheads against the kernel's own copy, not
RDMA hardware. The first pass of each way is a warm-up (connection set-up, page faults
in fresh buffers); every way is checked byte for byte once.
"""

from __future__ import annotations

import argparse
import queue
import socket
import threading
import time
from collections.abc import Callable

import numpy as np
from _common import format_table, load_average, machine_lines, median

import dataio.rdma as rdma

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``"256K"`` -> 262144."""
    text = text.strip().upper()
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def label(n: int) -> str:
    """262144 -> ``"256K"``."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


class SocketCopy:
    """A TCP connection on 127.0.0.1 and a helper thread at its far end."""

    def __init__(self, src: np.ndarray, dst: np.ndarray) -> None:
        self.src, self.dst = src, dst
        listener = socket.create_server(("127.0.0.1", 0))
        self.near = socket.create_connection(listener.getsockname())
        self.far, _ = listener.accept()
        listener.close()
        self.jobs: queue.Queue[tuple[str, int] | None] = queue.Queue()
        self.done: queue.Queue[None] = queue.Queue()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            op, size = job
            if op == "read":
                self.far.sendall(memoryview(self.src)[:size])
            else:
                _recv_into(self.far, memoryview(self.dst)[:size])
            self.done.put(None)

    def read(self, size: int) -> None:
        self.jobs.put(("read", size))
        _recv_into(self.near, memoryview(self.dst)[:size])
        self.done.get()

    def write(self, size: int) -> None:
        self.jobs.put(("write", size))
        self.near.sendall(memoryview(self.src)[:size])
        self.done.get()

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join()
        self.near.close()
        self.far.close()


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    while view.nbytes:
        got = sock.recv_into(view)
        view = view[got:]


class Way:
    """One way of moving ``size`` bytes in one direction, and its timings per size."""

    def __init__(
        self, name: str, op: str, run: Callable[[int], None], check: Callable[[int], bool]
    ):
        self.name, self.op, self.run, self.check = name, op, run, check
        self.seconds: dict[int, list[float]] = {}

    def measure(self, size: int, *, record: bool) -> None:
        start = time.perf_counter()
        self.run(size)
        elapsed = time.perf_counter() - start
        if not record:
            if not self.check(size):
                raise RuntimeError(f"{self.name} {self.op} of {size} bytes delivered wrong bytes")
            return
        self.seconds.setdefault(size, []).append(elapsed)

    def rate(self, size: int) -> float:
        return size / median(self.seconds[size]) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,16M,256M,1G")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settings", default="256K/4,1M/8,4M/8,16M/4")
    parser.add_argument("--providers", default="tcp;ofi_rxm,sockets")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    settings = [tuple(parse_size(p) for p in s.split("/")) for s in args.settings.split(",")]
    providers = args.providers.split(",")
    biggest = max(sizes)

    print("\n".join(machine_lines(["numpy", "cffi"])))
    info = rdma.info()
    print(f"libfabric: {info['version']} at {info['library']}; providers {providers}")
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, biggest, dtype=np.uint8)
    dst = np.zeros(biggest, dtype=np.uint8)

    copy = SocketCopy(src, dst)
    ways = [
        Way("tcp socket", "read", copy.read, lambda n: bool(np.array_equal(dst[:n], src[:n]))),
        Way("tcp socket", "write", copy.write, lambda n: bool(np.array_equal(dst[:n], src[:n]))),
    ]
    servers, clients = [], []
    for provider in providers:
        server = rdma.serve(bind="127.0.0.1:0", buffer_size=biggest, provider=provider)
        servers.append(server)
        served = np.frombuffer(server.buffer, dtype=np.uint8)
        served[:] = src
        for chunk, inflight in settings:
            client = rdma.connect(server.local_addr, chunk_size=chunk, max_inflight=inflight)
            clients.append(client)
            name = f"{provider} {label(chunk)}/{inflight}"

            def pull(n: int, c: rdma.Client = client) -> None:
                rdma.read_into(c, memoryview(dst)[:n], offset=0)

            def push(n: int, c: rdma.Client = client) -> None:
                rdma.write(c, offset=0, data=memoryview(src)[:n])

            def landed(n: int, view: np.ndarray = served) -> bool:
                return bool(np.array_equal(view[:n], src[:n]))

            ways.append(Way(name, "read", pull, lambda n: bool(np.array_equal(dst[:n], src[:n]))))
            ways.append(Way(name, "write", push, landed))
        del served

    try:
        for size in sizes:
            started = time.perf_counter()
            for way in ways:
                dst[:size] = 0
                way.measure(size, record=False)
            for r in range(args.rounds):
                shift = (r * 3) % len(ways)
                for way in [*ways[shift:], *ways[:shift]]:
                    way.measure(size, record=True)
            took = time.perf_counter() - started
            print(f"  {label(size)}: {args.rounds} rounds in {took:.1f} s", flush=True)
    finally:
        for client in clients:
            client.close()
        for server in servers:
            server.close()
        copy.close()

    headers = ["way", "op", *(label(s) for s in sizes), ""]
    rows = []
    for way in ways:
        rates = [way.rate(s) for s in sizes]
        base = next(w for w in ways if w.name == "tcp socket" and w.op == way.op)
        note = (
            "baseline"
            if way is base
            else f"x{rates[-1] / base.rate(sizes[-1]):.2f} at {label(sizes[-1])}"
        )
        rows.append([way.name, way.op, *(f"{r:.2f}" for r in rates), note])
    print()
    print("GB/s, median of interleaved rounds (higher is better)")
    print(format_table(headers, rows))
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
