// FillScope architecture viewer (ComfyUI frontend >= 1.32): the five-page report of a trace node and the Shapes
// Report's page, inside ComfyUI.
//
// Where it lives:
//   - a sidebar tab ("FillScope", id `fillscope-architecture`), registered with the frontend's extension manager:
//     app.extensionManager.registerSidebarTab({id, icon, title, tooltip, label, type: "custom", render, destroy})
//     (frontend 1.32.9: useWorkspaceStore().registerSidebarTab -> useSidebarTabStore; a "custom" tab is mounted
//     by the ExtensionSlot component, which calls render(el) on each mount and destroy() on unmount). The
//     frontend gives every tab 20% of the window; this tab widens its panel to WIDE_PERCENT while it is shown
//     (the panel's gutter still resizes it, and the width the user leaves it at is kept for the next time) and
//     gives the other tabs their width back when it closes;
//   - without that API (an older or different frontend): a dialog of this module's own, opened from a small
//     floating button and from the trace nodes' "Open architecture report" button;
//   - "Expand" in the sidebar opens the same viewer in that dialog (the report is wide).
//
// What it shows: the report selected in its list, else the newest one (window.FillScope.lastReport, live: every
// trace node run re-renders it), in an <iframe sandbox="allow-scripts"> (web/fillscope_viewer_dom.js) -- the
// report's own inline script runs (pages, language), but in an opaque origin: it cannot read ComfyUI's DOM,
// storage or cookies, nor call its API, nor start a download. The HTML is fetched from /view (ComfyUI 0.3.75
// serves .html there as application/octet-stream, a download, so it cannot be the iframe's src) and handed to the
// iframe as `srcdoc`. The report's own Content-Security-Policy (no network, only its own script by hash) still
// applies inside. The report tells the viewer its language (EN / 中文), which every view (sidebar, dialog, new
// tab) then opens in, and remembered across reloads; its "⤓ JSON" link asks the viewer, which downloads the
// report's .json file from /view. The viewer has its own ⤓ HTML / ⤓ JSON links (to /view) too.
// A Shapes Report's files come JSON first, its page second (nodes/inspect.py: the JSON stays what programs read
// as its file, and window.FillScope.lastReport names it): the viewer shows the page (the boundary table, EN / 中文,
// in the same sandboxed frame) and offers the JSON as its download. A JSON report without a page (one written
// before the Shapes Report wrote pages) is shown as text. Everything else is built with createElement and
// textContent: no file name, title or prompt reaches innerHTML.
//
// The list: this session's reports and, after a page reload, those of the prompts in ComfyUI's /history
// (restoreReports, called by web/fillscope.js), newest first.
//
// "Open in new tab" opens a blob: page built here (createHTMLDocument) that holds nothing but the same
// sandboxed iframe, so the report never runs in ComfyUI's origin there either.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { download, el, ensureStyle, releaseSidebar, sandboxedFrame, srcdocOf, standalonePage, widenSidebar } from "./fillscope_viewer_dom.js";

export const TAB_ID = "fillscope-architecture";
const EMPTY_TEXT = "Run a FillScope trace node (example_workflows/flux_fill_trace.json) to see its report here";
const MAX_LIST = 20; // reports listed (newest first)
const MAX_CACHE = 8; // fetched reports kept in memory (with their blob: pages)
const MAX_JSON_CHARS = 400_000; // a JSON report is shown up to this many characters

// ---- the session's reports (shared by every view) ----------------------------------------------
const FS = (window.FillScope = window.FillScope && typeof window.FillScope === "object" ? window.FillScope : {});
const reports = []; // newest first: {key, filename, subfolder, type, kind, json, page, nodeId, nodeTitle, nodeType, time}
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

/** Record a report file (a node's ui `fillscope_report` list, or one file). Returns its entry. A new report is
 *  the newest and shown at once; with `opts.time` (a Date: a report of an earlier prompt, from /history) it is
 *  put in the list by that time and changes nothing already listed or shown. */
