"""``python -m daimon.cli``: the ``daimon`` command."""

from __future__ import annotations

import sys

from daimon.cli import main

__all__ = ()

if __name__ == "__main__":
    sys.exit(main())
