// console-hook.js: runs in the page's MAIN world and keeps its last 20 console errors (console.error,
// uncaught errors, unhandled rejections) in window.__tandemConsoleErrors, each at most 1000
// characters, for the Tandem panel to read when the person asks for them. Installs once.
(() => {
  "use strict";
  const MAX_ERRORS = 20;
  const MAX_CHARS = 1000;
  if (window.__tandemConsoleHook === true) return;
  try {
    Object.defineProperty(window, "__tandemConsoleHook", { value: true });
  } catch {
    return;
  }
  const errors = [];
  window.__tandemConsoleErrors = errors;

  function describe(value) {
    try {
      if (typeof value === "string") return value;
      if (value instanceof Error || (value && typeof value.stack === "string" && typeof value.message === "string")) {
        const head = `${value.name || "Error"}: ${value.message}`;
        return value.stack && value.stack.includes(value.message) ? value.stack : `${head}\n${value.stack || ""}`;
      }
      if (value && typeof value === "object" && typeof value.nodeName === "string") {
        return `<${value.nodeName.toLowerCase()}>`;
      }
      if (value === null || typeof value !== "object") return String(value);
      const json = JSON.stringify(value);
      return typeof json === "string" ? json : String(value);
    } catch {
      try {
        return Object.prototype.toString.call(value);
      } catch {
        return "[unprintable]";
      }
    }
  }

  function record(text) {
    errors.push(String(text).slice(0, MAX_CHARS));
    if (errors.length > MAX_ERRORS) errors.splice(0, errors.length - MAX_ERRORS);
  }

  const original = console.error;
  console.error = function tandemConsoleError(...args) {
    try {
      record(args.map((a) => describe(a).slice(0, MAX_CHARS)).join(" "));
    } catch {
      // Never break the page's logging.
    }
    return original.apply(this, args);
  };

  window.addEventListener("error", (event) => {
    try {
      if (!(event instanceof ErrorEvent)) return;
      const stack = event.error && typeof event.error.stack === "string" ? event.error.stack : "";
      const where = event.filename ? ` (${event.filename}:${event.lineno}:${event.colno})` : "";
      const message = String(event.message).replace(/^Uncaught /, "");
      record(`Uncaught ${stack || `${message}${where}`}`);
    } catch {
      // Ignore.
    }
  });

  window.addEventListener("unhandledrejection", (event) => {
    try {
      record(`Unhandled rejection: ${describe(event.reason)}`);
    } catch {
      // Ignore.
    }
  });
})();
