// background.js: the extension's service worker. Opens the side panel from the toolbar button
// and registers console-hook.js (MAIN world, document_start) on the pages the extension may see,
// so console errors from before a pick are kept too.

const HOOK_ID = "tandem-console";

/** The Tandem server's origin(s): the packaged config.json and the one the person connected to. */
async function serverOrigins() {
  const urls = [];
  try {
    const res = await fetch(chrome.runtime.getURL("config.json"), { cache: "no-store" });
    if (res.ok) {
      const config = await res.json();
      if (config && typeof config.server_url === "string") urls.push(config.server_url);
    }
  } catch {
    // No config.json in this package.
  }
  try {
    const { server_url } = await chrome.storage.local.get("server_url");
    if (typeof server_url === "string") urls.push(server_url);
  } catch {
    // Storage unavailable: the packaged address is enough.
  }
  const origins = new Set();
  for (const url of urls) {
    try {
      origins.add(new URL(url).origin.toLowerCase());
    } catch {
      // Not a URL: nothing to exclude.
    }
  }
  return [...origins];
}

/** The origin a match pattern names ("https://app.acme.com/*" → "https://app.acme.com"). */
function patternOrigin(pattern) {
  const m = /^([a-z*]+:\/\/[^/]*)/i.exec(pattern);
  return m ? m[1].toLowerCase() : "";
}

async function registerConsoleHook() {
  const hosts = chrome.runtime.getManifest().host_permissions || [];
  const servers = await serverOrigins();
  const matches = hosts.filter((p) => !servers.includes(patternOrigin(p)));
  try {
    await chrome.scripting.unregisterContentScripts({ ids: [HOOK_ID] });
  } catch {
    // Not registered yet.
  }
  if (matches.length === 0) return;
  try {
    await chrome.scripting.registerContentScripts([
      {
        id: HOOK_ID,
        js: ["console-hook.js"],
        matches,
        excludeMatches: servers.map((o) => `${o}/*`),
        runAt: "document_start",
        world: "MAIN",
        allFrames: false,
      },
    ]);
  } catch (err) {
    if (!/duplicate/i.test(String(err && err.message))) {
      console.warn("Tandem: could not register the console hook:", err);
    }
  }
}

async function setup() {
  try {
    await chrome.sidePanel.setPanelBehavior({ openPanelOnActionClick: true });
  } catch (err) {
    console.warn("Tandem: could not set the side panel behaviour:", err);
  }
  await registerConsoleHook();
}

chrome.runtime.onInstalled.addListener(() => {
  setup();
});
chrome.runtime.onStartup.addListener(() => {
  setup();
});
