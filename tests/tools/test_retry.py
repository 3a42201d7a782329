import asyncio
import dataclasses
import random
from typing import Any

import pytest

from daimon.core.errors import BuilderError, DaimonError
from daimon.tools import ModelRetry, ToolRetryPolicy


def test_defaults() -> None:
    policy = ToolRetryPolicy()
    assert policy.max_retries == 2
    assert policy.initial_backoff == 0.1
    assert policy.max_backoff == 10.0
    assert policy.multiplier == 2.0
    assert policy.jitter is True
    assert policy.retry_on == (Exception,)


def test_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ToolRetryPolicy().max_retries = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_retries": -1},
        {"max_retries": 1.5},
        {"max_retries": True},
        {"initial_backoff": -0.1},
        {"max_backoff": -1},
        {"initial_backoff": float("nan")},
        {"multiplier": 0.5},
        {"multiplier": -2},
        {"multiplier": float("inf")},
        {"retry_on": (ValueError, "nope")},
        {"retry_on": 42},
    ],
)
def test_invalid_values_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(BuilderError):
        ToolRetryPolicy(**kwargs)


def test_zero_values_are_allowed() -> None:
    policy = ToolRetryPolicy(max_retries=0, initial_backoff=0, max_backoff=0, multiplier=1)
    assert policy.backoff(3) == 0


def test_retry_on_types() -> None:
    policy = ToolRetryPolicy(retry_on=(ConnectionError, TimeoutError))
    assert policy.is_retryable(ConnectionResetError())
    assert policy.is_retryable(TimeoutError())
    assert not policy.is_retryable(ValueError())


def test_a_single_exception_class_means_that_class() -> None:
    policy = ToolRetryPolicy(retry_on=ValueError)  # type: ignore[arg-type]
    assert policy.retry_on == (ValueError,)
    assert policy.is_retryable(ValueError())
    assert not policy.is_retryable(KeyError())


def test_retry_on_predicate() -> None:
    policy = ToolRetryPolicy(retry_on=lambda exc: "transient" in str(exc))
    assert policy.is_retryable(RuntimeError("transient glitch"))
    assert not policy.is_retryable(RuntimeError("permanent"))


def test_model_retry_and_cancellation_are_never_retried() -> None:
    policy = ToolRetryPolicy(retry_on=(BaseException,))
    assert not policy.is_retryable(ModelRetry("again"))
    assert not policy.is_retryable(asyncio.CancelledError())
    assert ToolRetryPolicy(retry_on=lambda exc: True).is_retryable(ModelRetry("x")) is False


def test_model_retry_is_not_a_daimon_error() -> None:
    signal = ModelRetry("use a date in ISO format")
    assert not isinstance(signal, DaimonError)
    assert signal.message == "use a date in ISO format"
    assert str(signal) == "use a date in ISO format"


def test_exponential_backoff_without_jitter() -> None:
    policy = ToolRetryPolicy(initial_backoff=0.1, multiplier=2, max_backoff=0.5, jitter=False)
    assert [policy.backoff(n) for n in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])


def test_full_jitter_stays_between_zero_and_the_backoff() -> None:
    random.seed(7)
    policy = ToolRetryPolicy(initial_backoff=1.0, multiplier=3, max_backoff=100)
    for attempt in range(1, 5):
        cap = min(3.0 ** (attempt - 1), 100)
        draws = [policy.backoff(attempt) for _ in range(200)]
        assert all(0 <= d <= cap for d in draws)
        assert max(draws) > cap / 2  # not stuck at zero
        assert len(set(draws)) > 1


def test_huge_attempt_numbers_cap_at_max_backoff() -> None:
    policy = ToolRetryPolicy(max_backoff=3.0, jitter=False)
    assert policy.backoff(100_000) == 3.0
