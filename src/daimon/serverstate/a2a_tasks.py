"""A2A tasks on a :class:`~daimon.core.StateStore`: :class:`StateTaskStore`.

The a2a-sdk's request handler keeps tasks in a ``TaskStore``; this one keeps them in the state
store, so that any replica can answer for a task another replica started. A task is stored by
its owner (the SDK's owner resolver, as in its in-memory store) and id, as versioned JSON::

    {"v": 1, "task": <the Task in protobuf's JSON mapping>}

Listing tasks is not supported: the state store finds records by key only.
"""

from __future__ import annotations

import hashlib
import json

from daimon.core.errors import InvalidIdError
from daimon.core.optional import require
from daimon.core.state_store import StateStore, check_name, check_ttl

require("a2a", extra="a2a")  # first: a missing SDK names its extra

from a2a.server.context import ServerCallContext  # noqa: E402
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope  # noqa: E402
from a2a.server.tasks.task_store import TaskStore  # noqa: E402
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task  # noqa: E402
from a2a.utils.errors import UnsupportedOperationError  # noqa: E402
from google.protobuf import json_format  # noqa: E402

__all__ = ("FORMAT_VERSION", "StateTaskStore")

FORMAT_VERSION = 1
"""The version of the stored task format."""


class StateTaskStore(TaskStore):
    """An a2a-sdk ``TaskStore`` whose tasks are in a :class:`~daimon.core.StateStore`.

    Args:
        store: Where the tasks are kept (shared by the replicas).
        kind: The kind of state the tasks are kept under.
        ttl: Seconds a task is kept after its last save (``None``: until deleted).
        resolve_owner: The SDK's owner resolver: whose a request's tasks are.
    """

    def __init__(
        self,
        store: StateStore,
        *,
        kind: str = "a2a_task",
        ttl: float | None = None,
        resolve_owner: OwnerResolver = resolve_user_scope,
    ) -> None:
        self._store = store
        self._kind = kind
        self._ttl = check_ttl(ttl)
        self._owner = resolve_owner

    def _key(self, task_id: str, context: ServerCallContext) -> str:
        """The record's key: owner and task id, hashed when too long to be a key."""
        key = json.dumps([self._owner(context), task_id], ensure_ascii=False)
        try:
            return check_name(self._kind, key)
        except InvalidIdError:
            return "h" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save or replace ``task``."""
        body = json_format.MessageToJson(task, indent=None)
        value = f'{{"v": {FORMAT_VERSION}, "task": {body}}}'
        await self._store.put(self._kind, self._key(task.id, context), value, ttl=self._ttl)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task, or ``None``."""
        value = await self._store.get(self._kind, self._key(task_id, context))
        if value is None:
            return None
        return json_format.ParseDict(json.loads(value)["task"], Task())

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """Not supported: raises the SDK's ``UnsupportedOperationError``."""
        raise UnsupportedOperationError(
            "listing tasks is not supported by a task store on daimon's server state"
        )

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Forget the task (no-op if it is not kept)."""
        await self._store.delete(self._kind, self._key(task_id, context))
