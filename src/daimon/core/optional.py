"""Import an optional library, or say which extra installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from daimon.core.errors import MissingDependencyError

__all__ = ("require",)


def require(module: str, *, extra: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingDependencyError` naming the extra to install.

    The :class:`ImportError` that caused it is kept as ``__cause__``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(module, extra) from exc
