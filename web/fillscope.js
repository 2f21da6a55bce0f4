// FillScope canvas extension (ComfyUI frontend >= 1.32).
//
// After a FillScope node runs, its face shows the key of its shapes table, drawn on the canvas (a widget named
// "fillscope_summary", readable at every zoom), and a click on it opens the whole table in a dialog
// (web/fillscope_table.js: what the summary and the table hold):
//   - at a readable zoom: up to three lines (the key tensor's name, shape and dtype; the next output; tensors and
//     wall time, or the first warning), with "⊞ table" (or "cached ⊞" for a table from ComfyUI's cache) at the right;
//   - zoomed out (where LiteGraph draws no text: its low-quality mode, or the lines would be under 9 px on
//     screen): the key alone ("fill_condition [1, 4096, 320]", or just the shape where the node is too narrow),
//     drawn about 15 px high on screen over the node's widget area (whose own text is not drawn at that zoom).
// The widget's `value` is the summary as text; `fsDrawn` is what its last draw showed ({mode, text, fontPx,
// screenPx}). Like every FillScope widget it is display-only: not in widgets_values, not in the prompt.
//
// Where a node's table comes from (web/fillscope_memory.js):
//   - `executed` (the node ran): its ui;
//   - `fillscope.live` (an Inspect node's model, CLIP or VAE was called by a later node): the record of those calls;
//   - `execution_cached` (ComfyUI reused the node's output, and sends it no ui): the newest ui in /history of a node
//     with the same class and inputs (the cache's own key), marked "cached";
//   - loading a workflow, and after a page reload: what each node showed after the latest run of this workflow
//     (from /history), marked "restored"; the viewer's report list is restored from /history too.
//
// Trace nodes (ui `fillscope_report` starting with an .html file) also get a button widget, "Open architecture
// report", that opens the architecture viewer (web/fillscope_viewer.js: a sidebar tab) on that node's report.
//
// Advanced inputs (a V3 input's `advanced` flag: a loader's device, placeholder_seed, memory, storage; a sampler's
// step cache) are folded on the node until the user shows them: in the litegraph canvas by widget.advanced (its
// node menu's "Show Advanced"), in Nodes 2.0 (the Vue node renderer) by folding their rows, with a show / hide
// toggle in the selection toolbox (hideAdvanced, foldVueRows).
//
// Public hooks (window.FillScope): lastReport ({filename, subfolder, type} of the newest report file, or null: a
// file in ComfyUI's output folder, fetchable with /view), reports (newest first), openViewer(report?),
// openTable(nodeId) (the dialog of a node's table), tableOf(nodeId) ({message, source, time} or null).
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { cachedTables, fetchHistory, lastTables, queuedPrompt } from "./fillscope_memory.js";
import { openTable, summarize } from "./fillscope_table.js";
import { addFallbackButton, addReport, openViewer, registerSidebar, restoreReports } from "./fillscope_viewer.js";

const SUMMARY = "fillscope_summary"; // the summary widget's name on a node
const BUTTON_NAME = "Open architecture report"; // the trace nodes' button widget (its name is its label)
const FONT_PX = 12; // the summary lines' font (graph units)
const LINE_PX = 16;
const PAD = 5;
const MIN_LINES = 2; // the widget is this many lines high at least, where there is room (for the zoomed-out label)
const GAP = 10; // px kept free between a grown node and the node below it
const BIG_SCREEN_PX = 15; // the zoomed-out label's height on screen
const SMALL_SCREEN_PX = 9; // lines smaller than this on screen give way to the zoomed-out label
const MONO = 'ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace';
const SOURCES = { run: "ran", cached: "from ComfyUI's cache", restored: "restored from /history" };

const FS = (window.FillScope = window.FillScope && typeof window.FillScope === "object" ? window.FillScope : {});

function isFillScope(node) {
  return typeof node?.type === "string" && node.type.startsWith("FillScope");
}

// ---- the summary widget --------------------------------------------------------------------------
function heightOf(w) {
  return (w.fs?.shown ?? MIN_LINES) * LINE_PX + 2 * PAD;
}

function colour(tone) {
  const LG = globalThis.LiteGraph ?? {};
  if (tone === "key") return "#9cdcfe";
  if (tone === "warn") return "#ff8f8f";
  if (tone === "dim") return LG.WIDGET_SECONDARY_TEXT_COLOR ?? "#999";
  return LG.WIDGET_TEXT_COLOR ?? "#ddd";
}

