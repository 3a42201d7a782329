"""A2A tasks and their events in daimon's state store, shared by replicas.

:class:`SharedTaskStore` is the a2a-sdk's ``VersionedTaskStore`` (its cluster mode) on a
:class:`~daimon.core.StateStore`: each task is one record of kind ``a2a_task``, by its owner (as
the SDK's owner resolver names it: tasks of one owner are never shown to another) and its id, as
versioned JSON::

    {"v": 1, "task": <the Task in protobuf's JSON mapping>}

(the format of :class:`daimon.serverstate.StateTaskStore`, so either reads the other's tasks).
The record's version is the task's: a write over a version another replica has moved past is
refused (the SDK then reloads the task and decides), so racing replicas never lose each other's
updates. A record of any other format is refused with a
:class:`~daimon.core.errors.SerializationError` saying so, never read as a task.

Listing: a state store finds records by key only, so each owner's tasks are also named, as they
are made, in a stream of kind ``a2a_task_ids`` (``{"v": 1, "id": "<task id>"}`` each). A list
reads the ids of the owner's newest ``max_listed`` tasks, then the tasks, and filters, orders
and pages them as the SDK's in-memory store does (its page tokens; the latest status first).

:class:`SharedTaskEvents` is the SDK's ``TaskEventStream`` on the same store: the replica running
a task appends each of its events to a stream of kind ``a2a_task_events``
(``{"v": 1, "version": <task version>, "event": <StreamResponse JSON>}``), which another replica
tails to serve ``tasks/subscribe`` to that task.
"""

from __future__ import annotations

from daimon.a2a import _sdk  # noqa: F401  # isort: skip - first: names the extra

import asyncio
import hashlib
import json
from collections.abc import AsyncGenerator
from typing import Any, TypeVar

from a2a.server.cluster import (
    ConcurrentTaskModificationError,
    StoredTask,
    TaskEventStream,
    TaskVersion,
    VersionedEvent,
    VersionedTaskStore,
)
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import (
    ListTasksRequest,
    ListTasksResponse,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.proto_utils import to_stream_response
from google.protobuf import json_format
from google.protobuf.message import Message as Proto

from daimon.core.errors import InvalidIdError, SerializationError
from daimon.core.state_store import StateStore, check_name, check_ttl
from daimon.kit.checks import check_positive

__all__ = ("DEFAULT_MAX_LISTED", "FORMAT_VERSION", "SharedTaskEvents", "SharedTaskStore")

FORMAT_VERSION = 1
"""The version of every record format here (the same as ``daimon.serverstate.a2a_tasks``)."""
DEFAULT_MAX_LISTED = 1000
"""How many of an owner's newest tasks a list looks at by default."""
EVENTS_KEPT = 24 * 3600.0
"""Seconds a task's events are kept after its latest (for replicas tailing it)."""
_P = TypeVar("_P", bound=Proto)
_T = TypeVar("_T")
_TASKS_KIND = "a2a_task"
_IDS_KIND = "a2a_task_ids"
_EVENTS_KIND = "a2a_task_events"
_PAGE = 1000
_WAIT = 30.0
_TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
    }
)


