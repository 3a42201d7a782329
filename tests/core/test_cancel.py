"""CancelToken: cooperative cancellation."""

from __future__ import annotations

import pytest

from daimon.core import CancelToken, RunCancelled


def test_fresh_token_is_not_cancelled() -> None:
    token = CancelToken()
    assert not token.cancelled
    assert token.reason is None
    token.raise_if_cancelled()  # no error


def test_cancel_runs_callbacks_once_and_is_idempotent() -> None:
    token = CancelToken()
    calls: list[str] = []
    token.on_cancel(lambda: calls.append("a"))
    token.on_cancel(lambda: calls.append("b"))
    token.cancel("stop")
    token.cancel("again")
    assert calls == ["a", "b"]
    assert token.cancelled
    assert token.reason == "stop"  # the first reason wins


def test_detach() -> None:
    token = CancelToken()
    calls: list[str] = []
    detach = token.on_cancel(lambda: calls.append("a"))
    token.on_cancel(lambda: calls.append("b"))
    detach()
    detach()  # detaching twice is harmless
    token.cancel()
    assert calls == ["b"]
    detach()  # and so is detaching after the cancel


def test_callback_added_after_cancel_runs_at_once() -> None:
    token = CancelToken()
    token.cancel()
    calls: list[str] = []
    detach = token.on_cancel(lambda: calls.append("late"))
    assert calls == ["late"]
    detach()


def test_raise_if_cancelled() -> None:
    token = CancelToken()
    token.cancel("user pressed stop")
    with pytest.raises(RunCancelled, match="operation cancelled: user pressed stop") as caught:
        token.raise_if_cancelled()
    assert caught.value.reason == "user pressed stop"
    bare = CancelToken()
    bare.cancel()
    with pytest.raises(RunCancelled, match=r"^operation cancelled$"):
        bare.raise_if_cancelled()


def test_a_failing_callback_does_not_stop_the_others() -> None:
    token = CancelToken()
    calls: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    token.on_cancel(boom)
    token.on_cancel(lambda: calls.append("after"))
    with pytest.raises(RuntimeError, match="boom"):
        token.cancel()
    assert calls == ["after"]
    assert token.cancelled


def test_several_failing_callbacks_raise_a_group() -> None:
    token = CancelToken()

    def boom() -> None:
        raise RuntimeError("boom")

    token.on_cancel(boom)
    token.on_cancel(boom)
    with pytest.raises(ExceptionGroup) as caught:
        token.cancel()
    assert len(caught.value.exceptions) == 2


async def test_cancel_interrupts_a_waiting_task() -> None:
    import asyncio

    token = CancelToken()
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    detach = token.on_cancel(lambda: waiter.cancel())
    asyncio.get_running_loop().call_soon(token.cancel, "stop")
    with pytest.raises(asyncio.CancelledError):
        await waiter
    detach()
    with pytest.raises(RunCancelled):
        token.raise_if_cancelled()
