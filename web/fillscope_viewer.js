// FillScope architecture viewer (ComfyUI frontend >= 1.32): the five-page report of a trace node, inside ComfyUI.
//
// Where it lives:
//   - a sidebar tab ("FillScope", id `fillscope-architecture`), registered with the frontend's extension manager:
//     app.extensionManager.registerSidebarTab({id, icon, title, tooltip, label, type: "custom", render, destroy})
//     (frontend 1.32.9: useWorkspaceStore().registerSidebarTab -> useSidebarTabStore; a "custom" tab is mounted
//     by the ExtensionSlot component, which calls render(el) on each mount and destroy() on unmount);
//   - without that API (an older or different frontend): a dialog of this module's own, opened from a small
//     floating button and from the trace nodes' "Open architecture report" button;
//   - "Expand" in the sidebar opens the same viewer in that dialog (the report is wide).
//
// What it shows: the report selected in its list, else the newest one (window.FillScope.lastReport, live: every
// trace node run re-renders it), in an <iframe sandbox="allow-scripts"> -- the report's own inline script runs
// (pages, language), but in an opaque origin: it cannot read ComfyUI's DOM, storage or cookies, nor call its
// API. The HTML is fetched from /view (ComfyUI 0.3.75 serves .html there as application/octet-stream, a
// download, so it cannot be the iframe's src) and handed to the iframe as `srcdoc`, with a
// `<base href="about:srcdoc">` put first in its head (see srcdocOf: without it the report's page navigation
// would navigate the frame to ComfyUI's own URL). The report's own Content-Security-Policy (no network, only
// its own script by hash) still applies inside. The report's "⤓ JSON" link is inert there (the sandbox allows
// no downloads); the viewer has its own ⤓ HTML / ⤓ JSON links (to /view).
// A JSON report (the Shapes Report node's) is shown as text. Everything else is built with createElement and
// textContent: no file name, title or prompt reaches innerHTML.
//
// "Open in new tab" opens a blob: page built here (createHTMLDocument) that holds nothing but the same
// sandboxed iframe, so the report never runs in ComfyUI's origin there either.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

export const TAB_ID = "fillscope-architecture";
const EMPTY_TEXT = "Run a FillScope trace node (workflows/flux_fill_trace.json) to see its report here";
const MAX_LIST = 20; // reports listed (newest first)
const MAX_CACHE = 8; // fetched reports kept in memory (with their blob: pages)
const MAX_JSON_CHARS = 400_000; // a JSON report is shown up to this many characters

// ---- the session's reports (shared by every view) ----------------------------------------------
const FS = (window.FillScope = window.FillScope && typeof window.FillScope === "object" ? window.FillScope : {});
const reports = []; // newest first: {key, filename, subfolder, type, kind, json, nodeId, nodeTitle, nodeType, time}
const listeners = new Set();
let selectedKey = null; // the report picked in a list; null: follow the newest
let last = FS.lastReport && typeof FS.lastReport === "object" ? fileRef(FS.lastReport) : null;

function fileRef(f) {
  if (!f || typeof f !== "object" || typeof f.filename !== "string" || !f.filename) return null;
  return {
    filename: f.filename,
    subfolder: typeof f.subfolder === "string" ? f.subfolder : f.subfolder == null ? "" : String(f.subfolder),
    type: typeof f.type === "string" && f.type ? f.type : "output",
  };
}

function keyOf(ref) {
  return ref.type + ":" + (ref.subfolder ? ref.subfolder + "/" : "") + ref.filename;
}

function kindOf(filename) {
  const ext = filename.toLowerCase().split(".").pop();
  return ext === "html" || ext === "htm" ? "html" : ext === "json" ? "json" : "other";
}

function notify() {
  for (const fn of [...listeners]) {
    try {
      fn();
    } catch (err) {
      console.warn("[FillScope] viewer update failed", err);
    }
  }
}

