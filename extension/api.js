// api.js: the Tandem HTTP client. Sends the bearer token (never cookies), turns the server's
// {"code","message"} answers into errors, and on any 401 to an authenticated call hands over to
// the 401 handler (clear the token, pair again) and fails the call as already handled.

let server = "";
let token = "";
let onUnauthorized = () => {};

export class ApiError extends Error {
  constructor(message, { status = 0, code = "", network = false, handled = false } = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.network = network;
    this.handled = handled;
  }
}

export function configure(options) {
  if ("server" in options) server = options.server || "";
  if ("token" in options) token = options.token || "";
  if ("onUnauthorized" in options) onUnauthorized = options.onUnauthorized;
}

export const serverUrl = () => server;
export const hasToken = () => Boolean(token);

/** `as`: "json" (default) or "blob". `auth: false` for the pairing calls, which have no token yet. */
export async function request(method, path, { body, auth = true, as = "json" } = {}) {
  if (!server) throw new ApiError("Not connected to a Tandem server.");
  if (auth && !token) throw new ApiError("This extension is not paired with Tandem.", { status: 401, handled: true });
  const headers = { Accept: as === "json" ? "application/json" : "*/*" };
  if (auth) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(server + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
      cache: "no-store",
      // A redirect could carry the token to another origin: refuse it.
      redirect: "error",
    });
  } catch (err) {
    throw new ApiError(`Could not reach Tandem at ${server} (${err && err.message ? err.message : "network error"}).`, { network: true });
  }
  if (res.status === 401 && auth) {
    token = "";
    onUnauthorized();
    throw new ApiError("Tandem no longer accepts this extension's sign-in.", { status: 401, handled: true });
  }
  if (!res.ok) throw await errorOf(res);
  if (as === "blob") return res.blob();
  const text = await res.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(`Tandem answered ${method} ${path} with something that is not JSON.`, { status: res.status });
  }
}

async function errorOf(res) {
  let code = "";
  let message = "";
  try {
    const body = JSON.parse(await res.text());
    if (body && typeof body.message === "string") message = body.message.slice(0, 1000);
    if (body && typeof body.code === "string") code = body.code.slice(0, 100);
  } catch {
    // Not a JSON error: say the status.
  }
  if (!message) message = `Tandem answered ${res.status}${res.statusText ? ` ${res.statusText}` : ""}.`;
  return new ApiError(message, { status: res.status, code });
}

export const get = (path, options) => request("GET", path, options);
export const post = (path, body, options) => request("POST", path, { ...options, body });
export const blob = (path) => request("GET", path, { as: "blob" });
