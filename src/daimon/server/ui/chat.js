// The transcript: one turn per prompt, its answer streamed in, tool calls as cards (a flow's
// agent nodes stream theirs into a block per node, above the answer).

/** `document.createElement` with a class, text and attributes. */
export function el(tag, options = {}) {
  const node = document.createElement(tag);
  if (options.className) node.className = options.className;
  if (options.text !== undefined) node.textContent = options.text;
  for (const [name, value] of Object.entries(options.attrs || {})) node.setAttribute(name, value);
  return node;
}

export function formatSeconds(seconds) {
  return seconds < 1 ? `${Math.round(seconds * 1000)} ms` : `${seconds.toFixed(2)} s`;
}

export function formatCost(cost) {
  return `$${(cost || 0).toFixed(cost >= 0.01 || !cost ? 4 : 6)}`;
}

export function formatUsage(usage, cost) {
  const input = usage.input_tokens || 0;
  const output = usage.output_tokens || 0;
  return `${input} in · ${output} out tokens · ${formatCost(cost)}`;
}

function pretty(value) {
  if (typeof value === "string") return value;
  return JSON.stringify(value, null, 2);
}

/** The text of a message's content: a string, or a list of parts. */
export function contentText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part) => (typeof part.text === "string" ? part.text : "")).join("");
}

/** Streamed text and tool cards in order, in `body`: an answer, or a flow node's agent's. */
class Stream {
  constructor(body, node = null) {
    this.body = body;
    this.node = node;
    this.text = null;
    this.cards = new Map();
    this.prompts = 0;  // a flow node may prompt its agent more than once
  }

  /** The agent's answer is done: what it streams next (prompted again) starts anew. */
  endPrompt() {
    this.text = null;
    this.prompts += 1;
  }

  /** Append streamed text (a new paragraph after tool cards). */
  addText(delta) {
    if (this.text === null) {
      this.text = el("p", { className: "answer-text" });
      this.body.append(this.text);
    }
    this.text.textContent += delta;
  }

  /** The card for a tool call, made when first seen. */
  card(callId, name) {
    let card = this.cards.get(callId);
    if (!card) {
      card = new ToolCard(name, this.node);
      this.cards.set(callId, card);
      this.body.append(card.root);
      this.text = null;
    }
    return card;
  }
}

/**
 * One prompt and its answer, in the transcript; a flow's agent nodes stream above the answer.
 * `files`: what is shown of the prompt's files (an element), under its text.
 */
export class Turn extends Stream {
  constructor(transcript, prompt, files = null) {
    super(el("div", { className: "answer", attrs: { "data-testid": "answer" } }));
    this.root = el("article", { className: "turn" });
    const user = el("div", { className: "message user", attrs: { "data-testid": "prompt" } });
    user.append(el("span", { className: "who", text: "You" }));
    if (prompt) user.append(el("p", { text: prompt }));
    if (files) user.append(files);
    this.answer = el("div", { className: "message assistant" });
    this.answer.append(el("span", { className: "who", text: "Agent" }));
    this.nodeBox = el("div", { className: "node-streams" });
    this.nodes = new Map();
    this.meta = el("footer", { className: "meta" });
    this.answer.append(this.nodeBox, this.body, this.meta);
    this.root.append(user, this.answer);
    transcript.append(this.root);
  }

  /** What the agent of flow node `name` streams: its text and tool cards, under a node tag. */
  nodeStream(name) {
    let stream = this.nodes.get(name);
    if (!stream) {
      const block = el("section", { className: "node-stream", attrs: { "aria-label": `Node ${name}` } });
      block.append(el("span", { className: "node-tag", text: `in ${name}` }));
      this.nodeBox.append(block);
      stream = new Stream(block, name);
      this.nodes.set(name, stream);
    }
    return stream;
  }

  /** Every tool card of the turn: the answer's and its flow nodes'. */
  *allCards() {
    yield* this.cards.values();
    for (const stream of this.nodes.values()) yield* stream.cards.values();
  }

  /** Show the whole answer at once (a resumed session). */
  setText(text) {
    this.addText(text);
  }

