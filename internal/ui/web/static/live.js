// Keeps a page current: the server says when something the person may read changed, and the
// page reads its main part again, as the person. No content arrives over the event stream.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var status = document.getElementById("live-status");
  if (!main || main.dataset.live === undefined || !window.EventSource) {
    return;
  }
  var busy = false, again = false, timer = null;

  function say(text, cls) {
    if (status) {
      status.textContent = text;
      status.className = "live " + cls;
    }
  }

  function refresh() {
    timer = null;
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    fetch(location.pathname + location.search, {headers: {"X-Siteops-Fragment": "1"}, credentials: "same-origin"})
      .then(function (r) {
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString("<main>" + html + "</main>", "text/html");
        main.replaceChildren.apply(main, Array.from(doc.querySelector("main").childNodes));
        main.dataset.updated = String(Date.now());
        say("live", "on");
      })
      .catch(function (e) {
        say("update failed: " + e.message, "off");
      })
      .finally(function () {
        busy = false;
        if (again) {
          again = false;
          schedule();
        }
      });
  }

  function schedule() {
    if (timer === null) {
      timer = setTimeout(refresh, 150);
    }
  }

  var url = "/live";
  if (main.dataset.live) {
    url += "?ns=" + encodeURIComponent(main.dataset.live);
  }
  var events = new EventSource(url);
  events.onopen = function () { say("live", "on"); };
  events.onerror = function () { say("reconnecting…", "off"); };
  events.addEventListener("change", schedule);
})();