/** `text` cut to `room` px (with "…") in the context's current font. */
function fit(ctx, text, room) {
  if (ctx.measureText(text).width <= room) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(text.slice(0, mid) + "…").width <= room) lo = mid;
    else hi = mid - 1;
  }
  return lo ? text.slice(0, lo) + "…" : "";
}

function drawLines(ctx, w, x, y, width, scale) {
  const LG = globalThis.LiteGraph ?? {};
  const { summary, source } = w.fs;
  ctx.fillStyle = LG.WIDGET_BGCOLOR ?? "#222";
  ctx.strokeStyle = LG.WIDGET_OUTLINE_COLOR ?? "#666";
  ctx.beginPath();
  ctx.roundRect(x, y, width, heightOf(w), 6);
  ctx.fill();
  ctx.stroke();
  ctx.font = `${FONT_PX}px ${MONO}`;
  ctx.textBaseline = "middle";
  const hint = source === "cached" ? "cached ⊞" : "⊞ table";
  const hintW = ctx.measureText(hint).width;
  ctx.textAlign = "right";
  ctx.fillStyle = colour("dim");
  ctx.fillText(hint, x + width - PAD, y + PAD + LINE_PX / 2);
  ctx.textAlign = "left";
  summary.lines.slice(0, w.fs.shown).forEach((line, i) => {
    const cy = y + PAD + LINE_PX * (i + 0.5);
    const end = x + width - PAD - (i === 0 ? hintW + 8 : 0);
    let cx = x + PAD;
    for (const seg of line) {
      const text = fit(ctx, seg.text, end - cx);
      ctx.fillStyle = colour(seg.tone);
      ctx.fillText(text, cx, cy);
      cx += ctx.measureText(text).width;
      if (text !== seg.text) break;
    }
  });
  w.fsDrawn = { mode: "lines", text: w.value, fontPx: FONT_PX, screenPx: FONT_PX * scale };
}

function drawBig(ctx, node, w, y, width, scale, lowQuality) {
  const { summary } = w.fs;
  // the whole widget area: the other widgets draw no text at this zoom; DOM widgets (a prompt's text box) are
  // hidden in low quality, else they cover the canvas: the label starts below them
  const others = (node.widgets ?? []).filter((o) => o !== w && typeof o.y === "number" && !o.hidden && o.y < y);
  let top = Math.min(y, ...others.map((o) => o.y));
  if (!lowQuality) for (const o of others) if (o.element) top = Math.max(top, o.y + (o.computedHeight ?? 0));
  const h = y + heightOf(w) - top;
  ctx.fillStyle = node.bgcolor ?? globalThis.LiteGraph?.NODE_DEFAULT_BGCOLOR ?? "#353535";
  ctx.beginPath();
  ctx.roundRect(4, top, width - 8, h, 6);
  ctx.fill();
  const sizeFor = (text) => {
    ctx.font = `bold 100px ${MONO}`;
    const per = Math.max(1e-6, ctx.measureText(text).width / 100);
    return Math.min(BIG_SCREEN_PX / scale, h * 0.8, (width - 16) / per);
  };
  let text = summary.big;
  let size = sizeFor(text);
  if (size * scale < BIG_SCREEN_PX * 0.75 && summary.short !== text) {
    text = summary.short;
    size = sizeFor(text);
  }
  ctx.font = `bold ${size}px ${MONO}`;
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  ctx.fillStyle = colour("key");
  ctx.fillText(text, width / 2, top + h / 2);
  w.fsDrawn = { mode: "big", text, fontPx: size, screenPx: size * scale };
}

function summaryWidget(node) {
  const old = node.widgets?.find((x) => x.name === SUMMARY);
  if (old) return old;
  const w = {
    name: SUMMARY,
    type: "fillscope_summary",
    value: "",
    serialize: false, // LGraphNode.serialize() skips it: widgets_values stay as saved
    options: { serialize: false }, // graphToPrompt skips it
    fs: null,
    fsDrawn: null,
    serializeValue: () => undefined,
    computeSize: (width) => [width ?? node.size[0], heightOf(w)],
    draw(ctx, n, width, y, _H, lowQuality) {
      if (!w.fs) return;
      const scale = app.canvas?.ds?.scale ?? 1;
      ctx.save();
      if (lowQuality || FONT_PX * scale < SMALL_SCREEN_PX) drawBig(ctx, n, w, y, width, scale, lowQuality);
      else drawLines(ctx, w, 10, y, width - 20, scale);
      ctx.restore();
    },
    onPointerDown(pointer) {
      pointer.onClick = () => showTable(node);
      return true;
    },
  };
  return node.addCustomWidget(w);
}

