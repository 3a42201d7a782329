"""The shared settings checks: one message for a bad setting, wherever it is set."""

from __future__ import annotations

import pytest

from daimon.core import BuilderError
from daimon.kit.checks import check_non_negative, check_positive


@pytest.mark.parametrize("value", [1, 2, 10**9])
def test_positive_returns_the_value(value: int) -> None:
    assert check_positive("size", value) == value


@pytest.mark.parametrize("value", [0, -1, True, 1.0, "3", None])
def test_positive_refuses_naming_the_setting(value: object) -> None:
    with pytest.raises(BuilderError, match=r"^size must be a positive integer, got "):
        check_positive("size", value)


def test_positive_names_the_alternative() -> None:
    with pytest.raises(BuilderError, match=r"^limit must be a positive integer or None, got 0$"):
        check_positive("limit", 0, "or None")


@pytest.mark.parametrize("value", [0, 1, 7])
def test_non_negative_returns_the_value(value: int) -> None:
    assert check_non_negative("retries", value) == value


@pytest.mark.parametrize("value", [-1, False, 0.0, "0", None])
def test_non_negative_refuses_naming_the_setting(value: object) -> None:
    with pytest.raises(BuilderError, match=r"^retries must be a non-negative integer, got "):
        check_non_negative("retries", value)


def test_the_agent_and_the_stores_say_it_the_same_way() -> None:
    from daimon import Agent
    from daimon.kit.vectors import check_dimension
    from daimon.models import ScriptedModel

    with pytest.raises(BuilderError, match=r"^max_iterations must be a positive integer, got 0$"):
        Agent(ScriptedModel(["a"]), max_iterations=0)
    with pytest.raises(BuilderError, match=r"^dimension must be a positive integer, got 0$"):
        check_dimension(0)
