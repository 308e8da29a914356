// Starts the web app (a file, not an inline script: the Content-Security-Policy allows no
// inline script).
import init from "/pkg/tandem.js";
init({ module_or_path: "/pkg/tandem_bg.wasm" });