/** How tall `node` may grow (px from its top) before it reaches the node below it; Infinity when none is. */
function roomBelow(node) {
  const title = globalThis.LiteGraph?.NODE_TITLE_HEIGHT ?? 30;
  const [x, y] = node.pos;
  const w = node.size[0];
  let bottom = Infinity;
  for (const o of node.graph?._nodes ?? node.graph?.nodes ?? []) {
    if (o === node || !o.pos || !o.size) continue;
    const top = o.pos[1] - title;
    if (top > y && o.pos[0] < x + w && o.pos[0] + o.size[0] > x) bottom = Math.min(bottom, top - GAP - y);
  }
  return bottom;
}

/** Frontend 1.32.9 copies a V3 input's `advanced` flag into widget.options.advanced, but LGraphNode.isWidgetVisible
 *  (and the node menu's "Show Advanced" / "Hide Advanced" toggle, LGraphNode.toggleAdvanced) read widget.advanced:
 *  set it, so a loader's device, placeholder_seed, memory and storage leave the face until the user shows them.
 *  Only visibility changes: every widget stays in node.widgets, so widgets_values keeps its order and length.
 *  LGraphNode.arrange in 1.32.9 still stacks hidden widgets (NODE_WIDGET_HEIGHT + 4 each) and grows the node to
 *  hold them, so a hidden widget measures -4 (+ 4 = no room) while it is hidden; computeSize skips it anyway. A new
 *  node shrinks to its visible widgets (a loaded one takes its saved size afterwards, in configure).
 *  Nodes 2.0 (the Vue node renderer) reads neither widget.advanced nor showAdvanced: see foldVueRows. */
function hideAdvanced(node) {
  let any = false;
  for (const w of node.widgets ?? []) {
    w.advanced = !!w.options?.advanced;
    if (!w.advanced) continue;
    any = true;
    const own = w.computeSize;
    w.computeSize = function (width) {
      if (!node.isWidgetVisible(this)) return [width ?? node.size[0], -4];
      return own ? own.call(this, width) : [width ?? node.size[0], globalThis.LiteGraph?.NODE_WIDGET_HEIGHT ?? 20];
    };
  }
  if (any && !node.showAdvanced && typeof node.computeSize === "function") {
    node.setSize([node.size[0], node.computeSize()[1]]);
  }
  if (any) watchShowAdvanced(node);
}

// ---- Nodes 2.0 (Comfy.VueNodes.Enabled) ------------------------------------------------------------------
// Frontend 1.32.9's Vue nodes draw a node's widgets themselves: NodeWidgets renders one `.lg-node-widget` row per
// widget of the node's Vue data, skipping only options.hidden / options.canvasOnly; widget.advanced and
// node.showAdvanced are not read, so a loader's device, placeholder_seed, memory and storage would all show.
// That data is a snapshot (useGraphNodeManager's safeWidgetMapper copies each widget's options), replaced by
// static copies on the first widget edit or link change: an options.hidden set later is never seen, and a row
// left out once could not come back. So the rows stay rendered and FillScope folds them: a row whose input socket
// (its slot dot's data-slot-key, `<node id>-in-<input index>`, names the input and so the widget) belongs to an
// advanced widget is hidden while the node's advanced inputs are folded, unless a link feeds it (its socket is
// the link's end). Rows are folded again whenever the Vue renderer adds or replaces them (a MutationObserver:
// its callback runs before the next paint, so a folded row never flashes) and whenever showAdvanced changes.
// The Vue node menu has no "Show Advanced" in 1.32.9; the selection toolbox gets FillScope's toggle (TOGGLE_ID).
const TOGGLE_ID = "FillScope.ToggleAdvancedInputs";

function hasAdvanced(node) {
  return !!node?.widgets?.some((w) => w?.advanced);
}

