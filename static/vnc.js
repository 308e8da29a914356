// The desktop over VNC (noVNC) where WebRTC cannot reach: the session's VNC WebSocket, scaled
// to the pane. The server decides whether this person's input is taken.
import RFB from "/novnc/core/rfb.js";

window.TandemVnc = {
  start(el, url, viewOnly) {
    const rfb = new RFB(el, url, { wsProtocols: ["binary"] });
    rfb.viewOnly = viewOnly;
    rfb.scaleViewport = true;
    rfb.background = "#111";
    return { close: () => rfb.disconnect() };
  },
};
