// The playground: pick an agent, chat over AG-UI, answer approvals, resume sessions, inspect runs.

import { ApiError, getJson, getToken, setToken, streamRun } from "./api.js";
import { Reader, runInput } from "./agui.js";
import { Turn, contentText, el, formatSeconds, formatUsage } from "./chat.js";
import { Attachments, fileList, keptFiles } from "./files.js";
import { listSessions, mergeSessions, newSessionId, touchSession, updateSession } from "./sessions.js";
import { renderFlow } from "./flow.js";
import { renderTimeline } from "./timeline.js";

const $ = (id) => document.getElementById(id);
const ui = {
  agent: $("agent"),
  transcript: $("transcript"),
  notice: $("notice"),
  composer: $("composer"),
  prompt: $("prompt"),
  attach: $("attach"),
  files: $("files"),
  attachments: $("attachments"),
  send: $("send"),
  cancel: $("cancel"),
  sessionUsage: $("session-usage"),
  sessionList: $("session-list"),
  newSession: $("new-session"),
  timeline: $("timeline"),
  flow: $("flow"),
  inspectorTitle: $("inspector-title"),
  tokenDialog: $("token-dialog"),
  tokenForm: $("token-form"),
  token: $("token"),
  tokenError: $("token-error"),
  forgetToken: $("forget-token"),
};

const state = {
  connected: false,
  sessionId: newSessionId(),
  title: null,
  listed: { agent: null, ids: [] },
  totals: { input_tokens: 0, output_tokens: 0, cost: 0 },
  controller: null,
  shown: null,
  pendingDraw: false,
  agents: new Map(),
};

/** The drawing of the picked agent when it is a flow (graph, DAG, workflow), else null. */
function pickedFlow() {
  return state.agents.get(ui.agent.value)?.flow || null;
}

function notice(text, isError = false) {
  ui.notice.textContent = text;
  ui.notice.classList.toggle("error", isError);
}

// ------------------------------------------------------------------------------ the token

function askToken(error) {
  ui.tokenError.textContent = error || "";
  ui.token.value = "";
  if (!ui.tokenDialog.open) ui.tokenDialog.showModal();
  ui.token.focus();
}

ui.tokenForm.addEventListener("submit", (event) => {
  event.preventDefault();
  setToken(ui.token.value.trim());
  ui.tokenDialog.close();
  connect();
});

// Escape dismisses the dialog (the browser closes it): say how to get it back.
ui.tokenDialog.addEventListener("cancel", () => {
  notice("This server needs a token: reload the page to enter it.", true);
});

ui.forgetToken.addEventListener("click", () => {
  setToken(null);
  location.reload();
});

function refused(error) {
  return error instanceof ApiError && error.status === 401;
}

function tokenRefusal(error) {
  return getToken() ? `The token was not accepted (401): ${error.message}` : "";
}

// --------------------------------------------------------------------------- the agents

async function connect() {
  try {
    const served = await getJson("/agents");
    state.agents = new Map(served.agents.map((agent) => [agent.name, agent]));
    ui.agent.replaceChildren(
      ...served.agents.map((agent) => {
        const tools = agent.tools.length ? ` — tools: ${agent.tools.join(", ")}` : "";
        return el("option", { text: `${agent.name} (${agent.model})${tools}`, attrs: { value: agent.name } });
      }),
    );
    ui.agent.value = served.default;
    ui.agent.disabled = false;
    ui.forgetToken.hidden = !getToken();
    state.connected = true;
    setRunning(false);
    notice("");
    loadSessions();
    draw();
  } catch (error) {
    if (refused(error)) askToken(tokenRefusal(error));
    else notice(`Cannot reach the server: ${error.message}`, true);
  }
}

// ----------------------------------------------------------------------------- sessions

