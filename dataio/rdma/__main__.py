"""``python -m dataio.rdma``: print the RDMA self-diagnostic; ``--build`` builds the shim first.

``--build`` compiles the libfabric shim into the cache (for example while building a
container image) and fails with the reason when it cannot; ``--json`` prints
:func:`dataio.rdma.diagnose` as JSON instead of its summary lines.
"""

from __future__ import annotations

import json
import sys

from dataio.exceptions import TransportError
from dataio.rdma._loader import shim_or_raise
from dataio.rdma._probe import diagnose


def main(argv: list[str] | None = None) -> int:
    """Run the diagnostic; return 1 when ``--build`` could not build the shim."""
    args = sys.argv[1:] if argv is None else argv
    if "--build" in args:
        try:
            print(f"shim: {shim_or_raise().path}")
        except TransportError as exc:
            print(exc, file=sys.stderr)
            return 1
    report = diagnose()
    print(json.dumps(report, indent=2) if "--json" in args else "\n".join(report["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
