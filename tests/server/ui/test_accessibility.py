"""axe-core audits of the playground in each state the other UI tests reach, and keyboard use.

Each state is audited against WCAG 2.1 A/AA and axe's best practices. A violation of impact
"serious" or "critical" fails the test; every violation found (the moderate and minor ones too)
and what axe could not decide is written to ``axe-<state>.json`` in the artifact folder.

The audit runs under the page's own strict CSP: playwright's ``evaluate`` injects axe through
the DevTools protocol, which the policy does not govern, so no context needs ``bypass_csp``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from axe_playwright_python.sync_playwright import Axe  # type: ignore[import-untyped]
from playwright.sync_api import expect

from daimon.server import ServedFlow

from .conftest import ARTIFACTS, TOKEN, approver, calculator, echo
from .test_flows import pipeline, research

if TYPE_CHECKING:
    from playwright.sync_api import Page

Live = Callable[..., Any]
"""tests/server's ``live`` fixture: ``live(agents, **settings)`` starts a server."""

TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
BLOCKING = ("critical", "serious")
REPORT_VERSION = 1


_axe = Axe()


def _found(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": found["id"],
            "impact": found["impact"],
            "help": found["help"],
            "help_url": found["helpUrl"],
            "targets": [" ".join(map(str, node["target"])) for node in found["nodes"]],
        }
        for found in results
    ]


def audit(page: Page, state: str) -> list[dict[str, Any]]:
    """Run axe on the page as it is now; fail on serious or critical violations.

    Writes every violation, and what axe left for a person to check, to ``axe-<state>.json``
    (versioned JSON); returns the violations.
    """
    options = {"runOnly": {"type": "tag", "values": TAGS}}
    response = _axe.run(page, options=options).response
    violations = _found(response["violations"])
    report = {
        "version": REPORT_VERSION,
        "state": state,
        "axe": response["testEngine"]["version"],
        "tags": TAGS,
        "rules_passed": len(response["passes"]),
        "violations": violations,
        "needs_review": _found(response["incomplete"]),
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"axe-{state}.json"
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"axe report: {path}")
    assert report["rules_passed"] > 0, "axe checked nothing: was it injected?"
    blocking = [v for v in violations if v["impact"] in BLOCKING]
    lines = [
        f"  {v['id']} ({v['impact']}): {v['help']}: {', '.join(v['targets'])}" for v in blocking
    ]
    assert not blocking, f"axe violations in state {state!r}:\n" + "\n".join(lines)
    return violations


def send(page: Page, text: str) -> None:
    """Type ``text`` into the message box and send it with Ctrl+Enter."""
    box = page.get_by_label("Message")
    box.fill(text)
    box.press("Control+Enter")


# ------------------------------------------------------------------------------- audits