export function addReport(files, node, opts = {}) {
  const list = Array.isArray(files) ? files : [files];
  const ref = fileRef(list[0]);
  if (!ref) return null;
  const jsonRef = list.slice(1).map(fileRef).find((f) => f && kindOf(f.filename) === "json") ?? null;
  // a JSON report's page (the Shapes Report's .html): what the viewer shows for it
  const pageRef = kindOf(ref.filename) === "json"
    ? list.slice(1).map(fileRef).find((f) => f && kindOf(f.filename) === "html") ?? null : null;
  const key = keyOf(ref);
  const old = reports.findIndex((r) => r.key === key);
  if (opts.time && old >= 0) return reports[old];
  const prev = old >= 0 ? reports.splice(old, 1)[0] : null;
  const entry = {
    ...ref,
    key,
    kind: kindOf(ref.filename),
    json: jsonRef ?? prev?.json ?? null,
    page: pageRef ?? prev?.page ?? null,
    nodeId: node?.id ?? prev?.nodeId ?? null,
    nodeTitle: node ? String(node.title ?? node.type ?? "") : prev?.nodeTitle ?? "",
    nodeType: node ? String(node.type ?? "") : prev?.nodeType ?? "",
    time: opts.time ?? new Date(),
  };
  if (opts.time) {
    const at = reports.findIndex((r) => !(r.time >= entry.time));
    reports.splice(at < 0 ? reports.length : at, 0, entry);
    if (reports[0] !== entry) {
      notify();
      return entry;
    }
  } else reports.unshift(entry);
  last = ref;
  selectedKey = null; // a new report is shown at once
  notify();
  return entry;
}

/** The reports of the prompts in ComfyUI's /history (web/fillscope_memory.js fetchHistory: newest first), for a
 *  page that was reloaded: oldest first into the list, each at its prompt's time. */
export function restoreReports(entries) {
  for (const e of [...(entries ?? [])].reverse()) {
    const prompt = e.prompt?.[2] ?? {};
    const done = e.status?.messages?.find?.((m) => Array.isArray(m) && m[0] === "execution_success")?.[1]?.timestamp;
    for (const [nid, ui] of Object.entries(e.outputs ?? {})) {
      if (!Array.isArray(ui?.fillscope_report)) continue;
      const node = prompt[nid] ?? {};
      addReport(ui.fillscope_report, { id: nid, title: node._meta?.title ?? node.class_type ?? "", type: node.class_type ?? "" },
        { time: new Date(typeof done === "number" ? done : 0) });
    }
  }
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
  return last ? { ...last, key: keyOf(last), kind: kindOf(last.filename), json: null, page: null, nodeTitle: "", time: null } : null;
}

/** The file a report is shown as: its page where it has one (a Shapes Report's JSON), else the report itself. */
function shownFile(entry) {
  if (!entry?.page) return entry;
  return { ...entry.page, key: keyOf(entry.page), kind: "html", json: entry, page: null };
}

function select(key) {
  selectedKey = key;
  notify();
}

/** The .json file of a report: the one its node wrote with it, else the .html's namesake; a JSON report itself. */
function jsonOf(entry) {
  if (!entry) return null;
  if (entry.kind === "json") return entry;
  if (entry.json) return entry.json;
  return entry.kind === "html" ? { ...entry, filename: entry.filename.replace(/\.html?$/i, ".json") } : null;
}

// ---- the report's language, carried from view to view (the report cannot store it in its sandbox) -------------
const LANG_KEY = "fillscope.viewer.lang";
let reportLang = (() => {
  try {
    return localStorage.getItem(LANG_KEY) === "zh" ? "zh" : "en";
  } catch {
    return "en";
  }
})();
const views = new Set(); // the open ReportViews

window.addEventListener("message", (e) => {
  const d = e.data;
  if (!d || typeof d !== "object" || d.fillscope !== "report") return;
  const view = [...views].find((v) => v.frame && e.source === v.frame.contentWindow);
  if (!view) return; // not one of the viewer's frames
  // a download only for a click (the frame's user activation reaches this page): nothing else may start one
  if (d.download === "json" && navigator.userActivation?.isActive !== false) {
    const ref = jsonOf(view.shownEntry);
    if (ref) download(viewURL(ref), ref.filename);
  }
  if ((d.lang === "en" || d.lang === "zh") && d.lang !== reportLang) {
    reportLang = d.lang;
    try {
      localStorage.setItem(LANG_KEY, reportLang);
    } catch {
      /* not remembered */
    }
    for (const v of views) if (v !== view) v.post({ fillscope: "viewer", lang: reportLang });
  }
});
FS.reportLang = () => reportLang;

// ---- fetching ------------------------------------------------------------------------------------
const cache = new Map(); // key -> Promise<{text, blobUrl}>: the file's text, the new-tab page

export function viewURL(ref) {
  const q = new URLSearchParams({ filename: ref.filename, subfolder: ref.subfolder ?? "", type: ref.type ?? "output" });
  return api.apiURL("/view?" + q.toString());
}

