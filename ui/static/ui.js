// seqlease ui: live updates. Every page works without this script; where
// it runs, it fetches the page again every data-refresh seconds (while the
// tab is visible) and swaps in the new <main>. The server escaped every
// value; DOMParser runs no script, and the nodes are moved, not re-parsed.
(function () {
  "use strict";
  var seconds = parseInt(document.body.getAttribute("data-refresh"), 10);
  var main = document.getElementById("main");
  if (!(seconds > 0) || !main || !window.fetch || !window.DOMParser) {
    return;
  }
  var live = document.getElementById("live");
  if (live) {
    live.hidden = false;
  }
  var busy = false;
  function refresh() {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    fetch(window.location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("status " + r.status);
        }
        return r.text();
      })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var next = doc.getElementById("main");
        if (next) {
          main.replaceChildren.apply(main, Array.prototype.slice.call(next.childNodes));
        }
        if (live) {
          live.textContent = "live";
        }
      })
      .catch(function () {
        if (live) {
          live.textContent = "not updating";
        }
      })
      .then(function () {
        busy = false;
      });
  }
  window.setInterval(refresh, seconds * 1000);
})();
