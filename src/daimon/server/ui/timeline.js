// The run inspector: a run's events, as timed on arrival, drawn as bars on lanes.
//
// A model call runs from the start of the run (or the end of the tools before it) to its
// `usage` event; the tools it asked for start then and last their reported `duration`. Model
// calls take the first lane; tool calls that overlap (parallel calls) take lanes side by side.
// A flow's nodes run from their start event to their end (labelled with the server's measured
// duration), on lanes of their own below. The agent a node prompts reports its events as
// `node_event`s; they are drawn the same way, from the node's start, on lanes under its bar.

import { el, formatSeconds } from "./chat.js";

/** What one agent run has done so far, to make its model and tool bars from its events. */
function agentTrack(start, node = null) {
  return {
    node,
    bars: [],
    calls: new Map(),
    pending: [],
    modelStart: start,
    modelOpen: true,
    batchStart: start,
    count: 0,
    seen: false,
  };
}

function trackEvent(track, t, kind, data) {
  track.seen = true;
  const bar = (kind, label, start, end, state) => {
    track.bars.push({ kind, label, start, end, state, node: track.node });
  };
  if (kind === "usage") {
    track.count += 1;
    bar("model", `model call ${track.count}`, track.modelStart, t, "ok");
    track.modelOpen = false;
    track.batchStart = t;
  } else if (kind === "tool_call_end") {
    track.calls.set(data.call.id, data.call.name);
    track.pending.push(data.call.id);
  } else if (kind === "tool_result") {
    const duration = (data.duration || 0) * 1000;
    const start = Math.max(0, Math.min(track.batchStart, t - duration));
    bar("tool", data.name, start, start + duration, data.output && data.output.is_error ? "error" : "ok");
    const index = track.pending.indexOf(data.call_id);
    if (index >= 0) track.pending.splice(index, 1);
    track.modelStart = Math.max(track.modelStart, t);
    track.modelOpen = true;
  } else if (kind === "done") {
    track.modelOpen = false;
    track.modelStart = t; // a node may prompt its agent again
  }
}

/** Close what `track` left under way at `end`: its tools, else (with `model`) its model call. */
function closeTrack(track, end, toolState, modelState, model) {
  if (track.pending.length) {
    for (const id of track.pending) {
      track.bars.push({
        kind: "tool",
        label: track.calls.get(id) || id,
        start: track.batchStart,
        end,
        state: toolState,
        node: track.node,
      });
    }
    track.pending = [];
  } else if (track.modelOpen && model) {
    track.count += 1;
    track.bars.push({
      kind: "model",
      label: `model call ${track.count}`,
      start: track.modelStart,
      end,
      state: modelState,
      node: track.node,
    });
  }
}

/**
 * The bars of a run: `{kind, label, start, end, lane, state, node}`, times in ms from its start
 * (`node` names the flow node whose agent made a model or tool call). What is still under way
 * (or was cut short) runs to `now` (or the run's end).
 */
export function runBars(run, now = 0) {
  const bars = [];
  const top = agentTrack(0);
  const openNodes = new Map();
  for (const { t, kind, data } of run.events) {
    if (kind === "node_started") {
      openNodes.set(data.node, {
        kind: "node",
        label: data.node,
        start: t,
        end: null,
        state: "running",
        track: agentTrack(t, data.node),
      });
    } else if (kind === "node_event") {
      const open = openNodes.get(data.node);
      if (open && data.event) trackEvent(open.track, t, data.event.kind, data.event);
    } else if (kind === "node_finished" || kind === "node_failed") {
      const bar = openNodes.get(data.node) || { kind: "node", label: data.node, track: agentTrack(t) };
      openNodes.delete(data.node);
      // The server measured the node; its start event cannot have arrived after the node began.
      bar.seconds = data.seconds || 0;
      bar.end = t;
      bar.start = Math.max(bar.start ?? 0, t - bar.seconds * 1000);
      bar.state = kind === "node_failed" ? "error" : "ok";
      closeTrack(bar.track, t, "cancelled", "error", bar.track.seen);
      bars.push(bar, ...bar.track.bars);
    } else {
      trackEvent(top, t, kind, data);
    }
  }
  const end = run.end ?? Math.max(now, run.events.at(-1)?.t ?? 0);
  const stopped = run.status === "done" ? null : run.status;
  const flow = Boolean(run.flow) || openNodes.size > 0 || bars.some((bar) => bar.kind === "node");
  for (const bar of openNodes.values()) {
    const state = run.status === "running" ? "running" : "cancelled";
    closeTrack(bar.track, end, state, state, bar.track.seen);
    bars.push({ ...bar, end, state }, ...bar.track.bars);
  }
  if (stopped) closeTrack(top, end, stopped, stopped, !flow);
  bars.push(...top.bars);
  assignLanes(bars);
  for (const bar of bars) delete bar.track;
  return bars;
}

