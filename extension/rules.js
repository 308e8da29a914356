// rules.js: the default repo for a page. A rule's pattern is matched against the whole URL, `*`
// standing for any run of characters and everything else literal (no regular expressions, so a
// hostile pattern cannot make matching slow).

/** True when the whole of `text` matches `pattern`. */
export function globMatch(pattern, text) {
  let p = 0;
  let t = 0;
  let star = -1;
  let mark = 0;
  while (t < text.length) {
    if (p < pattern.length && pattern[p] === "*") {
      star = p++;
      mark = t;
    } else if (p < pattern.length && pattern[p] === text[t]) {
      p++;
      t++;
    } else if (star !== -1) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.length && pattern[p] === "*") p++;
  return p === pattern.length;
}

/** The repo to preselect: the first matching rule's, else the last repo used, else the first. */
export function defaultRepo({ rules, repos, url, lastRepo }) {
  const known = new Set(repos.map((r) => r.id));
  if (url) {
    for (const rule of rules) {
      if (rule && typeof rule.pattern === "string" && globMatch(rule.pattern, url) && known.has(rule.repo_id)) {
        return rule.repo_id;
      }
    }
  }
  if (lastRepo && known.has(lastRepo)) return lastRepo;
  return repos.length ? repos[0].id : "";
}
