"""``python -m cronbus``: the same command line as the ``cronbus`` script."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    main()
