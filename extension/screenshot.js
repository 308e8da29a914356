// screenshot.js: the visible part of a tab as PNG, and the picked element cut out of it. Each is
// kept at most 3 MiB (halved until it fits), as base64 for the API and as a Blob for thumbnails.

const MAX_PNG_BYTES = 3 * 1024 * 1024;
// The server takes at most 8 MiB for a prompt with its context; base64 is 4 bytes per 3.
const MAX_BOTH_BASE64 = 7.5 * 1024 * 1024;

function dataUrlToBlob(dataUrl) {
  const comma = dataUrl.indexOf(",");
  const binary = atob(dataUrl.slice(comma + 1));
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return new Blob([bytes], { type: "image/png" });
}

export async function blobToBase64(blob) {
  const bytes = new Uint8Array(await blob.arrayBuffer());
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** The region (sx, sy, sw, sh) of the bitmap as PNG, halved until it is at most `max` bytes. */
async function fit(bitmap, sx, sy, sw, sh, max = MAX_PNG_BYTES) {
  let width = sw;
  let height = sh;
  let scaled = false;
  for (;;) {
    const canvas = new OffscreenCanvas(width, height);
    canvas.getContext("2d").drawImage(bitmap, sx, sy, sw, sh, 0, 0, width, height);
    const blob = await canvas.convertToBlob({ type: "image/png" });
    if (blob.size <= max || (width <= 16 && height <= 16)) {
      return { blob, png_base64: await blobToBase64(blob), width, height, scaled };
    }
    width = Math.max(1, Math.floor(width / 2));
    height = Math.max(1, Math.floor(height / 2));
    scaled = true;
  }
}

/**
 * Captures the window's visible tab; `rect` (CSS px, viewport coordinates) is the element's box.
 * Answers { view, element, notes }; `element` is null when the box is outside the visible part.
 * Throws when the tab cannot be captured (no activeTab grant).
 */
export async function capture(windowId, rect, devicePixelRatio, viewport) {
  const dataUrl = await chrome.tabs.captureVisibleTab(windowId, { format: "png" });
  const viewBlob = dataUrlToBlob(dataUrl);
  const bitmap = await createImageBitmap(viewBlob);
  try {
    const notes = [];

    // Normally the capture is the viewport × devicePixelRatio; when it is not, trust its size.
    let scale = devicePixelRatio > 0 ? devicePixelRatio : 1;
    if (viewport && viewport.width > 0 && Math.abs(bitmap.width - viewport.width * scale) > 2) {
      scale = bitmap.width / viewport.width;
    }
    const x0 = Math.max(0, Math.floor(rect.x * scale));
    const y0 = Math.max(0, Math.floor(rect.y * scale));
    const x1 = Math.min(bitmap.width, Math.ceil((rect.x + rect.width) * scale));
    const y1 = Math.min(bitmap.height, Math.ceil((rect.y + rect.height) * scale));
    let element = null;
    if (x1 - x0 >= 1 && y1 - y0 >= 1) {
      element = await fit(bitmap, x0, y0, x1 - x0, y1 - y0);
      if (element.scaled) notes.push("The element's screenshot was scaled down to fit 3 MiB.");
    } else {
      notes.push("The element is outside the visible part of the page, so only the whole view is captured.");
    }
    // The view gets what is left of the request's budget once the element's crop is in.
    const left = Math.floor(((MAX_BOTH_BASE64 - (element ? element.png_base64.length : 0)) * 3) / 4);
    const budget = Math.min(MAX_PNG_BYTES, left);
    const view =
      viewBlob.size <= budget
        ? { blob: viewBlob, png_base64: dataUrl.slice(dataUrl.indexOf(",") + 1), width: bitmap.width, height: bitmap.height, scaled: false }
        : await fit(bitmap, 0, 0, bitmap.width, bitmap.height, budget);
    return { view, element, notes };
  } finally {
    bitmap.close();
  }
}
