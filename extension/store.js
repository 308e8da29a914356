// store.js: what the extension keeps (chrome.storage.local: server_url, token, last_repo) and
// the packaged config.json ({"server_url": …}, written by the packager, may be absent).

export async function load() {
  const got = await chrome.storage.local.get(["server_url", "token", "last_repo"]);
  return {
    server_url: typeof got.server_url === "string" ? got.server_url : "",
    token: typeof got.token === "string" ? got.token : "",
    last_repo: typeof got.last_repo === "string" ? got.last_repo : "",
  };
}

export function save(values) {
  return chrome.storage.local.set(values);
}

export function forget(keys) {
  return chrome.storage.local.remove(keys);
}

export async function readConfig() {
  try {
    const res = await fetch(chrome.runtime.getURL("config.json"), { cache: "no-store" });
    if (!res.ok) return {};
    const config = await res.json();
    return config && typeof config === "object" ? config : {};
  } catch {
    return {};
  }
}
