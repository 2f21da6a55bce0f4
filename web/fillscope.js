// FillScope canvas extension (ComfyUI frontend >= 1.32).
//
// After a FillScope node runs, its shapes table is shown ON the node, in a DOM widget:
//   - nodes whose ui carries `fillscope_shapes` (schema fillscope.shapes/1, see fillscope/trace/records.py):
//     one row per tensor of fillscope_shapes[0].node.tensors (role, name, shape, dtype, provenance badge
//     "measured·meta|cpu|cuda" or "config"), then wall time (+ peak CUDA memory when present), then the
//     warnings (highlighted), then notes and facts (dimmed);
//   - the Shapes Report node (ui: text, fillscope_report, fillscope_boundaries): the boundary table;
//   - anything else with a `text` ui array: that text, as plain text.
// Everything is built with document.createElement + textContent: data never reaches innerHTML.
// The widget is display-only: it is kept out of the saved workflow (widgets_values) and out of the prompt.
//
// Trace nodes (ui `fillscope_report` starting with an .html file) also get a button widget, "Open architecture
// report", that opens the architecture viewer (web/fillscope_viewer.js: a sidebar tab) on that node's report;
// like the table it is display-only (not in widgets_values, not in the prompt).
//
// Public hooks:
//   window.FillScope.lastReport: {filename, subfolder, type} of the newest report file a FillScope node wrote
//   (the first file of its ui `fillscope_report`: a trace node's .html, a Shapes Report node's .json; a file in
//   ComfyUI's output folder, fetchable with /view?filename=..&subfolder=..&type=..), or null before any report
//   arrived. The viewer follows it live.
//   window.FillScope.reports (this session's reports, newest first), window.FillScope.openViewer(report?).
import { app } from "../../scripts/app.js";
import { addReport, addFallbackButton, openViewer, registerSidebar } from "./fillscope_viewer.js";

const WIDGET_NAME = "fillscope_table"; // the DOM widget's name on a node
const BUTTON_NAME = "Open architecture report"; // the trace nodes' button widget (its name is its label)
const FONT_PX = 11; // monospace font size of the panel
const LINE_PX = 14; // its line height
const CHAR_PX = FONT_PX * 0.61; // advance of one monospace character (DejaVu Sans Mono / Menlo ~0.6 em)
const MAX_HEIGHT = 240; // px: the panel scrolls beyond this
const MIN_HEIGHT = 40;
const SQUEEZED_HEIGHT = 56; // px: the panel's height where a neighbouring node leaves no room (it scrolls)
const GAP = 10; // px kept free between a grown node and its neighbours
const MAX_NODE_WIDTH = 620; // px: the node grows to fit the table up to this width, then the panel scrolls
const MARGIN = 6; // px around the panel inside the node (the DOM widget's margin; the frontend's default is 10)
const PANEL_CHROME_PX = 2 * MARGIN + 2 * 6 + 2; // widget margins + panel padding + border

if (!window.FillScope || typeof window.FillScope !== "object") {
  window.FillScope = { lastReport: null };
} else if (!("lastReport" in window.FillScope)) {
  window.FillScope.lastReport = null;
}

// ---- small DOM helpers (text only) ------------------------------------------------------------
function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function str(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "object") {
    try {
      return JSON.stringify(v);
    } catch {
      return String(v);
    }
  }
  return String(v);
}

function fmtShape(shape) {
  return Array.isArray(shape) ? "[" + shape.map(str).join(", ") + "]" : shape == null ? "–" : str(shape);
}

function fmtTime(s) {
  if (typeof s !== "number" || !isFinite(s)) return "–";
  return s < 1 ? (s * 1000).toFixed(1) + " ms" : s.toFixed(2) + " s";
}

function fmtBytes(b) {
  if (typeof b !== "number" || !isFinite(b)) return "";
  if (b >= 2 ** 30) return (b / 2 ** 30).toFixed(2) + " GiB";
  return (b / 2 ** 20).toFixed(1) + " MiB";
}

function badge(provenance, device) {
  const p = str(provenance);
  if (p === "measured") {
    const d = str(device);
    return el("span", "fs-badge fs-measured", d ? "measured·" + d : "measured");
  }
  if (p === "static-config") return el("span", "fs-badge fs-config", "config");
  return el("span", "fs-badge fs-other", p || "?");
}

const ROLE = { input: "in", output: "out", internal: "int" };

