"""RunContext: the one per-run context; a tool call gets a view of it, not a copy."""

from __future__ import annotations

from daimon import (
    Agent,
    AgentHook,
    CallTool,
    ChatResponse,
    Extension,
    RunContext,
    RunState,
    ToolCall,
    ToolOutput,
    Usage,
    tool,
)
from daimon.models import ScriptedModel


def test_run_state_is_run_context() -> None:
    from daimon.state import RunState as FromState

    assert RunState is RunContext is FromState
    state = RunState(run_id="r", agent_name="a", messages=[], session_id="s")
    assert (state.run_id, state.agent_name, state.session_id, state.deps) == ("r", "a", "s", None)
    assert state.call_id == "" and state.iteration == 0 and state.cost == 0.0


def test_a_call_view_shares_the_run_and_adds_the_call() -> None:
    reported: list[tuple[Usage, float]] = []
    run = RunContext(
        run_id="r", deps={"user": "ada"}, on_usage=lambda u, c: reported.append((u, c))
    )
    view = run.for_call("c1", "search")
    assert (view.call_id, view.tool_name, view.idempotency_key) == ("c1", "search", "r:c1")
    assert view.deps is run.deps and view.cancel is run.cancel and view.messages is run.messages
    run.usage = Usage(input_tokens=7)
    run.iteration = 3
    assert view.usage.input_tokens == 7 and view.iteration == 3  # live, not a snapshot
    view.report_usage(Usage(output_tokens=1), 0.5)
    assert reported == [(Usage(output_tokens=1), 0.5)]
    assert run.call_id == "" and "c1" in repr(view)


async def test_hooks_extensions_and_tools_see_one_run() -> None:
    seen: list[object] = []

    @tool
    def probe(ctx: RunContext[str]) -> str:
        """Reports what it sees."""
        seen.append(ctx)
        return f"{ctx.deps}:{ctx.call_id}:{ctx.usage.input_tokens}"

    class Hook(AgentHook):
        async def on_run_start(self, state: RunState) -> None:
            seen.append(state)

    class Ext(Extension):
        async def wrap_tool_call(
            self, call: ToolCall, ctx: RunState, call_next: CallTool
        ) -> ToolOutput:
            seen.append(ctx)
            return await call_next(call)

    first = ChatResponse.tool_use(
        ToolCall(id="p1", name="probe", arguments={}), usage=Usage(input_tokens=4)
    )
    model = ScriptedModel([first, "done"])
    agent = Agent(model, tools=[probe], hooks=[Hook()], extensions=[Ext()])
    response = await agent.prompt("q", deps="ada")
    assert model.requests[1].messages[-1].text == "ada:p1:4"
    run, extension_ctx, tool_ctx = seen
    assert run is extension_ctx  # hooks and extensions: the run's own context
    assert isinstance(tool_ctx, RunContext) and tool_ctx is not run
    assert tool_ctx.run_id == response.run_id and tool_ctx.call_id == "p1"
