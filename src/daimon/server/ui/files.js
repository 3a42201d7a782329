// Files attached to the next prompt: chosen with the Attach button or dropped on the message box,
// shown as removable chips, and sent as AG-UI content parts (image, audio or document, the bytes
// inline as base64 with their media type and the file's name in `metadata.filename`).

import { el } from "./chat.js";

// Text files browsers often give no type (or one the server would not take as text).
const TEXT_TYPES = {
  md: "text/markdown",
  markdown: "text/markdown",
  csv: "text/csv",
  txt: "text/plain",
  json: "text/plain",
  log: "text/plain",
  yaml: "text/plain",
  yml: "text/plain",
  toml: "text/plain",
};

/** The media type a file is sent with: the browser's, unless its name says it is text. */
export function mediaType(file) {
  const extension = (file.name.split(".").pop() || "").toLowerCase();
  const given = file.type || "";
  if (given.startsWith("image/") || given.startsWith("audio/") || given.startsWith("text/")) return given;
  if (given === "application/pdf") return given;
  return TEXT_TYPES[extension] || given || "application/octet-stream";
}

/** The AG-UI part a media type goes in. */
export function partKind(type) {
  if (type.startsWith("image/")) return "image";
  if (type.startsWith("audio/")) return "audio";
  return "document";
}

export function formatBytes(count) {
  if (count < 1024) return `${count} B`;
  if (count < 1024 * 1024) return `${(count / 1024).toFixed(1)} KB`;
  return `${(count / 1024 / 1024).toFixed(1)} MB`;
}

/** The file as a `data:` URL (base64). */
function readDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error || new Error(`cannot read ${file.name}`));
    reader.readAsDataURL(file);
  });
}

/** A read file: what is shown of it (name, size, a thumbnail's URL) and the part sent. */
async function prepare(file) {
  const type = mediaType(file);
  const url = await readDataUrl(file);
  const value = url.slice(url.indexOf(",") + 1);
  const kind = partKind(type);
  return {
    name: file.name,
    size: file.size,
    type,
    thumbnail: kind === "image" ? `data:${type};base64,${value}` : null,
    part: { type: kind, source: { type: "data", value, mimeType: type }, metadata: { filename: file.name } },
  };
}

/** The files attached to the next prompt, drawn as chips in `list` (a <ul>). */
export class Attachments {
  constructor(list, onChange = () => {}) {
    this.list = list;
    this.onChange = onChange;
    this.items = [];
  }

  /** Read and add `files` (a FileList or array); the promise settles once they are drawn. */
  async add(files) {
    const read = await Promise.all(Array.from(files, prepare));
    this.items.push(...read);
    this.draw();
    this.onChange(this.items);
  }

  remove(index) {
    this.items.splice(index, 1);
    this.draw();
    this.onChange(this.items);
  }

  /** Hand over the attached files and start again with none. */
  take() {
    const taken = this.items;
    this.items = [];
    this.draw();
    return taken;
  }

  draw() {
    const chips = this.items.map((item, index) => {
      const chip = el("li", { className: "chip" });
      chip.append(el("span", { text: `${item.name} (${formatBytes(item.size)})` }));
      const remove = el("button", {
        className: "chip-remove",
        text: "×",
        attrs: { type: "button", "aria-label": `Remove ${item.name}` },
      });
      remove.addEventListener("click", () => {
        this.remove(index);
        this.list.closest("form")?.querySelector("textarea")?.focus();
      });
      chip.append(remove);
      return chip;
    });
    this.list.replaceChildren(...chips);
    this.list.hidden = chips.length === 0;
  }
}

/** The files of a kept user message (daimon's parts, as `GET /sessions/{id}` gives them). */
export function keptFiles(content) {
  if (!Array.isArray(content)) return [];
  return content
    .filter((part) => ["image", "audio", "document"].includes(part.kind))
    .map((part) => ({
      name: part.name || part.media_type,
      thumbnail: part.kind === "image" && part.data ? `data:${part.media_type};base64,${part.data}` : null,
    }));
}

/** What the transcript shows of a prompt's files: each name, and a thumbnail of an image. */
export function fileList(items) {
  const list = el("ul", { className: "sent-files", attrs: { "aria-label": "Attached files" } });
  for (const item of items) {
    const entry = el("li");
    if (item.thumbnail) {
      entry.append(el("img", { className: "thumbnail", attrs: { src: item.thumbnail, alt: "" } }));
    }
    entry.append(el("span", { text: item.name }));
    list.append(entry);
  }
  return list;
}
