"""ToolRegistry.run: the one entry point the agent loop calls."""

import asyncio
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import pydantic
import pytest

from daimon.core.errors import RunCancelled
from daimon.core.messages import ToolCall
from daimon.core.tools import ToolOutput
from daimon.tools import ModelRetry, RunContext, ToolRegistry, ToolRetryPolicy, tool
from daimon.tools import _validation as validation

FAST = ToolRetryPolicy(max_retries=2, initial_backoff=0.001, jitter=False)


def call(name: str, arguments: dict[str, Any] | str | None = None) -> ToolCall:
    return ToolCall(id="c1", name=name, arguments={} if arguments is None else arguments)


class Flaky:
    """A tool body that fails ``failures`` times, then answers."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or ConnectionError("network down")
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return f"ok after {self.calls}"


async def test_success(ctx: RunContext[None]) -> None:
    @tool
    async def add(a: int, b: int) -> int:
        return a + b

    out = await ToolRegistry([add]).run(call("add", {"a": 2, "b": 3}), ctx)
    assert out == ToolOutput.json(5)


async def test_sync_tool(ctx: RunContext[None]) -> None:
    @tool
    def upper(text: str) -> str:
        return text.upper()

    assert (await ToolRegistry([upper]).run(call("upper", {"text": "a"}), ctx)).content == "A"


async def test_unknown_tool_names_it_and_lists_the_available_ones(ctx: RunContext[None]) -> None:
    @tool
    def one() -> None:
        """A test tool: one."""
        return None

    @tool
    def two() -> None:
        """A test tool: two."""
        return None

    out = await ToolRegistry([one, two]).run(call("three"), ctx)
    assert out.is_error
    assert "'three'" in out.content
    assert "one, two" in out.content


async def test_arguments_that_were_not_a_json_object(ctx: RunContext[None]) -> None:
    calls: list[str] = []

    @tool
    def search(query: str) -> str:
        calls.append(query)
        return query

    registry = ToolRegistry([search])
    out = await registry.run(call("search", '{"query": "unterminated'), ctx)
    assert out.is_error
    assert "not a valid JSON object" in out.content
    assert '{"query": "unterminated' in out.content
    long = await registry.run(call("search", "x" * 5000), ctx)
    assert long.is_error
    assert len(long.content) < 500
    assert calls == []


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"count": "three", "name": "a"}, "argument 'count' must be integer (got 'three')"),
        ({"name": "a"}, "missing required argument 'count'"),
        ({"count": 1, "name": "a", "extra": 1}, "unexpected argument 'extra'"),
        ({"count": 1, "name": 5}, "argument 'name' must be string"),
        ({"count": 1, "name": "a", "point": {"x": "1"}}, "argument 'point.x' must be integer"),
        ({"count": 1, "name": "a", "point": {}}, "missing required field 'x' in 'point'"),
        ({"count": 1, "name": "a", "point": {"x": 1, "q": 2}}, "unexpected field 'q' in 'point'"),
    ],
)
async def test_schema_failure_says_what_is_wrong_and_does_not_call_the_tool(
    ctx: RunContext[None], arguments: dict[str, Any], expected: str
) -> None:
    calls: list[Any] = []

    @dataclass
    class Point:
        x: int

    @tool
    def make(count: int, name: str, point: Point | None = None) -> None:
        calls.append(count)

    out = await ToolRegistry([make]).run(call("make", arguments), ctx)
    assert out.is_error
    assert "invalid arguments for tool 'make'" in out.content
    assert expected in out.content
    assert calls == []


async def test_validation_can_be_turned_off(ctx: RunContext[None]) -> None:
    received: list[Any] = []

    @tool
    def take(count: int) -> None:
        received.append(count)

    registry = ToolRegistry([take])
    out = await registry.run(call("take", {"count": "many"}), ctx, validate=False)
    assert not out.is_error
    assert received == ["many"]
    out = await registry.run(call("take", {"wrong": 1}), ctx, validate=False)
    assert out.is_error
    assert out.content.startswith("Error: TypeError: ")


async def test_validators_are_compiled_once_per_schema(
    ctx: RunContext[None], monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled: list[Any] = []
    real = validation._compile

    def counting(schema: Any) -> Any:
        compiled.append(schema)
        return real(schema)

    monkeypatch.setattr(validation, "_compile", counting)

    @tool
    def ping(n: int) -> int:
        return n

    for _ in range(3):
        registry = ToolRegistry([ping])
        for _ in range(3):
            assert not (await registry.run(call("ping", {"n": 1}), ctx)).is_error
    assert compiled == [ping.parameters_schema]


async def test_custom_tool_with_a_broken_schema_gets_an_error_not_an_exception(
    ctx: RunContext[None],
) -> None:
    class Broken:
        name = "broken"
        description = ""
        parameters_schema: ClassVar[dict[str, Any]] = {
            "type": "object",
            "properties": {"a": {"type": "no-such-type"}},
        }

        async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
            raise AssertionError("must not run")

    out = await ToolRegistry([Broken()]).run(call("broken", {"a": 1}), ctx)
    assert out.is_error
    assert "parameters schema is invalid" in out.content


async def test_pydantic_and_dataclass_arguments_are_converted(ctx: RunContext[None]) -> None:
    class Person(pydantic.BaseModel):
        name: str

    @dataclass
    class Place:
        city: str

    @tool
    def visit(who: Person, where: Place) -> str:
        assert isinstance(who, Person)
        assert isinstance(where, Place)
        return f"{who.name} in {where.city}"

    out = await ToolRegistry([visit]).run(
        call("visit", {"who": {"name": "Ann"}, "where": {"city": "Oslo"}}), ctx
    )
    assert out.content == "Ann in Oslo"


# ------------------------------------------------------------------ failures


async def test_exception_becomes_a_clear_error_without_traceback(ctx: RunContext[None]) -> None:
    @tool
    def explode() -> None:
        """A test tool: explode."""
        raise ValueError("the reactor is not ready")

    out = await ToolRegistry([explode]).run(call("explode"), ctx)
    assert out == ToolOutput.error("Error: ValueError: the reactor is not ready")
    assert "Traceback" not in out.content


async def test_exception_without_a_message_and_a_huge_message(ctx: RunContext[None]) -> None:
    @tool
    def silent() -> None:
        """A test tool: silent."""
        raise KeyError

    @tool
    def loud() -> None:
        """A test tool: loud."""
        raise RuntimeError("x" * 100_000)

    registry = ToolRegistry([silent, loud])
    assert (await registry.run(call("silent"), ctx)).content == "Error: KeyError"
    out = await registry.run(call("loud"), ctx)
    assert out.is_error
    assert len(out.content) < 3000


async def test_model_retry_sends_its_message_and_is_not_retried(ctx: RunContext[None]) -> None:
    calls: list[int] = []

    @tool(retry_policy=FAST)
    def lookup(user_id: int) -> str:
        calls.append(user_id)
        raise ModelRetry(f"no user {user_id}; call list_users first")

    out = await ToolRegistry([lookup]).run(call("lookup", {"user_id": 7}), ctx, retry_policy=FAST)
    assert out == ToolOutput.error("no user 7; call list_users first")
    assert calls == [7]


async def test_model_retry_without_any_policy(ctx: RunContext[None]) -> None:
    @tool
    async def ask() -> None:
        """A test tool: ask."""
        raise ModelRetry("be more specific")

    assert (await ToolRegistry([ask]).run(call("ask"), ctx)).content == "be more specific"


# ------------------------------------------------------------------ retries


async def test_no_retries_without_a_policy(ctx: RunContext[None]) -> None:
    flaky = Flaky(failures=1)
    out = await ToolRegistry([tool(flaky, name="flaky")]).run(call("flaky"), ctx)
    assert out == ToolOutput.error("Error: ConnectionError: network down")
    assert flaky.calls == 1


async def test_agent_level_policy_retries(ctx: RunContext[None]) -> None:
    flaky = Flaky(failures=2)
    registry = ToolRegistry([tool(flaky, name="flaky")])
    out = await registry.run(call("flaky"), ctx, retry_policy=FAST)
    assert out.content == "ok after 3"
    assert flaky.calls == 3


async def test_retries_give_up_after_max_retries(ctx: RunContext[None]) -> None:
    flaky = Flaky(failures=10)
    registry = ToolRegistry([tool(flaky, name="flaky")])
    out = await registry.run(call("flaky"), ctx, retry_policy=FAST)
    assert out == ToolOutput.error("Error: ConnectionError: network down")
    assert flaky.calls == 3


async def test_tool_policy_wins_over_the_agent_policy(ctx: RunContext[None]) -> None:
    flaky = Flaky(failures=10)
    own = ToolRetryPolicy(max_retries=4, initial_backoff=0.001, jitter=False)
    registry = ToolRegistry([tool(flaky, name="flaky", retry_policy=own)])
    await registry.run(call("flaky"), ctx, retry_policy=FAST)
    assert flaky.calls == 5


async def test_only_retryable_errors_are_retried(ctx: RunContext[None]) -> None:
    flaky = Flaky(failures=1, error=ValueError("bad input"))
    policy = ToolRetryPolicy(retry_on=(ConnectionError,), initial_backoff=0.001)
    out = await ToolRegistry([tool(flaky, name="flaky")]).run(
        call("flaky"), ctx, retry_policy=policy
    )
    assert out.content == "Error: ValueError: bad input"
    assert flaky.calls == 1


async def test_backoff_is_waited_between_retries(ctx: RunContext[None]) -> None:
    waits: list[int] = []

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Recording(ToolRetryPolicy):
        def backoff(self, attempt: int) -> float:
            waits.append(attempt)
            return 0.02

    flaky = Flaky(failures=2)
    registry = ToolRegistry([tool(flaky, name="flaky")])
    started = time.perf_counter()
    out = await registry.run(call("flaky"), ctx, retry_policy=Recording(max_retries=3))
    elapsed = time.perf_counter() - started
    assert out.content == "ok after 3"
    assert waits == [1, 2]
    assert elapsed >= 0.035


async def test_retries_stop_once_the_run_is_cancelled(ctx: RunContext[None]) -> None:
    calls = 0

    @tool
    async def doomed(ctx: RunContext[None]) -> None:
        """A test tool: doomed."""
        nonlocal calls
        calls += 1
        ctx.cancel.cancel("user left")
        raise ConnectionError("flaky")

    out = await ToolRegistry([doomed]).run(call("doomed"), ctx, retry_policy=FAST)
    assert out == ToolOutput.error("Error: ConnectionError: flaky")
    assert calls == 1


async def test_cancel_during_backoff_stops_before_the_next_try(ctx: RunContext[None]) -> None:
    flaky = Flaky(failures=5)
    slow = ToolRetryPolicy(max_retries=5, initial_backoff=0.05, jitter=False)
    registry = ToolRegistry([tool(flaky, name="flaky")])
    asyncio.get_running_loop().call_later(0.01, ctx.cancel.cancel)
    out = await registry.run(call("flaky"), ctx, retry_policy=slow)
    assert out.is_error
    assert flaky.calls == 1


# ------------------------------------------------------------------ timeouts


async def test_timeout(ctx: RunContext[None]) -> None:
    @tool(timeout=0.05)
    async def slow() -> str:
        """A test tool: slow."""
        await asyncio.sleep(10)
        return "never"

    started = time.perf_counter()
    out = await ToolRegistry([slow]).run(call("slow"), ctx)
    assert time.perf_counter() - started < 2
    assert out == ToolOutput.error("Error: tool 'slow' timed out after 0.05s")


async def test_timeout_of_a_sync_tool(ctx: RunContext[None]) -> None:
    @tool(timeout=0.05)
    def slow() -> str:
        """A test tool: slow."""
        time.sleep(0.3)
        return "never"

    out = await ToolRegistry([slow]).run(call("slow"), ctx)
    assert out.is_error
    assert "timed out after 0.05s" in out.content


async def test_timeouts_are_retried_when_the_policy_says_so(ctx: RunContext[None]) -> None:
    attempts = 0

    @tool(timeout=0.05, retry_policy=ToolRetryPolicy(retry_on=(TimeoutError,), jitter=False,
                                                     initial_backoff=0.001))  # fmt: skip
    async def sometimes_slow() -> str:
        """A test tool: sometimes slow."""
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            await asyncio.sleep(10)
        return "fast now"

    out = await ToolRegistry([sometimes_slow]).run(call("sometimes_slow"), ctx)
    assert out.content == "fast now"
    assert attempts == 2


async def test_a_timeout_error_raised_by_the_tool_is_an_ordinary_error(
    ctx: RunContext[None],
) -> None:
    @tool(timeout=5)
    async def upstream() -> None:
        """A test tool: upstream."""
        raise TimeoutError("upstream took too long")

    out = await ToolRegistry([upstream]).run(call("upstream"), ctx)
    assert out.content == "Error: TimeoutError: upstream took too long"


# ------------------------------------------------------------------ cancellation


@pytest.mark.parametrize("policy", [None, FAST])
async def test_cancellation_propagates_and_is_not_retried(
    ctx: RunContext[None], policy: ToolRetryPolicy | None
) -> None:
    started = asyncio.Event()
    calls = 0

    @tool(timeout=30)
    async def wait_forever() -> None:
        """A test tool: wait forever."""
        nonlocal calls
        calls += 1
        started.set()
        await asyncio.sleep(30)

    registry = ToolRegistry([wait_forever])
    task = asyncio.create_task(registry.run(call("wait_forever"), ctx, retry_policy=policy))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls == 1


async def test_cancelled_error_raised_inside_a_tool_propagates(ctx: RunContext[None]) -> None:
    @tool
    async def give_up() -> None:
        """A test tool: give up."""
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await ToolRegistry([give_up]).run(call("give_up"), ctx, retry_policy=FAST)


async def test_run_cancelled_raised_by_a_tool_propagates(ctx: RunContext[None]) -> None:
    @tool
    async def checks(ctx: RunContext[None]) -> None:
        """A test tool: checks."""
        ctx.cancel.cancel("stop")
        ctx.cancel.raise_if_cancelled()

    with pytest.raises(RunCancelled, match="stop"):
        await ToolRegistry([checks]).run(call("checks"), ctx)
    ctx.cancel = type(ctx.cancel)()
    with pytest.raises(RunCancelled):
        await ToolRegistry([tool(checks.function, timeout=1)]).run(call("checks"), ctx)


async def test_a_faulty_retry_predicate_does_not_crash_the_run(ctx: RunContext[None]) -> None:
    def broken(exc: BaseException) -> bool:
        raise RuntimeError("bug in predicate")

    flaky = Flaky(failures=1)
    policy = ToolRetryPolicy(retry_on=broken, initial_backoff=0.001)
    out = await ToolRegistry([tool(flaky, name="flaky")]).run(
        call("flaky"), ctx, retry_policy=policy
    )
    assert out.content == "Error: ConnectionError: network down"
    assert flaky.calls == 1


async def test_cancel_during_backoff_after_a_timeout_reports_the_timeout(
    ctx: RunContext[None],
) -> None:
    @tool(timeout=0.02, retry_policy=ToolRetryPolicy(initial_backoff=0.05, jitter=False))
    async def stuck() -> None:
        """A test tool: stuck."""
        await asyncio.sleep(10)

    asyncio.get_running_loop().call_later(0.03, ctx.cancel.cancel)
    out = await ToolRegistry([stuck]).run(call("stuck"), ctx)
    assert out == ToolOutput.error("Error: tool 'stuck' timed out after 0.02s")


async def test_validation_leaves_the_call_arguments_untouched(ctx: RunContext[None]) -> None:
    @dataclass
    class Window:
        width: int = 80

    @tool
    def draw(shape: str = "box", window: Window | None = None) -> str:
        return shape

    arguments: dict[str, Any] = {"window": {}}
    the_call = call("draw", arguments)
    out = await ToolRegistry([draw]).run(the_call, ctx)
    assert out.content == "box"
    assert the_call.arguments == {"window": {}}