/** Record a report file of this session (a node's ui `fillscope_report` list, or one file). Returns its entry. */
export function addReport(files, node) {
  const list = Array.isArray(files) ? files : [files];
  const ref = fileRef(list[0]);
  if (!ref) return null;
  const jsonRef = list.slice(1).map(fileRef).find((f) => f && kindOf(f.filename) === "json") ?? null;
  const key = keyOf(ref);
  const old = reports.findIndex((r) => r.key === key);
  const prev = old >= 0 ? reports.splice(old, 1)[0] : null;
  const entry = {
    ...ref,
    key,
    kind: kindOf(ref.filename),
    json: jsonRef ?? prev?.json ?? null,
    nodeId: node?.id ?? prev?.nodeId ?? null,
    nodeTitle: node ? String(node.title ?? node.type ?? "") : prev?.nodeTitle ?? "",
    nodeType: node ? String(node.type ?? "") : prev?.nodeType ?? "",
    time: new Date(),
  };
  reports.unshift(entry);
  last = ref;
  selectedKey = null; // a new report is shown at once
  notify();
  return entry;
}

// window.FillScope.lastReport: {filename, subfolder, type} of the newest report file, or null. Setting it (from
// anywhere) records the file and re-renders the viewer.
Object.defineProperty(FS, "lastReport", {
  configurable: true,
  enumerable: true,
  get: () => last,
  set: (v) => {
    if (v === null || v === undefined) {
      last = null;
      notify();
    } else addReport(v, null);
  },
});
if (last) addReport(last, null);
/** This session's reports, newest first (copies). */
Object.defineProperty(FS, "reports", { configurable: true, enumerable: true, get: () => reports.map((r) => ({ ...r })) });
FS.subscribe = (fn) => {
  listeners.add(fn);
  return () => listeners.delete(fn);
};

function currentEntry() {
  if (selectedKey) {
    const e = reports.find((r) => r.key === selectedKey);
    if (e) return e;
  }
  if (reports.length) return reports[0];
  return last ? { ...last, key: keyOf(last), kind: kindOf(last.filename), json: null, nodeTitle: "", time: null } : null;
}

function select(key) {
  selectedKey = key;
  notify();
}

// ---- fetching ------------------------------------------------------------------------------------
const cache = new Map(); // key -> Promise<{text, blobUrl}>

export function viewURL(ref) {
  const q = new URLSearchParams({ filename: ref.filename, subfolder: ref.subfolder ?? "", type: ref.type ?? "output" });
  return api.apiURL("/view?" + q.toString());
}

/** The report as the iframe's srcdoc: the same document with `<base href="about:srcdoc">` first in its head.
 *  A srcdoc document's base URL is its parent's, so the report's `history.replaceState(null, "", "#page=1")`
 *  would resolve to ComfyUI's own URL, fail in the opaque origin and fall back to location.replace(): the frame
 *  would navigate to ComfyUI itself. With the base, "#page=1" stays a fragment of about:srcdoc. The base comes
 *  before the report's own CSP meta (whose base-uri 'none' governs only what follows it); the report's
 *  script is kept byte for byte (its CSP hash still matches). Parsed with DOMParser: nothing runs here. */
function srcdocOf(html) {
  const doc = new DOMParser().parseFromString(html, "text/html");
  const base = doc.createElement("base");
  base.setAttribute("href", "about:srcdoc");
  doc.head.prepend(base);
  return "<!DOCTYPE html>\n" + doc.documentElement.outerHTML;
}

function sandboxedFrame(html, title) {
  const f = document.createElement("iframe");
  f.setAttribute("sandbox", "allow-scripts"); // no allow-same-origin: an opaque origin, no access to ComfyUI
  f.setAttribute("referrerpolicy", "no-referrer");
  f.title = title;
  f.srcdoc = html;
  return f;
}

