"""EvalRunner: runs scenarios through an agent, concurrently, and scores the answers."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TypeAlias

from daimon.core.errors import BuilderError
from daimon.core.protocols import Promptable
from daimon.eval._report import EvalReport, EvalResult, ScorerResult
from daimon.eval._scenario import EvalScenario
from daimon.eval._scorers import EvalOutput, Scorer
from daimon.kit.checks import check_positive

__all__ = ("EvalRunner", "ProgressCallback", "Promptable")

ProgressCallback: TypeAlias = Callable[[EvalResult, int, int], None]
"""Called as each scenario finishes: its result, how many are done, and how many in all."""

_MAX_ERROR_CHARS = 2000


class EvalRunner:
    """Runs scenarios through an agent and scores each answer.

    Scenarios run concurrently, at most ``concurrency`` at once. A run that fails, times out, or
    whose scorer raises makes its scenario fail with the error in its result; the eval goes on.

    Args:
        agent: What to evaluate.
        concurrency: Scenarios running at once.
        progress: Called as each scenario finishes (see :func:`~daimon.eval.console_progress`).
        timeout: Seconds a scenario's run may take.
        name: The report's name; by default the agent's.
    """

    __slots__ = ("agent", "concurrency", "name", "progress", "timeout")

    def __init__(
        self,
        agent: Promptable,
        *,
        concurrency: int = 4,
        progress: ProgressCallback | None = None,
        timeout: float | None = None,
        name: str | None = None,
    ) -> None:
        if not callable(getattr(agent, "prompt", None)):
            raise BuilderError(f"EvalRunner needs an agent with prompt(), not {agent!r}")
        check_positive("concurrency", concurrency)
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise BuilderError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.agent = agent
        self.concurrency = concurrency
        self.progress = progress
        self.timeout = timeout
        self.name = name if name is not None else str(getattr(agent, "name", "agent"))

    async def run(self, scenarios: Iterable[EvalScenario]) -> EvalReport:
        """Run every scenario; the report lists the results in the scenarios' order.

        Raises:
            BuilderError: Two scenarios share a name.
        """
        todo = list(scenarios)
        names = [s.name for s in todo]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise BuilderError(f"scenario names must be unique; repeated: {repeated}")
        created = datetime.now(UTC).isoformat(timespec="seconds")
        started = time.perf_counter()
        results: list[EvalResult | None] = [None] * len(todo)
        limit = asyncio.Semaphore(self.concurrency)
        done = 0

        async def one(index: int, scenario: EvalScenario) -> None:
            nonlocal done
            async with limit:
                result = await self.run_one(scenario)
            results[index] = result
            done += 1
            if self.progress is not None:
                self.progress(result, done, len(todo))

        try:
            async with asyncio.TaskGroup() as group:
                for index, scenario in enumerate(todo):
                    group.create_task(one(index, scenario))
        except BaseExceptionGroup as failures:
            # Scenario failures are results, so only the progress callback (or a signal) lands
            # here: surface a lone error as itself.
            if len(failures.exceptions) == 1:
                raise failures.exceptions[0] from None
            raise
        return EvalReport(
            name=self.name,
            results=tuple(r for r in results if r is not None),
            created_at=created,
            duration=time.perf_counter() - started,
        )

    async def run_one(self, scenario: EvalScenario) -> EvalResult:
        """Run and score one scenario."""
        started = time.perf_counter()
        deadline = asyncio.timeout(self.timeout)
        try:
            async with deadline:
                response = await self.agent.prompt(scenario.input)
        except Exception as exc:  # the run failed: the scenario fails, the eval goes on
            error = f"timed out after {self.timeout}s" if deadline.expired() else _describe(exc)
            return _failed(scenario, time.perf_counter() - started, error)
        latency = time.perf_counter() - started
        output = EvalOutput(scenario=scenario, response=response)
        scores = await asyncio.gather(*(_score(s, output) for s in scenario.expect))
        passed = all(s.passed for s in scores)
        value = math.fsum(s.value for s in scores) / len(scores) if scores else 1.0
        return EvalResult(
            scenario=scenario.name,
            input=scenario.input,
            passed=passed,
            score=value,
            latency=latency,
            cost=response.cost,
            usage=response.usage,
            output=response.text,
            scores=tuple(scores),
            tags=scenario.tags,
            metadata=scenario.metadata,
        )


async def _score(scorer: Scorer, output: EvalOutput) -> ScorerResult:
    name = str(getattr(scorer, "name", type(scorer).__name__))
    try:
        score = await scorer.score(output)
    except Exception as exc:  # a broken scorer fails its scenario, and says why
        return ScorerResult(name=name, value=0.0, passed=False, error=_describe(exc))
    return ScorerResult(name=name, value=score.value, passed=score.passed, reason=score.reason)


def _failed(scenario: EvalScenario, latency: float, error: str) -> EvalResult:
    return EvalResult(
        scenario=scenario.name,
        input=scenario.input,
        passed=False,
        score=0.0,
        latency=latency,
        error=error,
        tags=scenario.tags,
        metadata=scenario.metadata,
    )


def _describe(exc: BaseException) -> str:
    message = str(exc)
    if len(message) > _MAX_ERROR_CHARS:
        message = message[:_MAX_ERROR_CHARS] + "... (truncated)"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
