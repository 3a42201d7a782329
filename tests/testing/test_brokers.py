"""daimon.testing.brokers helpers (the conformance suite itself runs in tests/distributed)."""

from __future__ import annotations

import pytest

from daimon.core.errors import DaimonError
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.testing.brokers import broker_handles, sample_task


class _FailsToClose(MemoryBroker):
    async def aclose(self) -> None:
        await super().aclose()
        raise ConnectionError("the service went away")


async def test_broker_handles_closes_every_handle_when_one_fails_to_close() -> None:
    shared = MemoryBroker()
    kinds = iter([_FailsToClose, MemoryBroker])
    opened: list[MemoryBroker] = []

    def open_handle(**options: float) -> MemoryBroker:
        handle = next(kinds)(_queue=shared._queue, **options)
        opened.append(handle)
        return handle

    with pytest.raises(ConnectionError, match="went away"):
        async with broker_handles(open_handle) as make:
            await make()
            await make(lease=5.0)
    assert len(opened) == 2
    with pytest.raises(DaimonError, match="closed"):
        await opened[1].submit(sample_task())
