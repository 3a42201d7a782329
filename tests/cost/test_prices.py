"""The shipped list prices, as a price table."""

from __future__ import annotations

from daimon.core import Usage
from daimon.cost import ModelPrice, PriceTable, builtin_prices
from daimon.cost._prices import AS_OF, PRICES


def test_builtin_prices_cover_the_providers_and_say_when_they_were_read() -> None:
    table = builtin_prices()
    assert table.as_of
    mini = table.price("openai:gpt-4o-mini-2024-07-18")
    assert mini is not None and 0 < mini.input < mini.output
    assert table.price("anthropic:claude-sonnet-4-5") is not None
    assert table.cost("gpt-4o-mini", Usage(input_tokens=1_000_000)) == mini.input


def test_the_shipped_prices_price_dated_snapshots_by_their_entry() -> None:
    table = PriceTable(
        {k: ModelPrice(input=i, output=o, cached_input=c) for k, (i, o, c) in PRICES.items()},
        as_of=AS_OF,
    )
    assert table.price("gpt-4o-mini-2024-07-18") == table.price("gpt-4o-mini")
    assert table.price("claude-sonnet-4-5-20250929") == table.price("claude-sonnet-4-5")
    assert table.price("gpt-5.4-mini") != table.price("gpt-5")
    assert table.price("claude-opus-4-9") is None


def test_cache_writes_cost_a_quarter_more_than_input_where_billed() -> None:
    """Claude (Anthropic, Bedrock) and OpenAI's GPT-5.6 family bill writes at 1.25x input."""
    table = builtin_prices()
    billed = (
        "claude-sonnet-4-5",
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "gpt-5.6-sol",
        "gpt-5.6-terra",
        "openai:gpt-5.6-luna",
    )
    for model_id in billed:
        price = table.price(model_id)
        assert price is not None and price.cache_write == price.input * 1.25, model_id
    for model_id in ("gpt-5.5", "gpt-4o", "amazon.nova-pro-v1:0"):  # no fee of their own
        price = table.price(model_id)
        assert price is not None and price.cache_write is None, model_id