class SharedTaskStore(VersionedTaskStore):
    """The a2a-sdk's ``VersionedTaskStore`` on a :class:`~daimon.core.StateStore`.

    Args:
        store: Where the tasks are kept (shared by the replicas).
        ttl: Seconds a task is kept after its last change (``None``: until deleted); an owner's
            list of task ids is kept this long after its newest task.
        max_listed: How many of an owner's newest tasks a list looks at.
        resolve_owner: The SDK's owner resolver: whose a request's tasks are.
    """

    def __init__(
        self,
        store: StateStore,
        *,
        ttl: float | None = None,
        max_listed: int = DEFAULT_MAX_LISTED,
        resolve_owner: OwnerResolver = resolve_user_scope,
    ) -> None:
        self.store = store
        self.ttl = check_ttl(ttl)
        self.max_listed = check_positive("max_listed", max_listed)
        self._owner = resolve_owner

    async def save(
        self,
        task: Task,
        *,
        event: Event | None,
        prev: Task | None,
        prev_version: TaskVersion,
        context: ServerCallContext,
    ) -> TaskVersion:
        """Write ``task`` over ``prev_version`` (``MISSING``: a new task); its new version.

        A canceled task is written over any unfinished one.

        Raises:
            ConcurrentTaskModificationError: The task moved past ``prev_version`` (or, for a
                cancel, is finished or gone).
        """
        key = _key(self._owner(context), task.id)
        value = _encode(task)
        if task.status.state == TaskState.TASK_STATE_CANCELED:
            return await self._cancel(task.id, key, value)
        expected = _number(prev_version)
        version = await self.store.replace(_TASKS_KIND, key, value, version=expected, ttl=self.ttl)
        if version is None:
            raise ConcurrentTaskModificationError(task.id)
        if expected == 0:  # a new task: listed from now on
            listed = json.dumps({"v": FORMAT_VERSION, "id": task.id}, ensure_ascii=False)
            await self.store.append(_IDS_KIND, self._stream(context), listed, ttl=self.ttl)
        return TaskVersion(version)

    async def _cancel(self, task_id: str, key: str, value: str) -> TaskVersion:
        while True:
            record = await self.store.read(_TASKS_KIND, key)
            if record is None or _decode(record.value, task_id).status.state in _TERMINAL:
                raise ConcurrentTaskModificationError(task_id)
            version = await self.store.replace(
                _TASKS_KIND, key, value, version=record.version, ttl=self.ttl
            )
            if version is not None:
                return TaskVersion(version)

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        """The task with its version, or ``None``.

        Raises:
            SerializationError: The record is not a task in this format.
        """
        record = await self.store.read(_TASKS_KIND, _key(self._owner(context), task_id))
        if record is None:
            return None
        return StoredTask(_decode(record.value, task_id), TaskVersion(record.version))

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """A page of the owner's tasks (of its newest ``max_listed``), as the SDK's stores page.

        Raises:
            SerializationError: A task's record is not a task in this format.
        """
        ids = await self._listed(context)
        found = await asyncio.gather(*(self.get(task_id, context) for task_id in ids))
        view = InMemoryTaskStore(owner_resolver=self._owner)
        for stored in found:
            if stored is not None:  # deleted or expired since it was listed
                await view.save(stored.task, context)
        return await view.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Forget the task (no-op if it is not kept)."""
        await self.store.delete(_TASKS_KIND, _key(self._owner(context), task_id))

    def _stream(self, context: ServerCallContext) -> str:
        """The stream naming the tasks of the request's owner."""
        owner = self._owner(context).encode("utf-8", "surrogatepass")
        return "o" + hashlib.sha256(owner).hexdigest()

    async def _listed(self, context: ServerCallContext) -> tuple[str, ...]:
        """The ids of the owner's newest ``max_listed`` tasks made, oldest first."""
        stream, after = self._stream(context), 0
        ids: dict[str, None] = {}
        while True:
            events = await self.store.read_after(_IDS_KIND, stream, after, _PAGE)
            for _, value in events:
                task_id = _field(value, "an entry of the A2A task list", "id", str)
                ids.pop(task_id, None)  # made again (deleted or expired): now the newest
                ids[task_id] = None
            while len(ids) > self.max_listed:
                del ids[next(iter(ids))]
            if len(events) < _PAGE:
                return tuple(ids)
            after = events[-1][0]


