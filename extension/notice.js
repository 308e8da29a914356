// notice.js: the #error area (role=alert), shown in every view. An error remembers where it came
// from, so a background poll that recovers clears only its own message.

import { byId } from "./dom.js";

let source = null;

export function showError(message, from = "action") {
  const el = byId("error");
  el.textContent = String(message);
  el.hidden = false;
  source = from;
}

/** Clears the error; with `from`, only when that is where the shown error came from. */
export function clearError(from) {
  if (from && from !== source) return;
  const el = byId("error");
  el.textContent = "";
  el.hidden = true;
  source = null;
}

/** Shows a failed action's message, unless it was already handled (a 401 sends the person to pair again). */
export function report(err) {
  if (err && err.handled) return;
  showError(err && err.message ? err.message : String(err));
}