/** A blob: page that only frames the report, sandboxed: what "open in new tab" opens. */
function standalonePage(html, title) {
  const doc = document.implementation.createHTMLDocument(title);
  const meta = doc.createElement("meta");
  meta.setAttribute("charset", "utf-8");
  doc.head.prepend(meta);
  const style = doc.createElement("style");
  style.textContent = "html,body{margin:0;height:100%;background:#f4f6f9}iframe{display:block;border:0;width:100%;height:100%}";
  doc.head.appendChild(style);
  doc.body.appendChild(doc.importNode(sandboxedFrame(html, title), true));
  const text = "<!DOCTYPE html>\n" + doc.documentElement.outerHTML;
  return URL.createObjectURL(new Blob([text], { type: "text/html;charset=utf-8" }));
}

function load(entry) {
  let p = cache.get(entry.key);
  if (p) {
    cache.delete(entry.key); // most recently used last: evicted last
    cache.set(entry.key, p);
    return p;
  }
  p = (async () => {
    const resp = await fetch(viewURL(entry), { cache: "no-store" });
    if (!resp.ok) throw new Error(`HTTP ${resp.status} for ${entry.filename}`);
    const text = await resp.text();
    if (entry.kind !== "html") return { text, srcdoc: null, blobUrl: null };
    const srcdoc = srcdocOf(text);
    return { text, srcdoc, blobUrl: standalonePage(srcdoc, entry.filename) };
  })();
  cache.set(entry.key, p);
  p.catch(() => cache.get(entry.key) === p && cache.delete(entry.key)); // a failed load is retried next time
  while (cache.size > MAX_CACHE) {
    const [k, old] = cache.entries().next().value;
    cache.delete(k);
    old.then((r) => r.blobUrl && URL.revokeObjectURL(r.blobUrl), () => {});
  }
  return p;
}

// ---- DOM helpers (text only) ------------------------------------------------------------------------
function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function link(text, className) {
  const a = el("a", className, text);
  a.setAttribute("rel", "noopener noreferrer");
  return a;
}

function fmtClock(d) {
  return d instanceof Date ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" }) : "";
}

