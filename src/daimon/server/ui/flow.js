// Flow drawings: a served graph, DAG or workflow as an SVG, its nodes lit as they run.
//
// The layout is layered, top to bottom. A depth-first walk from the entry sets aside the edges
// that close a cycle (a graph's loops); every other edge points down, and each node sits one
// layer below its lowest predecessor. Within a layer, nodes keep the server's order, nudged
// toward their predecessors. Loops are drawn as arcs on the right, and edges that skip layers
// bend out to the left, so no arrow runs hidden behind a node.

import { el, formatSeconds } from "./chat.js";

const SVG = "http://www.w3.org/2000/svg";
const NODE_H = 30;
const LAYER_GAP = 56;
const NODE_GAP = 22;
const CHAR_W = 7.2;
const MARGIN = 16;
const LOOP_W = 56;

const GLYPHS = { idle: "", running: "⋯ ", done: "✓ ", failed: "✗ ", skipped: "⊘ ", cancelled: "■ " };

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

const pair = (source, target) => `${source}\u0000${target}`;

/**
 * Place a drawing's nodes: `{nodes: Map(id -> {x, y, w, layer}), back: Set(pair), width, height}`.
 * Linear in nodes and edges; a cycle only turns one of its edges into a back edge.
 */
export function layout(drawing) {
  const ids = drawing.nodes.map((node) => node.id);
  const known = new Set(ids);
  const edges = drawing.edges.filter((e) => known.has(e.source) && known.has(e.target));
  const out = new Map(ids.map((id) => [id, []]));
  for (const edge of edges) out.get(edge.source).push(edge.target);

  // Back edges: those that reach a node still on the depth-first stack (iterative: no recursion).
  const back = new Set();
  const seen = new Map(); // 1: on the stack, 2: finished
  for (const root of ids) {
    if (seen.has(root)) continue;
    seen.set(root, 1);
    const stack = [[root, 0]];
    while (stack.length) {
      const top = stack[stack.length - 1];
      const targets = out.get(top[0]);
      if (top[1] < targets.length) {
        const target = targets[top[1]++];
        const mark = seen.get(target);
        if (mark === 1) back.add(pair(top[0], target));
        else if (!mark) {
          seen.set(target, 1);
          stack.push([target, 0]);
        }
      } else {
        seen.set(top[0], 2);
        stack.pop();
      }
    }
  }

  // Layers: the longest path from a source, over the forward edges (Kahn's order).
  const waiting = new Map(ids.map((id) => [id, 0]));
  const down = new Map(ids.map((id) => [id, []]));
  const up = new Map(ids.map((id) => [id, []]));
  for (const edge of edges) {
    if (back.has(pair(edge.source, edge.target))) continue;
    down.get(edge.source).push(edge.target);
    up.get(edge.target).push(edge.source);
    waiting.set(edge.target, waiting.get(edge.target) + 1);
  }
  const layerOf = new Map(ids.map((id) => [id, 0]));
  const queue = ids.filter((id) => !waiting.get(id));
  for (let i = 0; i < queue.length; i++) {
    const node = queue[i];
    for (const target of down.get(node)) {
      layerOf.set(target, Math.max(layerOf.get(target), layerOf.get(node) + 1));
      waiting.set(target, waiting.get(target) - 1);
      if (!waiting.get(target)) queue.push(target);
    }
  }

  const layers = [];
  for (const id of ids) (layers[layerOf.get(id)] ||= []).push(id);
  const order = new Map(ids.map((id, i) => [id, i]));
  const slot = new Map();
  for (const layer of layers.filter(Boolean)) {
    const weight = (id) => {
      const from = up.get(id).filter((p) => slot.has(p));
      return from.length ? from.reduce((sum, p) => sum + slot.get(p), 0) / from.length : order.get(id);
    };
    const weights = new Map(layer.map((id) => [id, weight(id)]));
    layer.sort((a, b) => weights.get(a) - weights.get(b) || order.get(a) - order.get(b));
    layer.forEach((id, i) => slot.set(id, i));
  }

  const label = new Map(drawing.nodes.map((node) => [node.id, node.label]));
  const widthOf = (id) => Math.max(64, Math.ceil((label.get(id).length + 2) * CHAR_W) + 20);
  const rows = layers.filter(Boolean);
  const rowWidth = (row) => row.reduce((sum, id) => sum + widthOf(id), 0) + NODE_GAP * (row.length - 1);
  const inner = Math.max(...rows.map(rowWidth), 64);
  const skips = edges.some(
    (e) => !back.has(pair(e.source, e.target)) && layerOf.get(e.target) - layerOf.get(e.source) > 1,
  );
  const left = skips ? LOOP_W : 0;
  const nodes = new Map();
  rows.forEach((row, index) => {
    let x = left + MARGIN + (inner - rowWidth(row)) / 2;
    for (const id of row) {
      const w = widthOf(id);
      nodes.set(id, { x: x + w / 2, y: MARGIN + index * (NODE_H + LAYER_GAP) + NODE_H / 2, w, layer: index });
      x += w + NODE_GAP;
    }
  });
  const width = MARGIN * 2 + inner + left + (back.size ? LOOP_W : 0);
  const height = MARGIN * 2 + rows.length * NODE_H + Math.max(0, rows.length - 1) * LAYER_GAP;
  return { nodes, back, width, height };
}