/** Fold or unfold the advanced rows of `node`'s Vue element (none in the litegraph canvas: nothing to do). */
function foldVueRows(node, el) {
  el ??= document.querySelector(`.lg-node[data-node-id="${CSS.escape(String(node.id))}"]`);
  if (!el) return;
  for (const row of el.querySelectorAll(".lg-node-widget")) {
    const key = row.querySelector("[data-slot-key]")?.dataset.slotKey ?? "";
    const m = /-in-(\d+)$/.exec(key);
    const input = m ? node.inputs?.[Number(m[1])] : null;
    const w = input?.widget?.name ? node.widgets?.find((x) => x.name === input.widget.name) : null;
    if (!w?.advanced) continue;
    const folded = !node.showAdvanced && input.link == null;
    row.dataset.fillscopeAdvanced = folded ? "folded" : "shown";
    row.style.display = folded ? "none" : "";
  }
}

/** showAdvanced as an accessor of `node`: every change (the litegraph menu's LGraphNode.toggleAdvanced, FillScope's
 *  toolbox toggle, a saved workflow's showAdvanced set by configure) folds or unfolds the Vue rows at once. The
 *  value is kept as given, so a node never toggled still serialises no showAdvanced. */
function watchShowAdvanced(node) {
  let shown = node.showAdvanced;
  Object.defineProperty(node, "showAdvanced", {
    configurable: true,
    enumerable: true,
    get: () => shown,
    set: (v) => {
      shown = v;
      foldVueRows(node);
    },
  });
}

let rowObserver = null;
/** Fold the rows of every FillScope node element the Vue renderer adds or re-renders. */
function observeVueRows() {
  if (rowObserver || typeof MutationObserver !== "function") return;
  rowObserver = new MutationObserver((records) => {
    const els = new Set();
    for (const r of records) {
      const t = r.target instanceof Element ? r.target : null;
      const inNode = t?.closest?.(".lg-node[data-node-id]");
      if (inNode) els.add(inNode);
      for (const a of r.addedNodes) {
        if (!(a instanceof Element)) continue;
        if (a.matches(".lg-node[data-node-id]")) els.add(a);
        else if (!inNode) for (const e of a.querySelectorAll(".lg-node[data-node-id]")) els.add(e);
      }
    }
    const graph = app.canvas?.graph ?? app.graph;
    for (const el of els) {
      const node = graph?.getNodeById?.(el.dataset.nodeId);
      if (isFillScope(node) && hasAdvanced(node)) foldVueRows(node, el);
    }
  });
  rowObserver.observe(document.body, { childList: true, subtree: true });
}

/** The selection toolbox's toggle: the selected FillScope nodes' advanced inputs shown or folded
 *  (LGraphNode.toggleAdvanced, as the litegraph node menu's "Show Advanced" / "Hide Advanced"). */
function toggleSelectedAdvanced() {
  const nodes = Object.values(app.canvas?.selected_nodes ?? {}).filter((n) => isFillScope(n) && hasAdvanced(n));
  for (const n of nodes) n.toggleAdvanced?.();
  app.canvas?.setDirty?.(true, true);
}

/** Remember `node`'s size before FillScope's widgets first grew it: the saved workflow keeps that size (onSerialize),
 *  so showing a table never makes a workflow "modified"; a size the user or the frontend set later is kept. */
function keepSize(node) {
  if (!node.fsBaseSize) node.fsBaseSize = [node.size[0], node.size[1]];
}

/** Show `message` (a node's ui) on `node`; `source`: "run", "cached" or "restored". False when there is nothing.
 *  The node grows to fit the summary's lines (up to three), into free canvas: with a node below it, fewer lines. */
function show(node, message, source = "run", found = null) {
  const summary = summarize(message);
  if (!summary) return false;
  keepSize(node);
  node.fsTable = { message, source, time: Date.now(), promptId: found?.promptId ?? null };
  const w = summaryWidget(node);
  const room = roomBelow(node);
  w.fs = { summary, source, shown: 1 };
  w.value = summary.lines.map((l) => l.map((s) => s.text).join("")).join("\n");
  for (let n = Math.max(MIN_LINES, summary.lines.length); n >= 1; n--) {
    w.fs.shown = n;
    if (node.computeSize()[1] <= room) break;
  }
  const need = node.computeSize()[1];
  const grown = node.fsSize && node.size[0] === node.fsSize[0] && node.size[1] === node.fsSize[1]; // our last size
  const h = grown ? Math.max(node.fsBaseSize[1], need) : Math.max(node.size[1], need);
  if (h !== node.size[1]) node.setSize([node.size[0], h]);
  node.fsSize = [node.size[0], node.size[1]];
  node.setDirtyCanvas?.(true, true);
  w.triggerDraw?.(); // Nodes 2.0 draws a custom widget into its own canvas only when asked (or resized)
  return true;
}