function ensureStyle() {
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

// ---- one view (sidebar tab or dialog) ----------------------------------------------------------------
class ReportView {
  constructor(container, mode) {
    ensureStyle();
    this.mode = mode;
    this.shownKey = undefined;
    this.root = el("div", "fillscope-viewer");
    this.root.dataset.mode = mode;

    const head = el("div", "fsv-head");
    head.appendChild(el("div", "fsv-title", "FillScope architecture report"));
    if (mode === "sidebar") {
      const expand = el("button", "fsv-expand", "⤢ Expand");
      expand.type = "button";
      expand.title = "Show the report in a large dialog";
      expand.addEventListener("click", () => openDialog());
      head.appendChild(expand);
    } else {
      const close = el("button", "fsv-close", "✕ Close");
      close.type = "button";
      close.addEventListener("click", () => closeDialog());
      head.appendChild(close);
    }

    this.current = el("div", "fsv-current");
    this.name = el("span", "fsv-name");
    this.from = el("span", "fsv-from");
    const links = el("span", "fsv-links");
    this.openLink = link("Open in new tab ↗", "fsv-open-tab");
    this.openLink.target = "_blank";
    this.htmlLink = link("⤓ HTML", "fsv-download-html");
    this.jsonLink = link("⤓ JSON", "fsv-download-json");
    links.append(this.openLink, this.htmlLink, this.jsonLink);
    this.current.append(this.name, this.from, links);

    this.body = el("div", "fsv-body");
    this.list = el("div", "fsv-list");

    this.root.append(head, this.current, this.body, this.list);
    container.replaceChildren(this.root);
    this.unsubscribe = FS.subscribe(() => this.update());
    this.update();
  }

  destroy() {
    this.unsubscribe?.();
    this.unsubscribe = null;
    this.root.remove();
  }

  update() {
    const entry = currentEntry();
    this.renderCurrent(entry);
    this.renderList(entry);
    if ((entry?.key ?? null) !== this.shownKey) {
      this.shownKey = entry?.key ?? null;
      this.renderBody(entry);
    }
  }

  renderCurrent(entry) {
    this.current.hidden = !entry;
    if (!entry) return;
    this.name.textContent = (entry.subfolder ? entry.subfolder + "/" : "") + entry.filename;
    this.from.textContent = entry.nodeTitle ? `from #${entry.nodeId ?? "?"} ${entry.nodeTitle}` : "";
    const setLink = (a, href, download) => {
      if (href) {
        a.href = href;
        a.removeAttribute("aria-disabled");
      } else {
        a.removeAttribute("href");
        a.setAttribute("aria-disabled", "true");
      }
      if (download) a.setAttribute("download", download);
    };
    setLink(this.htmlLink, viewURL(entry), entry.filename);
    this.htmlLink.textContent = entry.kind === "html" ? "⤓ HTML" : "⤓ " + entry.filename.split(".").pop().toUpperCase();
    this.jsonLink.hidden = !entry.json;
    if (entry.json) setLink(this.jsonLink, viewURL(entry.json), entry.json.filename);
    this.openLink.hidden = entry.kind !== "html";
    setLink(this.openLink, null);
    if (entry.kind === "html") {
      load(entry).then(
        (r) => {
          if (this.shownKey === entry.key && r.blobUrl) setLink(this.openLink, r.blobUrl);
        },
        () => {},
      );
    }
  }

  renderList(entry) {
    const box = this.list;
    box.replaceChildren();
    if (!reports.length) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    box.appendChild(el("div", "fsv-list-title", `Reports this session (${reports.length})`));
    const ol = el("ol");
    for (const r of reports.slice(0, MAX_LIST)) {
      const li = el("li");
      const b = el("button", "fsv-item");
      b.type = "button";
      b.dataset.key = r.key;
      b.dataset.filename = r.filename;
      b.title = (r.subfolder ? r.subfolder + "/" : "") + r.filename;
      b.setAttribute("aria-current", String(entry?.key === r.key));
      b.append(el("span", "fsv-item-name", r.filename),
        el("span", "fsv-item-meta", [r.nodeTitle, fmtClock(r.time)].filter(Boolean).join(" · ")));
      b.addEventListener("click", () => select(r.key));
      li.appendChild(b);
      ol.appendChild(li);
    }
    box.appendChild(ol);
  }

  renderBody(entry) {
    const body = this.body;
    if (!entry) {
      const empty = el("div", "fsv-empty");
      empty.append(el("div", "fsv-empty-title", "No architecture report yet"), el("div", "fsv-empty-text", EMPTY_TEXT));
      body.replaceChildren(empty);
      body.dataset.state = "empty";
      return;
    }
    body.replaceChildren(el("div", "fsv-empty", "Loading " + entry.filename + " …"));
    body.dataset.state = "loading";
    load(entry).then(
      (r) => {
        if (this.shownKey !== entry.key) return;
        if (entry.kind === "html") {
          const frame = sandboxedFrame(r.srcdoc, "FillScope architecture report: " + entry.filename);
          frame.className = "fsv-frame";
          frame.dataset.key = entry.key;
          frame.dataset.filename = entry.filename;
          frame.addEventListener("load", () => { frame.dataset.loaded = "true"; }, { once: true });
          body.replaceChildren(frame);
        } else {
          let text = r.text;
          if (entry.kind === "json") {
            try {
              text = JSON.stringify(JSON.parse(text), null, 2);
            } catch {
              /* shown as sent */
            }
          }
          if (text.length > MAX_JSON_CHARS) text = text.slice(0, MAX_JSON_CHARS) + "\n… (truncated; download the file for all of it)";
          const pre = el("pre", "fsv-text", text);
          pre.dataset.key = entry.key;
          body.replaceChildren(pre);
        }
        body.dataset.state = "loaded";
      },
      (err) => {
        if (this.shownKey !== entry.key) return;
        const box = el("div", "fsv-empty fsv-error");
        box.append(el("div", "fsv-empty-title", "Could not load " + entry.filename), el("div", null, String(err?.message ?? err)));
        body.replaceChildren(box);
        body.dataset.state = "error";
      },
    );
  }
}

// ---- the dialog (fallback, and "Expand") ------------------------------------------------------------
let dialog = null; // {backdrop, view, onKey}

export function openDialog() {
  if (dialog) {
    dialog.view.update();
    return;
  }
  ensureStyle();
  const backdrop = el("div", "fillscope-dialog-backdrop");
  const box = el("div", "fillscope-dialog");
  box.setAttribute("role", "dialog");
  box.setAttribute("aria-label", "FillScope architecture report");
  backdrop.appendChild(box);
  backdrop.addEventListener("mousedown", (e) => {
    if (e.target === backdrop) closeDialog();
  });
  const onKey = (e) => {
    if (e.key === "Escape") {
      e.stopPropagation();
      closeDialog();
    }
  };
  document.addEventListener("keydown", onKey, true);
  document.body.appendChild(backdrop);
  dialog = { backdrop, view: new ReportView(box, "dialog"), onKey };
}

export function closeDialog() {
  if (!dialog) return;
  dialog.view.destroy();
  document.removeEventListener("keydown", dialog.onKey, true);
  dialog.backdrop.remove();
  dialog = null;
}

// ---- the sidebar tab ------------------------------------------------------------------------------
let sidebarView = null;
let sidebarRegistered = false;

function sidebarStore() {
  const st = app.extensionManager?.sidebarTab;
  return st && typeof st.toggleSidebarTab === "function" ? st : null;
}

/** Register the sidebar tab (frontend >= 1.3: app.extensionManager.registerSidebarTab); false without that API. */
export function registerSidebar() {
  const em = app.extensionManager;
  if (sidebarRegistered) return true;
  if (!em || typeof em.registerSidebarTab !== "function") return false;
  try {
    em.registerSidebarTab({
      id: TAB_ID,
      icon: "pi pi-sitemap",
      title: "FillScope",
      label: "FillScope",
      tooltip: "FillScope architecture report",
      type: "custom",
      render: (container) => {
        sidebarView?.destroy();
        container.style.height = "100%";
        sidebarView = new ReportView(container, "sidebar");
      },
      destroy: () => {
        sidebarView?.destroy();
        sidebarView = null;
      },
    });
    sidebarRegistered = true;
  } catch (err) {
    console.warn("[FillScope] could not register the sidebar tab; using a dialog", err);
    return false;
  }
  return true;
}

/** A small floating button that opens the dialog (only where the sidebar API is missing). */
export function addFallbackButton() {
  if (document.querySelector(".fillscope-open-viewer")) return;
  ensureStyle();
  const b = el("button", "fillscope-open-viewer", "FillScope report");
  b.type = "button";
  b.title = "FillScope architecture report";
  b.addEventListener("click", () => openDialog());
  document.body.appendChild(b);
}

/** Show the viewer (the sidebar tab, else the dialog), on `entry` (a report of this session) when given. */
export function openViewer(entry) {
  if (entry && typeof entry === "object") {
    const ref = fileRef(entry);
    if (ref) {
      const key = keyOf(ref);
      if (!reports.some((r) => r.key === key)) addReport(ref, null);
      selectedKey = key;
    }
  }
  const st = sidebarRegistered ? sidebarStore() : null;
  if (st) {
    if (st.activeSidebarTabId !== TAB_ID) st.toggleSidebarTab(TAB_ID);
    notify();
    return "sidebar";
  }
  openDialog();
  notify();
  return "dialog";
}

FS.openViewer = openViewer;
FS.closeViewerDialog = closeDialog;
