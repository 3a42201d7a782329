// AG-UI events, read into the records the chat, the timeline and the flow drawing are drawn from.
//
// The page speaks AG-UI to POST /agui/{agent}, like any AG-UI front end. daimon's details ride
// in each event's `metadata.daimon` (a tool's seconds, the flow node an agent event came from)
// and in CUSTOM events named `daimon.*` (each model call's usage, a skipped node). `Reader`
// turns each AG-UI event into zero or more records `{kind, data}`: `text_delta`,
// `tool_call_start`/`tool_call_delta`/`tool_call_end`, `tool_result`, `usage`, `node_started`,
// `node_finished`/`node_failed`/`node_skipped`, `node_event` (an event of a flow node's agent,
// wrapped), and last `done` (with the interrupts a paused run waits for) or `error`.

/** A fresh id for runs and messages. */
export function newId(prefix) {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return `${prefix}_${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/**
 * The RunAgentInput of a prompt (or of a resume, with `resume` entries and no prompt). With
 * `parts` (AG-UI media parts: the prompt's files) the message's content is a list of parts.
 */
export function runInput(threadId, text, resume = null, parts = []) {
  const content = parts.length ? [...(text ? [{ type: "text", text }] : []), ...parts] : text;
  const input = {
    threadId,
    runId: newId("run"),
    messages: text === null ? [] : [{ id: newId("msg"), role: "user", content }],
    state: {},
    tools: [],
    context: [],
    forwardedProps: {},
  };
  if (resume) input.resume = resume;
  return input;
}

function daimonMeta(event) {
  return (event.metadata && event.metadata.daimon) || null;
}

export class Reader {
  constructor() {
    this.runId = null;
    this.messages = new Map();  // message id -> where it came from (a node's agent, or null)
    this.calls = new Map();  // tool call id -> {name, args, where}
  }

  /** The records for one AG-UI event. */
  read(event) {
    switch (event.type) {
      case "RUN_STARTED":
        this.runId = event.runId;
        return [];
      case "TEXT_MESSAGE_START":
        this.messages.set(event.messageId, daimonMeta(event));
        return [];
      case "TEXT_MESSAGE_CONTENT":
        return this.scoped(this.messages.get(event.messageId), "text_delta", { text: event.delta });
      case "TEXT_MESSAGE_END": {
        const where = this.messages.get(event.messageId);
        return where ? this.scoped(where, "done", {}) : [];  // a node's agent may answer again
      }
      case "TOOL_CALL_START": {
        const where = daimonMeta(event);
        this.calls.set(event.toolCallId, { name: event.toolCallName, args: "", where });
        return this.scoped(where, "tool_call_start", { call_id: event.toolCallId, name: event.toolCallName });
      }
      case "TOOL_CALL_ARGS": {
        const call = this.call(event.toolCallId);
        call.args += event.delta;
        return this.scoped(call.where, "tool_call_delta", { call_id: event.toolCallId, arguments_delta: event.delta });
      }
      case "TOOL_CALL_END":
        return this.callEnd(event.toolCallId);
      case "TOOL_CALL_RESULT":
        return this.result(event);
      case "CUSTOM":
        return this.custom(event);
      case "STEP_STARTED":
        return [{ kind: "node_started", data: { node: event.stepName, step: daimonMeta(event)?.step ?? null } }];
      case "STEP_FINISHED":
        return [this.stepFinished(event)];
      case "RUN_FINISHED":
        return [{ kind: "done", data: this.finished(event) }];
      case "RUN_ERROR":
        return [{ kind: "error", data: { error_type: event.code || "error", message: event.message } }];
      default:
        return [];  // state snapshots and deltas: the records above carry what the page draws
    }
  }

  call(id) {
    let call = this.calls.get(id);
    if (!call) {
      call = { name: "tool", args: "", where: null };
      this.calls.set(id, call);
    }
    return call;
  }

  /** A record, wrapped as a `node_event` when a flow node's agent made it. */
  scoped(where, kind, data) {
    if (!where || !where.node) return [{ kind, data }];
    return [{ kind: "node_event", data: { node: where.node, step: where.step ?? null, event: { kind, ...data } } }];
  }

  callEnd(id) {
    const call = this.call(id);
    let args = {};
    try {
      args = call.args ? JSON.parse(call.args) : {};
    } catch {
      args = call.args;  // shown as written
    }
    return this.scoped(call.where, "tool_call_end", { call: { id, name: call.name, arguments: args } });
  }

  result(event) {
    const meta = daimonMeta(event) || {};
    const call = this.call(event.toolCallId);
    const content = typeof event.content === "string"
      ? event.content
      : event.content.map((part) => part.text || "").join("");
    return this.scoped(call.where || (meta.node ? meta : null), "tool_result", {
      call_id: event.toolCallId,
      name: meta.tool || call.name,
      output: { content, is_error: Boolean(meta.isError) },
      duration: meta.seconds ?? null,
    });
  }

  custom(event) {
    const value = event.value || {};
    if (event.name === "daimon.usage") {
      const usage = { input_tokens: value.inputTokens || 0, output_tokens: value.outputTokens || 0 };
      return this.scoped(value.node ? value : null, "usage", { usage, cost: value.cost || 0 });
    }
    if (event.name === "daimon.node_skipped") return [{ kind: "node_skipped", data: { node: value.node } }];
    return [];
  }

  stepFinished(event) {
    const meta = daimonMeta(event) || {};
    const data = { node: event.stepName, step: meta.step ?? null, seconds: meta.seconds || 0 };
    if (meta.errorType) {
      return { kind: "node_failed", data: { ...data, error_type: meta.errorType, message: meta.message } };
    }
    return { kind: "node_finished", data };
  }

  finished(event) {
    const meta = daimonMeta(event) || {};
    const outcome = event.outcome || { type: "success" };
    return {
      response: {
        run_id: this.runId,
        usage: meta.usage || null,
        cost: meta.cost || 0,
        text: meta.text || "",
      },
      interrupts: outcome.type === "interrupt" ? outcome.interrupts : [],
    };
  }
}