function edgePath(a, b, isBack) {
  if (!isBack && b.layer - a.layer > 1) {
    // Around the layers in between, on the left.
    const x1 = a.x - a.w / 2;
    const x2 = b.x - b.w / 2 - 2;
    const reach = Math.max(MARGIN / 2, Math.min(x1, x2) - LOOP_W * 1.6);
    const d = `M${x1} ${a.y} C${reach} ${a.y} ${reach} ${b.y} ${x2} ${b.y}`;
    return { d, lx: reach + LOOP_W * 0.45, ly: (a.y + b.y) / 2 };
  }
  if (!isBack) {
    const y1 = a.y + NODE_H / 2;
    const y2 = b.y - NODE_H / 2 - 2;
    const mid = (y1 + y2) / 2;
    return { d: `M${a.x} ${y1} C${a.x} ${mid} ${b.x} ${mid} ${b.x} ${y2}`, lx: (a.x + b.x) / 2, ly: mid };
  }
  const x1 = a.x + a.w / 2;
  const x2 = b.x + b.w / 2 + 2;
  const reach = Math.max(x1, x2) + LOOP_W * 0.8;
  if (a === b) {
    const d = `M${x1} ${a.y - 6} C${reach} ${a.y - 26} ${reach} ${a.y + 26} ${x2} ${a.y + 6}`;
    return { d, lx: reach - 10, ly: a.y };
  }
  const d = `M${x1} ${a.y} C${reach} ${a.y} ${reach} ${b.y} ${x2} ${b.y}`;
  return { d, lx: reach - 8, ly: (a.y + b.y) / 2 };
}

function build(container, name, drawing) {
  const place = layout(drawing);
  const words = `${name}, a ${drawing.kind} of ${drawing.nodes.filter((n) => !n.terminal).length} nodes`;
  const chart = svg("svg", {
    class: "flow",
    viewBox: `0 0 ${place.width} ${place.height}`,
    role: "group",
    "aria-label": `Flow ${words}`,
  });
  chart.style.maxWidth = `${place.width * 1.2}px`;
  const defs = svg("defs");
  const marker = svg("marker", {
    id: "flow-arrow",
    viewBox: "0 0 10 10",
    refX: 8,
    refY: 5,
    markerWidth: 7,
    markerHeight: 7,
    orient: "auto-start-reverse",
  });
  marker.append(svg("path", { d: "M0 0 L10 5 L0 10 z", class: "flow-arrowhead" }));
  defs.append(marker);
  chart.append(defs);
  const lines = svg("g", { "aria-hidden": "true" });
  for (const edge of drawing.edges) {
    const a = place.nodes.get(edge.source);
    const b = place.nodes.get(edge.target);
    if (!a || !b) continue;
    const path = edgePath(a, b, place.back.has(pair(edge.source, edge.target)));
    lines.append(
      svg("path", {
        d: path.d,
        class: `flow-edge${edge.dashed ? " dashed" : ""}`,
        "marker-end": "url(#flow-arrow)",
      }),
    );
    if (edge.label) lines.append(svg("text", { x: path.lx, y: path.ly, class: "flow-label" }, edge.label));
  }
  chart.append(lines);
  const boxes = new Map();
  for (const node of drawing.nodes) {
    const at = place.nodes.get(node.id);
    const group = svg("g", {
      class: `flow-node idle${node.terminal ? " terminal" : ""}`,
      role: "img",
      tabindex: node.terminal ? -1 : 0,
      "data-node": node.id,
      "data-state": "idle",
      "aria-label": node.terminal ? node.label : `${node.label}: not run`,
    });
    group.append(
      svg("rect", {
        x: at.x - at.w / 2,
        y: at.y - NODE_H / 2,
        width: at.w,
        height: NODE_H,
        rx: node.terminal ? NODE_H / 2 : 6,
      }),
    );
    const text = svg("text", { x: at.x, y: at.y }, node.label);
    const title = svg("title", {}, node.label);
    group.append(text, title);
    chart.append(group);
    if (!node.terminal) boxes.set(node.id, { group, text, title, label: node.label });
  }
  const status = el("p", { className: "flow-status", attrs: { role: "status" } });
  const legend = el("p", {
    className: "flow-legend",
    text: "⋯ running · ✓ done · ✗ failed · ⊘ skipped · ■ cancelled",
  });
  container.replaceChildren(chart, status, legend);
  return { drawing, boxes, status };
}

