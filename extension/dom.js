// dom.js: small DOM helpers for the panel. Everything that comes from the server or a page is
// put in the document as text (textContent, text nodes, attribute values): nothing is parsed as HTML.

export const byId = (id) => document.getElementById(id);

/** An element: h("div", { className: "entry", text: "…" }, child, "text", …). Other props become attributes. */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value == null || value === false) continue;
    if (key === "className") el.className = value;
    else if (key === "text") el.textContent = String(value);
    else el.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child != null && child !== false) el.append(child);
  }
  return el;
}

/** The URL when it is http(s), else null (so no javascript: or data: link is ever made). */
export function webUrl(value) {
  if (typeof value !== "string") return null;
  try {
    const url = new URL(value);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

/** A string from hostile data, or "" when it is not one, cut to max characters. */
export function str(value, max = 10000) {
  return typeof value === "string" ? value.slice(0, max) : "";
}

export function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KiB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MiB`;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
