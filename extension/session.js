// session.js: the session view — its header (title, state, links to Tandem and the pull
// request), the followed timeline, and follow-up prompts (queued or steering), with a pick.

import * as api from "./api.js";
import { byId, str, webUrl } from "./dom.js";
import { clearError, report, showError } from "./notice.js";
import { showView } from "./views.js";
import { followSession, pokeTimeline, stopFollowing } from "./timeline.js";
import { hideSpend, showSpend } from "./spend.js";
import { buildContext, clearPick } from "./context.js";

let sessionId = null;
let sending = false;

export function initSession({ back }) {
  byId("back").addEventListener("click", () => {
    closeSession();
    clearError();
    back();
  });
  byId("follow-send").addEventListener("click", sendFollowUp);
  byId("follow-prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) sendFollowUp();
  });
}

function setState(state) {
  const el = byId("session-state");
  el.textContent = state || "…";
  el.dataset.state = state || "";
  document.title = state ? `Tandem · ${state}` : "Tandem";
}

function setPr(number, url) {
  const href = webUrl(url);
  if (!href) return;
  const link = byId("pr-link");
  link.href = href;
  link.textContent = Number.isSafeInteger(number) ? `Pull request #${number}` : "Pull request";
  link.hidden = false;
}

/** Shows session `id` and follows its events; `summary` (a listed session) fills the header at once. */
export function openSession(id, summary) {
  sessionId = id;
  showView("session");
  byId("session-title").textContent = (summary && str(summary.title, 500)) || "Session";
  setState(summary ? str(summary.state, 50) : "");
  byId("open-session").href = `${api.serverUrl()}/sessions/${encodeURIComponent(id)}`;
  const pr = byId("pr-link");
  pr.hidden = true;
  pr.removeAttribute("href");
  hideSpend();
  showSpend(id);
  followSession(id, { onState: setState, onPr: setPr, onTurn: () => sessionId === id && showSpend(id) });
  pokeTimeline();
  api
    .get(`/api/sessions/${encodeURIComponent(id)}`)
    .then((detail) => {
      if (sessionId !== id || !detail || !detail.session) return;
      const title = str(detail.session.title, 500);
      if (title) byId("session-title").textContent = title;
    })
    .catch(() => {
      // The timeline reports what is wrong.
    });
}

export function closeSession() {
  sessionId = null;
  hideSpend();
  stopFollowing();
  document.title = "Tandem";
}

async function sendFollowUp() {
  if (sending || !sessionId) return;
  const text = byId("follow-prompt").value.trim();
  if (!text) {
    showError("Type the follow-up first.");
    return;
  }
  const id = sessionId;
  const button = byId("follow-send");
  sending = true;
  button.disabled = true;
  try {
    const context = await buildContext();
    const mode = byId("follow-mode").value === "steer" ? "steer" : "queue";
    await api.post(`/api/sessions/${encodeURIComponent(id)}/prompts`, { text, mode, context });
    clearError();
    byId("follow-prompt").value = "";
    clearPick();
    pokeTimeline();
  } catch (err) {
    report(err);
  } finally {
    sending = false;
    button.disabled = false;
  }
}