function load(report) {
  const entry = shownFile(report);
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
    if (entry.kind !== "html") return { text, blobUrl: null };
    const json = jsonOf(entry);
    const page = standalonePage(srcdocOf(text, reportLang), entry.filename,
      json && { url: viewURL(json), filename: json.filename }, reportLang);
    return { text, blobUrl: page };
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
function link(text, className) {
  const a = el("a", className, text);
  a.setAttribute("rel", "noopener noreferrer");
  return a;
}

function fmtClock(d) {
  return d instanceof Date ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" }) : "";
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
    this.frame = null; // the report's iframe while one is shown
    this.shownEntry = null;
    views.add(this);
    this.unsubscribe = FS.subscribe(() => this.update());
    this.update();
  }

  destroy() {
    views.delete(this);
    this.unsubscribe?.();
    this.unsubscribe = null;
    this.root.remove();
  }

  /** A message to the report in this view's frame (the report checks that it comes from its parent). */
  post(msg) {
    try {
      this.frame?.contentWindow?.postMessage(msg, "*");
    } catch {
      /* the frame is gone */
    }
  }

  update() {
    const entry = currentEntry();
    this.renderCurrent(entry);
    this.renderList(entry);
    if ((entry?.key ?? null) !== this.shownKey) {
      this.shownKey = entry?.key ?? null;
      this.shownEntry = entry;
      this.renderBody(entry);
    }
  }

  renderCurrent(report) {
    this.current.hidden = !report;
    if (!report) return;
    const entry = shownFile(report); // a Shapes Report's page, else the report itself
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
    const json = report.page ? report : report.json; // a Shapes Report: its JSON is the report itself
    this.jsonLink.hidden = !json;
    if (json) setLink(this.jsonLink, viewURL(json), json.filename);
    this.openLink.hidden = entry.kind !== "html";
    setLink(this.openLink, null);
    if (entry.kind === "html") {
      load(report).then(
        (r) => {
          if (this.shownKey === report.key && r.blobUrl) setLink(this.openLink, r.blobUrl);
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
    box.appendChild(el("div", "fsv-list-title", `Reports (${reports.length})`));
    const ol = el("ol");
    for (const r of reports.slice(0, MAX_LIST)) {
      const li = el("li");
      const b = el("button", "fsv-item");
      b.type = "button";
      b.dataset.key = r.key;
      const shown = shownFile(r);
      b.dataset.filename = shown.filename;
      b.title = (shown.subfolder ? shown.subfolder + "/" : "") + shown.filename;
      b.setAttribute("aria-current", String(entry?.key === r.key));
      b.append(el("span", "fsv-item-name", shown.filename),
        el("span", "fsv-item-meta", [r.nodeTitle, fmtClock(r.time)].filter(Boolean).join(" · ")));
      b.addEventListener("click", () => select(r.key));
      li.appendChild(b);
      ol.appendChild(li);
    }
    box.appendChild(ol);
  }

  renderBody(report) {
    const body = this.body;
    this.frame = null;
    const entry = shownFile(report); // a Shapes Report's page, else the report itself
    if (!entry) {
      const empty = el("div", "fsv-empty");
      empty.append(el("div", "fsv-empty-title", "No architecture report yet"), el("div", "fsv-empty-text", EMPTY_TEXT));
      body.replaceChildren(empty);
      body.dataset.state = "empty";
      return;
    }
    body.replaceChildren(el("div", "fsv-empty", "Loading " + entry.filename + " …"));
    body.dataset.state = "loading";
    load(report).then(
      (r) => {
        if (this.shownKey !== report.key) return;
        if (entry.kind === "html") {
          const frame = sandboxedFrame(srcdocOf(r.text, reportLang), "FillScope report: " + entry.filename);
          frame.className = "fsv-frame";
          frame.dataset.key = entry.key;
          frame.dataset.filename = entry.filename;
          frame.addEventListener("load", () => {
            // the report learns it is in the viewer (its JSON link asks here), in the viewer's language
            frame.contentWindow?.postMessage({ fillscope: "viewer", lang: reportLang }, "*");
            frame.dataset.loaded = "true";
          }, { once: true });
          this.frame = frame;
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
        if (this.shownKey !== report.key) return;
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
        // called from a Vue ref: the panel is an ancestor after the patch; another tab may reuse the frontend's slot
        // without calling destroy(): the container then leaves the DOM
        requestAnimationFrame(() => widenSidebar(container, () => {
          if (sidebarView?.root.parentElement !== container) return;
          sidebarView.destroy();
          sidebarView = null;
        }));
      },
      destroy: () => {
        releaseSidebar();
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
