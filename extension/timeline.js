// timeline.js: follows a session's event log (GET /api/sessions/{id}/events every 700 ms) and
// renders it compactly into #timeline: prompts (with their page context), the agent's streamed
// replies, tool calls, approval cards, turn ends, limits reached and failures; state changes, the
// pull request and the ends of turns (to read the use again) go to callbacks.

import * as api from "./api.js";
import { approvalAnswered, approvalCard } from "./approvals.js";
import { byId, h, str } from "./dom.js";
import { amount } from "./spend.js";
import { clearError, showError } from "./notice.js";

const POLL_MS = 700;
const RETRY_MS = 3000;
const PAGE = 200;
let follow = null; // { id, lastSeq, replies, approvals, urls, stopped, wake, poked, failing, onState, onPr, onTurn }

/** Starts following session `id` (stops any other). */
export function followSession(id, { onState, onPr, onTurn }) {
  stopFollowing();
  byId("timeline").replaceChildren();
  follow = { id, lastSeq: 0, replies: new Map(), approvals: new Map(), urls: [], stopped: false, wake: null, poked: false, failing: false, onState, onPr, onTurn };
  run(follow);
}

export function stopFollowing() {
  if (!follow) return;
  follow.stopped = true;
  if (follow.wake) follow.wake();
  for (const url of follow.urls) URL.revokeObjectURL(url);
  follow = null;
}

/** Polls now (after sending a prompt). */
export function pokeTimeline() {
  if (!follow) return;
  follow.poked = true;
  if (follow.wake) follow.wake();
}

function nap(f, ms) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      f.wake = null;
      resolve();
    };
    const timer = setTimeout(done, ms);
    f.wake = done;
  });
}

async function run(f) {
  while (!f.stopped) {
    let delay = POLL_MS;
    f.poked = false;
    try {
      const page = await api.get(`/api/sessions/${encodeURIComponent(f.id)}/events?after=${f.lastSeq}&limit=${PAGE}`);
      if (f.stopped) return;
      const events = page && page.events;
      if (!Array.isArray(events)) throw new Error("Tandem answered with something that is not a list of events.");
      render(f, events);
      if (f.failing) {
        f.failing = false;
        clearError("timeline");
      }
      if (events.length >= PAGE) delay = 0;
    } catch (err) {
      if (f.stopped || err.handled) return;
      if (err.status === 403 || err.status === 404) {
        showError(err.message, "timeline");
        return;
      }
      f.failing = true;
      showError(`Lost touch with this session (${err.message}); trying again.`, "timeline");
      delay = RETRY_MS;
    }
    if (f.poked) delay = 0;
    if (delay > 0) await nap(f, delay);
  }
}

function atBottom(el, slack = 24) {
  return el.scrollHeight - el.scrollTop - el.clientHeight <= slack;
}

function render(f, events) {
  const timeline = byId("timeline");
  const stick = atBottom(timeline);
  for (const event of events) {
    if (!event || typeof event !== "object" || !Number.isSafeInteger(event.seq) || event.seq <= f.lastSeq) continue;
    f.lastSeq = event.seq;
    try {
      renderEvent(f, timeline, event);
    } catch {
      // A malformed event is skipped; the rest still shows.
    }
  }
  if (stick) timeline.scrollTop = timeline.scrollHeight;
}