/** Each node's state in `run` (from its node events): `Map(node -> {state, runs, seconds, message})`. */
export function nodeStates(run) {
  const states = new Map();
  if (!run) return states;
  for (const { kind, data } of run.events) {
    if (!kind.startsWith("node_") || kind === "node_event") continue; // not its agent's events
    const node = states.get(data.node) || { state: "idle", runs: 0 };
    if (kind === "node_started") {
      node.state = "running";
      node.runs += 1;
    } else if (kind === "node_finished") {
      node.state = "done";
      node.seconds = data.seconds;
    } else if (kind === "node_failed") {
      node.state = "failed";
      node.seconds = data.seconds;
      node.message = data.message;
    } else if (kind === "node_skipped") {
      node.state = "skipped";
    }
    states.set(data.node, node);
  }
  if (run.status !== "running") {
    for (const node of states.values()) if (node.state === "running") node.state = "cancelled";
  }
  return states;
}

function describe(label, node) {
  const times = node.runs > 1 ? ` (ran ${node.runs} times)` : "";
  switch (node.state) {
    case "running":
      return `${label}: running${times}`;
    case "done":
      return `${label}: done in ${formatSeconds(node.seconds)}${times}`;
    case "failed":
      return `${label}: failed after ${formatSeconds(node.seconds)}${times}: ${node.message}`;
    case "skipped":
      return `${label}: skipped`;
    case "cancelled":
      return `${label}: cancelled${times}`;
    default:
      return `${label}: not run`;
  }
}

/**
 * Show `drawing` (the flow called `name`) in `container`, lit by `run`'s node events; hide the
 * container when there is no drawing. The SVG is built once per drawing, then only updated, so
 * keyboard focus on a node survives the updates.
 */
export function renderFlow(container, name, drawing, run) {
  if (!drawing) {
    container.hidden = true;
    container.replaceChildren();
    container.flow = null;
    return;
  }
  container.hidden = false;
  if (!container.flow || container.flow.drawing !== drawing) container.flow = build(container, name, drawing);
  const { boxes, status } = container.flow;
  const states = nodeStates(run);
  const counts = { running: [], done: 0, failed: [], skipped: 0 };
  for (const [id, box] of boxes) {
    const node = states.get(id) || { state: "idle", runs: 0 };
    if (box.group.dataset.state !== node.state || box.runs !== node.runs) {
      box.group.setAttribute("class", `flow-node ${node.state}`);
      box.group.dataset.state = node.state;
      box.text.textContent = `${GLYPHS[node.state] || ""}${box.label}`;
      box.runs = node.runs;
    }
    const words = describe(box.label, node);
    if (box.group.getAttribute("aria-label") !== words) {
      box.group.setAttribute("aria-label", words);
      box.title.textContent = words;
    }
    if (node.state === "running") counts.running.push(box.label);
    else if (node.state === "failed") counts.failed.push(box.label);
    else if (node.state === "done") counts.done += 1;
    else if (node.state === "skipped") counts.skipped += 1;
  }
  const parts = [];
  if (counts.running.length) parts.push(`running: ${counts.running.join(", ")}`);
  if (counts.done) parts.push(`${counts.done} of ${boxes.size} done`);
  if (counts.failed.length) parts.push(`failed: ${counts.failed.join(", ")}`);
  if (counts.skipped) parts.push(`${counts.skipped} skipped`);
  const text = run ? parts.join(" · ") || "starting…" : "Not run yet.";
  if (status.textContent !== text) status.textContent = text;
}