// ---- styles (once) ----------------------------------------------------------------------------
function ensureStyle() {
  if (document.getElementById("fillscope-style")) return;
  const style = el("style");
  style.id = "fillscope-style";
  style.textContent = `
.fillscope-panel { box-sizing: border-box; overflow: auto; font: ${FONT_PX}px/${LINE_PX}px ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace;
  color: var(--input-text, #ddd); background: var(--comfy-input-bg, #222); border: 1px solid var(--border-color, #4e4e4e);
  border-radius: 4px; padding: 3px 6px; pointer-events: auto; }
.fillscope-panel table { border-collapse: collapse; }
.fillscope-panel th { text-align: left; font-weight: 600; opacity: .7; position: sticky; top: -3px; background: var(--comfy-input-bg, #222); }
.fillscope-panel td, .fillscope-panel th { padding: 0 6px 0 0; white-space: nowrap !important; vertical-align: top; }
.fillscope-panel td.fs-role { opacity: .55; }
.fillscope-panel td.fs-shape { color: #9cdcfe; }
.fillscope-panel tr.fs-missing td { opacity: .45; }
.fillscope-panel .fs-title { font-weight: 600; margin-bottom: 2px; }
.fillscope-panel .fs-badge { border-radius: 3px; padding: 0 3px; }
.fillscope-panel .fs-measured { background: #1f4d2e; color: #b6f0c6; }
.fillscope-panel .fs-config { background: #4d3d12; color: #ffe08a; }
.fillscope-panel .fs-other { background: #444; color: #ccc; }
.fillscope-panel .fs-meta { opacity: .85; }
.fillscope-panel .fs-warning { padding: 0 4px 0 3px; background: #5a1d1d; color: #ffd0d0; border-left: 3px solid #ff6b6b; white-space: pre-wrap; }
.fillscope-panel .fs-dim { opacity: .6; }
.fillscope-panel div.fs-dim { white-space: pre-wrap; }
.fillscope-panel pre.fs-text { margin: 0; white-space: pre; }
`;
  document.head.appendChild(style);
}

// ---- content builders -------------------------------------------------------------------------
// Each builder returns {content, cols, rows, wraps}: the element, the widest cell of each table column in
// characters (monospace, so the node can be sized without measuring the DOM, which the frontend only mounts
// while the node is on screen), the number of unwrapped lines, and the lengths of the lines that wrap.

function table(headers, rowCells, rowClass, decorate) {
  const t = el("table");
  const thead = el("thead");
  const hr = el("tr");
  for (const h of headers) hr.appendChild(el("th", null, h));
  thead.appendChild(hr);
  t.appendChild(thead);
  const tbody = el("tbody");
  const cols = headers.map((h) => h.length);
  rowCells.forEach((cells, i) => {
    const tr = el("tr", rowClass(i));
    cells.forEach((cell, j) => {
      const td = el("td", cell.cls);
      if (cell.badge) td.appendChild(cell.badge);
      else td.textContent = cell.text;
      tr.appendChild(td);
      const len = cell.badge ? cell.badge.textContent.length + 1 : cell.text.length;
      cols[j] = Math.max(cols[j], len);
    });
    decorate?.(tr, i);
    tbody.appendChild(tr);
  });
  t.appendChild(tbody);
  return { table: t, cols };
}

function tensorCells(t) {
  return [
    { cls: "fs-role", text: ROLE[t?.role] ?? str(t?.role) },
    { cls: "fs-name", text: str(t?.name) },
    { cls: "fs-shape", text: fmtShape(t?.shape) },
    { cls: "fs-dtype", text: str(t?.dtype) },
    { cls: "fs-prov", badge: badge(t?.provenance, t?.device) },
  ];
}

/** One node's record (fillscope.shapes/1 `node`): tensors, timing, warnings, notes, facts. */
function buildRecord(record) {
  const box = el("div", "fs-record");
  const tensors = Array.isArray(record?.tensors) ? record.tensors : [];
  let cols = [];
  let rows = 0;
  const wraps = [];
  if (tensors.length) {
    const built = table(["", "tensor", "shape", "dtype", "provenance"], tensors.map(tensorCells), () => "fs-row",
      (tr, i) => { tr.dataset.tensor = str(tensors[i]?.name); });
    box.appendChild(built.table);
    cols = built.cols;
    rows += tensors.length + 1;
  }

  let timing = "wall " + fmtTime(record?.wall_s);
  if (typeof record?.peak_cuda_bytes === "number") timing += " · peak CUDA " + fmtBytes(record.peak_cuda_bytes);
  box.appendChild(el("div", "fs-meta fs-timing", timing));
  rows += 1;

  const add = (cls, text) => {
    box.appendChild(el("div", cls, text));
    wraps.push(text.length + 1);
  };
  for (const w of Array.isArray(record?.warnings) ? record.warnings : []) add("fs-warning", "⚠ " + str(w));
  for (const n of Array.isArray(record?.notes) ? record.notes : []) add("fs-dim fs-note", "note: " + str(n));
  const facts = record?.facts && typeof record.facts === "object" ? Object.entries(record.facts) : [];
  for (const [k, v] of facts) add("fs-dim fs-fact", str(k) + ": " + str(v));
  return { content: box, cols, rows, wraps };
}