  /**
   * Ask whether the calls that `interrupts` name may run: Approve or Reject, once, for all.
   * `answer(approved)` sends the resume (false when it could not, and the buttons stay).
   */
  askApproval(interrupts, answer) {
    const box = el("section", { className: "approval", attrs: { "aria-label": "Approval needed" } });
    const plain = interrupts.filter((i) => !inDoubt(i));
    if (plain.length) box.append(el("p", { text: plain.map((i) => i.message || i.reason).join(" ") }));
    for (const interrupt of interrupts.filter(inDoubt)) box.append(doubtNote(interrupt));
    if (plain.length < interrupts.length) box.classList.add("in-doubt");
    for (const interrupt of interrupts) {
      const reason = inDoubt(interrupt) ? "in doubt: waiting for approval" : "waiting for approval";
      this.cards.get(interrupt.toolCallId)?.waitFor(reason);
    }
    const approve = el("button", { text: "Approve", attrs: { type: "button" } });
    const reject = el("button", { className: "secondary", text: "Reject", attrs: { type: "button" } });
    const decide = (approved) => {
      if (!answer(approved)) return;
      box.replaceChildren(el("p", { text: approved ? "Approved." : "Rejected." }));
    };
    approve.addEventListener("click", () => decide(true));
    reject.addEventListener("click", () => decide(false));
    box.append(approve, reject);
    this.answer.insertBefore(box, this.meta);
    approve.focus();
  }

  status(text, kind = "") {
    const note = el("p", { className: `status ${kind}`, text });
    if (kind === "error") note.setAttribute("role", "alert");
    this.answer.insertBefore(note, this.meta);
  }
}

/** Whether an approval interrupt asks about a call in doubt (the server's `inDoubt`). */
export function inDoubt(interrupt) {
  return interrupt.metadata?.daimon?.inDoubt === true;
}

/** The question about a call in doubt: it started before, and whether it took effect is unknown. */
function doubtNote(interrupt) {
  const tool = interrupt.metadata?.daimon?.tool;
  const note = el("p", { className: "doubt" });
  note.append(
    el("strong", { className: "doubt-tag", text: "In doubt" }),
    ` ${tool ? `${tool}: ` : ""}this call started before and its outcome is unknown; run it again?`,
  );
  return note;
}

/**
 * A tool call: name, arguments, then its result or error and how long it took. A call made by
 * a flow node's agent is tagged with the node's name.
 */
export class ToolCard {
  constructor(name, node = null) {
    const where = node === null ? "" : ` in ${node}`;
    this.root = el("article", {
      className: "tool-card running",
      attrs: { "aria-label": `Tool call ${name}${where}` },
    });
    const head = el("header");
    this.name = el("span", { className: "tool-name", text: name });
    this.state = el("span", { className: "tool-state", text: "running…" });
    this.duration = el("span", { className: "tool-duration" });
    head.append(this.name);
    if (node !== null) head.append(el("span", { className: "node-tag", text: `in ${node}` }));
    head.append(this.state, this.duration);
    // A plain <pre> may not carry a name (ARIA prohibits it on generic elements): a named group.
    this.args = el("pre", { className: "tool-args", attrs: { role: "group", "aria-label": "Arguments" } });
    this.result = el("pre", { className: "tool-result", attrs: { role: "group", "aria-label": "Result" } });
    this.result.hidden = true;
    this.root.append(head, this.args, this.result);
  }

  setArguments(args) {
    this.args.textContent = pretty(args);
  }

  appendArguments(delta) {
    this.args.textContent += delta;
  }

  finish(output, seconds) {
    const failed = Boolean(output.is_error);
    this.root.classList.remove("running");
    this.root.classList.add(failed ? "failed" : "succeeded");
    this.state.textContent = failed ? "error" : "done";
    this.duration.textContent = seconds === null ? "" : formatSeconds(seconds);
    this.result.setAttribute("aria-label", failed ? "Error" : "Result");
    this.result.textContent = output.content;  // what the model read
    this.result.hidden = false;
  }

  /** Still to run, waiting for `reason` (an approval). */
  waitFor(reason) {
    this.state.textContent = reason;
  }

  stop(reason) {
    if (!this.root.classList.contains("running")) return;
    this.root.classList.remove("running");
    this.root.classList.add("failed");
    this.state.textContent = reason;
  }
}
