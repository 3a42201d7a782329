"""The playground in a real browser: chat, tool cards, inspector, cancel, sessions, token."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from playwright.sync_api import expect

from .conftest import TOKEN, Shots, Slow, approver, calculator, echo, failing

if TYPE_CHECKING:
    from playwright.sync_api import Page

Live = Callable[..., Any]
"""tests/server's ``live`` fixture: ``live(agents, **settings)`` starts a server."""


def send(page: Page, text: str) -> None:
    """Type ``text`` into the message box and send it with Ctrl+Enter."""
    box = page.get_by_label("Message")
    box.fill(text)
    box.press("Control+Enter")


def test_a_prompt_streams_its_answer_with_tool_cards_and_a_timeline(
    live: Live, page: Page, shots: Shots
) -> None:
    gate = threading.Event()
    server = live({"calc": calculator(gate), "echo": echo()}, ui=True)
    page.goto(server.url)
    agent = page.get_by_label("Agent")
    expect(agent).to_be_enabled()
    expect(agent.locator("option")).to_have_count(2)
    expect(agent).to_have_value("calc")
    shots(page, "loaded")

    send(page, "What are 2 + 3 and 4 * 5?")
    answer = page.get_by_test_id("answer").last
    # Streamed: the first words and the tool cards show while the tools still run.
    expect(answer).to_contain_text("Let me work that out.")
    add = page.get_by_role("article", name="Tool call add")
    expect(add).to_contain_text("running…")
    expect(add).to_contain_text('"a": 2')
    expect(page.get_by_role("button", name="Cancel")).to_be_enabled()
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    live_timeline = page.get_by_role("list", name="Run timeline")
    expect(live_timeline.locator(".bar.model.ok")).to_have_count(1)
    expect(live_timeline.locator(".bar.tool.running")).to_have_count(3)
    shots(page, "streaming")
    gate.set()

    expect(answer).to_contain_text("The sum is 5 and the product is 20.")
    expect(add.get_by_label("Result")).to_have_text("5")
    expect(add).to_contain_text("done")
    expect(add.locator(".tool-duration")).to_have_text(re.compile(r"^\d+ ms$"))
    failed = page.get_by_role("article", name="Tool call divide")
    expect(failed).to_have_class("tool-card failed")
    expect(failed.get_by_label("Error")).to_contain_text("division by zero")
    expect(page.get_by_text("This turn: 122 in · 27 out tokens · $0.0000")).to_be_visible()
    expect(page.get_by_text("Session: 122 in · 27 out tokens · $0.0000")).to_be_visible()
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()

    timeline = page.get_by_role("list", name="Run timeline")
    bars = timeline.get_by_role("listitem")
    expect(bars).to_have_count(5)  # two model calls, three tool calls
    expect(timeline.locator(".bar.model")).to_have_count(2)
    # The three tools ran at once: side by side, one lane each.
    lanes = timeline.locator(".bar.tool").evaluate_all("bars => bars.map(b => b.dataset.lane)")
    assert sorted(lanes) == ["1", "2", "3"]
    expect(timeline.locator(".bar.tool.error")).to_have_count(1)
    expect(timeline.locator(".bar.tool.error")).to_have_attribute(
        "aria-label", re.compile(r"^divide, tool call, \d+ ms, error$")
    )
    add_bar = timeline.locator(".bar.tool", has_text="add")
    add_label = add_bar.get_attribute("aria-label") or ""
    assert float(add_label.split(", ")[2].split(" ")[0]) >= 300  # the tool sleeps 0.3 s
    expect(page.get_by_text("done ·", exact=False)).to_be_visible()
    shots(page, "answered")

    # A second turn, then the first one's run back in the inspector.
    send(page, "Again?")
    expect(page.get_by_test_id("answer")).to_have_count(2)
    expect(page.get_by_test_id("answer").last).to_contain_text("The sum is 5 and")
    expect(page.get_by_text("Session: 244 in · 54 out tokens")).to_be_visible()
    page.get_by_role("button", name="Inspect run").first.click()
    expect(page.get_by_role("heading", name="Run inspector")).to_be_focused()
    expect(bars).to_have_count(5)


_BROKEN_WORDS = """summary => {
  const text = summary.firstChild;
  const broken = [];
  for (const word of text.textContent.matchAll(/\\S+/g)) {
    const range = document.createRange();
    range.setStart(text, word.index);
    range.setEnd(text, word.index + word[0].length);
    const lines = new Set([...range.getClientRects()].map((rect) => Math.round(rect.top)));
    if (lines.size > 1) broken.push(word[0]);
  }
  return {broken, overflows: summary.scrollWidth > summary.clientWidth};
}"""
"""The words of the run summary laid out across a line break, and whether it overflows."""


