"""The playground shows an approval in doubt apart from an ordinary one.

The page's own module, as the server sends it, runs in Node on a few lines of DOM (cheaper than
a browser, which these tests do not need: nothing here is layout), fed the interrupts a real
server sent.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from server.conftest import Calls
from server.test_agui import agui, guarded, run_input
from server.test_effects import died_mid_tool, payer

Live = Callable[..., Any]
"""tests/server's ``live`` fixture: ``live(agents, **settings)`` starts a server."""

NODE = shutil.which("node")

_DOM = """
class Node {
  constructor(tag) {
    this.tag = tag; this.kids = []; this.attrs = {}; this.own = ""; this.className = "";
    this.classList = {
      add: (name) => { this.className = `${this.className} ${name}`.trim(); },
      remove: (name) => {
        this.className = this.className.split(" ").filter((c) => c !== name).join(" ");
      },
      contains: (name) => this.className.split(" ").includes(name),
    };
  }
  set textContent(text) { this.own = String(text); this.kids = []; }
  get textContent() {
    return this.own + this.kids.map((k) => (typeof k === "string" ? k : k.textContent)).join("");
  }
  setAttribute(name, value) { this.attrs[name] = value; }
  append(...kids) { this.kids.push(...kids); }
  insertBefore(kid) { this.kids.push(kid); }
  replaceChildren(...kids) { this.own = ""; this.kids = kids; }
  addEventListener() {}
  focus() {}
  find(name) {
    if (this.className.split(" ").includes(name)) return this;
    for (const kid of this.kids) { const found = kid.find?.(name); if (found) return found; }
    return null;
  }
}
globalThis.document = { createElement: (tag) => new Node(tag) };
const { Turn } = await import("./chat.mjs");
const interrupts = JSON.parse(process.argv[2]);
const turn = new Turn(new Node("main"), "pay");
for (const i of interrupts) turn.card(i.toolCallId, i.metadata.daimon.tool);
turn.askApproval(interrupts, () => true);
const box = turn.answer.find("approval");
console.log(JSON.stringify({
  className: box.className,
  text: box.textContent,
  tag: box.find("doubt-tag")?.textContent ?? null,
  cards: interrupts.map((i) => turn.cards.get(i.toolCallId).state.textContent),
}));
"""


def shown(server: Any, interrupts: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    """What the served ``chat.js`` makes of ``interrupts``: the approval box and the cards."""
    script = server.client().get("/ui/chat.js")
    assert script.status_code == 200
    (folder / "chat.mjs").write_text(script.text)
    (folder / "show.mjs").write_text(_DOM)
    if NODE is None:
        pytest.fail("node is missing: apt-get install nodejs", pytrace=False)
    done = subprocess.run(
        [NODE, "show.mjs", json.dumps(interrupts)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_an_approval_in_doubt_is_labelled_and_an_ordinary_one_is_not(
    live: Live, tmp_path: Path
) -> None:
    received: list[str] = []
    died_mid_tool(tmp_path / "runs", received, "ask", "r-ui")
    server = live(
        {"payer": payer(tmp_path / "runs", received, "ask"), "bank": guarded(Calls())}, ui=True
    )
    doubtful = agui(server, run_input("pay", thread="t-ui", runId="r-ui"), "/agui/payer")
    ordinary = agui(server, run_input("Send 5", thread="t-bank"), "/agui/bank")

    seen = shown(server, doubtful[-1]["outcome"]["interrupts"], tmp_path)
    assert "in-doubt" in seen["className"].split()
    assert seen["tag"] == "In doubt"
    assert (
        "charge: this call started before and its outcome is unknown; run it again?"
        in (seen["text"])
    )
    assert seen["cards"] == ["in doubt: waiting for approval"]

    plain = shown(server, ordinary[-1]["outcome"]["interrupts"], tmp_path)
    assert plain["className"] == "approval" and plain["tag"] is None
    assert plain["text"].startswith("Approve the call to transfer?")
    assert plain["cards"] == ["waiting for approval"]
