"""``daimon eval``, ``daimon mcp serve`` and ``daimon a2a serve`` as a user runs them."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from .conftest import CLI, cli_env, daimon_command

REDIS = "redis://127.0.0.1:6379/0"


def write_dataset(path: Path, expect_answer: str) -> Path:
    lines = [
        {"name": "calculates", "input": "12.5 * 4 + 3?", "expect": {"tool_called": "calculator"}},
        {"name": "answers", "input": "12.5 * 4 + 3?", "expect": {"contains": expect_answer}},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_eval_passes_and_writes_its_report(cli: CLI, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "cases.jsonl", "53.0")
    report = tmp_path / "report.json"
    result = cli("eval", str(dataset), "agents:calculating", "--report", str(report))
    assert result.returncode == 0, result.stderr
    saved = json.loads(report.read_text())
    assert [r["scenario"] for r in saved["results"]] == ["calculates", "answers"]
    assert all(r["passed"] for r in saved["results"])


def test_eval_below_the_threshold_exits_1_for_ci(cli: CLI, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "cases.jsonl", "54")
    result = cli("eval", str(dataset), "agents:calculating", "--threshold", "0.9")
    assert result.returncode == 1
    assert "answers" in result.stdout


def test_eval_runs_any_promptable_a_supervisor_and_a_flow(cli: CLI, tmp_path: Path) -> None:
    delegated = {"tool_called": "delegate", "contains": "team: "}
    dataset = tmp_path / "team.jsonl"
    dataset.write_text(json.dumps({"name": "team", "input": "2 + 3?", "expect": delegated}))
    team = cli("eval", str(dataset), "agents:team")
    assert team.returncode == 0, team.stderr + team.stdout
    shouted = tmp_path / "shout.jsonl"
    shouted.write_text(json.dumps({"name": "loud", "input": "hi", "expect": {"contains": "HI!"}}))
    flow = cli("eval", str(shouted), "agents:shout")
    assert flow.returncode == 0, flow.stderr + flow.stdout


def test_serving_a_bad_agent_or_exposed_without_a_token_exits_2(cli: CLI) -> None:
    bad = cli("mcp", "serve", "agents:not_an_agent")
    assert bad.returncode == 2 and "not a daimon Agent" in bad.stderr
    assert "Traceback" not in bad.stderr
    exposed = cli("mcp", "serve", "agents:calculating", "--transport", "http", "--host", "0.0.0.0")
    assert exposed.returncode == 2 and "token" in exposed.stderr
    a2a = cli("a2a", "serve", "agents:calculating", "--host", "0.0.0.0")
    assert a2a.returncode == 2 and "token" in a2a.stderr


@pytest.mark.parametrize(
    ("command", "library", "missing", "extra"),
    [
        (("serve", "agents:calculating"), "uvicorn", "uvicorn", "server"),
        (("mcp", "serve", "agents:calculating"), "mcp", "mcp", "mcp"),
        (("a2a", "serve", "agents:calculating"), "a2a", "a2a", "a2a"),
        (("run", "--model", "openai:gpt-4o-mini", "2 + 3?"), "openai", "openai", "openai"),
        (
            ("worker", "agents:calculating", "--broker", "redis://127.0.0.1:6379"),
            "redis",
            "redis.asyncio",
            "redis",
        ),
    ],
    ids=["serve", "mcp serve", "a2a serve", "run", "worker"],
)
def test_a_missing_extra_is_one_line_and_exit_2_in_every_command(
    cli: CLI, command: tuple[str, ...], library: str, missing: str, extra: str
) -> None:
    result = cli(*command, without=library)
    notes = ("agent: ", "model: ")  # what is served or run, said before it starts
    lines = [line for line in result.stderr.splitlines() if not line.startswith(notes)]
    assert (result.returncode, len(lines)) == (2, 1), result.stderr
    assert lines[0] == (
        f"error: {missing!r} is not installed; install it with: "
        f'pip install "daimon-agents[{extra}]"'
    )


async def test_the_official_mcp_client_uses_an_agent_served_over_stdio(tmp_path: Path) -> None:
    from mcp import Client, StdioServerParameters

    command, *args = daimon_command("mcp", "serve", "agents:calculating")
    params = StdioServerParameters(command=command, args=args, env=cli_env(), cwd=str(tmp_path))
    async with Client(params) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"calculator", "ask_calculating"} <= tools
        result = await client.call_tool("calculator", {"expression": "6 * 7"})
        assert not result.is_error
        assert "42" in json.dumps(result.model_dump(mode="json"))


def test_mcp_serve_over_websocket(cli: CLI, tmp_path: Path) -> None:
    import asyncio

    from daimon.mcp import MCPClient

    exposed = cli("mcp", "serve", "agents:calculating", "--transport", "ws", "--host", "0.0.0.0")
    assert exposed.returncode == 2 and "token" in exposed.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        daimon_command(
            "mcp", "serve", "agents:calculating", "--transport", "ws", "--port", str(port)
        ),
        env=cli_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    async def calculate() -> str:
        deadline = time.monotonic() + 60
        while True:
            client = MCPClient.websocket(f"ws://127.0.0.1:{port}/mcp", connect_timeout=30)
            try:
                await client.connect()
                break
            except Exception:
                assert time.monotonic() < deadline, "the server did not come up"
                await asyncio.sleep(0.2)
        try:
            return str((await client.call_tool("calculator", {"expression": "6 * 7"})).content)
        finally:
            await client.aclose()

    try:
        assert "42" in asyncio.run(calculate())
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.mark.service("redis")
def test_worker_runs_tasks_from_redis_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    import asyncio
    import signal
    import subprocess
    import uuid

    from daimon.distributed import broker_from_url, new_task, wait_for_task

    queue = f"cli-{uuid.uuid4().hex[:8]}"
    url = "redis://127.0.0.1:6379/0"
    command = ["worker", "agents:calculating", "--broker", url, "--queue", queue]
    process = subprocess.Popen(
        daimon_command(*command),
        env=cli_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    async def submit_and_wait() -> str:
        broker = broker_from_url(url, queue=queue)
        try:
            task_id = await broker.submit(new_task("what is 12.5 * 4 + 3?"))
            async with asyncio.timeout(60):
                status = await wait_for_task(broker, task_id)
            assert status.result is not None
            return status.result.output
        finally:
            await broker.aclose()

    try:
        assert asyncio.run(submit_and_wait()) == "12.5 * 4 + 3 = 53.0"
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err


def test_serve_answers_over_http_and_refuses_to_be_exposed_without_a_token(
    cli: CLI, tmp_path: Path
) -> None:
    import socket
    import subprocess
    import time

    import httpx

    exposed = cli("serve", "agents:calculating", "--host", "0.0.0.0")
    assert exposed.returncode == 2 and "token" in exposed.stderr

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        daimon_command("serve", "agents:calculating", "--port", str(port)),
        env=cli_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{port}/prompt", json={"input": "12.5 * 4 + 3?"}, timeout=30
                )
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.2)
        assert response.status_code == 200, response.text
        assert response.json()["text"] == "12.5 * 4 + 3 = 53.0"
    finally:
        process.terminate()
        process.communicate(timeout=30)


def _start_serving(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], int]:
    """``daimon serve agents:calculating --port <free> ARGS`` as a subprocess, and its port."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port: int = s.getsockname()[1]
    command = daimon_command("serve", "agents:calculating", "--port", str(port), *args)
    process = subprocess.Popen(
        command,
        env=cli_env(**(env or {})),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, port


def _get_agents(port: int, host: str, deadline: float) -> httpx.Response:
    """GET /agents with ``Host: host`` and the token, retrying until the server is up."""
    while True:
        try:
            return httpx.get(
                f"http://127.0.0.1:{port}/agents",
                headers={"Host": host, "Authorization": "Bearer T0ken"},
                timeout=10,
            )
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.2)


