// The desktop pane's WebRTC side: a receive-only peer connection for the session's desktop
// video (non-trickle: the offer carries every candidate), and the mouse and keyboard of the
// person in control turned into desktop input messages. Signalling goes over the session's
// live channel through `send` (JSON text of a live message).
window.TandemDesktop = {
  start(video, send) {
    const pc = new RTCPeerConnection({ iceServers: [] });
    window.tandemDesktopPc = pc; // for tests and curious people: getStats()
    pc.addTransceiver("video", { direction: "recvonly" });
    pc.ontrack = (e) => {
      // Each frame as soon as it is decoded: a desktop someone drives is not a film, and the
      // loopback or LAN path has little jitter to smooth (the default target holds frames back).
      if ("jitterBufferTarget" in e.receiver) e.receiver.jitterBufferTarget = 0;
      else if ("playoutDelayHint" in e.receiver) e.receiver.playoutDelayHint = 0;
      video.srcObject = e.streams[0] || new MediaStream([e.track]);
      video.play().catch(() => {});
    };
    (async () => {
      await pc.setLocalDescription(await pc.createOffer());
      await new Promise((done) => {
        if (pc.iceGatheringState === "complete") return done();
        pc.addEventListener("icegatheringstatechange", () => pc.iceGatheringState === "complete" && done());
        setTimeout(done, 3000);
      });
      send(JSON.stringify({ type: "desktop_offer", sdp: pc.localDescription.sdp }));
    })();
    // Pointer and keys on the video: fractions of the picture, so any size maps onto the screen.
    const at = (e) => {
      const r = video.getBoundingClientRect();
      return { x: Math.min(1, Math.max(0, (e.clientX - r.left) / r.width)), y: Math.min(1, Math.max(0, (e.clientY - r.top) / r.height)) };
    };
    const input = (i) => send(JSON.stringify({ type: "desktop_input", input: i }));
    let lastMove = 0;
    const onMove = (e) => {
      const now = performance.now();
      if (now - lastMove < 33) return; // 30 moves a second is plenty
      lastMove = now;
      input({ kind: "move", ...at(e) });
    };
    const onDown = (e) => { video.focus(); e.preventDefault(); input({ kind: "down", ...at(e), button: e.button + 1 }); };
    const onUp = (e) => { e.preventDefault(); input({ kind: "up", ...at(e), button: e.button + 1 }); };
    const onWheel = (e) => { e.preventDefault(); input({ kind: "scroll", ...at(e), dy: Math.sign(e.deltaY) * Math.max(1, Math.round(Math.abs(e.deltaY) / 50)) }); };
    const modifier = (k) => ["Control", "Alt", "Shift", "Meta", "AltGraph", "CapsLock"].includes(k);
    const onKey = (e) => {
      // Ctrl/Cmd+V: the browser's paste event brings this computer's clipboard, typed below.
      if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === "v") return;
      e.preventDefault();
      if (modifier(e.key)) return; // held modifiers travel with the key they modify
      // AltGr (reported as Ctrl+Alt on some systems) already made the character in `key`.
      const altgr = e.getModifierState && e.getModifierState("AltGraph");
      input({ kind: "key", key: e.key, ctrl: e.ctrlKey && !altgr, alt: e.altKey && !altgr, shift: e.shiftKey, meta: e.metaKey });
    };
    // Pasting types the text into the workspace's focused window.
    const onPaste = (e) => {
      e.preventDefault();
      const text = e.clipboardData && e.clipboardData.getData("text/plain");
      if (text) input({ kind: "text", text: text.slice(0, 2000) });
    };
    const onMenu = (e) => e.preventDefault();
    video.addEventListener("mousemove", onMove);
    video.addEventListener("mousedown", onDown);
    video.addEventListener("mouseup", onUp);
    video.addEventListener("wheel", onWheel, { passive: false });
    video.addEventListener("keydown", onKey);
    video.addEventListener("contextmenu", onMenu);
    video.addEventListener("paste", onPaste);
    return {
      answer(sdp) { pc.setRemoteDescription({ type: "answer", sdp }).catch((e) => console.warn("desktop answer", e)); },
      close() {
        for (const [t, f] of [["mousemove", onMove], ["mousedown", onDown], ["mouseup", onUp], ["wheel", onWheel], ["keydown", onKey], ["contextmenu", onMenu], ["paste", onPaste]]) video.removeEventListener(t, f);
        send(JSON.stringify({ type: "desktop_close" }));
        pc.close();
      },
    };
  },
};
