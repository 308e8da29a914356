// picker.js: the element picker, injected by the panel into the page's isolated world. Highlights
// the element under the pointer; a click picks it (described: selector, cut outer HTML, text, box)
// and sends it to the panel; Escape cancels. Built with DOM APIs and element.style only, so it
// works on pages whose CSP forbids inline script and style. Injected again, it starts over.
(() => {
  "use strict";
  if (globalThis.__tandemPicker) {
    globalThis.__tandemPicker.start();
    return;
  }

  const ACCENT = "#2f6feb";
  const TOP = "2147483647";
  const MAX_HTML_BYTES = 32768;
  const MAX_TEXT = 4096;
  const MAX_SELECTOR = 1024;
  const SWALLOWED = ["mousedown", "mouseup", "pointerdown", "pointerup", "dblclick", "auxclick"];
  const FONT = "12px/1.4 system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";

  let active = false;
  let host = null;
  let box = null;
  let label = null;
  let hovered = null;
  let pointerX = -1;
  let pointerY = -1;
  let frame = 0;

  function style(el, props) {
    for (const [name, value] of Object.entries(props)) el.style.setProperty(name, value, "important");
  }

  function build() {
    host = document.createElement("div");
    style(host, { all: "initial", position: "fixed", top: "0", left: "0", width: "0", height: "0", "z-index": TOP, "pointer-events": "none", display: "block" });
    const root = host.attachShadow({ mode: "closed" });
    const fixed = { position: "fixed", "pointer-events": "none", "z-index": TOP, margin: "0", "box-sizing": "border-box" };
    box = document.createElement("div");
    style(box, { ...fixed, display: "none", border: `2px solid ${ACCENT}`, background: "rgba(47, 111, 235, 0.12)", "border-radius": "2px" });
    label = document.createElement("div");
    style(label, { ...fixed, display: "none", background: ACCENT, color: "#fff", font: FONT, padding: "2px 6px", "border-radius": "3px", "max-width": "70vw", "white-space": "nowrap", overflow: "hidden", "text-overflow": "ellipsis" });
    const hint = document.createElement("div");
    style(hint, { ...fixed, top: "8px", left: "50%", transform: "translateX(-50%)", background: "rgba(32, 33, 36, 0.92)", color: "#fff", font: FONT, padding: "4px 10px", "border-radius": "4px" });
    hint.textContent = "Tandem: click the element that is wrong · Esc cancels";
    root.append(box, label, hint);
    document.documentElement.append(host);
  }

  function shortName(el) {
    let name = el.localName || "element";
    const id = el.getAttribute("id");
    if (id) name += `#${id}`;
    const classes = el.classList ? [...el.classList].slice(0, 2) : [];
    for (const c of classes) name += `.${c}`;
    return name.length > 80 ? `${name.slice(0, 79)}…` : name;
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(update);
  }

  function update() {
    frame = 0;
    if (!active) return;
    let el = pointerX >= 0 ? document.elementFromPoint(pointerX, pointerY) : null;
    if (el === host) el = null;
    hovered = el;
    if (!el) {
      style(box, { display: "none" });
      style(label, { display: "none" });
      return;
    }
    const r = el.getBoundingClientRect();
    style(box, { display: "block", left: `${r.left}px`, top: `${r.top}px`, width: `${r.width}px`, height: `${r.height}px` });
    label.textContent = `${shortName(el)}  ${Math.round(r.width)}×${Math.round(r.height)}`;
    const top = r.top >= 24 ? r.top - 22 : Math.min(r.bottom + 4, window.innerHeight - 22);
    const left = Math.max(0, Math.min(r.left, window.innerWidth - 120));
    style(label, { display: "block", left: `${left}px`, top: `${Math.max(0, top)}px` });
  }

  function swallow(event) {
    if (!active) return;
    event.preventDefault();
    event.stopImmediatePropagation();
  }

  function onMove(event) {
    pointerX = event.clientX;
    pointerY = event.clientY;
    schedule();
  }

  function onKey(event) {
    // Only the person's own key presses and clicks count, never the page's synthetic ones.
    if (!active || !event.isTrusted || event.key !== "Escape") return;
    swallow(event);
    stop();
    send({ type: "tandem-pick-cancelled" });
  }

  function onClick(event) {
    if (!active) return;
    swallow(event);
    if (!event.isTrusted) return;
    let el = event.target instanceof Element ? event.target : null;
    if (!el || el === host) el = document.elementFromPoint(event.clientX, event.clientY) || hovered;
    if (!el || el === host) return;
    stop();
    finish(el);
  }

  const listeners = [
    ["mousemove", onMove, { capture: true, passive: true }],
    ["scroll", schedule, { capture: true, passive: true }],
    ["resize", schedule, { passive: true }],
    ["keydown", onKey, { capture: true }],
    ["click", onClick, { capture: true }],
    ...SWALLOWED.map((type) => [type, swallow, { capture: true }]),
  ];

  function start() {
    stop();
    build();
    active = true;
    for (const [type, fn, opts] of listeners) window.addEventListener(type, fn, opts);
    schedule();
  }

  function stop() {
    active = false;
    for (const [type, fn, opts] of listeners) window.removeEventListener(type, fn, opts);
    if (frame) cancelAnimationFrame(frame);
    frame = 0;
    if (host) host.remove();
    host = box = label = hovered = null;
  }

  function send(message) {
    try {
      chrome.runtime.sendMessage(message).catch(() => {});
    } catch {
      // The extension was reloaded: nobody is listening.
    }
  }

  function twoFrames() {
    const frames = new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
    return Promise.race([frames, new Promise((resolve) => setTimeout(resolve, 250))]);
  }

  function nonce() {
    return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  async function finish(el) {
    await twoFrames();
    let element;
    try {
      element = describe(el);
    } catch (err) {
      send({ type: "tandem-pick-cancelled", error: String(err && err.message) });
      return;
    }
    const mark = nonce();
    try {
      el.setAttribute("data-tandem-picked", mark);
    } catch {
      // The panel then finds no component names; the rest still works.
    }
    send({ type: "tandem-picked", nonce: mark, element, viewport: { width: window.innerWidth, height: window.innerHeight } });
  }

  // --- Describing the picked element (only on click: the page may be huge) ---

  function describe(el) {
    const r = el.getBoundingClientRect();
    const { html, bytes } = redactedHtml(el);
    return {
      selector: selectorFor(el),
      outer_html: bytes > MAX_HTML_BYTES ? cutUtf8(html, MAX_HTML_BYTES) : html,
      outer_html_bytes: bytes,
      text: collapsedText(el),
      rect: { x: Math.round(r.x), y: Math.round(r.y), width: Math.round(r.width), height: Math.round(r.height) },
      device_pixel_ratio: window.devicePixelRatio || 1,
      components: [],
    };
  }

  /**
   * The element's outer HTML without what a page keeps secret: the values of password and
   * hidden inputs, script bodies and meta tags that carry tokens. A copy is redacted (the page
   * is not touched); past 2 MB the original is cut instead (a copy would be slow), redacted by text.
   */
  function redactedHtml(el) {
    const secret = 'input[type="password" i], input[type="hidden" i], script, meta[name*="csrf" i], meta[name*="token" i]';
    const whole = el.outerHTML || "";
    if (whole.length > 2 * 1024 * 1024) {
      const head = whole
        .slice(0, MAX_HTML_BYTES)
        .replace(/<script\b[\s\S]*?(<\/script>|$)/gi, "<script>[redacted]</script>")
        .replace(/(<input\b[^>]*\btype=["']?(?:password|hidden)\b[^>]*\bvalue=)("[^"]*"|'[^']*'|[^\s>]*)/gi, '$1"[redacted]"');
      return { html: head, bytes: utf8Length(whole) };
    }
    if (!el.matches(secret) && !el.querySelector(secret)) return { html: whole, bytes: utf8Length(whole) };
    const copy = el.cloneNode(true);
    const all = [copy, ...copy.querySelectorAll(secret)].filter((n) => n.matches(secret));
    for (const n of all) {
      if (n.localName === "script") n.textContent = "[redacted]";
      else if (n.localName === "meta") n.setAttribute("content", "[redacted]");
      else n.setAttribute("value", "[redacted]");
    }
    const html = copy.outerHTML || "";
    return { html, bytes: utf8Length(html) };
  }

  /** UTF-8 length without encoding (lone surrogates count as U+FFFD, as TextEncoder writes them). */
  function utf8Length(s) {
    let n = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c < 0x80) n += 1;
      else if (c < 0x800) n += 2;
      else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
        n += 4;
        i++;
      } else n += 3;
    }
    return n;
  }

  /** The longest prefix of s that is at most max UTF-8 bytes, cut at a character boundary. */
  function cutUtf8(s, max) {
    let head = s.slice(0, max);
    const last = head.charCodeAt(head.length - 1);
    if (last >= 0xd800 && last <= 0xdbff) head = head.slice(0, -1);
    const { read } = new TextEncoder().encodeInto(head, new Uint8Array(max));
    return head.slice(0, read);
  }

  function collapsedText(el) {
    const raw = el.textContent || "";
    const CHUNK = 8192;
    let out = "";
    for (let i = 0; i < raw.length && out.length < MAX_TEXT + 2; i += CHUNK) {
      out = (out + raw.slice(i, i + CHUNK)).replace(/\s+/g, " ");
    }
    return out.trim().slice(0, MAX_TEXT);
  }

  function selectorFor(el) {
    const doc = el.ownerDocument;
    const uniqueFor = (selector, node) => {
      try {
        const found = doc.querySelectorAll(selector);
        return found.length === 1 && found[0] === node;
      } catch {
        return false;
      }
    };
    const idSelector = (node) => {
      const id = node.getAttribute("id");
      if (!id || id.length > 200) return null;
      const selector = `#${CSS.escape(id)}`;
      return uniqueFor(selector, node) ? selector : null;
    };

    const own = idSelector(el);
    if (own) return own;
    for (const attr of ["data-testid", "data-test", "name"]) {
      const value = el.getAttribute(attr);
      if (!value || value.length > 200) continue;
      const selector = `[${attr}="${CSS.escape(value)}"]`;
      if (uniqueFor(selector, el)) return selector;
    }

    const parts = [];
    for (let node = el; node && node.nodeType === Node.ELEMENT_NODE; node = node.parentElement) {
      if (node !== el) {
        const anchor = idSelector(node);
        if (anchor) {
          parts.unshift(anchor);
          break;
        }
      }
      if (node === doc.documentElement) {
        parts.unshift(CSS.escape(node.localName));
        break;
      }
      let n = 1;
      for (let s = node.previousElementSibling; s; s = s.previousElementSibling) {
        if (s.localName === node.localName) n++;
      }
      parts.unshift(`${CSS.escape(node.localName)}:nth-of-type(${n})`);
    }
    const full = parts.join(" > ");
    if (utf8Length(full) <= MAX_SELECTOR && uniqueFor(full, el)) return full;

    // A very deep page: the shortest tail of the path that still finds only this element.
    let longest = "";
    for (let i = parts.length - 1; i >= 0; i--) {
      const tail = parts.slice(i).join(" > ");
      if (utf8Length(tail) > MAX_SELECTOR) break;
      if (uniqueFor(tail, el)) return tail;
      longest = tail;
    }
    return longest;
  }

  globalThis.__tandemPicker = { start, stop, isActive: () => active };
  start();
})();
