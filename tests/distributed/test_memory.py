from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from daimon.core import BuilderError
from daimon.distributed import Broker, broker_from_url
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.testing.brokers import BrokerConformance


class TestMemoryBroker(BrokerConformance):
    @pytest.fixture
    async def make_broker(self) -> AsyncIterator[Any]:
        root = MemoryBroker()

        async def make(**options: Any) -> MemoryBroker:
            return root.handle(**options)

        yield make

    @pytest.fixture
    def outage(self) -> None:
        pytest.skip("the memory broker has no service to lose")


def test_is_a_core_broker() -> None:
    broker = MemoryBroker()
    assert isinstance(broker, Broker)
    core: Broker = broker  # checked by mypy too: the protocol holds statically
    assert core is broker


def test_from_url() -> None:
    broker = broker_from_url("memory://", lease=5.0, max_deliver=2)
    assert isinstance(broker, MemoryBroker)
    assert (broker.lease, broker.max_deliver) == (5.0, 2)


@pytest.mark.parametrize("options", [{"lease": 0}, {"max_deliver": 0}, {"max_deliver": 1.5}])
def test_bad_options_are_builder_errors(options: dict[str, Any]) -> None:
    with pytest.raises(BuilderError):
        MemoryBroker(**options)


def test_unknown_url_scheme() -> None:
    with pytest.raises(BuilderError, match="unknown broker URL"):
        broker_from_url("kafka://localhost")
