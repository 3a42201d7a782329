// The transcript: one turn per prompt, its answer streamed in, tool calls as cards.

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

/** One prompt and its answer, in the transcript. */
export class Turn {
  constructor(transcript, prompt) {
    this.root = el("article", { className: "turn" });
    const user = el("div", { className: "message user" });
    user.append(el("span", { className: "who", text: "You" }), el("p", { text: prompt }));
    this.answer = el("div", { className: "message assistant" });
    this.answer.append(el("span", { className: "who", text: "Agent" }));
    this.body = el("div", { className: "answer", attrs: { "data-testid": "answer" } });
    this.answer.append(this.body);
    this.meta = el("footer", { className: "meta" });
    this.answer.append(this.meta);
    this.root.append(user, this.answer);
    transcript.append(this.root);
    this.text = null;
    this.cards = new Map();
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
      card = new ToolCard(name);
      this.cards.set(callId, card);
      this.body.append(card.root);
      this.text = null;
    }
    return card;
  }

  /** Show the whole answer at once (a resumed session). */
  setText(text) {
    this.addText(text);
  }

  status(text, kind = "") {
    const note = el("p", { className: `status ${kind}`, text });
    if (kind === "error") note.setAttribute("role", "alert");
    this.answer.insertBefore(note, this.meta);
  }
}

/** A tool call: name, arguments, then its result or error and how long it took. */
export class ToolCard {
  constructor(name) {
    this.root = el("section", {
      className: "tool-card running",
      attrs: { "aria-label": `Tool call ${name}` },
    });
    const head = el("header");
    this.name = el("span", { className: "tool-name", text: name });
    this.state = el("span", { className: "tool-state", text: "running…" });
    this.duration = el("span", { className: "tool-duration" });
    head.append(this.name, this.state, this.duration);
    this.args = el("pre", { className: "tool-args", attrs: { "aria-label": "Arguments" } });
    this.result = el("pre", { className: "tool-result", attrs: { "aria-label": "Result" } });
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

  stop(reason) {
    if (!this.root.classList.contains("running")) return;
    this.root.classList.remove("running");
    this.root.classList.add("failed");
    this.state.textContent = reason;
  }
}
