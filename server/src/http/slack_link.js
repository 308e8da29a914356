// The Slack link page's button (http/slack.rs): disabled until the page has been shown, and its
// window focused, for the button's data-arm-ms (a second). A double-click whose second half
// lands here as the page appears or its window comes to the front (double-clickjacking) finds
// it disabled; leaving the window disables it again.
(function () {
  "use strict";
  var button = document.getElementById("link");
  if (!button) {
    return;
  }
  var wait = parseInt(button.getAttribute("data-arm-ms"), 10) || 1000;
  var timer = null;
  function disarm() {
    clearTimeout(timer);
    timer = null;
    button.disabled = true;
  }
  function arm() {
    disarm();
    if (document.visibilityState === "visible") {
      timer = setTimeout(function () {
        button.disabled = false;
      }, wait);
    }
  }
  window.addEventListener("pageshow", arm);
  window.addEventListener("focus", arm);
  window.addEventListener("blur", disarm);
  document.addEventListener("visibilitychange", arm);
  arm();
})();