def test_serve_on_0_0_0_0_takes_its_allowed_hosts_from_the_flag_or_the_environment(
    cli: CLI, tmp_path: Path
) -> None:
    """``--host 0.0.0.0 --token T`` was always refused (issue 17, item 10)."""
    refused = cli("serve", "agents:calculating", "--host", "0.0.0.0", "--token", "T0ken")
    assert refused.returncode == 2
    assert "--allowed-host" in refused.stderr and "DAIMON_ALLOWED_HOSTS" in refused.stderr
    assert "Traceback" not in refused.stderr

    exposed = ("--host", "0.0.0.0", "--token", "T0ken")
    by_flag = _start_serving(tmp_path, *exposed, "--allowed-host", "example.test")
    by_env = _start_serving(
        tmp_path, *exposed, env={"DAIMON_ALLOWED_HOSTS": "first.test, example.test"}
    )
    try:
        deadline = time.monotonic() + 60
        for _, port in (by_flag, by_env):
            named = _get_agents(port, f"example.test:{port}", deadline)
            assert named.status_code == 200, named.text
            assert named.json()["default"] == "calculating"
            other = _get_agents(port, f"attacker.test:{port}", deadline)
            assert other.status_code == 403, other.text
        assert _get_agents(by_env[1], "first.test", deadline).status_code == 200
        assert _get_agents(by_flag[1], "first.test", deadline).status_code == 403
    finally:
        for process, _ in (by_flag, by_env):
            process.terminate()
            process.communicate(timeout=30)


