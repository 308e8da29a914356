// panel.js: the side panel's wiring. Loads the stored server and token, picks the first view,
// and connects the views: pairing leads to the main view, sending to the session view, and a
// 401 anywhere (or a disconnect) back to connecting. Also works opened as a tab (panel.html).

import * as api from "./api.js";
import { byId } from "./dom.js";
import { clearError, showError } from "./notice.js";
import { currentView, showView } from "./views.js";
import * as store from "./store.js";
import { startTracking, targetTab } from "./tabs.js";
import { clearPick, initContext, renderPage } from "./context.js";
import { cancelPick } from "./pick.js";
import { initConnect, stopPairing } from "./connect.js";
import { enterMain, initMain, targetChanged } from "./main.js";
import { closeSession, initSession, openSession } from "./session.js";

const REVOKED =
  "Tandem no longer accepts this extension's sign-in (it was revoked or expired). Pair again.";

let token = "";

function signedOut() {
  token = "";
  stopPairing();
  closeSession();
  cancelPick();
  clearPick();
  showView("connect");
}

async function forgetToken() {
  await store.forget(["token"]);
}

function unauthorized() {
  forgetToken();
  signedOut();
  showError(REVOKED);
}

async function paired(newToken) {
  token = newToken;
  api.configure({ token: newToken });
  await store.save({ token: newToken });
  await enterMain();
}

function onTabChange(tab) {
  renderPage(tab);
  targetChanged();
}

async function init() {
  api.configure({ onUnauthorized: unauthorized });
  initContext();
  initConnect({ paired });
  initMain({ open: openSession });
  initSession({ back: () => enterMain() });
  byId("disconnect").addEventListener("click", async () => {
    await forgetToken();
    api.configure({ token: "" });
    signedOut();
    clearError();
  });

  const [config, stored] = await Promise.all([store.readConfig(), store.load()]);
  const packaged = typeof config.server_url === "string" ? config.server_url.replace(/\/+$/, "") : "";
  const server = stored.server_url || packaged;
  byId("server-url").value = server;
  token = stored.token;
  api.configure({ server: stored.server_url, token: stored.token });

  // Another panel (another window) paired or disconnected: follow it.
  chrome.storage.onChanged.addListener((changes, area) => {
    if (area !== "local") return;
    if (changes.server_url && typeof changes.server_url.newValue === "string") {
      // Another address: this panel's token (for the old one) goes, before anything is sent.
      api.configure({ server: changes.server_url.newValue, token: "" });
    }
    if (!changes.token) return;
    const next = typeof changes.token.newValue === "string" ? changes.token.newValue : "";
    if (next === token) return;
    token = next;
    api.configure({ token: next });
    if (!next) signedOut();
    else if (currentView() === "connect" || currentView() === "pair") {
      stopPairing();
      clearError();
      enterMain();
    }
  });

  await startTracking(onTabChange);
  renderPage(targetTab());
  if (stored.server_url && stored.token) await enterMain();
  else showView("connect");
}

init().catch((err) => {
  showView("connect");
  showError(`The Tandem panel could not start: ${err && err.message ? err.message : err}`);
});
