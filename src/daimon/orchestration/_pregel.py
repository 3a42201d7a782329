"""The graph runner: Pregel-style supersteps, saved to a checkpoint after each one.

Every node scheduled for a superstep runs in parallel on the same snapshot of the state; their
updates are merged (in scheduling order) when all have finished, then the routes out of each node
pick the next superstep's nodes. A node scheduled by several nodes runs once.

The progress is saved to the checkpoint after each superstep (see ``_graph_state``). With a store
that leases runs, the run holds its lease like an agent run does (``daimon.core._run_hold``): taken
before the checkpoint is loaded, renewed while nodes run, given up when the run ends or fails; a
runner whose lease ended has its saves refused by the store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from daimon.core._run_hold import RunHold
from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError, OrchestrationError, RunCancelled
from daimon.core.protocols import Checkpoint
from daimon.orchestration._common import Tally, call
from daimon.orchestration._errors import MaxStepsError, NodeError, StateConflictError
from daimon.orchestration._graph import (
    END,
    START,
    GraphContext,
    GraphResult,
    GraphSpec,
    NodeOutcome,
)
from daimon.orchestration._graph_state import Outcome, Progress, restore, save, save_after_failure
from daimon.orchestration._observe import (
    NodeAgentObserver,
    NodeFailed,
    NodeFinished,
    NodeObserver,
    NodeStarted,
)
from daimon.orchestration._tasks import cancellable

__all__ = ("run_graph",)


async def run_graph(
    graph: GraphSpec,
    state: Mapping[str, Any] | None,
    *,
    run_id: str | None,
    checkpoint: Checkpoint | None,
    cancel: CancelToken | None,
    max_steps: int,
    on_node: NodeObserver | None = None,
    on_agent_event: NodeAgentObserver | None = None,
) -> GraphResult:
    """Run ``graph`` from ``state``, or resume it from ``checkpoint``."""
    if type(max_steps) is not int or max_steps < 1:
        raise BuilderError(f"max_steps must be a positive integer, got {max_steps!r}")
    if checkpoint is not None and not run_id:
        raise BuilderError("a graph run with a checkpoint needs a run_id")
    if cancel is not None:
        cancel.raise_if_cancelled()
    if checkpoint is None or not run_id:
        return await _run(graph, state, None, None, cancel, max_steps, on_node, on_agent_event)
    hold = RunHold(checkpoint)
    hold.hold(run_id)
    try:
        await hold.take(run_id)  # before the load: of two resumers, one is refused here
        try:
            return await _run(
                graph, state, checkpoint, run_id, cancel, max_steps, on_node, on_agent_event
            )
        finally:
            await hold.end()
    finally:
        hold.release()


async def _run(
    graph: GraphSpec,
    state: Mapping[str, Any] | None,
    checkpoint: Checkpoint | None,
    run_id: str | None,
    cancel: CancelToken | None,
    max_steps: int,
    on_node: NodeObserver | None,
    on_agent_event: NodeAgentObserver | None,
) -> GraphResult:
    """The run itself, once its lease (if any) is held: load, then supersteps until done."""
    saved = await checkpoint.load(run_id) if checkpoint is not None and run_id else None
    if saved is not None:
        progress, tally = restore(graph, saved), Tally(saved.usage, saved.cost)
    else:
        tally = Tally()
        start = dict(state or {})
        progress = Progress(
            0, await _route_start(graph, start), start, [[] for _ in graph.joins], {}
        )
    history: list[tuple[str, ...]] = []
    while progress.next:
        if cancel is not None:
            cancel.raise_if_cancelled()
        if progress.step >= max_steps:
            raise MaxStepsError(max_steps, history[-1] if history else (), progress.next)
        outcomes = dict(progress.done)
        try:
            await _run_nodes(graph, progress, outcomes, tally, cancel, on_node, on_agent_event)
            merged = _merge(graph, progress, outcomes)
            joins = [list(seen) for seen in progress.joins]
            following = await _route(graph, progress.next, outcomes, merged, joins)
        except Exception as exc:
            if checkpoint is not None and run_id and len(outcomes) > len(progress.done):
                progress.done = outcomes
                await save_after_failure(checkpoint, run_id, progress, tally, exc)
            raise
        history.append(tuple(progress.next))
        progress = Progress(progress.step + 1, following, merged, joins, {})
        if checkpoint is not None and run_id:
            await save(checkpoint, run_id, progress, tally)
    return GraphResult(
        state=progress.state,
        steps=progress.step,
        history=tuple(history),
        usage=tally.usage,
        cost=tally.cost,
        resumed=saved is not None,
    )


async def _run_nodes(
    graph: GraphSpec,
    progress: Progress,
    outcomes: dict[str, Outcome],
    tally: Tally,
    cancel: CancelToken | None,
    on_node: NodeObserver | None,
    on_agent_event: NodeAgentObserver | None,
) -> None:
    """Run the superstep's nodes that have no outcome yet, in parallel, into ``outcomes``."""
    snapshot = MappingProxyType(progress.state)
    step = progress.step

    async def run_one(name: str) -> None:
        ctx = GraphContext(
            name, snapshot, step, cancel=cancel, tally=tally, on_agent_event=on_agent_event
        )
        if on_node is not None:
            on_node(NodeStarted(node=name, step=step))
            started = time.perf_counter()
        try:
            outcomes[name] = _outcome(await call(graph.nodes[name].fn, ctx))
        except RunCancelled:
            raise
        except Exception as exc:
            if on_node is not None:
                seconds = time.perf_counter() - started
                on_node(NodeFailed(node=name, seconds=seconds, error=exc, step=step))
            raise NodeError(name, exc) from exc
        if on_node is not None:
            on_node(NodeFinished(node=name, seconds=time.perf_counter() - started, step=step))

    with cancellable(cancel):
        async with asyncio.TaskGroup() as group:
            for name in progress.next:
                if name not in outcomes:
                    group.create_task(run_one(name))


