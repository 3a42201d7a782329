"""Debian's Chromium driven by playwright, the agents the page talks to, and screenshot artifacts.

Screenshots go to ``$DAIMON_ARTIFACTS/ui`` when set, else ``tests/server/ui/artifacts`` (ignored
by git); each test prints where it wrote them.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from daimon import Agent, ChatRequest, ModelError, Role, ToolCall, Usage, tool
from daimon.core.events import StreamEvent, ToolCallEnd, UsageEvent
from daimon.models import FunctionModel

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

TOKEN = "ui-test-token-0123456789"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = (
    Path(os.environ["DAIMON_ARTIFACTS"]) / "ui"
    if os.environ.get("DAIMON_ARTIFACTS")
    else Path(__file__).parent / "artifacts"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A headless Chromium (Debian's package: browser downloads fail here) per test module.

    Per module, not per session: playwright's sync API keeps an event loop running in the main
    thread while it is open, and the async tests of other modules need that thread's loop free.
    """
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: apt-get install chromium chromium-driver (.ci/run does it)",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (empty storage) and page; console errors fail the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"errors on the page: {errors}"


class Shots:
    """Writes numbered screenshots of one test's states into the artifact folder."""

    def __init__(self, name: str) -> None:
        self.folder = ARTIFACTS
        self.folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.paths: list[Path] = []

    def __call__(self, page: Page, state: str) -> Path:
        path = self.folder / f"{self.name}-{len(self.paths) + 1:02d}-{state}.png"
        page.screenshot(path=str(path), full_page=True)
        self.paths.append(path)
        print(f"screenshot: {path}")
        return path


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Shots:
    """``shots(page, "state")`` saves a screenshot named after the test."""
    return Shots(request.node.name.removeprefix("test_"))


# ---------------------------------------------------------------------------------- agents


def calculator(gate: threading.Event | None = None) -> Agent:
    """Streams a sentence, calls three tools at once (one fails), then streams the answer.

    ``add`` takes 0.3 s, and first waits for ``gate`` when one is given (so a test can look at
    the page while the run is under way).
    """

    @tool
    async def add(a: float, b: float) -> float:
        """Add two numbers."""
        if gate is not None:
            await asyncio.to_thread(gate.wait, 10)
        await asyncio.sleep(0.3)
        return a + b

    @tool
    async def multiply(a: float, b: float) -> float:
        """Multiply two numbers."""
        await asyncio.sleep(0.15)
        return a * b

    @tool
    def divide(a: float, b: float) -> float:
        """Divide a by b."""
        return a / b

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent | str]:
        last_prompt = max(i for i, m in enumerate(request.messages) if m.role is Role.USER)
        results = [m for m in request.messages[last_prompt:] if m.role is Role.TOOL]
        if not results:
            for word in ("Let ", "me ", "work ", "that ", "out."):
                await asyncio.sleep(0.02)
                yield word
            yield ToolCallEnd(call=ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3}))
            yield ToolCallEnd(
                call=ToolCall(id="c2", name="multiply", arguments={"a": 4, "b": 5}), index=1
            )
            yield ToolCallEnd(
                call=ToolCall(id="c3", name="divide", arguments={"a": 1, "b": 0}), index=2
            )
            yield UsageEvent(usage=Usage(input_tokens=42, output_tokens=12, requests=1))
            return
        by_name = {m.name: m.text for m in results}
        answer = f"The sum is {by_name['add']} and the product is {by_name['multiply']}."
        for word in answer.split(" "):
            await asyncio.sleep(0.02)
            yield word + " "
        yield UsageEvent(usage=Usage(input_tokens=80, output_tokens=15, requests=1))

    model = FunctionModel(stream_function=stream, model_name="scripted-calculator")
    return Agent(model, name="calc", tools=[add, multiply, divide])


def echo() -> Agent:
    """Answers ``echo: <prompt> (<n> messages)``, n counting the session's messages it saw."""

    async def stream(request: ChatRequest) -> AsyncIterator[str]:
        yield f"echo: {request.messages[-1].text} ({len(request.messages)} messages)"

    return Agent(FunctionModel(stream_function=stream, model_name="echo-model"), name="echo")


class Slow:
    """An agent whose model streams one word, then waits until cancelled (and says so)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()

        async def stream(request: ChatRequest) -> AsyncIterator[str]:
            yield "Thinking"
            self.started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            yield " (never)"

        self.agent = Agent(FunctionModel(stream_function=stream, model_name="slow"), name="slow")


def failing() -> Agent:
    """Its model streams a word, then fails as a provider would."""

    async def stream(request: ChatRequest) -> AsyncIterator[str]:
        yield "Starting"
        raise ModelError("the provider is down", status_code=503)

    return Agent(FunctionModel(stream_function=stream, model_name="down"), name="failing")


def approver() -> Agent:
    """Calls ``transfer`` (which needs a person's approval), then says what it did."""

    @tool(requires_approval=True)
    def transfer(amount: int) -> str:
        """Move money."""
        return f"moved {amount}"

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent | str]:
        last = request.messages[-1]
        if last.role is Role.TOOL:
            yield f"Done: {last.text}"
            return
        yield ToolCallEnd(call=ToolCall(id="tx-1", name="transfer", arguments={"amount": 5}))

    model = FunctionModel(stream_function=stream, model_name="bank-model")
    return Agent(model, name="bank", tools=[transfer])


def looker() -> Agent:
    """Answers with the prompt's text and what files it was given (media type, size, name)."""

    async def stream(request: ChatRequest) -> AsyncIterator[str]:
        last = request.messages[-1]
        seen = []
        for part in last.media:
            name = getattr(part, "name", None)
            size = len(part.data) if part.data is not None else 0
            seen.append(f"{part.media_type} {size} bytes" + (f" {name}" if name else ""))
        yield f"text: {last.text!r}; files: {'; '.join(seen) or 'none'}"

    return Agent(FunctionModel(stream_function=stream, model_name="looker-model"), name="looker")
