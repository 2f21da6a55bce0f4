// The architecture viewer's DOM pieces (web/fillscope_viewer.js uses them): its style, the sandboxed frame a report
// runs in, the stand-alone page of "Open in new tab", the downloads the viewer makes for a report, and the width of
// the frontend's sidebar panel while the viewer's tab is in it.
//
// The frame: <iframe sandbox="allow-scripts"> (no allow-same-origin: an opaque origin, no access to ComfyUI's DOM,
// storage, cookies or API; no allow-downloads: the report's own script cannot start a download). The HTML goes in
// as `srcdoc`, with `<base href="about:srcdoc">` first in its head and the viewer's language on its <html>.
//
// The viewer and a report talk by postMessage (fillscope/trace/report/report.js), each checking the other's window:
//   viewer -> report: {fillscope: "viewer", lang?}: "you are in the viewer" (and the language to show);
//   report -> viewer: {fillscope: "report", page, lang, download?}: its page and language on every change, and
//     download: "json" when its "⤓ JSON" link is clicked: the viewer downloads the report's .json file from /view
//     (the file the report was written with; nothing the report sends is downloaded or shown), and only while the
//     page has the click's user activation (a script alone cannot start downloads).

export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

/** The report as the iframe's srcdoc: the same document with `<base href="about:srcdoc">` first in its head.
 *  A srcdoc document's base URL is its parent's, so the report's `history.replaceState(null, "", "#page=1")`
 *  would resolve to ComfyUI's own URL, fail in the opaque origin and fall back to location.replace(): the frame
 *  would navigate to ComfyUI itself. With the base, "#page=1" stays a fragment of about:srcdoc. The base comes
 *  before the report's own CSP meta (whose base-uri 'none' governs only what follows it); the report's
 *  script is kept byte for byte (its CSP hash still matches). `lang` ("en"/"zh") goes on <html data-lang>, where
 *  the report's script takes its first language from inside a sandbox. Parsed with DOMParser: nothing runs here. */
export function srcdocOf(html, lang) {
  const doc = new DOMParser().parseFromString(html, "text/html");
  const base = doc.createElement("base");
  base.setAttribute("href", "about:srcdoc");
  doc.head.prepend(base);
  if (lang === "en" || lang === "zh") doc.documentElement.setAttribute("data-lang", lang);
  return "<!DOCTYPE html>\n" + doc.documentElement.outerHTML;
}

export function sandboxedFrame(srcdoc, title) {
  const f = document.createElement("iframe");
  f.setAttribute("sandbox", "allow-scripts"); // no allow-same-origin: an opaque origin, no access to ComfyUI
  f.setAttribute("referrerpolicy", "no-referrer");
  f.title = title;
  f.srcdoc = srcdoc;
  return f;
}

/** Download `url` (same origin: ComfyUI's /view) as `filename`, from ComfyUI's own page. */
export function download(url, filename) {
  const a = el("a");
  a.href = url;
  a.download = filename;
  a.rel = "noopener";
  a.hidden = true;
  document.body.appendChild(a);
  a.click();
  a.remove();
}

/** A blob: page that only frames the report, sandboxed: what "open in new tab" opens. Its small script is the
 *  report's host there as the viewer is here: it tells the report so, and downloads the .json file (`json`:
 *  {url, filename}) when the report's JSON link asks. */
export function standalonePage(srcdoc, title, json, lang) {
  const doc = document.implementation.createHTMLDocument(title);
  const meta = doc.createElement("meta");
  meta.setAttribute("charset", "utf-8");
  doc.head.prepend(meta);
  const style = doc.createElement("style");
  style.textContent = "html,body{margin:0;height:100%;background:#f4f6f9}iframe{display:block;border:0;width:100%;height:100%}";
  doc.head.appendChild(style);
  doc.body.appendChild(doc.importNode(sandboxedFrame(srcdoc, title), true));
  if (json) {
    const a = doc.createElement("a");
    a.id = "fillscope-json";
    a.href = new URL(json.url, location.href).href; // a blob: page resolves no relative URL
    a.setAttribute("download", json.filename);
    a.hidden = true;
    doc.body.appendChild(a);
  }
  const script = doc.createElement("script");
  script.textContent = `(function () {
  var f = document.querySelector("iframe"), a = document.getElementById("fillscope-json");
  f.addEventListener("load", function () { f.contentWindow.postMessage({ fillscope: "viewer", lang: ${JSON.stringify(lang === "zh" ? "zh" : "en")} }, "*"); });
  addEventListener("message", function (e) {
    var d = e.data;
    var clicked = !navigator.userActivation || navigator.userActivation.isActive;
    if (e.source === f.contentWindow && d && d.fillscope === "report" && d.download === "json" && a && clicked) { a.click(); }
  });
})();`;
  doc.body.appendChild(script);
  const text = "<!DOCTYPE html>\n" + doc.documentElement.outerHTML;
  return URL.createObjectURL(new Blob([text], { type: "text/html;charset=utf-8" }));
}