def _outcome(result: object) -> Outcome:
    if result is None:
        return Outcome(None, None)
    if isinstance(result, NodeOutcome):
        update = dict(result.update) if result.update is not None else None
        goto = result.goto
        return Outcome(update, None if goto is None else _names(goto))
    if isinstance(result, str):
        return Outcome(None, (result,))
    if isinstance(result, Mapping):
        return Outcome(dict(result), None)
    if isinstance(result, (list, tuple)):
        return Outcome(None, _names(result))
    raise TypeError(
        f"returned {type(result).__name__}: return a NodeOutcome, a state update (a mapping), "
        "the next node's name(s) or None"
    )


def _names(goto: str | Sequence[str]) -> tuple[str, ...]:
    names = (goto,) if isinstance(goto, str) else tuple(goto)
    if not all(isinstance(name, str) for name in names):
        raise TypeError(f"goto must name nodes with strings, got {goto!r}")
    return names


def _merge(graph: GraphSpec, progress: Progress, outcomes: dict[str, Outcome]) -> dict[str, Any]:
    """The state after the superstep: every update, through the keys' reducers."""
    writers: dict[str, list[str]] = {}
    for name in progress.next:
        for key in outcomes[name].update or ():
            writers.setdefault(key, []).append(name)
    state = dict(progress.state)
    for key, names in writers.items():
        reducer = graph.reducers.get(key)
        if reducer is None:
            if len(names) > 1:
                raise StateConflictError(key, names, progress.step)
            state[key] = _update(outcomes, names[0], key)
            continue
        value = state.get(key)
        for name in names:
            try:
                value = reducer(value, _update(outcomes, name, key))
            except Exception as exc:
                raise OrchestrationError(
                    f"the reducer of state key {key!r} failed on the update of node {name!r}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        state[key] = value
    return state


def _update(outcomes: dict[str, Outcome], name: str, key: str) -> Any:
    update = outcomes[name].update
    assert update is not None
    return update[key]


async def _route_start(graph: GraphSpec, state: dict[str, Any]) -> list[str]:
    targets = list(graph.edges.get(START, ()))
    targets += await _pick(graph, START, state)
    return list(dict.fromkeys(target for target in targets if target != END))


async def _route(
    graph: GraphSpec,
    ran: Sequence[str],
    outcomes: dict[str, Outcome],
    state: dict[str, Any],
    joins: list[list[str]],
) -> list[str]:
    """The next superstep's nodes, in a deterministic order; updates ``joins`` in place."""
    targets: list[str] = []
    for name in ran:
        goto = outcomes[name].goto
        if goto is None:
            targets += graph.edges.get(name, ())
            targets += await _pick(graph, name, state)
            continue
        allowed = graph.nodes[name].destinations
        for target in goto:
            if target not in allowed:
                raise OrchestrationError(
                    f"node {name!r} routed to {target!r}, which is not one of its destinations "
                    f"({', '.join(allowed) or 'none declared'}): declare it with "
                    f"add_node({name!r}, ..., destinations=[...])"
                )
        targets += goto
    for index, join in enumerate(graph.joins):
        seen = set(joins[index]).union(name for name in ran if name in join.sources)
        if seen.issuperset(join.sources):
            targets.append(join.target)
            seen.clear()
        joins[index] = [source for source in join.sources if source in seen]
    return list(dict.fromkeys(target for target in targets if target != END))


async def _pick(graph: GraphSpec, source: str, state: dict[str, Any]) -> list[str]:
    router = graph.routers.get(source)
    if router is None:
        return []
    try:
        picked = await call(router.fn, MappingProxyType(state))
        labels = _names(picked)
    except Exception as exc:
        raise NodeError(source, exc, what="router of") from exc
    unknown = [label for label in labels if label not in router.routes]
    if unknown:
        raise OrchestrationError(
            f"the router of {source!r} picked unknown route(s) {', '.join(map(repr, unknown))}; "
            f"routes: {', '.join(map(repr, router.routes))}"
        )
    return [router.routes[label] for label in labels]