def test_the_run_summary_breaks_lines_between_words(live: Live, page: Page, shots: Shots) -> None:
    server = live(calculator(), ui=True)
    page.set_viewport_size({"width": 1000, "height": 800})  # the inspector at its narrowest
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    send(page, "What are 2 + 3 and 4 * 5?")
    summary = page.locator(".run-summary")
    expect(summary).to_have_text(
        re.compile(r"^run \S+ · done · .* · 2 model calls · 3 tool calls$")
    )
    run_id = (summary.text_content() or "").split(" ")[1]
    assert summary.evaluate(_BROKEN_WORDS) == {"broken": [], "overflows": False}
    shots(page, "summary")
    # Narrower than the run id: the id wraps inside itself, every other word stays whole.
    summary.evaluate("s => { s.style.width = '9rem'; }")
    assert summary.evaluate(_BROKEN_WORDS) == {"broken": [run_id], "overflows": False}
    shots(page, "summary-narrow")


def test_cancel_stops_the_run_on_the_server(live: Live, page: Page, shots: Shots) -> None:
    slow = Slow()
    server = live(slow.agent, ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    send(page, "Take your time")
    expect(page.get_by_test_id("answer")).to_have_text("Thinking")
    assert slow.started.wait(5)
    shots(page, "running")

    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_text("Cancelled.", exact=True)).to_be_visible()
    expect(page.get_by_role("status")).to_have_text("Run cancelled.")
    assert slow.cancelled.wait(5), "the server did not cancel the run"
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    expect(
        page.get_by_role("list", name="Run timeline").locator(".bar.model.cancelled")
    ).to_have_count(1)
    shots(page, "cancelled")

    # Escape cancels too.
    slow.cancelled.clear()
    send(page, "Once more")
    expect(page.get_by_test_id("answer").last).to_have_text("Thinking")
    page.keyboard.press("Escape")
    expect(page.get_by_text("Cancelled.", exact=True)).to_have_count(2)
    assert slow.cancelled.wait(5), "the server did not cancel the second run"


