// tabs.js: the target tab, the page the person points at: the active tab of the panel's own
// window when it is a web page, else the active web page of the most recently focused other
// normal window. Follows tab and window switches; calls back when the target changes.

let ownWindowId = null;
const focusOrder = []; // window ids, most recently focused first
let current = null;
let onChange = () => {};
let timer = 0;

export const isWebTab = (tab) => Boolean(tab && typeof tab.url === "string" && /^https?:\/\//i.test(tab.url));

export const targetTab = () => current;

function summary(tab) {
  return tab ? { id: tab.id, windowId: tab.windowId, url: tab.url, title: tab.title || "" } : null;
}

async function resolve() {
  const tabs = await chrome.tabs.query({ active: true, windowType: "normal" });
  const byWindow = new Map(tabs.map((t) => [t.windowId, t]));
  const own = byWindow.get(ownWindowId);
  if (isWebTab(own)) return own;
  for (const id of focusOrder) {
    if (id === ownWindowId) continue;
    const tab = byWindow.get(id);
    if (isWebTab(tab)) return tab;
  }
  const rest = tabs
    .filter((t) => t.windowId !== ownWindowId && !focusOrder.includes(t.windowId) && isWebTab(t))
    .sort((a, b) => (b.lastAccessed || 0) - (a.lastAccessed || 0));
  return rest[0] || null;
}

export async function refresh() {
  let next = null;
  try {
    next = summary(await resolve());
  } catch {
    next = null;
  }
  const same =
    (next === null && current === null) ||
    (next && current && next.id === current.id && next.url === current.url && next.title === current.title && next.windowId === current.windowId);
  current = next;
  if (!same) onChange(current);
}

function soon() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 80);
}

function focused(windowId) {
  if (windowId === chrome.windows.WINDOW_ID_NONE) return;
  const at = focusOrder.indexOf(windowId);
  if (at !== -1) focusOrder.splice(at, 1);
  focusOrder.unshift(windowId);
  soon();
}

export async function startTracking(callback) {
  onChange = callback;
  try {
    ownWindowId = (await chrome.windows.getCurrent()).id;
  } catch {
    ownWindowId = null;
  }
  try {
    const last = await chrome.windows.getLastFocused({ windowTypes: ["normal"] });
    if (last && last.id !== ownWindowId) focusOrder.push(last.id);
  } catch {
    // No window focused yet.
  }
  chrome.windows.onFocusChanged.addListener(focused);
  chrome.windows.onRemoved.addListener((id) => {
    const at = focusOrder.indexOf(id);
    if (at !== -1) focusOrder.splice(at, 1);
    soon();
  });
  chrome.tabs.onActivated.addListener(({ windowId }) => {
    if (windowId !== ownWindowId) focused(windowId);
    else soon();
  });
  chrome.tabs.onUpdated.addListener(soon);
  chrome.tabs.onRemoved.addListener(soon);
  // A toolbar click on a page grants the extension that page without any tab event: look again
  // when the person comes back to the panel, and now and then.
  window.addEventListener("focus", soon);
  document.documentElement.addEventListener("pointerenter", soon);
  setInterval(refresh, 3000);
  await refresh();
}
