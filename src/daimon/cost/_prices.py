"""List prices of OpenAI, Anthropic, Gemini and Amazon Bedrock models, and :func:`builtin_prices`.

Each entry is ``(input, output, cached_input)`` in dollars per million tokens; ``cached_input``
is the price of input tokens read from the provider's prompt cache (``None``: same as input).
Model ids match by prefix in :class:`~daimon.cost.PriceTable` (``gpt-4o-mini`` prices
``gpt-4o-mini-2024-07-18``), so dated snapshots need no entry of their own.

Prices change: these are standard (not batch, not priority) rates for prompts under any
long-context threshold, compiled on :data:`AS_OF` from the providers' published price lists and
public trackers of them, not read from the live pages. Check them before billing anyone.

Cache writes (:data:`CACHE_WRITES`): Claude models, on Anthropic and on Bedrock, bill tokens
written to the 5-minute prompt cache at 1.25x the input price; the 1-hour cache (2x) is not told
apart and is priced as the 5-minute one. OpenAI's GPT-5.6 family (and, OpenAI says, later
families) bills cache writes at 1.25x the input price too, and reports them
(``cache_write_tokens``); earlier OpenAI models report them without a fee of their own. Other
models bill cache writes as plain input (Gemini caches implicitly and reports no writes). OpenAI
reasoning tokens are billed as output, and reported as output by the API, so already priced.

GPT-5.6 (Sol, Terra, Luna): the list prices OpenAI announced with the family, cached input at a
tenth of input.

Gemini (the Gemini API's paid tier; Vertex AI lists the same rates for these models): prices are
for prompts up to 200k tokens (the Pro models charge more above), text/image/video input, thinking
tokens billed as output (daimon reports them as output). Context-cache storage is not priced.

Bedrock: on-demand rates in us-east-1, keyed by Bedrock model id; cross-region inference profiles
(``us.``, ``eu.``, ``apac.``, ``global.``, ... before the model id) are priced as the model itself,
although AWS bills some geographic profiles of the newest models up to 10% more. Ollama models
run on your own hardware and have no entry: they cost nothing.
"""

from __future__ import annotations

from daimon.cost._table import ModelPrice, PriceTable

__all__ = ("AS_OF", "CACHE_WRITES", "PRICES", "SOURCE", "builtin_prices")

AS_OF = "2026-11-30"
"""When the prices below were read."""

SOURCE = (
    "openai.com/api/pricing, platform.claude.com/docs/en/about-claude/pricing, "
    "ai.google.dev/gemini-api/docs/pricing and aws.amazon.com/bedrock/pricing "
    "(standard tier, per million tokens)"
)
"""Where the prices come from."""

_Price = tuple[float, float, float | None]

_OPENAI: dict[str, _Price] = {
    "gpt-5.6-sol": (5.00, 30.00, 0.50),
    "gpt-5.6-terra": (2.50, 15.00, 0.25),
    "gpt-5.6-luna": (1.00, 6.00, 0.10),
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

# Gemini 2.5 Flash is a prefix of 2.5 Flash-Lite: each has its own entry, and the longer one wins.
_GEMINI: dict[str, _Price] = {
    "gemini-3.5-flash": (1.50, 9.00, 0.15),
    "gemini-3.1-pro": (2.00, 12.00, 0.20),
    "gemini-3.1-flash-lite": (0.25, 1.50, 0.025),
    "gemini-3-pro": (2.00, 12.00, 0.20),
    "gemini-3-flash": (0.50, 3.00, 0.05),
    "gemini-2.5-pro": (1.25, 10.00, 0.125),
    "gemini-2.5-flash": (0.30, 2.50, 0.03),
    "gemini-2.5-flash-lite": (0.10, 0.40, 0.01),
    "gemini-2.0-flash": (0.10, 0.40, 0.025),
    "gemini-2.0-flash-lite": (0.075, 0.30, None),
    "gemini-embedding-001": (0.15, 0.0, None),
}

# As for Anthropic, no bare family ids ("anthropic.claude-opus-4"): they would price later 4.x
# releases at the old rate.
_BEDROCK_MODELS: dict[str, _Price] = {
    "anthropic.claude-opus-4-6": (5.00, 25.00, 0.50),
    "anthropic.claude-opus-4-5": (5.00, 25.00, 0.50),
    "anthropic.claude-opus-4-1": (15.00, 75.00, 1.50),
    "anthropic.claude-opus-4-20250514": (15.00, 75.00, 1.50),
    "anthropic.claude-sonnet-4-6": (3.00, 15.00, 0.30),
    "anthropic.claude-sonnet-4-5": (3.00, 15.00, 0.30),
    "anthropic.claude-sonnet-4-20250514": (3.00, 15.00, 0.30),
    "anthropic.claude-3-7-sonnet": (3.00, 15.00, 0.30),
    "anthropic.claude-haiku-4-5": (1.00, 5.00, 0.10),
    "anthropic.claude-3-5-haiku": (0.80, 4.00, 0.08),
    "anthropic.claude-3-haiku": (0.25, 1.25, None),
    "amazon.nova-premier": (2.50, 12.50, None),
    "amazon.nova-pro": (0.80, 3.20, 0.20),
    "amazon.nova-lite": (0.06, 0.24, 0.015),
    "amazon.nova-micro": (0.035, 0.14, 0.00875),
    "meta.llama3-3-70b-instruct": (0.72, 0.72, None),
    "amazon.titan-embed-text-v2": (0.02, 0.0, None),
    "amazon.titan-embed-text-v1": (0.10, 0.0, None),
    "cohere.embed-english-v3": (0.10, 0.0, None),
    "cohere.embed-multilingual-v3": (0.10, 0.0, None),
}

_BEDROCK_PROFILES = ("us", "eu", "apac", "global", "jp", "au")
"""Prefixes of Bedrock's cross-region inference profiles (``us.anthropic.claude-...``)."""

_BEDROCK: dict[str, _Price] = {
    **_BEDROCK_MODELS,
    **{
        f"{profile}.{model}": price
        for profile in _BEDROCK_PROFILES
        for model, price in _BEDROCK_MODELS.items()
    },
}

PRICES: dict[str, tuple[float, float, float | None]] = {
    **_OPENAI,
    **_ANTHROPIC,
    **_GEMINI,
    **_BEDROCK,
}
"""Model id (or id prefix) to ``(input, output, cached_input)`` dollars per million tokens."""


_CACHE_WRITE_PREMIUM = 1.25
"""Cache writes as a multiple of the input price: Claude's 5-minute cache (Anthropic and Bedrock)
and OpenAI's GPT-5.6 family."""


def _bills_cache_writes(model: str) -> bool:
    return model.startswith(("claude-", "gpt-5.6")) or "anthropic.claude-" in model


CACHE_WRITES: dict[str, float] = {
    model: round(rates[0] * _CACHE_WRITE_PREMIUM, 6)
    for model, rates in PRICES.items()
    if _bills_cache_writes(model)
}
"""Model id (or id prefix) to dollars per million tokens written to the prompt cache; models left
out bill cache writes as input."""


def builtin_prices() -> PriceTable:
    """List prices of the providers' current models, as shipped with this daimon version.

    The table's ``as_of`` says when they were read; prices change, so check before billing.
    """
    table = {
        model: ModelPrice(
            input=rates[0],
            output=rates[1],
            cached_input=rates[2],
            cache_write=CACHE_WRITES.get(model),
        )
        for model, rates in PRICES.items()
    }
    return PriceTable(table, as_of=AS_OF)
