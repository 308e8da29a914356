// pick.js: picking an element on a tab. Injects console-hook.js (MAIN world) and picker.js
// (isolated world), waits for the picker's answer, then reads the React component names and the
// console errors in the page's MAIN world and takes the screenshots. Everything the page gives
// back is checked and cut to size here.

import { capture } from "./screenshot.js";
import { str } from "./dom.js";
import { serverUrl } from "./api.js";

export const NO_SCREENSHOT_NOTE =
  "No screenshot: click the Tandem toolbar button on that page to let the extension see it, then pick again.";

let pending = null; // { tabId, resolve }

chrome.runtime.onMessage.addListener((message, sender) => {
  if (!pending || sender.id !== chrome.runtime.id || !sender.tab || sender.tab.id !== pending.tabId) return;
  if (sender.frameId !== undefined && sender.frameId !== 0) return;
  if (!message || (message.type !== "tandem-picked" && message.type !== "tandem-pick-cancelled")) return;
  const { resolve } = pending;
  pending = null;
  resolve(message.type === "tandem-picked" ? message : null);
});

function dropPending(tabId) {
  if (pending && pending.tabId === tabId) {
    const { resolve } = pending;
    pending = null;
    resolve(null);
  }
}
chrome.tabs.onRemoved.addListener(dropPending);
// A page that loads anew loses its picker (an in-page navigation keeps it): look once it has loaded.
chrome.tabs.onUpdated.addListener(async (tabId, change) => {
  if (!pending || pending.tabId !== tabId || change.status !== "complete") return;
  try {
    const [result] = await chrome.scripting.executeScript({
      target: { tabId },
      func: () => Boolean(globalThis.__tandemPicker && globalThis.__tandemPicker.isActive()),
    });
    if (!result || result.result !== true) dropPending(tabId);
  } catch {
    dropPending(tabId);
  }
});

export const isPicking = () => pending !== null;

/** Stops a picker that is running (its answer, if any, is ignored). */
export async function cancelPick() {
  if (!pending) return;
  const { tabId } = pending;
  dropPending(tabId);
  try {
    await chrome.scripting.executeScript({
      target: { tabId },
      func: () => globalThis.__tandemPicker && globalThis.__tandemPicker.stop(),
    });
  } catch {
    // The tab is gone or navigated: no picker left.
  }
}

/** Runs in the page's MAIN world: takes the mark off the picked element, reads React's fibers and the console errors. */
function readPickedInPage(nonce) {
  const out = { components: [], console_errors: [] };
  try {
    const el = document.querySelector(`[data-tandem-picked="${CSS.escape(nonce)}"]`);
    if (el) {
      el.removeAttribute("data-tandem-picked");
      const key = Object.getOwnPropertyNames(el).find((k) => k.startsWith("__reactFiber$") || k.startsWith("__reactInternalInstance$"));
      const names = [];
      let fiber = key ? el[key] : null;
      for (let depth = 0; fiber && typeof fiber === "object" && depth < 30; depth++, fiber = fiber.return) {
        let name = null;
        try {
          const type = fiber.type;
          if (typeof type === "function") name = type.displayName || type.name;
          else if (type && typeof type === "object") {
            const inner = type.render || type.type;
            name = type.displayName || (typeof inner === "function" ? inner.displayName || inner.name : null);
          }
        } catch {
          name = null;
        }
        if (typeof name === "string" && name && names[names.length - 1] !== name.slice(0, 100)) names.push(name.slice(0, 100));
      }
      out.components = names.reverse();
    }
  } catch {
    // A page that breaks this gets no component names.
  }
  try {
    const list = window.__tandemConsoleErrors;
    if (Array.isArray(list)) out.console_errors = list.filter((s) => typeof s === "string").slice(-20);
  } catch {
    // No errors then.
  }
  return out;
}

/** Runs in the page's MAIN world: the console errors console-hook.js kept. */
function readConsoleErrorsInPage() {
  const list = window.__tandemConsoleErrors;
  return Array.isArray(list) ? list.filter((s) => typeof s === "string").slice(-20) : [];
}

