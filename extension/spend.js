// spend.js: the session's use against its limits under its title, as on the session page:
// what it cost, its tokens and sandbox minutes, and each budget it draws on (near or at its
// limit marked). Read when the session opens and after each turn or limit.

import * as api from "./api.js";
import { byId, h, str } from "./dom.js";

/** Micro-dollars as people write dollars: "$1,148.34", "$0.025", "$0.0018". */
export function dollars(micros) {
  const sign = micros < 0 ? "-" : "";
  const m = Math.abs(micros);
  if (m >= 1_000_000) {
    const cents = Math.floor((m + 5_000) / 10_000);
    const whole = Math.floor(cents / 100).toLocaleString("en-US");
    return `${sign}$${whole}.${String(cents % 100).padStart(2, "0")}`;
  }
  // Under a dollar: up to four decimals, only those that say something.
  const tenths = Math.floor((m + 50) / 100);
  let digits = String(tenths).padStart(4, "0").replace(/0+$/, "");
  if (digits.length < 2) digits = digits.padEnd(2, "0");
  return `${sign}$0.${digits}`;
}

const int = (v) => (Number.isSafeInteger(v) ? v : 0);

export function amount(l) {
  const used = int(l.used);
  const limit = int(l.limit);
  switch (l.kind) {
    case "cost_micros":
      return `${dollars(used)} of ${dollars(limit)}`;
    case "tokens":
      return `${used.toLocaleString("en-US")} of ${limit.toLocaleString("en-US")} tokens`;
    case "sandbox_minutes":
      return `${used} of ${limit} sandbox minutes`;
    default:
      return `${used} of ${limit}`;
  }
}

function scope(l) {
  switch (l.scope) {
    case "tree":
      return "tree budget";
    case "automation":
      return "run budget";
    case "person_daily":
      return `${str(l.whose, 200)}'s day`;
    case "repo_daily":
      return "repo's day";
    default:
      return str(l.scope, 50);
  }
}

let reading = 0;

/** Reads session `id`'s use and shows it in #session-spend (hidden when there is none yet). */
export async function showSpend(id) {
  const el = byId("session-spend");
  const mine = ++reading;
  let s;
  try {
    s = await api.get(`/api/sessions/${encodeURIComponent(id)}/spend`);
  } catch {
    // A person who may not read it, or an older server: nothing is shown.
    if (mine === reading) el.hidden = true;
    return;
  }
  if (mine !== reading) return;
  if (!s || typeof s !== "object" || (int(s.tokens) === 0 && int(s.sandbox_minutes) === 0)) {
    el.hidden = true;
    return;
  }
  const parts = [h("span", { text: `${dollars(int(s.cost_micros))} · ${int(s.tokens).toLocaleString("en-US")} tokens · ${int(s.sandbox_minutes)} sandbox min` })];
  const limits = Array.isArray(s.limits) ? s.limits : [];
  for (const l of limits) {
    if (!l || typeof l !== "object" || l.scope === "requests" || int(l.limit) <= 0) continue;
    const share = int(l.used) / int(l.limit);
    const cls = share >= 1 ? "limit bad" : share >= 0.8 ? "limit warn" : "limit";
    parts.push(h("span", { className: cls, text: ` · ${scope(l)}: ${amount(l)}` }));
  }
  el.replaceChildren(...parts);
  el.hidden = false;
}

export function hideSpend() {
  reading++;
  const el = byId("session-spend");
  el.hidden = true;
  el.replaceChildren();
}