/** The Shapes Report node's boundary rows (fillscope/trace/summary.py boundary_rows). */
function buildBoundaries(rows) {
  const box = el("div", "fs-boundaries");
  const list = rows.filter((r) => r && typeof r === "object");
  const cells = list.map((r) => {
    const observed = Array.isArray(r.shape);
    return [
      { cls: "fs-name", text: str(r.tensor) },
      // a pixel tensor on a padded / cropped model grid says so (summary.py size_note): "(padded from 1000x600)"
      { cls: "fs-shape", text: observed ? fmtShape(r.shape) + (r.size_note ? ` (${str(r.size_note)})` : "") : "not observed" },
      { cls: "fs-dtype", text: str(r.dtype) },
      observed ? { cls: "fs-prov", badge: badge(r.provenance, r.device) } : { cls: "fs-prov", text: "" },
      { cls: "fs-boundary fs-dim", text: str(r.boundary) },
      { cls: "fs-node fs-dim", text: str(r.node) },
    ];
  });
  const built = table(["tensor", "shape", "dtype", "provenance", "boundary", "node"], cells,
    (i) => (Array.isArray(list[i].shape) ? "fs-row" : "fs-row fs-missing"),
    (tr, i) => { tr.dataset.tensor = str(list[i].tensor); });
  box.appendChild(built.table);
  return { content: box, cols: built.cols, rows: list.length + 1, wraps: [] };
}

function buildText(text) {
  const lines = text.split("\n");
  return { content: el("pre", "fs-text", text), cols: [Math.max(...lines.map((l) => l.length))], rows: lines.length, wraps: [] };
}

/** What to show for an executed message, or null when it carries nothing FillScope shows. */
function buildContent(message) {
  const doc = Array.isArray(message?.fillscope_shapes) ? message.fillscope_shapes[0] : undefined;
  if (doc && typeof doc === "object" && doc.node && typeof doc.node === "object") return buildRecord(doc.node);
  if (Array.isArray(message?.fillscope_boundaries)) return buildBoundaries(message.fillscope_boundaries);
  if (Array.isArray(message?.text) && message.text.length) {
    const text = message.text.map(str).join("\n");
    if (text) return buildText(text);
  }
  return null;
}

/** [node width, panel height] in px for built content, starting from the node's current width. */
function layout(built, nodeWidth) {
  const tableW = built.cols.reduce((sum, c) => sum + c * CHAR_PX + 6, 0);
  const width = Math.min(MAX_NODE_WIDTH, Math.max(nodeWidth, Math.ceil(tableW) + PANEL_CHROME_PX));
  const inner = Math.max(60, width - PANEL_CHROME_PX);
  let lines = built.rows;
  for (const n of built.wraps) lines += Math.max(1, Math.ceil((n * CHAR_PX) / inner));
  const scrollbar = tableW > inner ? 12 : 0;
  const height = Math.max(MIN_HEIGHT, Math.min(MAX_HEIGHT, lines * LINE_PX + 8 + scrollbar));
  return [width, height];
}

/** Record the node's report files (ui `fillscope_report`) for the viewer; the entry, or null. */
function rememberReport(node, message) {
  const files = message?.fillscope_report;
  const f = Array.isArray(files) ? files[0] : undefined;
  if (!(f && typeof f === "object" && typeof f.filename === "string" && f.filename)) return null;
  const clean = files.filter((x) => x && typeof x === "object" && typeof x.filename === "string" && x.filename)
    .map((x) => ({ filename: x.filename, subfolder: str(x.subfolder), type: str(x.type || "output") }));
  return addReport(clean, node);
}

/** The "Open architecture report" button of a node whose report is an HTML page (the trace nodes). */
function reportButton(node, entry) {
  node.fsReport = { filename: entry.filename, subfolder: entry.subfolder, type: entry.type };
  let widget = node.widgets?.find((w) => w.name === BUTTON_NAME);
  if (widget) return widget;
  widget = node.addWidget("button", BUTTON_NAME, null, () => openViewer(node.fsReport), {
    serialize: false, // graphToPrompt skips it
  });
  widget.serialize = false; // LGraphNode.serialize() skips it: widgets_values stay as saved
  widget.serializeValue = () => undefined;
  return widget;
}

