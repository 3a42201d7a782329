"""The loop guard: a model that repeats one tool call with one result is stopped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from daimon.core.errors import RepeatedToolCallError
from daimon.core.messages import ToolCall
from daimon.core.tools import ToolOutput

__all__ = ("RepeatGuard",)


class _Repeat:
    """One distinct call of a run: its arguments, and its last result with how often it came."""

    __slots__ = ("arguments", "content", "count", "is_error")

    def __init__(self, arguments: Any, output: ToolOutput) -> None:
        self.arguments = arguments
        self.count = 1
        self.content = output.content
        self.is_error = output.is_error

    def returned(self, output: ToolOutput) -> None:
        """Count a result: the same one again adds one, another starts over."""
        if self.content == output.content and self.is_error == output.is_error:
            self.count += 1
        else:
            self.count, self.content, self.is_error = 1, output.content, output.is_error


class RepeatGuard:
    """Counts a run's calls and refuses one that already returned the same result ``limit`` times.

    Calls are the same when their names are and their parsed arguments are equal (in any key
    order; equal as Python values, so ``1`` and ``1.0`` match); unparseable arguments match as the
    model wrote them. The counts are kept by tool name (a run makes few distinct calls, and
    comparing dicts costs less than encoding them as keys); they are not checkpointed, so a
    resumed run starts afresh.
    """

    __slots__ = ("_limit", "_seen")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: dict[str, list[_Repeat]] = {}

    def check(self, calls: Sequence[ToolCall]) -> None:
        """Raise before anything of the turn runs if a call would go past the limit.

        Identical calls in one turn count one each.

        Raises:
            RepeatedToolCallError: A call returned the same result ``limit`` times already.
        """
        seen = self._seen
        for index, call in enumerate(calls):
            entries = seen.get(call.name)  # none on a run's first turn: nothing more to look at
            found = _find(entries, call.arguments) if entries is not None else None
            count = 1 + (found.count if found is not None else 0)
            if index:
                count += _earlier_copies(calls, index)
            if count > self._limit:
                raise RepeatedToolCallError(call.name, call.arguments, count)

    def count(self, calls: Sequence[ToolCall], completed: Mapping[str, ToolOutput]) -> None:
        """Count the turn's results."""
        seen = self._seen
        for call in calls:
            output = completed.get(call.id)
            if output is None:
                continue
            entries = seen.get(call.name)
            if entries is None:
                seen[call.name] = [_Repeat(call.arguments, output)]
                continue
            found = _find(entries, call.arguments)
            if found is None:
                entries.append(_Repeat(call.arguments, output))
            else:
                found.returned(output)


def _find(entries: list[_Repeat], arguments: Any) -> _Repeat | None:
    for entry in entries:
        if entry.arguments == arguments:
            return entry
    return None


def _earlier_copies(calls: Sequence[ToolCall], index: int) -> int:
    """How many calls before ``calls[index]`` in its turn are the same call.

    Its own function: a generator expression in ``check`` would make a cell of ``call`` on every
    check, with or without a second call.
    """
    call = calls[index]
    return sum(
        1
        for other in calls[:index]
        if other.name == call.name and other.arguments == call.arguments
    )
