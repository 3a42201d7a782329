from __future__ import annotations

from daimon.core.chat import StopReason, Usage
from daimon.kit.sdk_support import (
    LoopClients,
    LoopClientsOwner,
    cache_exclusive_usage,
    stop_reason,
)

TABLE = {"stop": StopReason.END_TURN, "length": StopReason.MAX_TOKENS}


def test_stop_reason_maps_through_the_table() -> None:
    assert stop_reason(TABLE, "length", has_calls=False) is StopReason.MAX_TOKENS
    assert stop_reason(TABLE, "length", has_calls=True) is StopReason.MAX_TOKENS
    assert stop_reason(TABLE, "stop", has_calls=False) is StopReason.END_TURN


def test_unknown_or_missing_reasons_end_the_turn() -> None:
    assert stop_reason(TABLE, "whatever", has_calls=False) is StopReason.END_TURN
    assert stop_reason(TABLE, None, has_calls=False) is StopReason.END_TURN


def test_a_turn_with_calls_that_ended_normally_is_tool_use() -> None:
    assert stop_reason(TABLE, "stop", has_calls=True) is StopReason.TOOL_USE
    assert stop_reason(TABLE, None, has_calls=True) is StopReason.TOOL_USE


def test_cache_exclusive_usage_adds_cache_reads_and_writes_to_the_input() -> None:
    keys = {"input": "in", "output": "out", "read": "r", "written": "w"}
    usage = cache_exclusive_usage({"in": 10, "out": 5, "r": 100, "w": 200}, **keys)
    assert usage == Usage(
        input_tokens=310, output_tokens=5, cached_tokens=100, cache_write_tokens=200, requests=1
    )
    assert cache_exclusive_usage({"in": 3, "out": None}, **keys) == Usage(
        input_tokens=3, requests=1
    )
    assert cache_exclusive_usage(None, **keys) == Usage(requests=1)
    assert cache_exclusive_usage({}, **keys) == Usage(requests=1)


class _Client:
    def __init__(self) -> None:
        self.closed = 0

    async def close(self) -> None:
        self.closed += 1


class _Model(LoopClientsOwner):
    __slots__ = ("_clients",)

    def __init__(self, clients: LoopClients) -> None:
        self._clients = clients


async def test_loop_clients_owner_closes_the_client_it_built_once() -> None:
    built: list[_Client] = []

    def factory() -> _Client:
        built.append(_Client())
        return built[-1]

    async with _Model(LoopClients(factory)) as model:
        await model._clients.get()
    await model.aclose()  # idempotent
    assert [c.closed for c in built] == [1]


async def test_loop_clients_owner_never_closes_a_given_client() -> None:
    given = _Client()
    async with _Model(LoopClients(_Client, given)) as model:
        assert await model._clients.get() is given
    assert given.closed == 0