// ---- the widget -------------------------------------------------------------------------------
function tableWidget(node) {
  let widget = node.widgets?.find((w) => w.name === WIDGET_NAME);
  if (widget) return widget;
  ensureStyle();
  const panel = el("div", "fillscope-panel");
  panel.dataset.fillscope = "shapes";
  // Scroll the panel, not the canvas, with the wheel.
  panel.addEventListener("wheel", (e) => e.stopPropagation(), { passive: true });
  widget = node.addDOMWidget(WIDGET_NAME, "fillscope", panel, {
    serialize: false, // graphToPrompt skips widgets whose options.serialize === false
    getValue: () => "",
    setValue: () => {},
    margin: MARGIN,
    // The widget's layout height includes its margins; computeSize() and the node's layout use these.
    getMinHeight: () => Math.min(widget?.fsHeight ?? MIN_HEIGHT, SQUEEZED_HEIGHT) + 2 * MARGIN,
    getMaxHeight: () => (widget?.fsHeight ?? MIN_HEIGHT) + 2 * MARGIN,
  });
  // LGraphNode.serialize() skips widgets whose own `serialize` is false: widgets_values stay as saved.
  widget.serialize = false;
  widget.serializeValue = () => undefined;
  widget.fsHeight = MIN_HEIGHT;
  return widget;
}

/** Room around `node` up to the nearest node to its right / below: {right, bottom} in px from node.pos
 *  (Infinity when free). Only nodes entirely right of / below the node's current box count. */
function room(node, width, height) {
  const title = globalThis.LiteGraph?.NODE_TITLE_HEIGHT ?? 30;
  const [x, y] = node.pos;
  const [w0, h0] = node.size;
  let right = Infinity;
  let bottom = Infinity;
  const nodes = node.graph?._nodes ?? node.graph?.nodes ?? [];
  for (const o of nodes) {
    if (o === node || !o.pos || !o.size) continue;
    const ox = o.pos[0], oy = o.pos[1] - title, ow = o.size[0], oh = o.size[1] + title;
    if (ox >= x + w0 && oy < y + height && oy + oh > y - title) right = Math.min(right, ox - GAP - x);
    if (oy >= y + h0 && ox < x + width && ox + ow > x) bottom = Math.min(bottom, oy - GAP - y);
  }
  return { right, bottom };
}

function show(node, message) {
  const built = buildContent(message);
  if (!built) return;
  const widget = tableWidget(node);
  const [wantW, wantH] = layout(built, node.size[0]);
  widget.fsHeight = wantH;
  widget.element.replaceChildren(built.content);
  widget.element.scrollTop = 0;
  // Grow the node so the table fits, into free canvas only: a node to the right or below stops the growth
  // and the panel scrolls (the user can still resize the node: the panel takes up to its full height).
  // Never shrinks what the user sized. computeSize() counts the panel at its minimum (getMinHeight).
  const squeezed = Math.min(wantH, SQUEEZED_HEIGHT);
  const full = node.computeSize([wantW, 0])[1] + (wantH - squeezed);
  const r = room(node, wantW, full);
  const w = Math.max(node.size[0], Math.min(wantW, r.right));
  const base = node.computeSize([w, 0])[1];
  const h = Math.max(node.size[1], base, Math.min(base + (wantH - squeezed), room(node, w, full).bottom));
  if (w !== node.size[0] || h !== node.size[1]) node.setSize([w, h]);
  node.setDirtyCanvas?.(true, true);
}

app.registerExtension({
  name: "FillScope.ShapesOnNodes",
  commands: [
    { id: "FillScope.OpenArchitectureReport", label: "FillScope: open the architecture report", icon: "pi pi-sitemap",
      function: () => openViewer() },
  ],
  async setup() {
    // The architecture viewer: a sidebar tab where the frontend has the API (1.32.9: yes), else a dialog.
    if (!registerSidebar()) addFallbackButton();
  },
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (!nodeData?.name?.startsWith("FillScope")) return;
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (message) {
      const r = onExecuted?.apply(this, arguments);
      try {
        const entry = rememberReport(this, message);
        // The button first, so that show() sizes the node with it.
        if (entry && entry.kind === "html") reportButton(this, entry);
        show(this, message);
      } catch (err) {
        console.warn("[FillScope] could not show the shapes table", err);
      }
      return r;
    };
  },
});