const cleanList = (value, count, chars) =>
  Array.isArray(value) ? value.filter((s) => typeof s === "string" && s).slice(-count).map((s) => s.slice(0, chars)) : [];

async function inMainWorld(tabId, func, args = []) {
  // The page's own world: it can make a read slow or endless; give up after 3 s.
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error("the page did not answer")), 3000);
  });
  try {
    const run = chrome.scripting.executeScript({ target: { tabId }, world: "MAIN", func, args });
    const [result] = await Promise.race([run, timeout]);
    return result ? result.result : undefined;
  } finally {
    clearTimeout(timer);
  }
}

/** Installs the console hook in the tab (it keeps errors from now on). */
export async function hookConsole(tabId) {
  await chrome.scripting.executeScript({ target: { tabId }, files: ["console-hook.js"], world: "MAIN" });
}

export async function readConsoleErrors(tabId) {
  return cleanList(await inMainWorld(tabId, readConsoleErrorsInPage), 20, 1000);
}

function cleanElement(e) {
  if (!e || typeof e !== "object") return null;
  const r = e.rect && typeof e.rect === "object" ? e.rect : {};
  const int = (v) => (Number.isFinite(v) ? Math.round(v) : 0);
  return {
    selector: str(e.selector, 1024),
    outer_html: str(e.outer_html, 32768),
    outer_html_bytes: Number.isSafeInteger(e.outer_html_bytes) && e.outer_html_bytes >= 0 ? e.outer_html_bytes : 0,
    text: str(e.text, 4096),
    rect: { x: int(r.x), y: int(r.y), width: int(r.width), height: int(r.height) },
    device_pixel_ratio: Number.isFinite(e.device_pixel_ratio) && e.device_pixel_ratio > 0 ? e.device_pixel_ratio : 1,
    components: [],
  };
}

/**
 * Lets the person pick an element on `tab`. Answers null when they cancel (or the tab goes away),
 * else { tab, element (components filled), consoleErrors, shots: { element, view }, notes }.
 * Throws when the extension may not touch the page.
 */
export async function pickOn(tab) {
  await cancelPick();
  // Tandem's own pages hold credentials (share links, new tokens, pairing codes): never picked.
  if (sameOrigin(tab.url, serverUrl())) {
    throw new Error("That tab is Tandem itself; pick on the page you want to change.");
  }
  try {
    await hookConsole(tab.id);
    await chrome.scripting.executeScript({ target: { tabId: tab.id }, files: ["picker.js"] });
  } catch (err) {
    throw new Error(
      `Tandem cannot reach that page (${err && err.message ? err.message : err}). Click the Tandem toolbar button on that page, then pick again.`,
    );
  }
  const message = await new Promise((resolve) => {
    pending = { tabId: tab.id, resolve };
  });
  if (!message) return null;
  const element = cleanElement(message.element);
  if (!element) throw new Error("The picker sent nothing usable; pick again.");
  const nonce = str(message.nonce, 64);
  const viewport = message.viewport && typeof message.viewport === "object" ? message.viewport : null;

  let live = tab;
  try {
    live = await chrome.tabs.get(tab.id);
  } catch {
    return null;
  }
  const notes = [];
  const [page, shots] = await Promise.all([
    inMainWorld(tab.id, readPickedInPage, [nonce]).catch(() => null),
    (async () => {
      if (!live.active) throw new Error("the tab is no longer shown");
      return capture(live.windowId, element.rect, element.device_pixel_ratio, viewport);
    })().catch(() => null),
  ]);
  element.components = cleanList(page && page.components, 32, 100);
  if (shots) notes.push(...shots.notes);
  else notes.push(NO_SCREENSHOT_NOTE);
  return {
    tab: { id: live.id, windowId: live.windowId, url: live.url || tab.url, title: live.title || tab.title || "" },
    element,
    consoleErrors: cleanList(page && page.console_errors, 20, 1000),
    shots: { element: shots ? shots.element : null, view: shots ? shots.view : null },
    notes,
  };
}

function sameOrigin(a, b) {
  try {
    return new URL(a).origin === new URL(b).origin;
  } catch {
    return false;
  }
}
