"""``--limits`` and ``--limits-store``: shared rate limits for the model calls of served agents.

``--limits 'rpm=500,itpm=200000,otpm=50000,concurrent=20,period=60'`` gives any subset of:
requests (``rpm``), input tokens (``itpm``) and output tokens (``otpm``) per period, calls at
once (``concurrent``), the period in seconds (``period``, 60 by default) and the longest a call
waits for its turn (``max_wait``, 60 s). ``--limits-store redis://...`` or ``postgresql://...``
keeps them where every worker and replica shares them; by default they hold in this process.
An agent file says the same in a ``rate_limits`` table (``store`` names the store).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from daimon.core.errors import BuilderError
from daimon.core.limits import RateLimits

if TYPE_CHECKING:
    from daimon.core.protocols import Promptable
    from daimon.limits import Limiter

__all__ = ("FIELDS", "apply_limits", "limiter_for", "parse_limits", "rate_limits")

FIELDS: Mapping[str, str] = {
    "rpm": "requests_per_minute",
    "itpm": "input_tokens_per_minute",
    "otpm": "output_tokens_per_minute",
    "concurrent": "concurrent",
    "period": "period",
    "max_wait": "max_wait",
}
"""The short names the options and agent files use -> :class:`RateLimits` fields."""

_SECONDS = frozenset({"period", "max_wait"})
_IN_PROCESS = frozenset({"", "memory"})


def parse_limits(text: str) -> RateLimits:
    """The limits ``name=value,...`` gives; :class:`BuilderError` naming the field if wrong."""
    values: dict[str, object] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, equals, value = (part.strip() for part in item.partition("="))
        if name in FIELDS and not equals:
            raise BuilderError(f"{name} needs a value: {name}=N")
        values[name] = value
    return rate_limits(values)


def rate_limits(values: Mapping[str, object]) -> RateLimits:
    """The limits of short-named ``values`` (numbers or their text), checked field by field."""
    if not values:
        raise BuilderError(f"no limits given: use any of {', '.join(FIELDS)} (rpm=500,...)")
    fields: dict[str, float | int] = {}
    for name, value in values.items():
        field = FIELDS.get(name)
        if field is None:
            raise BuilderError(f"unknown field {name!r} (known fields: {', '.join(FIELDS)})")
        fields[field] = _seconds(name, value) if name in _SECONDS else _count(name, value)
    return RateLimits(**fields)  # type: ignore[arg-type]  # each field checked above


def _count(name: str, value: object) -> int:
    number = value
    if isinstance(value, str):
        number = int(value) if value.isdigit() else None
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise BuilderError(f"{name} must be a positive whole number, got {value!r}")
    return number


def _seconds(name: str, value: object) -> float:
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if (
        isinstance(number, bool)
        or not isinstance(number, int | float)
        or not (math.isfinite(number) and number > 0)
    ):
        raise BuilderError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(number)


def limiter_for(limits: RateLimits, store: str | None) -> Limiter:
    """A limiter of ``limits`` kept at ``store`` (a URL), or in this process (``None``)."""
    from daimon.limits import Limiter

    if store is None or store.partition(":")[0] in _IN_PROCESS:
        return Limiter(limits)
    try:
        return Limiter.from_url(store, limits)
    except ImportError as exc:  # the store's module or its client library is missing
        raise BuilderError(f"cannot keep limits at {store!r}: {exc}") from None


def apply_limits(served: Promptable, limiter: Limiter) -> Promptable:
    """``served`` with its model calls under ``limiter`` (an agent; others cannot say how)."""
    from daimon.agent import Agent

    if not isinstance(served, Agent):
        raise BuilderError(
            f"--limits applies to agents, not a {type(served).__name__}: give its agents "
            "limits=Limiter(...) in code"
        )
    return served.replace(limits=limiter)