/** Nodes 2.0: every face is drawn into its own canvas, which does not follow the canvas' zoom; redraw the faces when
 *  the zoom changes (each chooses its lines or its big key from the scale). The litegraph canvas ignores this. */
function redrawFacesOnZoom() {
  const ds = app.canvas?.ds;
  if (!ds) return;
  const onChanged = ds.onChanged;
  let drawnAt = ds.scale;
  ds.onChanged = function () {
    const r = onChanged?.apply(this, arguments);
    if (ds.scale !== drawnAt) { // a pan keeps every face as drawn
      drawnAt = ds.scale;
      for (const node of app.graph?._nodes ?? app.graph?.nodes ?? []) {
        node.widgets?.find((x) => x.name === SUMMARY)?.triggerDraw?.();
      }
    }
    return r;
  };
}

function showTable(node) {
  const t = node?.fsTable;
  if (!t) return null;
  const when = t.source === "run" ? " at " + new Date(t.time).toLocaleTimeString() : "";
  return openTable(node.title ?? node.type, t.message, node.id, SOURCES[t.source] + when);
}

// ---- reports ---------------------------------------------------------------------------------------
function reportFiles(message) {
  const files = message?.fillscope_report;
  if (!Array.isArray(files)) return [];
  return files.filter((x) => x && typeof x === "object" && typeof x.filename === "string" && x.filename)
    .map((x) => ({ filename: x.filename, subfolder: x.subfolder == null ? "" : String(x.subfolder), type: String(x.type || "output") }));
}

/** The "Open architecture report" button of a node whose report is an HTML page (the trace nodes). */
function reportButton(node, file) {
  if (!/\.html?$/i.test(file?.filename ?? "")) return;
  node.fsReport = file;
  if (node.widgets?.some((w) => w.name === BUTTON_NAME)) return;
  keepSize(node);
  const widget = node.addWidget("button", BUTTON_NAME, null, () => openViewer(node.fsReport), {
    serialize: false, // graphToPrompt skips it
  });
  widget.serialize = false; // LGraphNode.serialize() skips it: widgets_values stay as saved
  widget.serializeValue = () => undefined;
}

/** A table from elsewhere (the cache, /history) on `node`, with its report button; the viewer is not moved. */
function showFound(node, found, source) {
  reportButton(node, reportFiles(found.ui)[0]);
  show(node, found.ui, source, found);
}

// ---- cached nodes, reloads ----------------------------------------------------------------------------
async function promptOf(promptId) {
  const queued = await queuedPrompt(promptId);
  if (queued) return queued;
  try {
    const resp = await api.fetchApi("/history/" + encodeURIComponent(promptId), { cache: "no-store" });
    const entry = (await resp.json())?.[promptId];
    if (entry?.prompt?.[2]) return entry.prompt[2];
  } catch {
    /* below */
  }
  return (await app.graphToPrompt()).output;
}

async function onCached(detail) {
  const graph = app.graph;
  const ids = (Array.isArray(detail?.nodes) ? detail.nodes : []).map(String).filter((id) => isFillScope(graph?.getNodeById(id)));
  if (!ids.length) return;
  const started = Date.now();
  const tables = await cachedTables(await promptOf(detail.prompt_id), ids);
  if (app.graph !== graph) return;
  for (const [id, found] of tables) {
    const node = graph.getNodeById(id);
    if (node && !(node.fsTable?.source === "run" && node.fsTable.time >= started)) showFound(node, found, "cached");
  }
}

let reportsRestored = false; // the viewer's list is restored once (on the page's first graph), tables on every load

async function restoreGraph(graph) {
  const started = Date.now();
  const tables = graph?.nodes?.some(isFillScope);
  if (!tables && reportsRestored) return;
  const entries = await fetchHistory();
  restoreReports(entries);
  reportsRestored = true;
  if (app.graph !== graph || !tables || !entries.length) return;
  let prompt = null;
  try {
    prompt = (await app.graphToPrompt()).output;
  } catch {
    /* a graph that cannot be queued: the latest run of the workflow still counts */
  }
  if (app.graph !== graph) return;
  for (const [id, found] of lastTables(graph, prompt, entries)) {
    const node = graph.getNodeById(id);
    if (node && !(node.fsTable && node.fsTable.time >= started)) showFound(node, found, "restored");
  }
}