def test_a_failed_run_is_reported_and_marked(live: Live, page: Page, shots: Shots) -> None:
    server = live(failing(), ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    send(page, "Anyone there?")
    alert = page.get_by_role("log", name="Conversation").get_by_role("alert")
    expect(alert).to_have_text(re.compile(r"^ModelError: .*the provider is down"))
    expect(page.get_by_test_id("answer")).to_have_text("Starting")
    timeline = page.get_by_role("list", name="Run timeline")
    expect(timeline.locator(".bar.model.error")).to_have_count(1)
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    shots(page, "failed")


def test_sessions_are_listed_and_resumed(live: Live, page: Page, shots: Shots) -> None:
    server = live({"echo": echo(), "echo2": echo()}, ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    send(page, "first topic")
    expect(page.get_by_test_id("answer")).to_have_text("echo: first topic (1 messages)")
    send(page, "more on it")
    expect(page.get_by_test_id("answer").last).to_have_text("echo: more on it (3 messages)")

    page.get_by_role("button", name="New session").click()
    expect(page.get_by_test_id("answer")).to_have_count(0)
    send(page, "second topic")
    expect(page.get_by_test_id("answer")).to_have_text("echo: second topic (1 messages)")
    sessions = page.get_by_role("navigation", name="Sessions").get_by_role("listitem")
    expect(sessions).to_have_count(2)
    shots(page, "two-sessions")

    # Another agent is another session (sessions live in an agent's memory).
    page.get_by_label("Agent").select_option("echo2")
    expect(page.get_by_test_id("answer")).to_have_count(0)
    expect(page.get_by_role("status")).to_have_text("New session with echo2.")

    page.get_by_role("button", name="first topic").click()
    expect(page.get_by_label("Agent")).to_have_value("echo")
    expect(page.get_by_test_id("answer")).to_have_count(2)
    expect(page.get_by_test_id("answer").last).to_have_text("echo: more on it (3 messages)")
    expect(page.get_by_role("button", name="first topic")).to_have_attribute("aria-current", "true")
    send(page, "and again")
    expect(page.get_by_test_id("answer").last).to_have_text("echo: and again (5 messages)")
    shots(page, "resumed")

    # The list survives a reload (it is kept in the browser; the messages on the server).
    page.reload()
    expect(sessions).to_have_count(2)


def test_sessions_made_through_the_api_are_listed_and_resumable(
    live: Live, page: Page, shots: Shots
) -> None:
    server = live({"echo": echo(), "echo2": echo()}, ui=True)
    with server.client() as api:  # plain HTTP, not the page: this browser has no record of them
        for text in ("hello from a script", "and a follow-up"):
            reply = api.post("/prompt", json={"input": text, "session_id": "api-chat-7"})
            assert reply.status_code == 200, reply.text
        other = {"input": "for the other agent", "session_id": "api-other", "agent": "echo2"}
        assert api.post("/prompt", json=other).status_code == 200

    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_have_value("echo")
    sessions = page.get_by_role("navigation", name="Sessions").get_by_role("listitem")
    listed = page.get_by_role("button", name="api-chat-7")
    expect(listed).to_be_visible()  # shown by its id: the page never saw its first prompt
    expect(sessions).to_have_count(1)  # the other agent's session is listed under that agent
    shots(page, "listed")

    listed.click()
    answers = page.get_by_test_id("answer")
    expect(answers).to_have_count(2)
    log = page.get_by_role("log", name="Conversation")
    expect(log).to_contain_text("hello from a script")
    expect(answers.last).to_have_text("echo: and a follow-up (3 messages)")
    expect(page.get_by_role("status")).to_have_text("Resumed “api-chat-7”.")
    expect(listed).to_have_attribute("aria-current", "true")
    send(page, "now from the page")
    expect(answers.last).to_have_text("echo: now from the page (5 messages)")
    shots(page, "resumed")

    page.get_by_label("Agent").select_option("echo2")
    expect(page.get_by_role("button", name="api-other")).to_be_visible()
    # After a reload the server's list comes back (with a session made meanwhile), and the one
    # both the browser and the server know now is listed once.
    late = {"input": "made meanwhile", "session_id": "api-late"}
    assert server.client().post("/prompt", json=late).status_code == 200
    page.reload()
    expect(page.get_by_label("Agent")).to_have_value("echo")
    expect(page.get_by_role("button", name="api-late")).to_be_visible()
    expect(sessions).to_have_count(2)
    expect(page.get_by_role("button", name="api-chat-7")).to_have_count(1)


def test_the_token_is_asked_for_once_and_a_wrong_one_is_reported(
    live: Live, page: Page, shots: Shots
) -> None:
    server = live(echo(), ui=True, token=TOKEN)
    page.goto(server.url)
    dialog = page.get_by_role("dialog", name="This server needs a token")
    expect(dialog).to_be_visible()
    token = page.get_by_label("Access token")
    expect(token).to_be_focused()
    assert TOKEN not in page.content()
    shots(page, "asked")

    token.fill("not-the-token")
    token.press("Enter")
    expect(dialog).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("The token was not accepted (401)")
    shots(page, "refused")

    page.get_by_label("Access token").fill(TOKEN)
    dialog.get_by_role("button", name="Connect").click()
    expect(dialog).to_be_hidden()
    expect(page.get_by_label("Agent")).to_be_enabled()
    send(page, "hello")
    expect(page.get_by_test_id("answer")).to_have_text("echo: hello (1 messages)")
    # Asked once: a reload in the same tab keeps it.
    page.reload()
    expect(page.get_by_label("Agent")).to_be_enabled()
    expect(dialog).to_be_hidden()
    shots(page, "connected")


def test_keyboard_and_screen_reader_names(live: Live, page: Page) -> None:
    server = live(echo(), ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    log = page.get_by_role("log", name="Conversation")
    expect(log).to_have_attribute("aria-live", "polite")
    for name in ("Send", "Cancel", "New session"):
        expect(page.get_by_role("button", name=name)).to_be_visible()
    expect(page.get_by_role("combobox", name="Agent")).to_be_visible()
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()
    # Keyboard only: Tab reaches the message box; Ctrl+Enter sends.
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to the message box")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_label("Message")).to_be_focused()
    page.keyboard.type("typed")
    page.keyboard.press("Control+Enter")
    expect(log.get_by_test_id("answer")).to_have_text("echo: typed (1 messages)")
    # Every control has an accessible name.
    unnamed = page.evaluate(
        """() => [...document.querySelectorAll('button, select, textarea, input')]
            .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                         && !e.textContent.trim())
            .map(e => e.outerHTML)"""
    )
    assert unnamed == []
    # Focus is visible: a control reached by the keyboard gets an outline. (Reached by Tab:
    # after a script's focus() Chromium shows focus only if the element focused before did,
    # which races with the playground re-enabling the message box when the answer lands.)
    page.get_by_role("button", name="New session").focus()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="New session")).to_be_focused()
    outline = page.get_by_role("button", name="New session").evaluate(
        "b => getComputedStyle(b).outlineStyle"
    )
    assert outline == "solid"


def test_the_page_speaks_ag_ui_and_asks_for_approvals_in_the_chat(
    live: Live, page: Page, shots: Shots
) -> None:
    server = live({"bank": approver()}, ui=True)
    posted: list[str] = []
    page.on("request", lambda r: posted.append(r.url) if r.method == "POST" else None)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()

    send(page, "Send 5 to Bob")
    approval = page.get_by_role("region", name="Approval needed")
    expect(approval).to_contain_text("Approve the call to transfer?")
    card = page.get_by_role("article", name="Tool call transfer")
    expect(card).to_contain_text("waiting for approval")
    expect(card).to_contain_text('"amount": 5')
    expect(page.get_by_text("The run waits for your approval.")).to_be_visible()
    shots(page, "approval")

    approval.get_by_role("button", name="Approve").click()
    answer = page.get_by_test_id("answer").last
    expect(answer).to_contain_text("Done: moved 5")
    expect(card.get_by_label("Result")).to_have_text("moved 5")
    expect(approval).to_have_text("Approved.")
    shots(page, "approved")
    # One event protocol: the prompt and the resume both went to the AG-UI endpoint.
    assert [url.removeprefix(server.url) for url in posted] == ["/agui/bank", "/agui/bank"]
