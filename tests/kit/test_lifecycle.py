from __future__ import annotations

import asyncio

import pytest

from daimon.kit.lifecycle import AsyncClosing, SetupOnEnter, serve_until_cancelled


class Closing(AsyncClosing):
    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def aclose(self) -> None:
        self.calls.append("aclose")


class SetUp(SetupOnEnter):
    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def setup(self) -> None:
        self.calls.append("setup")

    async def aclose(self) -> None:
        self.calls.append("aclose")


async def test_async_with_gives_the_object_and_closes_it() -> None:
    resource = Closing()
    async with resource as entered:
        assert entered is resource
        assert resource.calls == []
    assert resource.calls == ["aclose"]


async def test_closes_when_the_body_raises() -> None:
    resource = SetUp()
    with pytest.raises(RuntimeError, match="boom"):
        async with resource:
            raise RuntimeError("boom")
    assert resource.calls == ["setup", "aclose"]


async def test_setup_runs_on_entry() -> None:
    resource = SetUp()
    async with resource as entered:
        assert entered is resource
        assert resource.calls == ["setup"]
    assert resource.calls == ["setup", "aclose"]


def test_slotted_subclasses_stay_slotted() -> None:
    assert not hasattr(Closing(), "__dict__")
    assert not hasattr(SetUp(), "__dict__")


async def test_a_subclass_without_aclose_says_so() -> None:
    class Bare(AsyncClosing):
        pass

    with pytest.raises(NotImplementedError):
        async with Bare():
            pass


class _Server:
    """Stands in for ``uvicorn.Server``: serves until ``should_exit``, then drains."""

    def __init__(self) -> None:
        self.should_exit = False
        self.started = asyncio.Event()
        self.drained = False

    async def serve(self) -> None:
        self.started.set()
        while not self.should_exit:  # noqa: ASYNC110 - uvicorn polls should_exit like this
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)  # requests in flight finish
        self.drained = True


async def test_serve_until_cancelled_shuts_down_before_the_cancel_goes_on() -> None:
    server = _Server()
    task = asyncio.create_task(serve_until_cancelled(server))
    await server.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert server.should_exit and server.drained


async def test_serve_until_cancelled_returns_when_the_server_stops() -> None:
    server = _Server()
    server.should_exit = True
    await serve_until_cancelled(server)
    assert server.drained