def _worker(tmp_path: Path, queue: str, *args: str, **env: str) -> subprocess.Popen[str]:
    """``daimon worker agents:lingering`` on the Redis queue ``queue``, as a subprocess."""
    command = ["worker", "agents:lingering", "--broker", REDIS, "--queue", queue, *args]
    return subprocess.Popen(
        daimon_command(*command),
        env=cli_env(**env),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.service("redis")
def test_a_killed_workers_task_runs_again_after_its_lease(tmp_path: Path) -> None:
    """``daimon worker --lease 2``: a SIGKILLed worker's task is taken over within seconds,
    not the broker's default 30 (issue 17, item 12)."""
    import asyncio
    import signal
    import uuid

    from daimon.core import TaskStatus
    from daimon.distributed import broker_from_url, new_task, wait_for_task

    queue = f"cli-lease-{uuid.uuid4().hex[:8]}"

    async def submit() -> str:
        async with broker_from_url(REDIS, queue=queue) as broker:
            return await broker.submit(new_task("the report"))

    async def finished(task_id: str) -> TaskStatus:
        async with broker_from_url(REDIS, queue=queue) as broker, asyncio.timeout(25):
            return await wait_for_task(broker, task_id)  # the default lease, 30 s, is too late

    task_id = asyncio.run(submit())
    started = tmp_path / "started"
    lingering = {"DAIMON_TEST_STARTED": str(started), "DAIMON_TEST_LINGER": "1"}
    first = _worker(tmp_path, queue, "--lease", "2", **lingering)
    try:
        deadline = time.monotonic() + 60
        while not started.exists():  # the task is running in the first worker
            assert first.poll() is None, f"the worker exited: {first.communicate()[1]}"
            assert time.monotonic() < deadline, "the worker never started the task"
            time.sleep(0.05)
    finally:
        first.kill()
        first.communicate(timeout=30)
    killed = time.monotonic()
    second = _worker(tmp_path, queue, "--lease", "2")
    try:
        status = asyncio.run(finished(task_id))
        took = time.monotonic() - killed
    finally:
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert status.result is not None and status.result.output == "done: the report"
    assert took < 15, f"the task was taken over {took:.1f} s after the kill"


def test_worker_lease_must_be_a_positive_number_of_seconds(cli: CLI) -> None:
    for bad in ("0", "-1", "nan", "inf"):
        refused = cli("worker", "agents:lingering", "--broker", "memory://", "--lease", bad)
        assert refused.returncode == 2, refused.stderr
        assert "Invalid value for '--lease': must be a positive number of seconds" in (
            refused.stderr
        ), refused.stderr


async def test_the_official_mcp_client_asks_a_supervisor_served_over_stdio(tmp_path: Path) -> None:
    from mcp import Client, StdioServerParameters

    command, *args = daimon_command("mcp", "serve", "agents:team")
    params = StdioServerParameters(command=command, args=args, env=cli_env(), cwd=str(tmp_path))
    async with Client(params) as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == ["ask_team"]
        result = await client.call_tool("ask_team", {"prompt": "what is 12.5 * 4 + 3?"})
        assert not result.is_error
        assert result.content[0].text == "team: 12.5 * 4 + 3 = 53.0"  # type: ignore[union-attr]