FS.openTable = (id) => showTable(app.graph?.getNodeById(id));
FS.tableOf = (id) => {
  const t = app.graph?.getNodeById(id)?.fsTable;
  return t ? { message: t.message, source: t.source, time: t.time, promptId: t.promptId } : null;
};

/** Workflows saved before klein's model_type moved to the sampler hold the loader's third widget value
 *  (source, variant, model_type, dtype, ...); the frontend sets widget values by position, so without this every
 *  later widget would take its neighbour's value. The dropped value is said in the console when it was not "auto"
 *  (the sampler's model_type is where it goes now). */
function migrateKleinLoader(nodeType) {
  const configure = nodeType.prototype.configure;
  nodeType.prototype.configure = function (info) {
    const v = info?.widgets_values;
    if (Array.isArray(v) && v.length === 8 && ["auto", "distilled", "base"].includes(v[2])) {
      if (v[2] !== "auto")
        console.warn(`[FillScope] klein loader ${info.id}: model_type '${v[2]}' moved to the klein sampler; set it there`);
      info = { ...info, widgets_values: [...v.slice(0, 2), ...v.slice(3)] };
    }
    return configure.call(this, info);
  };
}

app.registerExtension({
  name: "FillScope.ShapesOnNodes",
  commands: [
    { id: "FillScope.OpenArchitectureReport", label: "FillScope: open the architecture report", icon: "pi pi-sitemap",
      function: () => openViewer() },
    { id: TOGGLE_ID, label: "FillScope: show / hide the advanced inputs", icon: "pi pi-sliders-h",
      function: () => toggleSelectedAdvanced() },
  ],
  // Nodes 2.0's node menu has no "Show Advanced" (frontend 1.32.9): the toggle sits in the selection toolbox
  getSelectionToolboxCommands(item) {
    return isFillScope(item) && hasAdvanced(item) ? [TOGGLE_ID] : [];
  },
  async setup() {
    // The architecture viewer: a sidebar tab where the frontend has the API (1.32.9: yes), else a dialog.
    if (!registerSidebar()) addFallbackButton();
    observeVueRows(); // Nodes 2.0: fold the advanced rows of FillScope nodes (foldVueRows)
    redrawFacesOnZoom();
    // Inspect nodes on ComfyUI's own MODEL / CLIP / VAE finish their record when a later node calls the model
    // (nodes/live.py): the record arrives as this event, shown as an `executed` ui is.
    api.addEventListener("fillscope.live", (e) => {
      try {
        const node = app.graph?.getNodeById(String(e.detail?.node));
        if (node && e.detail?.output) show(node, e.detail.output, "run");
      } catch (err) {
        console.warn("[FillScope] could not show a live record", err);
      }
    });
    api.addEventListener("execution_cached", (e) => {
      onCached(e.detail).catch((err) => console.warn("[FillScope] could not show the cached nodes' tables", err));
    });
  },
  async afterConfigureGraph() {
    // not awaited: loading the workflow does not wait for /history
    restoreGraph(app.graph).catch((err) => console.warn("[FillScope] could not restore the shapes tables", err));
  },
  nodeCreated(node) {
    // invoked from the node's constructor: LiteGraph.createNode sets node.type only afterwards, comfyClass is set
    if (!String(node?.comfyClass ?? node?.type ?? "").startsWith("FillScope")) return;
    hideAdvanced(node);
  },
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (!nodeData?.name?.startsWith("FillScope")) return;
    if (nodeData.name === "FillScopeLoadKleinTransformer") migrateKleinLoader(nodeType);
    const onSerialize = nodeType.prototype.onSerialize;
    nodeType.prototype.onSerialize = function (o) {
      onSerialize?.apply(this, arguments);
      // the size before FillScope's widgets grew the node, unless it was resized since (see keepSize)
      const [b, s] = [this.fsBaseSize, this.fsSize];
      if (b && s && o?.size && this.size[0] === s[0] && this.size[1] === s[1]) o.size = [b[0], b[1]];
    };
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (message) {
      const r = onExecuted?.apply(this, arguments);
      try {
        const files = reportFiles(message);
        if (files.length) addReport(files, this);
        reportButton(this, files[0]); // the button first, so that the summary is the last widget
        show(this, message, "run");
      } catch (err) {
        console.warn("[FillScope] could not show the shapes table", err);
      }
      return r;
    };
  },
});
