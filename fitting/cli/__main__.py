"""``python -m fitting.cli``: the same as ``mnmt-fit``."""

from __future__ import annotations

import sys

from fitting.cli.entry import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
