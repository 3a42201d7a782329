// The sessions this browser started, newest first (ids and titles only, in localStorage: the
// messages stay in the agent's memory on the server and are fetched when a session is resumed),
// merged with the ones the server lists for the picked agent, so sessions begun elsewhere show.

const KEY = "daimon.sessions";
const LIMIT = 50;

export function newSessionId() {
  return `ui-${crypto.randomUUID()}`;
}

export function listSessions() {
  try {
    const saved = JSON.parse(localStorage.getItem(KEY) || "[]");
    return Array.isArray(saved) ? saved : [];
  } catch {
    return [];
  }
}

/** Record that session `id` (of `agent`) was used now; the first prompt names it. */
export function touchSession(id, agent, prompt) {
  const sessions = listSessions();
  const found = sessions.find((s) => s.id === id && s.agent === agent);
  const rest = sessions.filter((s) => s !== found);
  const entry = found || { id, agent, title: prompt.slice(0, 60) };
  entry.updated = Date.now();
  localStorage.setItem(KEY, JSON.stringify([entry, ...rest].slice(0, LIMIT)));
}

/** Merge `fields` into the saved entry of session `id` (of `agent`). */
export function updateSession(id, agent, fields) {
  const sessions = listSessions();
  const found = sessions.find((s) => s.id === id && s.agent === agent);
  if (!found) return;
  Object.assign(found, JSON.parse(JSON.stringify(fields)));
  localStorage.setItem(KEY, JSON.stringify(sessions));
}

/** This browser's sessions, then those the server holds for `agent` that it did not start. */
export function mergeSessions(local, agent, serverIds) {
  const known = new Set(local.filter((s) => s.agent === agent).map((s) => s.id));
  return [...local, ...serverIds.filter((id) => !known.has(id)).map((id) => ({ id, agent }))];
}
