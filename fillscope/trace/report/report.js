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
    prev.disabled = p === 1; next.disabled = p === n;
    counter.textContent = p + " / " + n;
    writeHash();
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
  }
  tabs.forEach(function (t) {
    t.addEventListener("click", function () { show(t.getAttribute("data-goto")); window.scrollTo(0, 0); });
  });
  [prev, next].forEach(function (b) {
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
  window.addEventListener("beforeprint", function () {
    Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) { d.open = true; });
  });
  var h = parseHash(), stored = null;
  try { stored = localStorage.getItem("fillscope.report.lang"); } catch (e) {}
  root.classList.add("js");
  setLang(h.lang || stored || "en");
  show(h.page || 1);
  window.fillscopeReport = { show: show, setLang: setLang,
    page: function () { return cur; }, lang: function () { return lang; } };
})();
