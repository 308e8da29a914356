// approvals.js: approval cards in the side panel's timeline. A card says what the agent wants
// (a tool of an MCP server, reaching a name off the allow-list, or one of Tandem's own actions),
// its arguments and whose turn asked; a driver approves once, for the rest of the session, or
// denies with a reason (POST /api/sessions/{id}/approvals/{approval}); everyone sees who
// answered or that nobody did in time. Everything on a card came from an agent or a tool: it is
// put in the panel as text.

import * as api from "./api.js";
import { h, str } from "./dom.js";

const ACTIONS = {
  open_pull_request: "open or update the session's pull request",
  push: "push to the session's branch",
  spawn_sessions: "start child sessions",
};

/** "call sentry's tool list_issues", as the web app says it. */
function describe(subject) {
  if (!subject || typeof subject !== "object") return "do something";
  switch (subject.kind) {
    case "tool":
      return `call ${str(subject.server, 200)}'s tool ${str(subject.tool, 200)}`;
    case "egress":
      return `reach ${str(subject.host, 300)} (not on the allow-list)`;
    case "action": {
      const action = str(subject.action, 200);
      return ACTIONS[action] || `do ${action}`;
    }
    default:
      return "do something";
  }
}

/** "Ada approved it", "nobody answered in time; denied", … */
function outcomeText(event) {
  const who = event.by && typeof event.by === "object" ? str(event.by.name, 200) || "someone" : "nobody";
  const reason = str(event.reason, 1000);
  const why = reason ? `: ${reason}` : "";
  switch (event.state) {
    case "approved":
      return event.for_session === true ? `${who} approved it for the rest of the session` : `${who} approved it`;
    case "timed_out":
      return `nobody answered in time; denied${why}`;
    default:
      return `${who} denied it${why}`;
  }
}

function argumentsText(value) {
  try {
    return JSON.stringify(value, null, 2).slice(0, 16 * 1024);
  } catch {
    return "";
  }
}

/** Appends the card of an `approval_asked` event to `timeline` (kept in `f.approvals` by id). */
export function approvalCard(f, timeline, event) {
  const a = event.approval;
  if (!a || typeof a !== "object") return;
  const id = str(a.id, 100);
  if (!id || f.approvals.has(id)) return;
  const asker = a.asked_for && typeof a.asked_for === "object" ? str(a.asked_for.name, 200) : "";
  const reason = h("input", { className: "approval-reason", type: "text", maxlength: "1000", placeholder: "Reason (the agent sees it)", "aria-label": "Reason for denying" });
  const approve = h("button", { type: "button", className: "primary approval-approve", text: "Approve" });
  const always = h("button", { type: "button", className: "approval-approve-session", text: "Approve for this session" });
  const deny = h("button", { type: "button", className: "danger approval-deny", text: "Deny" });
  const actions = h("div", { className: "approval-actions" }, approve, always, reason, deny);
  const status = h("div", { className: "approval-status", role: "status" });
  const card = h(
    "div",
    { className: "entry approval pending", "data-approval": id, role: "group", "aria-label": "Approval" },
    h("div", { className: "approval-head" }, h("strong", { text: "Approval: " }), `the agent wants to ${describe(a.subject)}`),
    asker ? h("div", { className: "approval-for", text: `Asked during ${asker}'s turn` }) : null,
    h("pre", { className: "approval-args", text: argumentsText(a.arguments) }),
    actions,
    status,
  );
  const entry = { card, actions, status, done: false };
  f.approvals.set(id, entry);
  const answer = async (yes, forSession) => {
    if (entry.done) return;
    for (const b of [approve, always, deny]) b.disabled = true;
    status.textContent = "Sending…";
    status.classList.remove("failed");
    const text = reason.value.trim();
    try {
      await api.post(`/api/sessions/${encodeURIComponent(f.id)}/approvals/${encodeURIComponent(id)}`, {
        approve: yes,
        for_session: forSession,
        reason: !yes && text ? text : null,
      });
      if (!entry.done) status.textContent = "Answered; waiting for the timeline.";
    } catch (err) {
      if (err.handled) return;
      // A viewer, an approval someone else answered first, a server that went away: said here.
      status.textContent = err.message;
      status.classList.add("failed");
      for (const b of [approve, always, deny]) b.disabled = false;
    }
  };
  approve.addEventListener("click", () => answer(true, false));
  always.addEventListener("click", () => answer(true, true));
  deny.addEventListener("click", () => answer(false, false));
  if (a.state && a.state !== "pending") settle(entry, { state: a.state, by: a.answered_by, reason: a.reason, for_session: a.for_session });
  timeline.append(card);
}

/** An `approval_answered` event: its card says who answered and loses its buttons. */
export function approvalAnswered(f, event) {
  const entry = f.approvals.get(str(event.approval_id, 100));
  if (entry) settle(entry, event);
}

function settle(entry, event) {
  entry.done = true;
  entry.actions.remove();
  entry.status.classList.remove("failed");
  entry.status.classList.add("approval-outcome");
  entry.status.textContent = outcomeText(event);
  entry.card.classList.remove("pending");
  entry.card.classList.add(event.state === "approved" ? "approved" : "denied");
}
