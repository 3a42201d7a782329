"""A Responses run travels to a worker as its spec: versioned JSON that makes the same run."""

from __future__ import annotations

import json

import pytest

from daimon import Agent, Message
from daimon._paused_runs import PausedRuns
from daimon._run_logs import JOB_KEY, NativeJob, log_job
from daimon.core.errors import BuilderError, SerializationError
from daimon.core.results import AgentResponse
from daimon.distributed import new_task
from daimon.models import FunctionModel
from daimon.server._client_tools import RunStart, spec
from daimon.server._responses_run import ResponseRun, ResponseStore, job_from_spec
from daimon.serverstate import MemoryStateStore


def a_run(store: MemoryStateStore, agent: Agent) -> ResponseRun:
    async def opened() -> MemoryStateStore:
        return store

    tool = spec("lookup", "Look a thing up.", {"type": "object", "properties": {}})
    conversation = RunStart(
        prompt=Message.user("now?"),
        history=[Message.user("earlier"), Message.assistant("yes")],
        instructions="be brief",
        client_tools=(tool,),
        resumed=AgentResponse(text="paused", run_id="r1"),
        results={"call-1": "42"},
    )
    obj = {"id": "resp_abc", "model": "helper", "status": "queued", "background": True}
    return ResponseRun(
        agent=agent,
        conversation=conversation,
        obj=obj,
        keep=True,
        kept=ResponseStore(opened, 60.0),
        paused=PausedRuns(store, "responses", 60.0),
        timeout=12.0,
        tool_choice="lookup",
    )


def test_a_spec_makes_the_same_run_on_a_worker() -> None:
    store = MemoryStateStore()
    agent = Agent(FunctionModel(lambda r: "hi"), name="helper")
    run = a_run(store, agent)
    spec_json = json.loads(json.dumps(run.spec()))  # it travels as JSON
    again = job_from_spec(agent, spec_json, store)
    assert again.obj == run.obj
    assert again.conversation == run.conversation
    assert (again.keep, again.timeout, again.tool_choice) == (True, 12.0, "lookup")
    assert again.kept.ttl == 60.0
    assert getattr(again.agent, "tool_choice", None) == "lookup"  # applied on the worker too


def test_a_spec_of_another_format_or_kind_is_refused() -> None:
    store = MemoryStateStore()
    agent = Agent(FunctionModel(lambda r: "hi"), name="helper")
    newer = {**a_run(store, agent).spec(), "format": 2}
    with pytest.raises(SerializationError, match="format 2; this daimon reads 1"):
        job_from_spec(agent, newer, store)
    task = new_task("", metadata={JOB_KEY: {"kind": "fax"}})
    with pytest.raises(BuilderError, match="kind 'fax'"):
        log_job(agent, task, store)
    assert isinstance(log_job(agent, new_task("plain"), store), NativeJob)


def test_a_spec_the_workers_agent_cannot_run_fails_for_good() -> None:
    store = MemoryStateStore()
    agent = Agent(FunctionModel(lambda r: "hi"), name="helper")
    spec_json = {**a_run(store, agent).spec(), "tool_choice": "no_such_tool"}
    task = new_task("", metadata={JOB_KEY: spec_json})
    with pytest.raises(BuilderError, match="responses run this worker cannot make"):
        log_job(agent, task, store)
