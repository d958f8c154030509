"""``python -m dataio``: print the capability report of this host."""

from __future__ import annotations

import json
import sys

from dataio._capabilities import format_report, report


def main(argv: list[str] | None = None) -> int:
    """Print the report; ``--json`` prints it as JSON."""
    args = sys.argv[1:] if argv is None else argv
    info = report()
    print(json.dumps(info, indent=2) if "--json" in args else format_report(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
