"""Task brokers: each queues agent tasks on one service, behind its extra.

Every broker implements :class:`daimon.core.Broker` (also exported by :mod:`daimon.distributed`).
Importing this package stays cheap: each broker, and the library it needs, loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports

if TYPE_CHECKING:
    from daimon.distributed.brokers.grpc import GrpcBroker, GrpcBrokerServer
    from daimon.distributed.brokers.memory import MemoryBroker
    from daimon.distributed.brokers.nats import NatsBroker
    from daimon.distributed.brokers.postgres import PostgresBroker
    from daimon.distributed.brokers.pubsub import PubSubBroker
    from daimon.distributed.brokers.rabbitmq import RabbitMQBroker
    from daimon.distributed.brokers.redis import RedisBroker, RedisTaskStore
    from daimon.distributed.brokers.servicebus import ServiceBusBroker
    from daimon.distributed.brokers.sqs import SqsBroker

__all__ = (
    "GrpcBroker",
    "GrpcBrokerServer",
    "MemoryBroker",
    "NatsBroker",
    "PostgresBroker",
    "PubSubBroker",
    "RabbitMQBroker",
    "RedisBroker",
    "RedisTaskStore",
    "ServiceBusBroker",
    "SqsBroker",
)

# name -> (module, attribute)
_LAZY: dict[str, tuple[str, str]] = {
    "GrpcBroker": ("daimon.distributed.brokers.grpc", "GrpcBroker"),
    "GrpcBrokerServer": ("daimon.distributed.brokers.grpc", "GrpcBrokerServer"),
    "MemoryBroker": ("daimon.distributed.brokers.memory", "MemoryBroker"),
    "NatsBroker": ("daimon.distributed.brokers.nats", "NatsBroker"),
    "PostgresBroker": ("daimon.distributed.brokers.postgres", "PostgresBroker"),
    "PubSubBroker": ("daimon.distributed.brokers.pubsub", "PubSubBroker"),
    "RabbitMQBroker": ("daimon.distributed.brokers.rabbitmq", "RabbitMQBroker"),
    "RedisBroker": ("daimon.distributed.brokers.redis", "RedisBroker"),
    "RedisTaskStore": ("daimon.distributed.brokers.redis", "RedisTaskStore"),
    "ServiceBusBroker": ("daimon.distributed.brokers.servicebus", "ServiceBusBroker"),
    "SqsBroker": ("daimon.distributed.brokers.sqs", "SqsBroker"),
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
