"""Spend records: what a run started here used and cost, however it ended."""

from __future__ import annotations

from contextvars import ContextVar, Token

from daimon.core.chat import Usage

__all__ = ("SpendRecord",)

_RECORD: ContextVar[SpendRecord | None] = ContextVar("daimon_spend_record", default=None)


class SpendRecord:
    """The usage and cost of a run started inside :meth:`collect`, filled in however it ends.

    :class:`~daimon.multiagent.AgentTool` uses it to report what a sub-agent spent even when it
    failed or was cancelled, its own sub-agents' spending included.
    """

    __slots__ = ("claimed", "cost", "usage")

    def __init__(self) -> None:
        self.usage = Usage()
        """Tokens the run used, nested runs' included."""
        self.cost = 0.0
        """Dollars the run spent, nested runs' included."""
        self.claimed = False

    @staticmethod
    def collect() -> tuple[SpendRecord, Token[SpendRecord | None]]:
        """A record for the next run started here; give the token to :meth:`done` afterwards."""
        record = SpendRecord()
        return record, _RECORD.set(record)

    @staticmethod
    def done(token: Token[SpendRecord | None]) -> None:
        """Stop collecting (undo :meth:`collect`)."""
        _RECORD.reset(token)

    @staticmethod
    def claim() -> SpendRecord | None:
        """For a run starting: the record it fills in, unless another run has it already."""
        record = _RECORD.get()
        if record is None or record.claimed:
            return None
        record.claimed = True
        return record
