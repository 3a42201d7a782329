"""The marker for fields added to a persisted type after its records were first written."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ("ADDED",)

ADDED: Mapping[str, Any] = MappingProxyType({"daimon_added": True})
"""Field metadata for a field added to a type after records of it were first written
(``field(default=..., metadata=ADDED)``): :mod:`daimon.core.codec` writes it only when it differs
from its default. A record that does not use the new field then reads back in a release that
does not know it (the decoder refuses unknown fields), so a rolling upgrade's older processes
still read what the newer ones wrote; the new release reads older records with the default."""
