// connect.js: the connect and pair views. Checks that the address is a Tandem server
// (GET /api/extension/hello), starts a pairing, shows its code and polls until the person
// approves it in Tandem, then hands the token over.

import * as api from "./api.js";
import { byId, sleep, webUrl } from "./dom.js";
import { clearError, showError } from "./notice.js";
import { showView } from "./views.js";
import * as store from "./store.js";

let pairing = 0; // bumps to stop a poll loop
let onPaired = async () => {};

export function initConnect({ paired }) {
  onPaired = paired;
  byId("connect-form").addEventListener("submit", (event) => {
    event.preventDefault();
    connect();
  });
  byId("cancel-pair").addEventListener("click", () => {
    stopPairing();
    clearError();
    showView("connect");
  });
}

export function stopPairing() {
  pairing++;
}

/** The address as typed, made canonical: http(s) only, no trailing slash, no query or fragment. */
export function normalizeServer(input) {
  const raw = String(input || "").trim();
  let url;
  try {
    url = new URL(raw);
  } catch {
    throw new Error("Type Tandem's full address, starting with https:// or http://.");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new Error("Tandem's address starts with https:// or http://.");
  }
  if (url.username || url.password) throw new Error("Leave any user name and password out of the address.");
  return (url.origin + url.pathname).replace(/\/+$/, "");
}

async function hello(server) {
  let res;
  try {
    res = await fetch(`${server}/api/extension/hello`, { credentials: "omit", cache: "no-store", headers: { Accept: "application/json" } });
  } catch (err) {
    throw new Error(
      `Could not reach a Tandem server at ${server} (${err && err.message ? err.message : "network error"}). ` +
        "Check the address; the extension can only talk to the Tandem server it was downloaded from, so download it from that server's /extension page.",
    );
  }
  const notTandem = (what) =>
    new Error(`That address is not a Tandem server: ${server} (${what}). Check the address — it is the one you open Tandem at.`);
  if (res.status !== 200) throw notTandem(`it answered ${res.status}${res.statusText ? ` ${res.statusText}` : ""}`);
  let body;
  try {
    body = await res.json();
  } catch {
    throw notTandem("its answer is not JSON");
  }
  if (!body || typeof body !== "object" || body.product !== "tandem") throw notTandem("its answer does not say it is Tandem");
  return body;
}

async function connect() {
  const button = byId("connect");
  button.disabled = true;
  try {
    const server = normalizeServer(byId("server-url").value);
    byId("server-url").value = server;
    await hello(server);
    api.configure({ server, token: "" });
    // The token first: no moment holds the old token beside the new address.
    await store.forget(["token"]);
    await store.save({ server_url: server });
    const started = await api.post("/api/extension/pairings", { label: "Chrome extension" }, { auth: false });
    if (!started || typeof started.device_code !== "string" || typeof started.user_code !== "string") {
      throw new Error("Tandem answered the pairing request with something unexpected.");
    }
    clearError();
    showPairing(started);
  } catch (err) {
    showError(err && err.message ? err.message : String(err));
  } finally {
    button.disabled = false;
  }
}

function showPairing(started) {
  byId("pair-code").textContent = started.user_code.slice(0, 64);
  const link = byId("pair-link");
  const approve = webUrl(started.approve_url);
  if (approve) link.href = approve;
  else link.removeAttribute("href");
  link.hidden = !approve;
  const expires = Number.isFinite(started.expires_in_secs) && started.expires_in_secs > 0 ? started.expires_in_secs : 600;
  const minutes = Math.max(1, Math.round(expires / 60));
  byId("pair-status").textContent = `Waiting for approval… The code works for ${minutes} minute${minutes === 1 ? "" : "s"}.`;
  showView("pair");
  poll(started.device_code, expires, started.interval_secs);
}

async function poll(deviceCode, expiresInSecs, intervalSecs) {
  const me = ++pairing;
  const deadline = Date.now() + expiresInSecs * 1000;
  const interval = Math.min(60, Math.max(1, Number.isFinite(intervalSecs) ? intervalSecs : 2)) * 1000;
  for (;;) {
    await sleep(interval);
    if (me !== pairing) return;
    if (Date.now() > deadline) {
      showError("The code expired; connect again.");
      showView("connect");
      return;
    }
    let answer;
    try {
      answer = await api.post("/api/extension/pairings/poll", { device_code: deviceCode }, { auth: false });
    } catch (err) {
      if (me !== pairing) return;
      if (err.network) {
        showError(`${err.message} Still waiting for the approval.`, "pair-poll");
        continue;
      }
      showError(err.message);
      showView("connect");
      return;
    }
    if (me !== pairing) return;
    clearError("pair-poll");
    if (answer && answer.status === "pending") continue;
    const token = answer && answer.status === "approved" && answer.token ? answer.token.token : null;
    if (typeof token !== "string" || !token) {
      showError("Tandem answered the pairing poll with something unexpected; connect again.");
      showView("connect");
      return;
    }
    pairing++;
    clearError();
    await onPaired(token);
    return;
  }
}