// ---- the sidebar panel's width -----------------------------------------------------------------------
let widened = null; // {panel, other, bases, percent}: the panel widened for this tab, and what it had before
const WIDE_PERCENT = 36; // the tab's default width, in % of the sidebar's splitter (the frontend gives tabs 20)
const WIDTH_KEY = "fillscope.viewer.width"; // the width the user last left this tab at (%)

function percentOf(panel) {
  const total = panel.parentElement.getBoundingClientRect().width;
  return total > 0 ? (100 * panel.getBoundingClientRect().width) / total : 0;
}

/** Widen the frontend's sidebar panel (a PrimeVue SplitterPanel: flex-basis "calc(P% - 4px)", its gutter measures
 *  the panels when dragged; or a reka-ui one: flex-grow P) for this tab: to the width the user left it at, else to WIDE_PERCENT if narrower. */
export function widenSidebar(container, onLeave) {
  const panel = container.closest(".side-bar-panel");
  // PrimeVue's splitter (frontend 1.32) sizes its panels by flex-basis; reka-ui's (1.5x: panels [data-panel]) by
  // flex-grow, the panel's share in percent
  const isPanel = (c) => c.classList.contains("p-splitterpanel") || c.hasAttribute("data-panel");
  const other = panel && [...panel.parentElement.children].find((c) => c !== panel && isPanel(c));
  if (!panel || !other || widened) return;
  const prop = panel.hasAttribute("data-panel") ? "flexGrow" : "flexBasis";
  const size = (p) => (prop === "flexGrow" ? String(p) : `calc(${p}% - 4px)`);
  let saved = NaN;
  try {
    saved = Number(localStorage.getItem(WIDTH_KEY));
  } catch {
    /* none */
  }
  const percent = saved >= 10 && saved <= 80 ? saved : WIDE_PERCENT;
  if (!(saved >= 10) && percentOf(panel) >= percent) return;
  widened = { panel, other, prop, bases: [panel.style[prop], other.style[prop]], percent, now: percent };
  panel.style[prop] = size(percent);
  other.style[prop] = size(100 - percent);
  // the width the user drags it to (measured while it is shown: on close the panel is hidden first)
  widened.observer = new ResizeObserver(() => {
    const now = percentOf(panel);
    if (widened && now > 0) widened.now = now;
  });
  widened.observer.observe(panel);
  // `onLeave` when the container leaves the DOM (another tab took the panel)
  widened.left = new MutationObserver(() => {
    if (container.isConnected) return;
    releaseSidebar();
    onLeave?.();
  });
  widened.left.observe(panel, { childList: true, subtree: true });
}

/** Give the other tabs their width back, keeping the width the user dragged this tab to for the next time. */
export function releaseSidebar() {
  if (!widened) return;
  const { panel, other, prop, bases, percent, now, observer, left } = widened;
  widened = null;
  observer.disconnect();
  left.disconnect();
  if (Math.abs(now - percent) > 1) {
    try {
      localStorage.setItem(WIDTH_KEY, now.toFixed(1));
    } catch {
      /* not remembered */
    }
  }
  [panel.style[prop], other.style[prop]] = bases;
}