function renderEvent(f, timeline, event) {
  switch (event.type) {
    case "prompt_queued":
      timeline.append(promptEntry(f, event));
      break;
    case "agent_delta":
      reply(f, timeline, event, false);
      break;
    case "agent_message":
      reply(f, timeline, event, true);
      break;
    case "tool_call":
      timeline.append(h("div", { className: "entry tool", text: `⚙ ${str(event.name, 200)}` }));
      break;
    case "turn_ended": {
      const outcome = str(event.outcome, 50);
      const error = str(event.error, 2000);
      const text = outcome === "completed" ? "done" : outcome === "failed" ? `failed: ${error || "no reason given"}` : `${outcome}${error ? `: ${error}` : ""}`;
      timeline.append(h("div", { className: `entry turn-end${outcome === "failed" ? " failed" : ""}`, text }));
      f.onTurn();
      break;
    }
    case "approval_asked":
      approvalCard(f, timeline, event);
      break;
    case "approval_answered":
      approvalAnswered(f, event);
      break;
    case "limit_reached": {
      const l = event.limit && typeof event.limit === "object" ? event.limit : {};
      timeline.append(h("div", { className: "entry state failed limit-reached", text: `Stopped at ${limitWords(l)}: ${amount(l)} used.` }));
      f.onTurn();
      break;
    }
    case "state_changed": {
      const to = str(event.to, 50);
      f.onState(to);
      if (to === "failed") {
        const reason = str(event.reason, 2000);
        timeline.append(h("div", { className: "entry state failed", text: reason ? `Session failed: ${reason}` : "Session failed." }));
      }
      break;
    }
    case "pr_opened":
      f.onPr(event.number, event.url);
      break;
    default:
      break;
  }
}

/** "Ada's budget for today", as the web app says which limit a turn reached. */
function limitWords(l) {
  const whose = str(l.whose, 200);
  switch (l.scope) {
    case "tree":
      return `the session tree's budget (root ${whose})`;
    case "automation":
      return `the automation ${whose}'s budget per run`;
    case "person_daily":
      return `${whose}'s budget for today`;
    case "repo_daily":
      return `the repo ${whose}'s budget for today`;
    default:
      return "the server's model requests per session tree";
  }
}

/** The streamed reply for a prompt: deltas append; agent_message sets the whole text and closes it. */
function reply(f, timeline, event, whole) {
  const key = str(event.prompt_id, 200);
  const text = str(event.text, 200000);
  let entry = f.replies.get(key);
  if (!entry || entry.done) {
    entry = { el: h("div", { className: "entry agent" }), done: false };
    f.replies.set(key, entry);
    timeline.append(entry.el);
  }
  if (whole) {
    entry.el.textContent = text;
    entry.done = true;
  } else {
    entry.el.append(text);
  }
}

function promptEntry(f, event) {
  const author = event.author && typeof event.author === "object" ? str(event.author.name, 200) : "";
  const entry = h(
    "div",
    { className: "entry prompt" },
    h("div", { className: "author", text: `${author || "Someone"}${event.mode === "steer" ? " · steering" : ""}` }),
    h("div", { className: "text", text: str(event.text, 100000) }),
  );
  const context = event.context;
  if (context && typeof context === "object") entry.append(contextChip(f, context));
  return entry;
}

function contextChip(f, context) {
  const element = context.element && typeof context.element === "object" ? context.element : null;
  const chip = h("div", { className: "chip" });
  if (element && str(element.selector)) chip.append(h("code", { className: "selector", text: str(element.selector, 1024) }));
  if (str(context.url)) chip.append(h("div", { className: "url", text: str(context.url, 2000) }));
  const shots = Array.isArray(context.screenshots) ? context.screenshots.filter((s) => s && typeof s === "object" && str(s.artifact)) : [];
  const shot = shots.find((s) => s.kind === "element") || shots[0];
  if (shot) chip.append(thumbnail(f, shot));
  return chip;
}

function thumbnail(f, shot) {
  const img = h("img", { className: "thumb", alt: shot.kind === "element" ? "Screenshot of the picked element" : "Screenshot of the page" });
  if (Number.isSafeInteger(shot.width) && Number.isSafeInteger(shot.height) && shot.width > 0 && shot.height > 0) {
    img.width = shot.width;
    img.height = shot.height;
  }
  api
    .blob(`/api/sessions/${encodeURIComponent(f.id)}/artifacts/${encodeURIComponent(str(shot.artifact, 200))}`)
    .then((blob) => {
      if (f.stopped) return;
      const url = URL.createObjectURL(blob);
      f.urls.push(url);
      const timeline = byId("timeline");
      const stick = atBottom(timeline, 24 + (img.height || 0));
      img.addEventListener("load", () => {
        if (stick) timeline.scrollTop = timeline.scrollHeight;
      });
      img.src = url;
    })
    .catch(() => {
      img.replaceWith(h("div", { className: "muted", text: "(screenshot unavailable)" }));
    });
  return img;
}
