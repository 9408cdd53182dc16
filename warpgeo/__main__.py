"""``python -m warpgeo``: the same as the ``warpgeo`` command."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
