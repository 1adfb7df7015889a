// cronbus console: live updates over one server-sent-events stream per tab, confirmations,
// and small conveniences. Everything else is plain HTML forms and htmx attributes.
(function () {
  "use strict";
  let source = null;
  let version = null;
  // The tabs of one browser share one stream per namespace: browsers open at most 6
  // connections per server over HTTP/1.1, so a stream per tab would leave a 7th tab unable to
  // load anything. The visible tab holding the lock "cronbus-live <url>" keeps the stream and
  // passes each tick to the other tabs over a BroadcastChannel; when it is hidden or closed,
  // the lock goes to another visible tab. Without these APIs (an insecure origin has no
  // navigator.locks), each tab keeps its own stream.
  const url = document.body.dataset.live;
  const shared = Boolean(url && window.BroadcastChannel && navigator.locks);
  const channel = shared ? new BroadcastChannel("cronbus-live " + url) : null;
  let waiting = null;  // AbortController of this tab's request for the lock
  let release = null;  // ends this tab's hold of the lock

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

  function onTick(data) {
    if (document.hidden) return;  // a hidden tab fetches nothing; it refreshes when shown
    setState("live");
    if (data.figures) showFigures(data.figures);
    if (version !== null && data.version !== version) {
      // Parts of the page marked hx-trigger="cb:changed from:body" fetch themselves again.
      document.body.dispatchEvent(new CustomEvent("cb:changed", { detail: data }));
    }
    version = data.version;
  }

  function stream() {
    source = new EventSource(url);
    source.addEventListener("open", function () { setState("live"); });
    source.addEventListener("tick", function (message) {
      let data;
      try { data = JSON.parse(message.data); } catch (e) { return; }
      onTick(data);
      if (channel) channel.postMessage(data);
    });
    source.addEventListener("error", function () { setState("reconnecting…"); });
  }

  function open() {
    if (!url || !window.EventSource) return;
    if (!shared) {
      if (!source) stream();
      return;
    }
    if (waiting) return;
    waiting = new AbortController();
    navigator.locks.request("cronbus-live " + url, { signal: waiting.signal }, function () {
      return new Promise(function (resolve) { release = resolve; stream(); });
    }).catch(function () { /* aborted: the tab was hidden before its turn */ });
  }

  function close() {
    if (waiting) { waiting.abort(); waiting = null; }
    if (source) { source.close(); source = null; }
    if (release) { release(); release = null; }
    setState("paused while hidden");
  }

  if (channel) channel.onmessage = function (message) { onTick(message.data); };

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
