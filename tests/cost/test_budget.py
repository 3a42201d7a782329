"""Budget: what one run may spend, counted together with the runs its tools start."""

from __future__ import annotations

import pytest

from daimon.core import BudgetExceededError
from daimon.cost import Budget


def test_a_budget_refuses_what_could_pass_its_limit_or_a_callers() -> None:
    caller = Budget(10.0)
    held = caller.reserve(4.0)
    caller.settle(held, 3.0)
    assert caller.used == 3.0
    sub = Budget(None, caller)  # no limit of its own: the caller's applies
    sub.reserve(6.0)
    assert caller.used == 9.0  # held for the sub-agent while it runs
    with pytest.raises(BudgetExceededError) as refused:
        Budget(None, caller).reserve(2.0)  # a second sub-agent, in parallel
    assert (refused.value.spent, refused.value.limit) == (9.0, 10.0)
    sub.settle(6.0, 5.0)
    sub.spend(0.5)  # what its own tools reported
    assert (sub.used, caller.used) == (5.5, 8.5)
    sub.close()  # it ended: the caller counts it from the usage its tool reports
    assert caller.used == 3.0
    caller.spend(5.5)
    assert caller.used == 8.5


def test_a_budget_of_its_own_can_be_tighter_than_the_callers() -> None:
    caller = Budget(100.0)
    sub = Budget(1.0, caller, spent=0.5)  # resumed with $0.5 spent: not counted again above
    with pytest.raises(BudgetExceededError) as refused:
        sub.reserve(0.6)
    assert (refused.value.spent, refused.value.limit) == (0.5, 1.0)
    deep = Budget(None, sub)
    deep.reserve(0.25)
    assert (sub.used, caller.used) == (0.75, 0.25)
    deep.close()
    assert (sub.used, caller.used) == (0.5, 0.0)