class SharedTaskEvents(TaskEventStream):
    """The a2a-sdk's ``TaskEventStream`` on a :class:`~daimon.core.StateStore`.

    Args:
        store: Where the events are kept (shared by the replicas).
        ttl: Seconds a task's events are kept after its latest.
    """

    def __init__(self, store: StateStore, *, ttl: float = EVENTS_KEPT) -> None:
        self.store = store
        self.ttl = check_ttl(ttl)

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        """Append ``event`` to the task's events."""
        body = json_format.MessageToJson(to_stream_response(event.event), indent=None)
        value = f'{{"v": {FORMAT_VERSION}, "version": {_number(event.version)}, "event": {body}}}'
        await self.store.append(_EVENTS_KIND, _events_name(task_id), value, ttl=self.ttl)

    async def subscribe(
        self, task_id: str, *, after: TaskVersion
    ) -> AsyncGenerator[VersionedEvent, None]:
        """The task's events newer than ``after``, as they come (until the caller stops)."""
        name, seen = _events_name(task_id), 0
        while True:
            events = await self.store.wait_after(_EVENTS_KIND, name, seen, wait=_WAIT)
            for number, value in events:
                seen = number
                what = f"an event of A2A task {task_id!r}"
                version = TaskVersion(_field(value, what, "version", int))
                if version.is_after(after):
                    yield VersionedEvent(_event(_field(value, what, "event", dict), what), version)

    async def destroy(self, task_id: str) -> None:
        """Nothing: a finished task's events expire on their own (replicas may still tail)."""


def _key(owner: str, task_id: str) -> str:
    """A task's record key: owner and task id, hashed when too long to be a key."""
    key = json.dumps([owner, task_id], ensure_ascii=False)
    try:
        return check_name(_TASKS_KIND, key)
    except InvalidIdError:
        return "h" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _events_name(task_id: str) -> str:
    try:
        return check_name(_EVENTS_KIND, task_id, "stream")
    except InvalidIdError:
        return "h" + hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()


def _number(version: TaskVersion) -> int:
    """The state store's version a task version wraps (``MISSING`` is 0)."""
    value = version._value  # the SDK offers no reader: its own stores read it so too
    if not isinstance(value, int):
        raise SerializationError(f"a task version of the state store is a number, got {value!r}")
    return value


def _encode(task: Task) -> str:
    body = json_format.MessageToJson(task, indent=None)
    return f'{{"v": {FORMAT_VERSION}, "task": {body}}}'


def _decode(value: str, task_id: str) -> Task:
    """The task a record holds.

    Raises:
        SerializationError: The record is not ``{"v": 1, "task": {...}}`` with a valid task.
    """
    what = f"the record of A2A task {task_id!r}"
    return _parsed(_field(value, what, "task", dict), Task(), what)


def _event(data: dict[str, Any], what: str) -> Event:
    response = _parsed(data, StreamResponse(), what)
    payload = response.WhichOneof("payload")
    if payload is None:
        raise SerializationError(f"{what} holds no event")
    found: Event = getattr(response, payload)
    return found


def _parsed(data: dict[str, Any], into: _P, what: str) -> _P:
    try:
        return json_format.ParseDict(data, into)
    except json_format.ParseError as exc:
        raise SerializationError(f"{what} is not valid: {exc}") from None


def _field(value: str, what: str, name: str, kind: type[_T]) -> _T:
    """Field ``name`` of the versioned JSON record ``value``.

    Raises:
        SerializationError: ``value`` is not JSON, not of this format version, or lacks the
            field.
    """
    try:
        record = json.loads(value)
    except ValueError:
        raise SerializationError(f"{what} is not JSON: it was not written by daimon") from None
    if not isinstance(record, dict) or "v" not in record:
        raise SerializationError(
            f"{what} is not a versioned daimon record (no 'v'): it was not written by daimon"
        )
    if record["v"] != FORMAT_VERSION:
        raise SerializationError(
            f"{what} is of format {record['v']!r}; this daimon reads format {FORMAT_VERSION}"
        )
    found = record.get(name)
    if not isinstance(found, kind) or isinstance(found, bool):
        raise SerializationError(f"{what} has no {name!r} of the expected type")
    return found
