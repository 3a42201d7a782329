"""Reducers: how a graph merges a node's update of one state key into the state."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

__all__ = ("Reducer", "append", "merge")

Reducer: TypeAlias = Callable[[Any, Any], Any]
"""``(current, update) -> new``; ``current`` is ``None`` when the key is not set yet.

Updates of one superstep are folded in the order the nodes were scheduled, never in the order
they finished, so a run is deterministic.
"""


def append(current: Any, update: Any) -> list[Any]:
    """Add to a list: a list or tuple update adds each item, anything else adds itself."""
    items = list(current) if current is not None else []
    if isinstance(update, (list, tuple)):
        items.extend(update)
    else:
        items.append(update)
    return items


def merge(current: Any, update: Any) -> dict[str, Any]:
    """Merge a mapping update into a mapping, key by key (the update wins)."""
    if not isinstance(update, Mapping):
        raise TypeError(f"the merge reducer needs a mapping update, got {type(update).__name__}")
    return {**(current if current is not None else {}), **update}