/** Ask the server for the picked agent's sessions (flows keep none), then redraw the list. */
async function loadSessions() {
  const agent = ui.agent.value;
  state.listed = { agent, ids: [] };
  renderSessions();
  if (pickedFlow()) return;
  try {
    const listed = await getJson(`/sessions?agent=${encodeURIComponent(agent)}`);
    if (ui.agent.value !== agent) return;  // another agent was picked meanwhile
    state.listed = { agent, ids: listed.sessions.map((s) => s.session_id) };
    renderSessions();
  } catch (error) {
    // A memory that cannot list (501) leaves this browser's own list.
    if (refused(error)) askToken(tokenRefusal(error));
  }
}

function renderSessions() {
  const { agent, ids } = state.listed;
  const items = mergeSessions(listSessions(), agent, ids).map((session) => {
    const button = el("button", {
      className: "session",
      text: session.title || session.id,
      attrs: { type: "button", title: `${session.agent} · ${session.id}` },
    });
    if (session.id === state.sessionId) button.setAttribute("aria-current", "true");
    button.append(el("span", { className: "session-agent", text: session.agent }));
    button.addEventListener("click", () => resume(session));
    const item = el("li");
    item.append(button);
    return item;
  });
  ui.sessionList.replaceChildren(...items);
}

function showTotals() {
  ui.sessionUsage.textContent = `Session: ${formatUsage(state.totals, state.totals.cost)}`;
}

function startSession(id, totals, title = null) {
  state.sessionId = id;
  state.title = title;
  state.totals = { input_tokens: 0, output_tokens: 0, cost: 0, ...totals };
  state.shown = null;
  ui.transcript.replaceChildren();
  draw();
  showTotals();
  renderSessions();
}

async function resume(session) {
  if (state.controller) return;
  const switched = ui.agent.value !== session.agent;
  if ([...ui.agent.options].some((option) => option.value === session.agent)) {
    ui.agent.value = session.agent;
  }
  // A session begun elsewhere keeps its id as its title here too.
  startSession(session.id, session.totals, session.title || session.id);
  if (switched) loadSessions();
  if (pickedFlow()) {
    notice("A flow keeps no conversation: its runs start afresh.");
    ui.prompt.focus();
    return;
  }
  try {
    const path = `/sessions/${encodeURIComponent(session.id)}?agent=${encodeURIComponent(session.agent)}`;
    const kept = await getJson(path);
    showMessages(kept.messages);
    const resumed = `Resumed “${state.title}”.`;
    notice(kept.messages.length ? resumed : "The server kept no messages of this session.");
  } catch (error) {
    if (refused(error)) askToken(tokenRefusal(error));
    else notice(`Could not load the session: ${error.message}`, true);
  }
  ui.prompt.focus();
}

function showMessages(messages) {
  let turn = null;
  for (const message of messages) {
    if (message.role === "user") {
      const files = keptFiles(message.content);
      turn = new Turn(ui.transcript, contentText(message.content), files.length ? fileList(files) : null);
    } else if (turn && message.role === "assistant") {
      for (const call of message.tool_calls || []) turn.card(call.id, call.name).setArguments(call.arguments);
      const text = contentText(message.content);
      if (text) turn.setText(text);
    } else if (turn && message.role === "tool") {
      const card = turn.card(message.tool_call_id, message.name || "tool");
      card.finish({ content: contentText(message.content), is_error: message.is_error }, null);
    }
  }
}

ui.agent.addEventListener("change", () => {
  // A session lives in one agent's memory: another agent starts another session.
  startSession(newSessionId());
  loadSessions();
  notice(`New session with ${ui.agent.value}.`);
});

ui.newSession.addEventListener("click", () => {
  if (state.controller) return;
  startSession(newSessionId());
  notice("New session.");
  ui.prompt.focus();
});

// ---------------------------------------------------------------------------------- runs

function setRunning(running) {
  ui.send.disabled = running || !state.connected;
  ui.cancel.disabled = !running;
  ui.agent.disabled = running || !state.connected;
  ui.newSession.disabled = running;
  ui.composer.setAttribute("aria-busy", String(running));
}

function show(run) {
  state.shown = run;
  draw();
}

