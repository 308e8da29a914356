// context.js: what a prompt carries besides its text — the page (#page), the current pick
// (#picked, started from #pick or #follow-pick) and, when ticked, the page's console errors —
// and the `context` object built from them for the API.

import { byId, h, formatBytes } from "./dom.js";
import { clearError, report, showError } from "./notice.js";
import { targetTab } from "./tabs.js";
import { cancelPick, hookConsole, isPicking, pickOn, readConsoleErrors } from "./pick.js";

const PICK_BUTTONS = ["pick", "follow-pick"];
const PICK_LABEL = "Pick an element";
let current = null; // the pick, see pick.js
let thumbUrl = null;

export function initContext() {
  for (const id of PICK_BUTTONS) byId(id).addEventListener("click", togglePick);
  byId("clear-pick").addEventListener("click", () => {
    clearPick();
    clearError();
  });
  byId("console-errors").addEventListener("change", (event) => {
    const tab = targetTab();
    // Pages the extension was not told about at install have no hook yet: errors count from now.
    if (event.target.checked && tab) hookConsole(tab.id).catch(() => {});
  });
  window.addEventListener("pagehide", () => {
    cancelPick();
  });
}

export function renderPage(tab) {
  const page = byId("page");
  page.replaceChildren();
  if (tab) {
    page.append(h("div", { className: "page-title", text: tab.title || "(untitled page)" }), h("div", { className: "page-url", text: tab.url }));
  } else {
    page.append(
      h("div", {
        className: "page-none",
        text: "No web page to point at. Switch to the page; if it does not show here, click the Tandem toolbar button on it.",
      }),
    );
  }
  if (!isPicking()) setPickButtons(PICK_LABEL, !tab);
}

function setPickButtons(text, disabled) {
  for (const id of PICK_BUTTONS) {
    const button = byId(id);
    button.textContent = text;
    button.disabled = disabled;
  }
}

async function togglePick() {
  if (isPicking()) {
    await cancelPick();
    setPickButtons(PICK_LABEL, !targetTab());
    return;
  }
  const tab = targetTab();
  if (!tab) {
    showError("There is no web page to pick from: switch to the page first.");
    return;
  }
  setPickButtons("Picking… (Esc cancels)", false);
  try {
    const picked = await pickOn(tab);
    if (picked) {
      setPick(picked);
      clearError();
    }
  } catch (err) {
    report(err);
  } finally {
    if (!isPicking()) setPickButtons(PICK_LABEL, !targetTab());
  }
}

function setPick(picked) {
  clearPick();
  current = picked;
  const { element, shots, notes } = picked;
  byId("picked-selector").textContent = element.selector || "(no selector)";
  const thumb = byId("picked-thumb");
  if (shots.element) {
    thumbUrl = URL.createObjectURL(shots.element.blob);
    thumb.src = thumbUrl;
    thumb.hidden = false;
  }
  const components = byId("picked-components");
  components.textContent = element.components.length ? `Components: ${element.components.join(" › ")}` : "";
  components.hidden = element.components.length === 0;
  const kept = new TextEncoder().encode(element.outer_html).length;
  byId("picked-cut").textContent =
    element.outer_html_bytes > kept
      ? `HTML cut to ${formatBytes(kept)} of ${formatBytes(element.outer_html_bytes)}.`
      : `Whole HTML included (${formatBytes(element.outer_html_bytes)}).`;
  const note = byId("pick-note");
  note.replaceChildren(...notes.map((n) => h("div", { text: n })));
  note.hidden = notes.length === 0;
  byId("picked").hidden = false;
}

export function clearPick() {
  current = null;
  if (thumbUrl) URL.revokeObjectURL(thumbUrl);
  thumbUrl = null;
  const thumb = byId("picked-thumb");
  thumb.removeAttribute("src");
  thumb.hidden = true;
  byId("picked").hidden = true;
}

async function consoleErrorsOf(tab) {
  try {
    const live = await chrome.tabs.get(tab.id);
    if (live.url === tab.url) return await readConsoleErrors(tab.id);
  } catch {
    // Fall back to what was read at the pick.
  }
  if (current) return current.consoleErrors;
  throw new Error("Could not read that page's console errors: click the Tandem toolbar button on the page, or untick “Include the page's console errors”.");
}

/** The `context` for a prompt: null when nothing is picked and console errors are not asked for. */
export async function buildContext() {
  const wantErrors = byId("console-errors").checked;
  if (!current && !wantErrors) return null;
  const tab = current ? current.tab : targetTab();
  if (!tab) throw new Error("There is no page to take console errors from: switch to the page, or untick “Include the page's console errors”.");
  const screenshots = [];
  if (current && current.shots.element) screenshots.push({ kind: "element", png_base64: current.shots.element.png_base64 });
  if (current && current.shots.view) screenshots.push({ kind: "view", png_base64: current.shots.view.png_base64 });
  return {
    url: tab.url,
    title: tab.title || "",
    element: current ? { ...current.element } : null,
    screenshots,
    console_errors: wantErrors ? await consoleErrorsOf(tab) : [],
  };
}
