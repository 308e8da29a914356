// views.js: which view of the panel shows (connect, pair, main, session). The context box (#context:
// the page, the pick, the console-errors box) moves into the main or the session view.

import { byId } from "./dom.js";

const VIEWS = ["connect", "pair", "main", "session"];
let current = null;

export function showView(name) {
  for (const view of VIEWS) byId(`view-${view}`).hidden = view !== name;
  const slot = byId(name === "session" ? "session-context-slot" : "main-context-slot");
  const context = byId("context");
  if (context.parentElement !== slot) slot.append(context);
  if (name !== "session") document.title = "Tandem";
  current = name;
}

export const currentView = () => current;
