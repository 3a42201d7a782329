"""Token streaming: the text of the model call in flight, read from its activity's heartbeats.

A worker with ``stream_tokens`` streams each model call and heartbeats the text so far (the
SDK sends the newest details every ``TOKEN_HEARTBEAT`` seconds). A client polling a run reads
them with ``describe`` (the pending activities' details; nothing enters the history) and shows
the new part as a ``TextDelta``. The workflow's recorded events stay the source of truth:
when the turn's recorded text arrives, only what the deltas did not show of it is passed on.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowHandle

from daimon.core.events import StreamEvent, TextDelta
from daimon.temporal._activities import MODEL_ACTIVITY
from daimon.temporal._converter import data_converter

__all__ = ("TokenTail",)


class TokenTail:
    """The deltas a client has shown of the model call in flight, and how to finish its turn."""

    __slots__ = ("_activity", "_handle", "_shown")

    def __init__(self, handle: WorkflowHandle[Any, Any]) -> None:
        self._handle = handle
        self._shown = ""
        self._activity: str | None = None

    async def deltas(self) -> list[TextDelta]:
        """What the model call in flight has produced since the last look (one delta or none).

        Nothing while the previous call's recorded turn has not reached the client yet, nor
        when a retried attempt's text does not continue what was shown.
        """
        description = await self._handle.describe()
        for pending in description.raw_description.pending_activities:
            if pending.activity_type.name != MODEL_ACTIVITY:
                continue
            if not pending.HasField("heartbeat_details"):
                return []
            if self._activity not in (None, pending.activity_id):
                return []
            (text,) = await data_converter.decode(pending.heartbeat_details.payloads, [str])
            if not isinstance(text, str) or not text.startswith(self._shown):
                return []
            new, self._shown = text[len(self._shown) :], text
            self._activity = pending.activity_id
            return [TextDelta(text=new)] if new else []
        return []

    def recorded(self, event: StreamEvent) -> StreamEvent | None:
        """A recorded event as the client should see it, after the deltas already shown.

        The turn's recorded text comes less the part the deltas showed (``None`` when they
        showed it all); when it does not continue them (an attempt that died after showing
        text, retried with another answer) it comes whole.
        """
        if self._activity is None or not isinstance(event, TextDelta):
            return event
        shown, self._shown, self._activity = self._shown, "", None
        if not event.text.startswith(shown):
            return event
        rest = event.text[len(shown) :]
        return TextDelta(text=rest) if rest else None
