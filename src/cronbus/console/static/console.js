// cronbus console: live updates over one server-sent-events stream per tab, confirmations,
// and small conveniences. Everything else is plain HTML forms and htmx attributes.
(function () {
  "use strict";
  let source = null;
  let version = null;

  function setState(text) {
    const el = document.querySelector("[data-live-state]");
    if (el) el.textContent = text;
  }

  // Figures from the shared aggregate: any element with data-figure="name" shows one.
  function showFigures(figures) {
    document.querySelectorAll("[data-figure]").forEach(function (el) {
      const value = figures[el.dataset.figure];
      if (value !== undefined && el.textContent !== String(value)) el.textContent = value;
    });
  }

  function open() {
    const url = document.body.dataset.live;
    if (!url || source || !window.EventSource) return;
    source = new EventSource(url);
    source.addEventListener("open", function () { setState("live"); });
    source.addEventListener("tick", function (message) {
      let data;
      try { data = JSON.parse(message.data); } catch (e) { return; }
      if (data.figures) showFigures(data.figures);
      if (version !== null && data.version !== version) {
        // Parts of the page marked hx-trigger="cb:changed from:body" fetch themselves again.
        document.body.dispatchEvent(new CustomEvent("cb:changed", { detail: data }));
      }
      version = data.version;
    });
    source.addEventListener("error", function () { setState("reconnecting…"); });
  }

  function close() {
    if (source) { source.close(); source = null; }
    setState("paused while hidden");
  }

  // A hidden tab holds no stream: the server computes nothing for it.
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { close(); }
    else {
      open();
      document.body.dispatchEvent(new CustomEvent("cb:changed", { detail: {} }));
    }
  });

  // Forms and buttons with data-confirm ask first.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    const submitter = event.submitter;
    const text = (submitter && submitter.dataset.confirm) || form.dataset.confirm;
    if (text && !window.confirm(text)) event.preventDefault();
  }, true);

  // Selects marked data-autosubmit submit their form when changed.
  document.addEventListener("change", function (event) {
    const el = event.target;
    if (el.matches && el.matches("select[data-autosubmit]") && el.form) el.form.requestSubmit();
  });

  document.addEventListener("DOMContentLoaded", function () {
    if (!document.hidden) open();
  });
})();
