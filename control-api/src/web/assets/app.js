// The dashboard's only script: keeps the live parts of a page (elements with data-live)
// current from the daemon's server-sent events, which carry each part re-rendered by the
// server (already escaped). Without it every page still works; it only stops updating.
"use strict";
(function () {
  var parts = document.querySelectorAll("[data-live]");
  if (!parts.length || !window.EventSource) return;
  var view = parts[0].getAttribute("data-live") === "tasks" ? "tasks" : "overview";
  var query = new URLSearchParams(window.location.search);
  query.set("view", view);
  var source = new EventSource("/events?" + query.toString());
  parts.forEach(function (part) {
    source.addEventListener(part.getAttribute("data-live"), function (event) {
      part.innerHTML = event.data;
    });
  });
})();