function draw() {
  if (state.pendingDraw) return;
  state.pendingDraw = true;
  requestAnimationFrame(() => {
    state.pendingDraw = false;
    const run = state.shown;
    renderTimeline(ui.timeline, run, run ? performance.now() - run.start : 0);
    // A flow's run shows its own drawing; with no run shown, the picked flow's, unlit.
    if (run) renderFlow(ui.flow, run.agent, run.flow, run.flow ? run : null);
    else renderFlow(ui.flow, ui.agent.value, pickedFlow(), null);
  });
}

/**
 * Draw an agent's streamed text and tool calls into `stream` (the answer, or a flow node's
 * block); `key` tells its tool calls apart. False for events that draw nothing there.
 */
function streamEvent(stream, kind, data, key = (id) => id) {
  switch (kind) {
    case "text_delta":
      stream.addText(data.text);
      return true;
    case "tool_call_start":
      stream.card(key(data.call_id), data.name);
      return true;
    case "tool_call_delta":
      stream.card(key(data.call_id), "tool").appendArguments(data.arguments_delta);
      return true;
    case "tool_call_end":
      stream.card(key(data.call.id), data.call.name).setArguments(data.call.arguments);
      return true;
    case "tool_result":
      stream.card(key(data.call_id), data.name).finish(data.output, data.duration);
      return true;
    default:
      return false;
  }
}

/** A flow node's agent event: its text and tool cards, in the node's block. */
function nodeEvent(turn, data) {
  const event = data.event;
  if (!event) return;
  const stream = turn.nodeStream(data.node);
  // Call ids are the model's: another step, or another prompt of the agent, may repeat them.
  if (!streamEvent(stream, event.kind, event, (id) => `${data.step}/${stream.prompts}/${id}`)) {
    if (event.kind === "done") stream.endPrompt();
  }
}

function onEvent(turn, run, kind, data) {
  run.events.push({ t: performance.now() - run.start, kind, data });
  const box = ui.transcript;
  const following = box.scrollHeight - box.scrollTop - box.clientHeight < 48;
  if (kind === "node_event") {
    nodeEvent(turn, data);
  } else if (kind === "done") {
    run.status = data.interrupts.length ? "paused" : "done";
    run.interrupts = data.interrupts;
    if (data.response) {
      run.runId = data.response.run_id;
      run.usage = data.response.usage;  // a flow's counts its nodes' agents: counted once, here
      run.cost = data.response.cost;
      if (!turn.text && !turn.cards.size) turn.setText(data.response.text);
    }
  } else if (kind === "error") {
    run.status = "error";
    turn.status(`${data.error_type}: ${data.message}`, "error");
  } else {
    streamEvent(turn, kind, data);
  }
  if (following) box.scrollTop = box.scrollHeight;  // keep up with the answer, unless scrolled away
  if (state.shown === run) draw();
}

async function send() {
  const text = ui.prompt.value.trim();
  if ((!text && !attachments.items.length) || state.controller || !state.connected) return;
  const agent = ui.agent.value;
  ui.prompt.value = "";
  const files = attachments.take();
  const turn = new Turn(ui.transcript, text, files.length ? fileList(files) : null);
  ui.transcript.scrollTop = ui.transcript.scrollHeight;
  touchSession(state.sessionId, agent, state.title || text || files.map((f) => f.name).join(", "));
  renderSessions();
  const parts = files.map((file) => file.part);
  await runTurn(turn, agent, runInput(state.sessionId, text, null, parts));
}

// ---------------------------------------------------------------------------------- files

const attachments = new Attachments(ui.attachments, (items) => {
  notice(items.length ? `${items.length} file${items.length === 1 ? "" : "s"} attached.` : "No files attached.");
});

async function attach(files) {
  if (!files || !files.length) return;
  try {
    await attachments.add(files);
  } catch (error) {
    notice(`Could not read the file: ${error.message}`, true);
  }
}

ui.attach.addEventListener("click", () => ui.files.click());

ui.files.addEventListener("change", async () => {
  await attach(ui.files.files);
  ui.files.value = "";  // the same file may be chosen again
  ui.prompt.focus();
});

function dragsFiles(event) {
  return Boolean(event.dataTransfer) && Array.from(event.dataTransfer.types || []).includes("Files");
}

