(function () {
  "use strict";
  var root = document.documentElement;
  var pages = Array.prototype.slice.call(document.querySelectorAll("section.page"));
  var n = pages.length, cur = 1, lang = "en";
  var tabs = Array.prototype.slice.call(document.querySelectorAll("[data-goto]"));
  var prev = document.querySelector(".pager .prev"), next = document.querySelector(".pager .next");
  var counter = document.querySelector(".pager .counter");
  function parseHash() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i > 0) { out[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1)); }
    });
    return out;
  }
  function writeHash() {
    var h = "#page=" + cur + "&lang=" + lang;
    if (location.hash === h) { return; }
    // The hash only bookmarks the page; where it cannot be written (a srcdoc or sandboxed frame) skip it:
    // navigating instead would load the embedding page's URL into the frame.
    try { history.replaceState(null, "", h); } catch (e) { /* not bookmarkable here */ }
  }
  function show(p) {
    p = Math.max(1, Math.min(n, parseInt(p, 10) || 1));
    cur = p;
    pages.forEach(function (s, i) { s.hidden = (i + 1) !== p; });
    tabs.forEach(function (t) {
      if (parseInt(t.getAttribute("data-goto"), 10) === p) { t.setAttribute("aria-current", "page"); }
      else { t.removeAttribute("aria-current"); }
    });
    // a one-page document (the Shapes Report's page) has no pager
    if (prev) { prev.disabled = p === 1; }
    if (next) { next.disabled = p === n; }
    if (counter) { counter.textContent = p + " / " + n; }
    writeHash();
    tellHost();
  }
  // In FillScope's viewer (a sandboxed frame: no storage, no downloads) the viewer says so with a message; the
  // report then tells it its page and language (the viewer carries the language into its other views), and its
  // JSON link asks the viewer for the .json file instead of a download the sandbox would block.
  var host = null;
  function tellHost(extra) {
    if (!host) { return; }
    var msg = { fillscope: "report", page: cur, lang: lang };
    if (extra) { msg.download = extra; }
    try { host.postMessage(msg, "*"); } catch (e) { /* the viewer is gone */ }
  }
  function setLang(l) {
    lang = l === "zh" ? "zh" : "en";
    root.setAttribute("data-lang", lang);
    root.setAttribute("lang", lang === "zh" ? "zh-CN" : "en");
    Array.prototype.forEach.call(document.querySelectorAll("[data-title-en]"), function (el) {
      el.setAttribute("title", el.getAttribute(lang === "zh" ? "data-title-zh" : "data-title-en"));
    });
    Array.prototype.forEach.call(document.querySelectorAll(".langs button"), function (b) {
      b.setAttribute("aria-pressed", String(b.getAttribute("data-lang") === lang));
    });
    try { localStorage.setItem("fillscope.report.lang", lang); } catch (e) {}
    writeHash();
    tellHost();
  }
  tabs.forEach(function (t) {
    t.addEventListener("click", function () { show(t.getAttribute("data-goto")); window.scrollTo(0, 0); });
  });
  [prev, next].filter(Boolean).forEach(function (b) {
    b.addEventListener("click", function () { show(cur + parseInt(b.getAttribute("data-step"), 10)); window.scrollTo(0, 0); });
  });
  Array.prototype.forEach.call(document.querySelectorAll(".langs button"), function (b) {
    b.addEventListener("click", function () { setLang(b.getAttribute("data-lang")); });
  });
  document.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) { return; }
    var t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) { return; }
    if (e.key === "ArrowRight") { show(cur + 1); e.preventDefault(); }
    else if (e.key === "ArrowLeft") { show(cur - 1); e.preventDefault(); }
    else if (e.key === "Home") { show(1); e.preventDefault(); }
    else if (e.key === "End") { show(n); e.preventDefault(); }
  });
  window.addEventListener("hashchange", function () {
    var h = parseHash();
    if (h.lang && h.lang !== lang) { setLang(h.lang); }
    if (h.page && parseInt(h.page, 10) !== cur) { show(h.page); }
  });
  window.addEventListener("message", function (e) {
    var d = e.data;
    if (window.parent === window || e.source !== window.parent || !d || d.fillscope !== "viewer") { return; }
    host = window.parent;
    if (d.lang === "en" || d.lang === "zh") { setLang(d.lang); } else { tellHost(); }
  });
  var dl = document.querySelector("a.dl");
  if (dl) {
    dl.addEventListener("click", function (e) {
      if (host) { e.preventDefault(); tellHost("json"); }
    });
  }
  window.addEventListener("beforeprint", function () {
    Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) { d.open = true; });
  });
  var h = parseHash(), stored = null;
  try { stored = localStorage.getItem("fillscope.report.lang"); } catch (e) {}
  root.classList.add("js");
  // the language: the URL's, else the one remembered here, else the page's own (a viewer sets it in the markup)
  setLang(h.lang || stored || root.getAttribute("data-lang") || "en");
  show(h.page || 1);
  window.fillscopeReport = { show: show, setLang: setLang,
    page: function () { return cur; }, lang: function () { return lang; }, hosted: function () { return !!host; } };
})();
