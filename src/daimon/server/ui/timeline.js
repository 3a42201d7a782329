// The run inspector: a run's events, as timed on arrival, drawn as bars on lanes.
//
// A model call runs from the start of the run (or the end of the tools before it) to its
// `usage` event; the tools it asked for start then and last their reported `duration`. Model
// calls take the first lane; tool calls that overlap (parallel calls) take lanes side by side.
// A flow's nodes run from their start event to their end (labelled with the server's measured
// duration), on lanes of their own below.

import { el, formatSeconds } from "./chat.js";

/**
 * The bars of a run: `{kind, label, start, end, lane, state}`, times in ms from its start.
 * What is still under way (or was cut short) runs to `now` (or the run's end).
 */
export function runBars(run, now = 0) {
  const bars = [];
  const calls = new Map();
  let modelStart = 0;
  let modelOpen = true;
  let batchStart = 0;
  let count = 0;
  const pending = [];
  const openNodes = new Map();
  for (const { t, kind, data } of run.events) {
    if (kind === "usage") {
      count += 1;
      bars.push({ kind: "model", label: `model call ${count}`, start: modelStart, end: t, state: "ok" });
      modelOpen = false;
      batchStart = t;
    } else if (kind === "tool_call_end") {
      calls.set(data.call.id, data.call.name);
      pending.push(data.call.id);
    } else if (kind === "tool_result") {
      const duration = (data.duration || 0) * 1000;
      const start = Math.min(batchStart, t - duration);
      bars.push({
        kind: "tool",
        label: data.name,
        start: Math.max(0, start),
        end: Math.max(0, start) + duration,
        state: data.output && data.output.is_error ? "error" : "ok",
      });
      const index = pending.indexOf(data.call_id);
      if (index >= 0) pending.splice(index, 1);
      modelStart = Math.max(modelStart, t);
      modelOpen = true;
    } else if (kind === "node_started") {
      openNodes.set(data.node, { kind: "node", label: data.node, start: t, end: null, state: "running" });
    } else if (kind === "node_finished" || kind === "node_failed") {
      const bar = openNodes.get(data.node) || { kind: "node", label: data.node };
      openNodes.delete(data.node);
      // The server measured the node; its start event cannot have arrived after the node began.
      bar.seconds = data.seconds || 0;
      bar.end = t;
      bar.start = Math.max(bar.start ?? 0, t - bar.seconds * 1000);
      bar.state = kind === "node_failed" ? "error" : "ok";
      bars.push(bar);
    } else if (kind === "done") {
      modelOpen = false;
    }
  }
  const end = run.end ?? Math.max(now, run.events.at(-1)?.t ?? 0);
  const stopped = run.status === "done" ? null : run.status;
  const flow = Boolean(run.flow) || openNodes.size > 0 || bars.some((bar) => bar.kind === "node");
  for (const bar of openNodes.values()) {
    bars.push({ ...bar, end, state: run.status === "running" ? "running" : "cancelled" });
  }
  if (stopped) {
    if (pending.length) {
      for (const id of pending) {
        bars.push({ kind: "tool", label: calls.get(id) || id, start: batchStart, end, state: stopped });
      }
    } else if (modelOpen && !flow) {
      count += 1;
      bars.push({ kind: "model", label: `model call ${count}`, start: modelStart, end, state: stopped });
    }
  }
  assignLanes(bars);
  return bars;
}

function assignLanes(bars) {
  for (const bar of bars) if (bar.kind === "model") bar.lane = 0;
  const below = pack(bars.filter((bar) => bar.kind === "tool"), 1);
  const first = bars.some((bar) => bar.kind !== "node") ? below : 0;
  pack(bars.filter((bar) => bar.kind === "node"), first);
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
    const words = `${bar.label}, ${KIND_WORDS[bar.kind]}, ` +
      `${formatSeconds(seconds)}${bar.state === "ok" ? "" : `, ${bar.state}`}`;
    const item = el("li", {
      className: `bar ${bar.kind} ${bar.state}${bar.start / total > 0.6 ? " flip" : ""}`,
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
