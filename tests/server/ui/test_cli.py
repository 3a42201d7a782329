"""``daimon serve`` serves the page at ``/`` (end to end, in a browser); ``--no-ui`` does not."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from playwright.sync_api import expect

from .conftest import Shots

if TYPE_CHECKING:
    from playwright.sync_api import Page

AGENTS = Path(__file__).parents[2] / "cli"  # tests/cli/agents.py: the CLI tests' agents


@contextmanager
def daimon_serve(*options: str) -> Iterator[str]:
    """Run ``daimon serve agents:calculating`` on a free loopback port; yield its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(AGENTS), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("DAIMON_TOKEN", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daimon.cli",
            "serve",
            "agents:calculating",
            "--port",
            str(port),
            *options,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/health", timeout=5)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "daimon serve did not come up"
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.mark.timeout(120)
def test_daimon_serve_serves_the_playground(page: Page, shots: Shots) -> None:
    with daimon_serve() as url:
        page.goto(url)
        expect(page.get_by_label("Agent")).to_have_value("calculating")
        box = page.get_by_label("Message")
        box.fill("12.5 * 4 + 3?")
        box.press("Control+Enter")
        expect(page.get_by_test_id("answer")).to_contain_text("12.5 * 4 + 3 = 53.0")
        expect(page.get_by_role("article", name="Tool call calculator")).to_contain_text("53.0")
        shots(page, "answered")


@pytest.mark.timeout(120)
def test_no_ui_serves_the_api_only() -> None:
    with daimon_serve("--no-ui") as url:
        assert httpx.get(f"{url}/").status_code == 404
        assert httpx.get(f"{url}/ui/app.js").status_code == 404
        assert httpx.get(f"{url}/agents").status_code == 200