def test_the_idle_page_with_agents_listed(live: Live, page: Page) -> None:
    server = live({"calc": calculator(), "echo": echo()}, ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    expect(page.get_by_label("Agent").locator("option")).to_have_count(2)
    expect(page.get_by_text("Send a prompt to see its run here.")).to_be_visible()
    audit(page, "idle")


def test_a_run_waiting_for_approval(live: Live, page: Page) -> None:
    server = live({"bank": approver()}, ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    page.get_by_label("Message").fill("Send 5 to Bob")
    page.get_by_label("Message").press("Control+Enter")
    approval = page.get_by_role("region", name="Approval needed")
    expect(approval.get_by_role("button", name="Approve")).to_be_focused()
    audit(page, "approval")


def test_the_token_prompt(live: Live, page: Page) -> None:
    server = live(echo(), ui=True, token=TOKEN)
    page.goto(server.url)
    dialog = page.get_by_role("dialog", name="This server needs a token")
    expect(dialog).to_be_visible()
    audit(page, "token-asked")

    page.get_by_label("Access token").fill("not-the-token")
    page.get_by_label("Access token").press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("The token was not accepted (401)")
    audit(page, "token-refused")

    page.get_by_label("Access token").fill(TOKEN)
    dialog.get_by_role("button", name="Connect").click()
    expect(page.get_by_label("Agent")).to_be_enabled()
    expect(page.get_by_role("button", name="Forget token")).to_be_visible()
    audit(page, "token-connected")


def test_a_turn_running_finished_and_inspected(live: Live, page: Page) -> None:
    gate = threading.Event()
    server = live({"calc": calculator(gate), "echo": echo()}, ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()

    send(page, "What are 2 + 3 and 4 * 5?")
    add = page.get_by_role("article", name="Tool call add")
    expect(add).to_contain_text("running…")
    expect(page.get_by_role("button", name="Cancel")).to_be_enabled()
    timeline = page.get_by_role("list", name="Run timeline")
    expect(timeline.locator(".bar.tool.running")).to_have_count(3)
    audit(page, "running")
    gate.set()

    answer = page.get_by_test_id("answer")
    expect(answer).to_contain_text("The sum is 5 and the product is 20.")
    failed = page.get_by_role("article", name="Tool call divide")
    expect(failed.get_by_label("Error")).to_contain_text("division by zero")
    expect(add.get_by_label("Result")).to_have_text("5")
    expect(timeline.locator(".bar.tool.error")).to_have_count(1)
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    audit(page, "answered")

    send(page, "Again?")
    expect(answer).to_have_count(2)
    expect(answer.last).to_contain_text("The sum is 5 and")
    page.get_by_role("button", name="Inspect run").first.click()
    expect(page.get_by_role("heading", name="Run inspector")).to_be_focused()
    expect(timeline.get_by_role("listitem")).to_have_count(5)
    audit(page, "inspector")


def test_a_served_flow_drawn_running_done_and_failed(live: Live, page: Page) -> None:
    gate = threading.Event()
    server = live({"research": ServedFlow(research(gate)), "pipeline": pipeline()}, ui=True)
    page.goto(server.url)
    drawing = page.get_by_role("group", name="Flow research, a graph of 3 nodes")
    expect(drawing).to_be_visible()
    expect(drawing.locator(".flow-node.idle")).to_have_count(5)
    audit(page, "flow-drawn")

    send(page, "what is rust?")
    expect(drawing.get_by_role("img", name="search: running")).to_be_visible()
    timeline = page.get_by_role("list", name="Run timeline")
    expect(timeline.locator(".bar.node.running")).to_have_count(1)
    audit(page, "flow-running")
    gate.set()

    expect(page.get_by_test_id("answer")).to_have_text("draft 2: rust is a language")
    expect(timeline.locator(".bar.node")).to_have_count(4)
    audit(page, "flow-done")

    page.get_by_label("Agent").select_option("pipeline")
    dag = page.get_by_role("group", name="Flow pipeline, a dag of 4 nodes")
    expect(dag).to_be_visible()
    send(page, "https://example.org")
    expect(dag.locator(".flow-node.failed")).to_have_count(1)
    expect(dag.get_by_role("img", name="summarize: cancelled")).to_be_visible()
    expect(page.get_by_role("log", name="Conversation").get_by_role("alert")).to_be_visible()
    audit(page, "flow-failed")


def test_the_sessions_list_with_several_entries(live: Live, page: Page) -> None:
    server = live(echo(), ui=True)
    with server.client() as api:  # sessions begun elsewhere are listed by their ids
        for number in (1, 2):
            body = {"input": "from a script", "session_id": f"api-chat-{number}"}
            assert api.post("/prompt", json=body).status_code == 200
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()
    for topic in ("first topic", "second topic", "third topic"):
        page.get_by_role("button", name="New session").click()
        send(page, topic)
        expect(page.get_by_test_id("answer")).to_have_text(f"echo: {topic} (1 messages)")
    sessions = page.get_by_role("navigation", name="Sessions").get_by_role("listitem")
    expect(sessions).to_have_count(5)
    page.get_by_role("button", name="first topic").click()
    expect(page.get_by_role("button", name="first topic")).to_have_attribute("aria-current", "true")
    expect(page.get_by_test_id("answer")).to_have_count(1)
    audit(page, "sessions")


# ----------------------------------------------------------------------------- keyboard

# What has the focus: a short key naming it, and whether its focus can be seen.
FOCUSED = """() => {
  const e = document.activeElement;
  if (!e || e === document.body) return null;
  const style = getComputedStyle(e);
  const outlined = style.outlineStyle !== "none" && parseFloat(style.outlineWidth) > 0;
  return {
    key: e.id ? `#${e.id}` : e.classList.contains("session") ? "session"
      : e.getAttribute("aria-label") || e.textContent.trim(),
    focus_visible: e.matches(":focus-visible"),
    indicator: outlined ? `outline ${style.outlineStyle} ${style.outlineWidth}`
      : style.boxShadow !== "none" ? `box-shadow ${style.boxShadow}` : null,
  };
}"""


def press(page: Page, key: str) -> dict[str, Any]:
    """Press ``key``; what has the focus then, which must be an element showing its focus."""
    page.keyboard.press(key)
    focused: dict[str, Any] | None = page.evaluate(FOCUSED)
    assert focused is not None, f"{key} left the focus on no element"
    assert focused["focus_visible"], f"{key} reached {focused['key']!r}, not :focus-visible"
    assert focused["indicator"], f"{key} reached {focused['key']!r}: no outline or box-shadow"
    return focused


def walk(page: Page, key: str, until: str, limit: int = 30) -> list[str]:
    """Press ``key`` until the element keyed ``until`` has the focus; the keys reached."""
    reached: list[str] = []
    while not reached or reached[-1] != until:
        assert len(reached) < limit, f"{key} never reached {until!r}: {reached}"
        reached.append(press(page, key)["key"])
    return reached


def in_order(wanted: list[str], reached: list[str]) -> bool:
    """Whether ``wanted`` were all reached, in that order (others between them allowed)."""
    remaining = iter(reached)
    return all(key in remaining for key in wanted)


def test_the_keyboard_alone_reaches_every_control_with_a_visible_focus(
    live: Live, page: Page
) -> None:
    gate = threading.Event()
    server = live(calculator(gate), ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_be_enabled()

    # From page load, Tab goes through the header, the sessions, the message box and the Attach
    # button to Send.
    reached = walk(page, "Tab", until="#send")
    assert reached[0] == "Skip to the message box", reached
    assert in_order(["#agent", "#new-session", "#prompt", "#attach", "#send"], reached), reached
    assert "#cancel" not in reached  # disabled while nothing runs
    back = walk(page, "Shift+Tab", until="#agent")
    assert back == ["#attach", "#prompt", "#new-session", "#agent"]

    # A run under way (its tool held by the gate): Tab from the message box reaches Cancel.
    press(page, "Tab")
    press(page, "Tab")
    page.keyboard.type("What are 2 + 3 and 4 * 5?")
    page.keyboard.press("Control+Enter")
    expect(page.get_by_role("article", name="Tool call add")).to_contain_text("running…")
    assert press(page, "Tab")["key"] == "#attach"  # files for the next prompt may be picked
    assert press(page, "Tab")["key"] == "#cancel"  # Send is disabled while the run goes on
    assert press(page, "Shift+Tab")["key"] == "#attach"
    assert press(page, "Tab")["key"] == "#cancel"
    page.keyboard.press("Enter")
    expect(page.get_by_text("Cancelled.", exact=True)).to_be_visible()
    gate.set()  # let the cancelled run's tool thread go
    expect(page.get_by_label("Message")).to_be_focused()  # not lost with the disabled Cancel

    # Back up from the message box: the run's inspector button, then the session just made.
    back = walk(page, "Shift+Tab", until="#agent")
    assert in_order(["Inspect run", "session", "#new-session", "#agent"], back), back
    walk(page, "Tab", until="Inspect run")
    page.keyboard.press("Enter")
    heading = page.get_by_role("heading", name="Run inspector")
    expect(heading).to_be_focused()
    assert heading.evaluate("h => h.matches(':focus-visible')")
    assert heading.evaluate("h => getComputedStyle(h).outlineStyle") != "none"
    bar = press(page, "Tab")  # into the timeline: each bar is a stop, named for screen readers
    assert bar["key"].startswith("model call 1, model call"), bar


def test_escape_closes_the_token_dialog_and_the_token_is_typed_in(live: Live, page: Page) -> None:
    server = live(echo(), ui=True, token=TOKEN)
    page.goto(server.url)
    dialog = page.get_by_role("dialog", name="This server needs a token")
    expect(dialog).to_be_visible()
    expect(page.get_by_label("Access token")).to_be_focused()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page.get_by_role("status")).to_have_text(
        "This server needs a token: reload the page to enter it."
    )

    page.reload()
    expect(dialog).to_be_visible()
    page.keyboard.type(TOKEN)
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(page.get_by_label("Agent")).to_be_enabled()
    reached = walk(page, "Tab", until="#send")
    assert in_order(["#agent", "#forget-token", "#new-session", "#prompt"], reached), reached
