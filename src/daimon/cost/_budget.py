"""Budgets: what one run may spend, counted together with the runs its tools start."""

from __future__ import annotations

from contextvars import ContextVar, Token

from daimon.core.errors import BudgetExceededError

__all__ = ("Budget",)

_ENCLOSING: ContextVar[Budget | None] = ContextVar("daimon_enclosing_budget", default=None)


class Budget:
    """What one run may spend, counted together with the runs its tools start.

    A run with ``max_budget``, or one started by a tool of a run that has a budget, gets a
    ``Budget``. Before each model call the run reserves the call's worst case; the call
    is refused when that could take this run, or any run that started it, past its limit. What a
    started run (a sub-agent) reserves and spends counts against its callers' limits while it
    runs, so sub-agents running in parallel share what their caller has left. When it ends, its
    part is withdrawn: its caller counts it again through the usage the tool reports
    (:meth:`~daimon.tools.RunContext.report_usage`, as :class:`~daimon.multiagent.AgentTool`
    does).

    Safe within one event loop: a reservation checks and holds in one step, with no await.

    Args:
        limit: Dollars this run may spend (``None``: no limit of its own).
        parent: The budget of the run whose tool started this one.
        spent: Dollars already spent (a resumed run's cost so far).
    """

    __slots__ = ("_pushed", "limit", "parent", "used")

    def __init__(
        self, limit: float | None, parent: Budget | None = None, *, spent: float = 0.0
    ) -> None:
        self.limit = limit
        self.parent = parent
        self.used = spent
        """Dollars spent and held: this run's, and those of the runs it started that still run."""
        self._pushed = 0.0

    @staticmethod
    def enclosing() -> Budget | None:
        """The budget of the run whose tool is executing here, if any."""
        return _ENCLOSING.get()

    def enter(self) -> Token[Budget | None]:
        """Make this the enclosing budget for runs started here (while a tool executes)."""
        return _ENCLOSING.set(self)

    @staticmethod
    def leave(token: Token[Budget | None]) -> None:
        """Undo :meth:`enter`."""
        _ENCLOSING.reset(token)

    def reserve(self, amount: float) -> float:
        """Hold ``amount`` for a call about to be made; returns it, for :meth:`settle`.

        Raises:
            BudgetExceededError: This run, or a run that started it, could pass its limit. The
                error names that run's spending and limit.
        """
        node: Budget | None = self
        while node is not None:
            limit = node.limit
            if limit is not None and (node.used >= limit or node.used + amount > limit):
                whose = "" if node is self else "the limit is that of a run that started this one"
                raise BudgetExceededError(node.used, limit, reserved=amount, detail=whose)
            node = node.parent
        self._add(amount)
        return amount

    def settle(self, held: float, cost: float) -> None:
        """Replace a reservation by what the call cost."""
        self._add(cost - held)

    def spend(self, cost: float) -> None:
        """Count dollars spent outside a reservation (nested work a tool reported)."""
        if cost:
            self._add(cost)

    def close(self) -> None:
        """The run ended: withdraw what it still counts in its callers' budgets."""
        if self._pushed:
            pushed, self._pushed = self._pushed, 0.0
            node = self.parent
            while node is not None:
                node.used -= pushed
                if node.parent is not None:
                    node._pushed -= pushed
                node = node.parent

    def _add(self, delta: float) -> None:
        self.used += delta
        node = self
        while node.parent is not None:
            node._pushed += delta
            node = node.parent
            node.used += delta

    def __repr__(self) -> str:
        return f"Budget(limit={self.limit!r}, used={self.used!r})"