for (const name of ["dragenter", "dragover"]) {
  ui.composer.addEventListener(name, (event) => {
    if (!dragsFiles(event)) return;
    event.preventDefault();
    ui.composer.classList.add("dropping");
  });
}

ui.composer.addEventListener("dragleave", (event) => {
  if (!ui.composer.contains(event.relatedTarget)) ui.composer.classList.remove("dropping");
});

ui.composer.addEventListener("drop", (event) => {
  ui.composer.classList.remove("dropping");
  if (!event.dataTransfer || !event.dataTransfer.files.length) return;
  event.preventDefault();
  attach(event.dataTransfer.files);
});

/** Answer the interrupts a paused run waits for (approve or reject every call), then resume. */
function askApproval(turn, run, agent) {
  turn.askApproval(run.interrupts, (approved) => {
    if (state.controller) return false;
    const resume = run.interrupts.map((interrupt) => ({
      interruptId: interrupt.id,
      status: approved ? "resolved" : "cancelled",
      payload: { approved },
    }));
    turn.endPrompt();
    runTurn(turn, agent, runInput(state.sessionId, null, resume));
    return true;
  });
}

/** Stream one AG-UI run into `turn`: a prompt's, or the resume of a paused one. */
async function runTurn(turn, agent, input) {
  const run = {
    start: performance.now(),
    events: [],
    status: "running",
    end: null,
    agent,
    flow: pickedFlow(),
    interrupts: [],
  };
  show(run);
  const controller = new AbortController();
  state.controller = controller;
  const ticking = setInterval(() => state.shown === run && draw(), 250);
  setRunning(true);
  notice("Running…");
  const reader = new Reader();
  try {
    await streamRun(
      agent,
      input,
      (event) => {
        for (const { kind, data } of reader.read(event)) onEvent(turn, run, kind, data);
      },
      controller.signal,
    );
    if (run.status === "running") {
      run.status = "error";
      turn.status("The stream ended without an answer.", "error");
    }
  } catch (error) {
    if (error.name === "AbortError") {
      run.status = "cancelled";
      turn.status("Cancelled.", "cancelled");
    } else {
      run.status = "error";
      turn.status(error.message, "error");
      if (refused(error)) askToken(tokenRefusal(error));
    }
  } finally {
    run.end = performance.now() - run.start;
    clearInterval(ticking);
    state.controller = null;
    if (run.status !== "paused") for (const card of turn.allCards()) card.stop(run.status);
    finishTurn(turn, run, agent);
    // Cancel is disabled now: a keyboard user who pressed it goes back to the message box.
    const onCancel = document.activeElement === ui.cancel;
    setRunning(false);
    if (onCancel) ui.prompt.focus();
    const outcome = {
      done: "",
      paused: "The run waits for your approval.",
      cancelled: "Run cancelled.",
      error: "The run failed.",
    };
    notice(outcome[run.status], run.status === "error");
    if (run.status === "paused") askApproval(turn, run, agent);
    draw();
  }
}

function finishTurn(turn, run, agent) {
  const parts = [formatSeconds(run.end / 1000)];
  if (run.usage) {
    parts.unshift(formatUsage(run.usage, run.cost));
    state.totals.input_tokens += run.usage.input_tokens || 0;
    state.totals.output_tokens += run.usage.output_tokens || 0;
    state.totals.cost += run.cost || 0;
    updateSession(state.sessionId, agent, { totals: state.totals });
    showTotals();
  }
  turn.meta.append(el("span", { className: "turn-usage", text: `This turn: ${parts.join(" · ")}` }));
  const inspect = el("button", { className: "link", text: "Inspect run", attrs: { type: "button" } });
  inspect.addEventListener("click", () => {
    show(run);
    ui.inspectorTitle.focus();
  });
  turn.meta.append(inspect);
}

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});

ui.prompt.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    send();
  }
});

ui.cancel.addEventListener("click", () => state.controller?.abort());

document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && state.controller && !ui.tokenDialog.open) state.controller.abort();
});

showTotals();
renderTimeline(ui.timeline, null);
connect();
