// main.js: the main view — who is signed in, where the prompt goes (a new session in a repo, or
// one of the person's running sessions), and sending the prompt with its context.

import * as api from "./api.js";
import { byId, h, str } from "./dom.js";
import { clearError, report, showError } from "./notice.js";
import { defaultRepo } from "./rules.js";
import { showView } from "./views.js";
import { targetTab } from "./tabs.js";
import { buildContext, clearPick } from "./context.js";
import * as store from "./store.js";

const ENDED = new Set(["stopped", "failed"]);
let repos = [];
let rules = [];
let sessions = [];
let repoTouched = false;
let lastRepo = "";
let sending = false;
let openSession = () => {};

export function initMain({ open }) {
  openSession = open;
  byId("repo").addEventListener("change", () => {
    repoTouched = true;
  });
  byId("target").addEventListener("change", syncTarget);
  byId("send").addEventListener("click", send);
  byId("refresh").addEventListener("click", () => enterMain({ fromAction: true }));
  byId("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) send();
  });
}

const list = (value) => (Array.isArray(value) ? value.filter((x) => x && typeof x === "object" && typeof x.id === "string") : []);

export async function enterMain({ fromAction = false } = {}) {
  showView("main");
  const [me, repoList, ruleList, sessionList, stored] = await Promise.allSettled([
    api.get("/api/me"),
    api.get("/api/repos"),
    api.get("/api/extension/rules"),
    api.get("/api/sessions?limit=20"),
    store.load(),
  ]);
  const failed = [me, repoList, sessionList].filter((r) => r.status === "rejected").map((r) => r.reason);
  if (failed.some((err) => err && err.handled)) return;
  if (stored.status === "fulfilled") lastRepo = stored.value.last_repo;

  byId("me").textContent = me.status === "fulfilled" && me.value ? `Signed in as ${str(me.value.name, 200)}` : "";
  if (repoList.status === "fulfilled") repos = list(repoList.value);
  rules = ruleList.status === "fulfilled" && Array.isArray(ruleList.value) ? ruleList.value.filter((r) => r && typeof r === "object") : [];
  if (sessionList.status === "fulfilled") sessions = list(sessionList.value).filter((s) => !ENDED.has(s.state));
  renderRepos();
  renderTargets();
  if (failed.length) report(failed[0]);
  else if (fromAction) clearError();
}

function renderRepos() {
  const select = byId("repo");
  const keep = repoTouched ? select.value : "";
  select.replaceChildren(...repos.map((r) => h("option", { value: r.id, text: str(r.name, 200) || r.id })));
  if (repos.length === 0) select.append(h("option", { value: "", text: "No repositories yet" }));
  select.value = keep && repos.some((r) => r.id === keep) ? keep : pickDefault();
}

function pickDefault() {
  const tab = targetTab();
  return defaultRepo({ rules, repos, url: tab ? tab.url : "", lastRepo });
}

/** The target tab changed: the default repo may follow it, until the person chose one. */
export function targetChanged() {
  if (!repoTouched && repos.length) byId("repo").value = pickDefault();
}

function renderTargets() {
  const select = byId("target");
  const keep = select.value;
  const options = [h("option", { value: "new", text: "New session" })];
  for (const s of sessions) {
    const title = str(s.title, 80) || "(untitled)";
    options.push(h("option", { value: s.id, text: `${title} · ${str(s.repo_name, 80)}` }));
  }
  select.replaceChildren(...options);
  select.value = keep && sessions.some((s) => s.id === keep) ? keep : "new";
  syncTarget();
}

function syncTarget() {
  byId("repo").disabled = byId("target").value !== "new";
}

async function send() {
  if (sending) return;
  const text = byId("prompt").value.trim();
  if (!text) {
    showError("Type what is wrong or what should change.");
    return;
  }
  const target = byId("target").value;
  const button = byId("send");
  sending = true;
  button.disabled = true;
  try {
    const context = await buildContext();
    let id;
    let summary;
    if (target === "new") {
      const repoId = byId("repo").value;
      if (!repoId) throw new Error("Choose a repository first (add one in Tandem if there is none).");
      const created = await api.post("/api/sessions", { repo_id: repoId, prompt: text, context });
      if (!created || !created.session || typeof created.session.id !== "string") throw new Error("Tandem answered with something unexpected.");
      summary = created.session;
      id = summary.id;
      lastRepo = repoId;
      await store.save({ last_repo: repoId });
    } else {
      await api.post(`/api/sessions/${encodeURIComponent(target)}/prompts`, { text, mode: "queue", context });
      id = target;
      summary = sessions.find((s) => s.id === target) || null;
    }
    clearError();
    byId("prompt").value = "";
    clearPick();
    openSession(id, summary);
  } catch (err) {
    report(err);
  } finally {
    sending = false;
    button.disabled = false;
  }
}
