"""``--limits`` and ``--limits-store`` on ``daimon serve`` and ``daimon worker``; agent files."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from daimon.cli.limits import parse_limits
from daimon.cli.loading import ConfigError, load_agent_file
from daimon.core import BuilderError
from daimon.limits import RateLimits

from .conftest import CLI, cli_env, daimon_command


def test_limits_read_every_field() -> None:
    given = "rpm=500, itpm=200000,otpm=50000,concurrent=20,period=60,max_wait=5.5"
    assert parse_limits(given) == RateLimits(
        requests_per_minute=500,
        input_tokens_per_minute=200_000,
        output_tokens_per_minute=50_000,
        concurrent=20,
        period=60.0,
        max_wait=5.5,
    )
    assert parse_limits("concurrent=2") == RateLimits(concurrent=2)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("rpm=abc", "rpm must be a positive whole number, got 'abc'"),
        ("rpm=0", "rpm must be a positive whole number, got '0'"),
        ("itpm=1.5", "itpm must be a positive whole number, got '1.5'"),
        ("period=-1", "period must be a positive number of seconds, got '-1'"),
        ("max_wait=inf", "max_wait must be a positive number of seconds, got 'inf'"),
        ("tpm=5", "unknown field 'tpm' (known fields: rpm, itpm, otpm, concurrent, period"),
        ("otpm", "otpm needs a value: otpm=N"),
        ("", "no limits given"),
    ],
)
def test_a_bad_limit_names_its_field(given: str, message: str) -> None:
    with pytest.raises(BuilderError) as caught:
        parse_limits(given)
    assert message in str(caught.value)


def test_bad_limit_options_exit_2_with_one_line(cli: CLI) -> None:
    cases = [
        (
            ("worker", "agents:calculating", "--broker", "memory://", "--limits", "rpm=abc"),
            "error: --limits: rpm must be a positive whole number, got 'abc'",
        ),
        (
            ("serve", "agents:calculating", "--limits", "rpm=5,bogus=1"),
            "error: --limits: unknown field 'bogus'",
        ),
        (
            ("serve", "agents:calculating", "--limits", "rpm=5", "--limits-store", "ftp://x"),
            "error: --limits-store: no limit store for 'ftp://x'",
        ),
        (
            ("worker", "agents:calculating", "--broker", "memory://", "--limits-store", "redis://"),
            "error: --limits-store needs --limits",
        ),
        (
            ("serve", "agents:team", "--limits", "rpm=5"),
            "error: --limits applies to agents, not a Supervisor",
        ),
    ]
    for args, message in cases:
        refused = cli(*args)
        assert refused.returncode == 2, refused.stderr
        lines = [line for line in refused.stderr.splitlines() if line.startswith("error")]
        assert len(lines) == 1 and lines[0].startswith(message), refused.stderr


def test_a_served_agent_waits_its_turn_and_its_stream_says_so(tmp_path: Path) -> None:
    """The calculating agent calls its model twice a prompt: at one a period, the second waits."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ("--port", str(port), "--limits", "rpm=1,period=0.5")
    process = subprocess.Popen(
        daimon_command("serve", "agents:calculating", *args),
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
                    f"http://127.0.0.1:{port}/prompt/stream", json={"input": "sum?"}, timeout=30
                )
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.2)
        assert response.status_code == 200, response.text
        kinds = [line[7:] for line in response.text.splitlines() if line.startswith("event: ")]
        assert kinds.count("rate_limit_wait") == 1, kinds
        assert kinds.index("rate_limit_wait") > kinds.index("tool_result")  # the second call
        assert '"key":"function"' in response.text.replace(" ", "")
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_an_agent_file_takes_rate_limits(tmp_path: Path) -> None:
    from daimon.cli.app import _build_agent
    from daimon.cli.render import JsonRenderer
    from daimon.limits import LimitedModel

    path = tmp_path / "agent.yaml"
    path.write_text("model: scripted:x\nrate_limits: {rpm: 60, concurrent: 2, period: 1}\n")
    config = load_agent_file(path)
    assert config.rate_limits == RateLimits(requests_per_minute=60, concurrent=2, period=1.0)
    assert config.rate_limits_store is None

    path.write_text("rate_limits: {rpm: 60, store: 'memory://'}\n")
    agent = _build_agent(
        JsonRenderer(),
        model="openai-compatible:m@http://127.0.0.1:9/v1",
        system=None,
        tools=(),
        agent_spec=str(path),
        demo_tool=False,
    )
    assert agent.limits is not None and isinstance(agent.model, LimitedModel)
    assert agent.limits.limits == RateLimits(requests_per_minute=60)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("{rpm: fast}", "rate_limits: rpm must be a positive whole number, got 'fast'"),
        ("{rpm: 5, tpm: 5}", "unknown field rate_limits.tpm"),
        ("{period: 0}", "rate_limits: period must be a positive number of seconds, got 0"),
        ("{rpm: 5, store: 7}", "rate_limits.store must be a non-empty string"),
    ],
)
def test_a_bad_rate_limits_table_names_the_field(tmp_path: Path, table: str, message: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(f"rate_limits: {table}\n")
    with pytest.raises(ConfigError) as caught:
        load_agent_file(path)
    assert message in str(caught.value)