export function ensureStyle() {
  if (document.getElementById("fillscope-viewer-style")) return;
  const style = el("style");
  style.id = "fillscope-viewer-style";
  style.textContent = `
.fillscope-viewer { box-sizing: border-box; display: flex; flex-direction: column; gap: 6px; height: 100%; min-height: 0;
  padding: 8px; color: var(--fg-color, #ddd); font: 13px/1.35 system-ui, sans-serif; }
.fillscope-viewer * { box-sizing: border-box; }
.fillscope-viewer .fsv-head { display: flex; align-items: center; gap: 8px; }
.fillscope-viewer .fsv-title { font-weight: 600; font-size: 14px; flex: 1; min-width: 0; }
.fillscope-viewer button { font: inherit; font-size: 12px; color: var(--input-text, #ddd); background: var(--comfy-input-bg, #222);
  border: 1px solid var(--border-color, #4e4e4e); border-radius: 5px; padding: 3px 8px; cursor: pointer; }
.fillscope-viewer button:hover { border-color: var(--descrip-text, #999); }
.fillscope-viewer .fsv-current { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 10px; font-size: 12px; }
.fillscope-viewer .fsv-name { font-family: ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace; word-break: break-all; }
.fillscope-viewer .fsv-from { opacity: .65; }
.fillscope-viewer .fsv-links { display: flex; gap: 10px; margin-left: auto; }
.fillscope-viewer .fsv-links a { color: var(--p-primary-color, #6cb6ff); text-decoration: none; white-space: nowrap; }
.fillscope-viewer .fsv-links a:hover { text-decoration: underline; }
.fillscope-viewer .fsv-links a[aria-disabled="true"] { opacity: .45; pointer-events: none; }
.fillscope-viewer .fsv-body { flex: 1 1 auto; min-height: 240px; display: flex; border: 1px solid var(--border-color, #4e4e4e);
  border-radius: 6px; overflow: hidden; background: var(--comfy-input-bg, #222); }
.fillscope-viewer .fsv-body iframe { flex: 1; width: 100%; height: 100%; border: 0; background: #f4f6f9; }
.fillscope-viewer .fsv-body pre { margin: 0; padding: 8px; overflow: auto; flex: 1; font: 11px/1.35 ui-monospace, Menlo, Consolas, monospace; white-space: pre; }
.fillscope-viewer .fsv-empty { margin: auto; max-width: 320px; padding: 16px; text-align: center; opacity: .85; }
.fillscope-viewer .fsv-empty .fsv-empty-title { font-weight: 600; margin-bottom: 6px; }
.fillscope-viewer .fsv-error { color: #ff9b9b; }
.fillscope-viewer .fsv-list { flex: 0 0 auto; max-height: 30%; overflow: auto; }
.fillscope-viewer .fsv-list-title { font-size: 11px; text-transform: uppercase; letter-spacing: .05em; opacity: .65; margin: 2px 0 4px; }
.fillscope-viewer .fsv-list ol { list-style: none; margin: 0; padding: 0; display: flex; flex-direction: column; gap: 3px; }
.fillscope-viewer .fsv-item { width: 100%; text-align: left; display: flex; flex-direction: column; gap: 1px; }
.fillscope-viewer .fsv-item > span { min-width: 0; max-width: 100%; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.fillscope-viewer .fsv-item .fsv-item-name { font-family: ui-monospace, Menlo, Consolas, monospace; }
.fillscope-viewer .fsv-item .fsv-item-meta { opacity: .6; font-size: 11px; }
.fillscope-viewer .fsv-item[aria-current="true"] { border-color: var(--p-primary-color, #6cb6ff); }
.fillscope-dialog-backdrop { position: fixed; inset: 0; z-index: 3000; background: rgba(0,0,0,.55); display: flex; }
.fillscope-dialog { margin: 3vh auto; width: min(1500px, 94vw); height: 94vh; display: flex; flex-direction: column;
  background: var(--comfy-menu-bg, #353535); border: 1px solid var(--border-color, #4e4e4e); border-radius: 8px;
  box-shadow: 0 10px 40px rgba(0,0,0,.5); overflow: hidden; }
.fillscope-dialog > .fillscope-viewer { flex: 1; }
.fillscope-open-viewer { position: fixed; right: 14px; bottom: 14px; z-index: 1000; font: 12px system-ui, sans-serif;
  color: var(--input-text, #ddd); background: var(--comfy-menu-bg, #353535); border: 1px solid var(--border-color, #4e4e4e);
  border-radius: 6px; padding: 5px 10px; cursor: pointer; }
`;
  document.head.appendChild(style);
}
