"""Brokers by URL: ``redis://...`` picks the Redis broker, and so on."""

from __future__ import annotations

import importlib
from typing import Any, cast

from daimon.core.errors import BuilderError
from daimon.core.protocols import Broker

__all__ = ("broker_from_url",)

# URL scheme -> (module, class). Modules load only when asked for: each needs its own extra.
_SCHEMES: dict[str, tuple[str, str]] = {
    "memory": ("daimon.distributed.brokers.memory", "MemoryBroker"),
    "redis": ("daimon.distributed.brokers.redis", "RedisBroker"),
    "rediss": ("daimon.distributed.brokers.redis", "RedisBroker"),
    "unix": ("daimon.distributed.brokers.redis", "RedisBroker"),
    "nats": ("daimon.distributed.brokers.nats", "NatsBroker"),
    "tls": ("daimon.distributed.brokers.nats", "NatsBroker"),
    "amqp": ("daimon.distributed.brokers.rabbitmq", "RabbitMQBroker"),
    "amqps": ("daimon.distributed.brokers.rabbitmq", "RabbitMQBroker"),
    "sqs": ("daimon.distributed.brokers.sqs", "SqsBroker"),
    "grpc": ("daimon.distributed.brokers.grpc", "GrpcBroker"),
    "grpcs": ("daimon.distributed.brokers.grpc", "GrpcBroker"),
    "pubsub": ("daimon.distributed.brokers.pubsub", "PubSubBroker"),
    "sb": ("daimon.distributed.brokers.servicebus", "ServiceBusBroker"),
    "postgresql": ("daimon.distributed.brokers.postgres", "PostgresBroker"),
    "postgres": ("daimon.distributed.brokers.postgres", "PostgresBroker"),
}


# Task stores for brokers whose service has no key-value store: URL scheme -> (module, class).
_STORES: dict[str, tuple[str, str]] = {
    "redis": ("daimon.distributed.brokers.redis", "RedisTaskStore"),
    "rediss": ("daimon.distributed.brokers.redis", "RedisTaskStore"),
    "unix": ("daimon.distributed.brokers.redis", "RedisTaskStore"),
}


def _load(table: dict[str, tuple[str, str]], url: str, what: str) -> Any:
    scheme, sep, _ = url.partition(":")
    if not sep or scheme.lower() not in table:
        known = ", ".join(f"{s}://" for s in sorted(table))
        raise BuilderError(f"unknown {what} URL {url!r}; expected one of {known}")
    module, name = table[scheme.lower()]
    return getattr(importlib.import_module(module), name)


def broker_from_url(url: str, **options: Any) -> Broker:
    """A broker handle for ``url``, made with the broker class's ``from_url(url, **options)``.

    Schemes: ``memory``, ``redis``/``rediss``/``unix`` (Redis Streams), ``nats``/``tls`` (NATS
    JetStream), ``amqp``/``amqps`` (RabbitMQ), ``sqs`` (Amazon SQS), ``grpc``/``grpcs`` (the
    daimon broker service), ``pubsub`` (Google Pub/Sub), ``postgresql``/``postgres`` (a
    PostgreSQL table, its own task store). Options are the broker's keyword
    arguments, such as ``lease``, ``max_deliver`` and ``queue``. RabbitMQ, SQS and Pub/Sub keep
    task states in a store: give ``store="redis://..."`` (a store made from a URL is closed
    with the broker).

    ``sb`` is Azure Service Bus (``sb://<namespace host>/<queue>``); it needs a store too.
    """
    cls = _load(_SCHEMES, url, "broker")
    store = options.get("store")
    if isinstance(store, str):
        # The store's keys are named after the broker's queue, from the options or the URL.
        queue = options.get("queue") or getattr(cls, "queue_in_url", lambda url: None)(url)
        store_options = {"queue": queue} if queue else {}
        options["store"] = _load(_STORES, store, "task store").from_url(store, **store_options)
        options.setdefault("own_store", True)
    return cast(Broker, cls.from_url(url, **options))
