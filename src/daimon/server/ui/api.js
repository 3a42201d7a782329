// The server's API as the page uses it: every request carries the bearer token (when one was
// given), and runs stream AG-UI events read with fetch + a ReadableStream SSE parser, because
// EventSource cannot send an Authorization header.

const TOKEN_KEY = "daimon.token";

/** An answer that is not 2xx: `status`, and the server's `{error: {type, message}}`. */
export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra = {}) {
  const all = { ...extra };
  const token = getToken();
  if (token) all.Authorization = `Bearer ${token}`;
  return all;
}

async function failure(response) {
  let type = "http_error";
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      type = body.error.type || type;
      message = body.error.message || message;
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, type, message);
}

/** GET a JSON document. */
export async function getJson(path) {
  const response = await fetch(path, { headers: headers(), credentials: "same-origin" });
  if (!response.ok) throw await failure(response);
  return response.json();
}

/**
 * POST a RunAgentInput to the AG-UI endpoint of `agent` and call `onEvent(event)` for each
 * AG-UI event as it arrives. Resolves when the stream ends; rejects with an ApiError (non-2xx)
 * or an AbortError.
 */
export async function streamRun(agent, input, onEvent, signal) {
  // The run outlives its connection (a client may come back with Last-Event-ID): Cancel asks
  // the server to stop it, naming its stream (the part of each event's id before the colon).
  let lastId = null;
  const cancel = () => {
    if (lastId) cancelStream(lastId.slice(0, lastId.lastIndexOf(":")));
  };
  signal.addEventListener("abort", cancel, { once: true });
  try {
    const response = await fetch(`/agui/${encodeURIComponent(agent)}`, {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(input),
      signal,
    });
    if (!response.ok) throw await failure(response);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = parseFrame(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (frame) {
          if (frame.id) lastId = frame.id;
          onEvent(frame.data);
        }
      }
    }
  } finally {
    signal.removeEventListener("abort", cancel);
  }
}

/** Ask the server to stop the run writing `stream` (wherever it runs); errors are ignored. */
export function cancelStream(stream) {
  const url = `/prompt/stream/${encodeURIComponent(stream)}`;
  return fetch(url, { method: "DELETE", headers: headers() }).catch(() => null);
}

/** One SSE frame: `{event, data, id}` with data parsed as JSON, or null for comments (pings). */
export function parseFrame(text) {
  let event = "message";
  let id = null;
  const data = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "id") id = value;
    else if (field === "data") data.push(value);
  }
  if (data.length === 0) return null;
  return { event, data: JSON.parse(data.join("\n")), id };
}
