"""List prices of OpenAI and Anthropic models, as plain data.

Each entry is ``(input, output, cached_input)`` in dollars per million tokens; ``cached_input``
is the price of input tokens read from the provider's prompt cache (``None``: same as input).
Model ids match by prefix in :class:`daimon.cost.PriceTable` (``gpt-4o-mini`` prices
``gpt-4o-mini-2024-07-18``), so dated snapshots need no entry of their own.

Prices change: these are standard (not batch, not priority) rates for prompts under any
long-context threshold, compiled on :data:`AS_OF` from the providers' published price lists and
public trackers of them, not read from the live pages. Check them before billing anyone.

Not priced: Anthropic cache writes (billed at 1.25x input for the 5-minute cache; counted here at
the input price) and OpenAI reasoning tokens (billed as output, and reported as output by the
API, so already priced).
"""

from __future__ import annotations

__all__ = ("AS_OF", "PRICES", "SOURCE")

AS_OF = "2026-11-30"
"""When the prices below were read."""

SOURCE = (
    "openai.com/api/pricing and platform.claude.com/docs/en/about-claude/pricing "
    "(standard tier, per million tokens)"
)
"""Where the prices come from."""

_Price = tuple[float, float, float | None]

_OPENAI: dict[str, _Price] = {
    "gpt-5.5": (5.00, 30.00, 0.50),
    "gpt-5.4": (2.50, 15.00, 0.25),
    "gpt-5.4-mini": (0.75, 4.50, 0.075),
    "gpt-5.4-nano": (0.20, 1.25, 0.02),
    "gpt-5.2": (1.75, 14.00, 0.175),
    "gpt-5.1": (1.25, 10.00, 0.125),
    "gpt-5": (1.25, 10.00, 0.125),
    "gpt-5-mini": (0.25, 2.00, 0.025),
    "gpt-5-nano": (0.05, 0.40, 0.005),
    "gpt-4.1": (2.00, 8.00, 0.50),
    "gpt-4.1-mini": (0.40, 1.60, 0.10),
    "gpt-4.1-nano": (0.10, 0.40, 0.025),
    "gpt-4o": (2.50, 10.00, 1.25),
    "gpt-4o-mini": (0.15, 0.60, 0.075),
    "o3": (2.00, 8.00, 0.50),
    "o3-mini": (1.10, 4.40, 0.55),
    "o4-mini": (1.10, 4.40, 0.275),
    "o1": (15.00, 60.00, 7.50),
    "text-embedding-3-small": (0.02, 0.0, None),
    "text-embedding-3-large": (0.13, 0.0, None),
    "text-embedding-ada-002": (0.10, 0.0, None),
}

# Bare family ids ("claude-opus-4") are left out on purpose: as prefixes they would price every
# later 4.x release at the old Opus 4 rate.
_ANTHROPIC: dict[str, _Price] = {
    "claude-opus-4-8": (5.00, 25.00, 0.50),
    "claude-opus-4-7": (5.00, 25.00, 0.50),
    "claude-opus-4-6": (5.00, 25.00, 0.50),
    "claude-opus-4-5": (5.00, 25.00, 0.50),
    "claude-opus-4-1": (15.00, 75.00, 1.50),
    "claude-opus-4-0": (15.00, 75.00, 1.50),
    "claude-opus-4-20250514": (15.00, 75.00, 1.50),
    "claude-sonnet-4-6": (3.00, 15.00, 0.30),
    "claude-sonnet-4-5": (3.00, 15.00, 0.30),
    "claude-sonnet-4-0": (3.00, 15.00, 0.30),
    "claude-sonnet-4-20250514": (3.00, 15.00, 0.30),
    "claude-3-7-sonnet": (3.00, 15.00, 0.30),
    "claude-haiku-4-5": (1.00, 5.00, 0.10),
    "claude-3-5-haiku": (0.80, 4.00, 0.08),
    "claude-3-haiku": (0.25, 1.25, 0.03),
}

PRICES: dict[str, tuple[float, float, float | None]] = {**_OPENAI, **_ANTHROPIC}
"""Model id (or id prefix) to ``(input, output, cached_input)`` dollars per million tokens."""
