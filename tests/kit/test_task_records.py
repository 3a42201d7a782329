"""The task record's state machine that every broker shares."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from daimon.core import BuilderError, TaskResult, TaskState
from daimon.core.codec import dumps, loads
from daimon.distributed.brokers.redis import RedisTaskStore
from daimon.kit.task_records import (
    BrokerError,
    TaskRecord,
    begin,
    cancel,
    check_options,
    heartbeat,
    settle,
    submit_through,
    view,
)

LEASE = 10.0


def started(max_deliver: int = 3, now: float = 0.0) -> TaskRecord:
    rec = TaskRecord()
    assert begin(rec, now, LEASE, max_deliver) == ("run", 1.0)
    return rec


def test_begin_counts_attempts_and_leases() -> None:
    rec = started()
    assert (rec.state, rec.attempt, rec.lease_until) == ("running", 1, LEASE)
    assert begin(rec, 5.0, LEASE, 3) == ("busy", 5.0)  # a duplicate while the lease is live
    assert begin(rec, 11.0, LEASE, 3) == ("run", 2.0)  # the lease ran out: a new attempt


def test_a_lost_last_attempt_is_dead_lettered_with_why() -> None:
    rec = started(max_deliver=1)
    assert begin(rec, 20.0, LEASE, 1) == ("dead", 0.0)
    assert rec.state == "failed"
    assert rec.error == (
        "dead-lettered after 1 attempts; attempt 1 was lost: no heartbeat within the 10s lease "
        "(its worker crashed or hung)"
    )
    assert begin(rec, 30.0, LEASE, 1) == ("skip", 0.0)


def test_only_the_newest_attempt_settles_once() -> None:
    rec = started()
    begin(rec, 11.0, LEASE, 3)
    result = TaskResult(task_id="t", output="x")
    assert settle(rec, 1, "complete", 3, result=result) == "stale"
    assert heartbeat(rec, 1, 12.0, LEASE) == "lost"
    assert heartbeat(rec, 2, 12.0, LEASE) == "ok" and rec.lease_until == 22.0
    assert settle(rec, 2, "complete", 3, result=result) == "ok"
    assert settle(rec, 2, "fail", 3, error="late") == "ended"
    assert view(rec, 0.0).result == result and rec.error is None


def test_retry_then_dead_letter_and_release_does_not_count() -> None:
    rec = started(max_deliver=2)
    assert settle(rec, 1, "release", 2) == "released"
    assert begin(rec, 1.0, LEASE, 2) == ("run", 2.0)
    assert settle(rec, 2, "retry", 2, error="e1") == "requeued"
    assert begin(rec, 2.0, LEASE, 2) == ("run", 3.0)
    assert settle(rec, 3, "retry", 2, error="e2") == "dead"
    assert rec.error == "dead-lettered after 2 attempts; last error: e2"


def test_cancel_and_view() -> None:
    rec = started()
    assert view(rec, 5.0).state is TaskState.RUNNING
    assert view(rec, 10.0).state is TaskState.PENDING  # its worker is gone
    assert cancel(rec)
    assert heartbeat(rec, 1, 6.0, LEASE) == "cancelled"
    assert not cancel(rec)
    assert view(rec, 0.0).state is TaskState.CANCELLED


def test_a_record_round_trips_as_versioned_json() -> None:
    rec = started()
    settle(rec, 1, "complete", 3, result=TaskResult(task_id="t", output="ü"))
    assert loads(dumps(rec), TaskRecord) == rec


@pytest.mark.parametrize(("lease", "max_deliver"), [(0, 1), (-1.0, 1), (1.0, 0), (1.0, 2.0)])
def test_bad_options(lease: float, max_deliver: int) -> None:
    with pytest.raises(BuilderError):
        check_options(lease, max_deliver)


# --- submit_through: a submit whose message cannot be sent leaves no record (real Redis store).


@pytest.fixture
async def store(service_url: dict[str, str]) -> AsyncIterator[RedisTaskStore]:
    queue = f"records-{uuid.uuid4().hex}"
    async with RedisTaskStore.from_url(
        service_url["redis"], queue=queue, prefix="daimon-test:"
    ) as made:
        yield made
        keys = [k async for k in made.client.scan_iter(match=f"daimon-test:{{{queue}}}:*")]
        if keys:
            await made.client.delete(*keys)


class Sends:
    """A ``send`` step that fails while ``down`` is set, counting the calls."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.down:
            raise ConnectionError("the service is down")


@pytest.mark.service("redis")
async def test_a_failed_send_withdraws_the_record(store: RedisTaskStore) -> None:
    send = Sends()
    send.down = True
    with pytest.raises(BrokerError, match=r"'t' was not queued \(ConnectionError: the service"):
        await submit_through(store, "t", send)
    with pytest.raises(KeyError):  # no phantom pending task
        await store.status("t")
    send.down = False
    assert await submit_through(store, "t", send) == "t"  # submitting again starts afresh
    assert (await store.status("t")).state is TaskState.PENDING
    assert send.calls == 2


@pytest.mark.service("redis")
async def test_a_pending_task_is_sent_again_and_an_ended_one_is_not(store: RedisTaskStore) -> None:
    send = Sends()
    await submit_through(store, "t", send)
    send.down = True
    with pytest.raises(BrokerError, match="an earlier submit's record stays"):
        await submit_through(store, "t", send)  # sent again: the first send may have died
    assert (await store.status("t")).state is TaskState.PENDING  # the first submit's record
    await store.cancel("t")
    assert await submit_through(store, "t", send) == "t"  # ended: nothing is sent
    assert send.calls == 2