function assignLanes(bars) {
  const own = bars.filter((bar) => bar.kind !== "node" && !bar.node);
  for (const bar of own) if (bar.kind === "model") bar.lane = 0;
  const below = pack(own.filter((bar) => bar.kind === "tool"), 1);
  const first = own.length ? below : 0;
  // A node whose agent made calls takes its own lane plus its agent's lanes, under its bar.
  const laneEnds = [];
  for (const node of bars.filter((bar) => bar.kind === "node").sort((a, b) => a.start - b.start)) {
    const inner = node.track ? node.track.bars : [];
    for (const bar of inner) if (bar.kind === "model") bar.lane = 0;
    const height = 1 + (inner.length ? pack(inner.filter((bar) => bar.kind === "tool"), 1) : 0);
    let lane = 0;
    while (laneEnds.slice(lane, lane + height).some((end) => end > node.start)) lane += 1;
    for (let i = lane; i < lane + height; i++) laneEnds[i] = node.end;
    node.lane = lane + first;
    for (const bar of inner) bar.lane += node.lane + 1;
  }
}

/** Put overlapping bars side by side, on lanes from `first`; returns the next free lane. */
function pack(bars, first) {
  const laneEnds = [];
  for (const bar of bars.sort((a, b) => a.start - b.start)) {
    let lane = laneEnds.findIndex((end) => end <= bar.start);
    if (lane < 0) {
      lane = laneEnds.length;
      laneEnds.push(0);
    }
    laneEnds[lane] = bar.end;
    bar.lane = lane + first;
  }
  return first + laneEnds.length;
}

const KIND_WORDS = { model: "model call", tool: "tool call", node: "node" };

/** Draw `run` into `container` (replacing what was there); `now` is ms since it started. */
export function renderTimeline(container, run, now = 0) {
  container.replaceChildren();
  if (!run) {
    container.append(el("p", { className: "empty", text: "Send a prompt to see its run here." }));
    return;
  }
  const bars = runBars(run, now);
  const total = Math.max(run.end ?? now, ...bars.map((b) => b.end), 1);
  const lanes = Math.max(1, ...bars.map((b) => b.lane + 1));
  const summary = el("p", { className: "run-summary" });
  const models = bars.filter((b) => b.kind === "model").length;
  const nodes = bars.filter((b) => b.kind === "node").length;
  const tools = bars.length - models - nodes;
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  let counts = [plural(models, "model call"), plural(tools, "tool call")];
  if (run.flow || nodes) counts = [plural(nodes, "node run"), ...counts.filter((c) => !c.startsWith("0 "))];
  summary.textContent =
    `${run.runId ? `run ${run.runId} · ` : ""}${run.status} · ${formatSeconds(total / 1000)} · ` +
    counts.join(" · ");
  const chart = el("ol", {
    className: "timeline",
    attrs: { "aria-label": "Run timeline", "data-lanes": String(lanes) },
  });
  chart.style.height = `${lanes * 2}rem`;
  for (const bar of bars) {
    const seconds = bar.seconds ?? (bar.end - bar.start) / 1000;
    const where = bar.node ? ` in ${bar.node}` : "";
    const words = `${bar.label}, ${KIND_WORDS[bar.kind]}${where}, ` +
      `${formatSeconds(seconds)}${bar.state === "ok" ? "" : `, ${bar.state}`}`;
    const classes = ["bar", bar.kind, bar.state];
    if (bar.node) classes.push("inner");
    if (bar.start / total > 0.6) classes.push("flip");
    const item = el("li", {
      className: classes.join(" "),
      attrs: { "aria-label": words, title: words, tabindex: "0", "data-lane": String(bar.lane) },
    });
    item.style.left = `${(bar.start / total) * 100}%`;
    item.style.width = `max(0.4rem, ${((bar.end - bar.start) / total) * 100}%)`;
    item.style.top = `${bar.lane * 2}rem`;
    item.append(el("span", { text: `${bar.label} ${formatSeconds(seconds)}` }));
    chart.append(item);
  }
  const axis = el("div", { className: "axis", attrs: { "aria-hidden": "true" } });
  axis.append(el("span", { text: "0" }), el("span", { text: formatSeconds(total / 1000) }));
  container.append(summary, chart, axis);
}
