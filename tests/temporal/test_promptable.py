"""TemporalAgent: runs on Temporal behind the Promptable protocol, so front ends serve them."""

from __future__ import annotations

import httpx
from temporalio.client import Client

from daimon.server import create_app
from daimon.temporal import TemporalAgent, serving

from ._agents import arithmetic, refunds


async def test_prompt_pauses_for_approval_and_resume_finishes_by_run_id(
    client: Client, task_queue: str
) -> None:
    remote = TemporalAgent(client, "refunds", task_queue=task_queue)
    async with serving(client, [refunds], task_queue=task_queue):
        paused = await remote.prompt("refund order 8", run_id=f"refund-8-{task_queue}")
        assert paused.paused and paused.run_id == f"refund-8-{task_queue}"
        (pending,) = paused.pending_approvals
        response = await remote.resume(paused.run_id, {pending.id: True})
    assert response.text == "refund: order 8 refunded"


async def test_daimon_serve_runs_its_prompts_on_temporal(client: Client, task_queue: str) -> None:
    app = create_app(TemporalAgent(client, "arithmetic", task_queue=task_queue))
    transport = httpx.ASGITransport(app=app)
    async with (
        serving(client, [arithmetic], task_queue=task_queue),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http,
    ):
        answer = await http.post("/prompt", json={"input": "add 6 7"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["text"] == "the sum is 13"
