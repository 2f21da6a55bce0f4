// FillScope wire labels: the shape on every link of the canvas, for any graph (issue 33).
//
// The server's wire recorder (nodes/wires.py) writes a record of every node's outputs as the node runs, and of the
// calls the MODEL / CLIP / VAE on a wire got later; each arrives here as the websocket event `fillscope.wires`
// {prompt_id, node, record}. Each link is labelled from the record of the output it leaves: its first tensor's
// shape and dtype ("[1,16,128,128] bf16"), a CONDITIONING's first tensor and its number of entries, a MODEL's
// architecture and, once sampled, its diffusion model's input; a list output its length. Hovering a label draws the
// whole record next to it.
//
// Where: on the link's curve, at the free spot nearest its middle (not over a node, nor over another label); a link
// that runs behind nodes all along gets the spot that covers least (`covered()` lists those). Placements are kept
// until the link's ends, its text or the zoom change. Text 10 graph units high (10 px at 100 %), never under 7 px on
// screen; no labels zoomed out below MIN_SCALE.
//
// A label is drawn only where the record's node class is the node's on the canvas (another workflow's records never
// label this one). After a page reload or on loading a workflow the labels come back from the newest run of this very
// workflow in /history (its extra_pnginfo.workflow.id is the graph's id) whose records the server still keeps
// (GET /fillscope/wires?prompt_id=ID). The setting "FillScope › Wires › Shapes on links" switches them off. Links
// inside a subgraph, and those leaving a subgraph node, are not labelled yet (their records are under the inner
// nodes' "outer:inner" ids).
//
// A failed prompt's explanation (`fillscope.explain`, nodes/wire_explain.py) turns the labels of the links it blames
// red and opens a panel beside ComfyUI's error (#fillscope-explain-panel: the fix, the culprits and their files).
//
// Drawn in LGraphCanvas.onDrawForeground (graph coordinates), so in the litegraph canvas and in Nodes 2.0, whose
// links are drawn on that canvas too. Test hooks: window.FillScope.wires = {records(), labels(), promptId(),
// covered(), draws()}.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { fetchHistory } from "./fillscope_memory.js";

const EVENT = "fillscope.wires";
const EXPLAIN_EVENT = "fillscope.explain"; // a failed node's shape error explained (nodes/wire_explain.py)
const SETTING = "FillScope.Wires.ShapesOnLinks";
const FONT_GRAPH_PX = 10; // label text height in graph units (10 px on screen at 100 %), ...
const MIN_SCREEN_PX = 7; // ... and never under 7 px on screen when zoomed out
const MIN_SCALE = 0.3; // zoomed out further: no labels (they would cover the links)
const MAX_PANEL_LINES = 28;
const MONO = 'ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace';
const DTYPES = { float32: "f32", float16: "f16", bfloat16: "bf16", float64: "f64", float8_e4m3fn: "f8e4m3",
  float8_e5m2: "f8e5m2", int64: "i64", int32: "i32", uint8: "u8", bool: "bool" };

const state = { records: new Map(), promptId: null, labels: [], covered: [], hover: null, draws: 0, warned: false,
  places: new Map(), explanation: null }; // places: link id -> {key, x, y, cover} (see place)

const FS = (window.FillScope = window.FillScope && typeof window.FillScope === "object" ? window.FillScope : {});
FS.wires = {
  records: () => Object.fromEntries(state.records),
  labels: () => state.labels.map(({ link, text, x, y, w, h, red }) => ({ link, text, x, y, w, h, red })),
  promptId: () => state.promptId,
  covered: () => state.covered.slice(), // links whose label covers a node (the link runs behind nodes all along)
  draws: () => state.draws, // canvas frames the labels were drawn in
  explanation: () => state.explanation, // the last failure explained in this page's prompt (fillscope.explain)
};

/** Whether a link leaves an output the last explanation blames (its label is drawn red). */
function blamed(link) {
  const culprits = state.explanation?.prompt_id === state.promptId ? state.explanation.culprits ?? [] : [];
  return culprits.some((c) => String(c.node) === String(link.origin_id) && Number(c.slot) === Number(link.origin_slot));
}

function enabled() {
  try {
    const v = app.extensionManager?.setting?.get?.(SETTING) ?? app.ui?.settings?.getSettingValue?.(SETTING);
    return v !== false;
  } catch {
    return true;
  }
}

function redraw() {
  app.canvas?.setDirty?.(true, true);
}

// ---- what a label says -----------------------------------------------------------------------------------------
const dtype = (d) => DTYPES[d] ?? String(d);
const shape = (s) => "[" + (Array.isArray(s) ? s.join(",") : "?") + "]";

function modelLabel(type, facts, calls) {
  let text = String(facts["diffusion model"] ?? facts.class ?? type);
  if (type === "VAE" && facts.latent_channels != null) text += ` ${facts.latent_channels}ch`;
  const call = (calls ?? []).find((c) => c.kind === "diffusion model");
  const x = call?.rows?.find((r) => r.name === "x (diffusion model in)");
  if (x) text += " · x " + shape(x.shape);
  return text;
}

/** The label of one output record ({type, items, values: [{tensors, facts}], calls}); null where there is none. */
export function labelOf(output) {
  const value = output?.values?.[0];
  if (!value) return output && output.items === 0 ? "[] (empty list)" : null;
  const tensors = value.tensors ?? [];
  const facts = value.facts ?? {};
  let text;
  if (["MODEL", "CLIP", "VAE"].includes(output.type) || (!tensors.length && facts.class)) {
    text = modelLabel(output.type, facts, output.calls);
  } else if (tensors.length) {
    const first = tensors[0];
    text = `${shape(first.shape)} ${dtype(first.dtype)}`;
    if (output.type === "CONDITIONING") {
      const entries = tensors.filter((t) => /^\[\d+\]\[0\]$/.test(t.name)).length;
      if (entries > 1) text += ` ×${entries}`;
    } else if (tensors.length > 1) {
      text += ` +${tensors.length - 1}`;
    }
  } else {
    const first = Object.entries(facts)[0];
    text = first ? String(first[1]) : String(output.type);
  }
  if (output.items > 1) text = `${output.items}× ${text}`;
  if (output.warned) text = "⚠ " + text;
  return text.length > 48 ? text.slice(0, 47) + "…" : text;
}

/** The whole record of one output, as lines (the hover panel). */
export function recordLines(record, slot) {
  const out = record.outputs?.[slot];
  if (!out) return [];
  const lines = [`node ${record.node} ${record.class_type}${record.cached ? " (cached)" : ""} · ` +
    `output ${slot} ${out.name} (${out.type}${out.is_list ? ", list" : ""}${out.items > 1 ? `, ${out.items} items` : ""})`];
  for (const w of record.warnings ?? []) lines.push(`⚠ ${w}`);
  (out.values ?? []).forEach((v, i) => {
    if ((out.values ?? []).length > 1) lines.push(`item ${i}`);
    for (const t of v.tensors ?? []) lines.push(`  ${t.name}  ${shape(t.shape)} ${t.dtype} ${t.device}`);
    for (const [k, val] of Object.entries(v.facts ?? {})) lines.push(`  ${k}: ${typeof val === "object" ? JSON.stringify(val) : val}`);
  });
  for (const c of out.calls ?? []) {
    const steps = c["steps scheduled"] != null ? ` · ${c["steps scheduled"]} steps` : "";
    lines.push(`called by node ${c.consumer} (${c.input}): ${c.kind} ${c.part} · ${c.calls} call${c.calls === 1 ? "" : "s"}${steps}`);
    for (const r of c.rows ?? []) lines.push(`  ${r.role === "output" ? "→" : "←"} ${r.name}  ${shape(r.shape)} ${r.dtype}`);
  }
  return lines;
}

// ---- drawing ---------------------------------------------------------------------------------------------------
function nodeType(node) {
  return String(node?.comfyClass ?? node?.type ?? "");
}

function linkRecord(graph, link) {
  if (link?.origin_id == null || link.origin_slot == null) return null;
  const record = state.records.get(String(link.origin_id));
  if (!record) return null;
  const node = graph.getNodeById?.(link.origin_id);
  if (!node || nodeType(node) !== record.class_type) return null;
  return record;
}

function overlap(rect, boxes) {
  let area = 0;
  for (const r of boxes) {
    const w = Math.min(rect[0] + rect[2], r[0] + r[2]) - Math.max(rect[0], r[0]);
    const h = Math.min(rect[1] + rect[3], r[1] + r[3]) - Math.max(rect[1], r[1]);
    if (w > 0 && h > 0) area += w * h;
  }
  return area;
}

/** Points along the link's curve (LiteGraph's spline: control points a quarter of the distance out of each slot),
 *  the middle first, then outwards. */
function alongLink(a, b, n = 24) {
  const d = Math.hypot(b[0] - a[0], b[1] - a[1]) * 0.25;
  const c1 = [a[0] + d, a[1]], c2 = [b[0] - d, b[1]];
  const pts = [];
  for (let i = 0; i <= n; i++) {
    const t = i / n, u = 1 - t;
    const k = [u * u * u, 3 * u * u * t, 3 * u * t * t, t * t * t];
    pts.push({ t, p: [0, 1].map((j) => k[0] * a[j] + k[1] * c1[j] + k[2] * c2[j] + k[3] * b[j]) });
  }
  return pts.sort((x, y) => Math.abs(x.t - 0.5) - Math.abs(y.t - 0.5));
}

function endpoints(graph, link) {
  const from = graph.getNodeById?.(link.origin_id);
  const to = graph.getNodeById?.(link.target_id);
  try {
    const a = from?.getConnectionPos?.(false, link.origin_slot);
    const b = to?.getConnectionPos?.(true, link.target_slot);
    if (a && b) return [[a[0], a[1]], [b[0], b[1]]];
  } catch {
    // a node of another kind (a subgraph's IO node): the centre marker alone
  }
  return null;
}

/** Where a w x h label goes: the free spot on the link nearest its middle (not over a node, nor over another label);
 *  where the link runs behind nodes all along, the spot that covers the least. [x, y, covers] */
function place(ends, link, w, h, nodes, placed) {
  const pts = ends ? alongLink(ends[0], ends[1]) : [{ t: 0.5, p: [link._pos[0], link._pos[1]] }];
  let best = null;
  for (const { p } of pts) {
    const rect = [p[0] - w / 2, p[1] - h / 2, w, h];
    const cover = overlap(rect, nodes) + overlap(rect, placed);
    if (!best || cover < best[2]) best = [rect[0], rect[1], cover];
    if (cover === 0) break;
  }
  return best;
}

function drawLabels(ctx) {
  const canvas = app.canvas;
  const graph = canvas?.graph ?? app.graph;
  state.labels = [];
  state.covered = [];
  state.draws += 1;
  if (!graph || !state.records.size || !enabled()) return;
  const scale = canvas.ds?.scale ?? 1;
  if (scale < MIN_SCALE) return;
  const px = Math.max(FONT_GRAPH_PX, MIN_SCREEN_PX / scale);
  const pad = 2 * px / FONT_GRAPH_PX;
  const nodes = (canvas.visible_nodes ?? []).map((n) => n.boundingRect).filter(Boolean).map((r) => [r[0], r[1], r[2], r[3]]);
  const placed = [];
  ctx.save();
  ctx.font = `${px}px ${MONO}`;
  ctx.textBaseline = "top";
  for (const link of canvas.renderedPaths ?? []) {
    const record = link?._pos ? linkRecord(graph, link) : null;
    const output = record?.outputs?.[link.origin_slot];
    const text = output ? labelOf(record.warnings?.length ? { ...output, warned: true } : output) : null;
    if (!text) continue;
    const w = ctx.measureText(text).width + 2 * pad;
    const h = px + 2 * pad;
    const ends = endpoints(graph, link);
    const key = `${text}|${px}|${ends ? ends.flat().map((v) => v.toFixed(1)).join(",") : link._pos.join(",")}`;
    let spot = state.places.get(link.id);
    if (spot?.key !== key) {
      const [sx, sy, sc] = place(ends, link, w, h, nodes, placed);
      spot = { key, x: sx, y: sy, cover: sc };
      state.places.set(link.id, spot);
    }
    const { x, y, cover } = spot;
    if (cover > 0) state.covered.push(link.id);
    placed.push([x, y, w, h]);
    const red = blamed(link);
    ctx.fillStyle = red ? "rgba(150,20,20,0.92)" : "rgba(18,18,22,0.85)";
    ctx.beginPath();
    ctx.roundRect ? ctx.roundRect(x, y, w, h, 3 * pad / 2) : ctx.rect(x, y, w, h);
    ctx.fill();
    ctx.fillStyle = record.cached ? "#9fc3dc" : "#ececec";
    ctx.fillText(text, x + pad, y + pad);
    state.labels.push({ link: link.id, text, x, y, w, h, record, slot: link.origin_slot, red });
  }
  const mouse = canvas.graph_mouse;
  const hovered = mouse && state.labels.find((l) => mouse[0] >= l.x && mouse[0] <= l.x + l.w && mouse[1] >= l.y && mouse[1] <= l.y + l.h);
  state.hover = hovered?.link ?? null;
  if (hovered) drawPanel(ctx, hovered, px, pad);
  ctx.restore();
}

function drawPanel(ctx, label, px, pad) {
  let lines = recordLines(label.record, label.slot);
  if (lines.length > MAX_PANEL_LINES) lines = [...lines.slice(0, MAX_PANEL_LINES - 1), `… ${lines.length - MAX_PANEL_LINES + 1} more lines`];
  const lh = px * 1.3;
  const w = Math.max(...lines.map((l) => ctx.measureText(l).width)) + 4 * pad;
  const h = lines.length * lh + 2 * pad;
  const x = label.x;
  const y = label.y + label.h + pad;
  ctx.fillStyle = "rgba(10,10,14,0.94)";
  ctx.strokeStyle = "#6a8caf";
  ctx.lineWidth = 1 / (app.canvas.ds?.scale ?? 1);
  ctx.beginPath();
  ctx.rect(x, y, w, h);
  ctx.fill();
  ctx.stroke();
  ctx.fillStyle = "#e6e6e6";
  lines.forEach((line, i) => ctx.fillText(line, x + 2 * pad, y + pad + i * lh));
}

// ---- a failure explained: the panel beside ComfyUI's error ---------------------------------------------------------
const PANEL_ID = "fillscope-explain-panel";

function el(tag, style, text) {
  const e = document.createElement(tag);
  if (style) e.style.cssText = style;
  if (text != null) e.textContent = text;
  return e;
}

/** A fixed panel at the right of the window (not a dialog: ComfyUI's own error dialog stays as it is, this sits beside
 *  it, above its mask), with the fix, the culprits and where each came from; or, where no mismatch was recognised,
 *  what came into the failing node. Closed by its button, or replaced by the next explanation. */
function showPanel(x) {
  document.getElementById(PANEL_ID)?.remove();
  if (!x) return;
  const panel = el("div", "position:fixed;right:16px;top:120px;width:min(460px,40vw);max-height:70vh;overflow:auto;" +
    "z-index:20000;background:#1c1c22;color:#e6e6e6;border:1px solid #b33;border-radius:8px;padding:12px 14px;" +
    "font:13px/1.45 system-ui,sans-serif;box-shadow:0 6px 24px rgba(0,0,0,.5)");
  panel.id = PANEL_ID;
  panel.setAttribute("aria-label", "FillScope: the failure explained");
  const close = el("button", "float:right;background:none;border:0;color:#aaa;font-size:16px;cursor:pointer", "✕");
  close.title = "Close";
  close.addEventListener("click", () => panel.remove());
  panel.append(close, el("div", "font-weight:600;margin-bottom:6px",
    `FillScope: why node ${x.node} (${x.class_type}) failed`));
  panel.append(el("div", `font:12px ${MONO};color:#f0b0b0;margin-bottom:8px;white-space:pre-wrap`, String(x.message ?? "").trim()));
  if (x.fix) {
    const fix = el("div", "margin-bottom:8px", x.fix);
    fix.className = "fillscope-explain-fix";
    panel.append(fix);
    for (const c of x.culprits ?? []) {
      const from = (c.source ?? [])[0];
      const says = from?.["file says"] ? ` (the file says ${Object.values(from["file says"]).join(", ")})` : "";
      const file = from ? ` · read by ${from.class_type} node ${from.node}: ${Object.values(from.inputs).join(", ")}${says}` : "";
      panel.append(el("div", `font:12px ${MONO};margin:2px 0`,
        `'${c.input}' ← node ${c.node} (${c.type}${c.architecture ? ", " + c.architecture : ""}): ${(c.carries ?? []).join(", ")}${file}`));
    }
  } else {
    panel.append(el("div", "margin-bottom:6px", "No known shape mismatch in the message. What came into the node:"));
    for (const i of x.inputs ?? []) {
      const shapes = (i.shapes ?? []).slice(0, 3).map((t) => `${t.name} ${shape(t.shape)}`).join(", ");
      panel.append(el("div", `font:12px ${MONO};margin:2px 0`,
        `'${i.input}' ← node ${i.node} (${i.type}): ${shapes || i.architecture || ""}`));
    }
  }
  document.body.append(panel);
}

// ---- records in ------------------------------------------------------------------------------------------------
async function restore(graph) {
  const gid = graph?.id;
  if (!gid) return;
  for (const entry of await fetchHistory(16)) {
    if (entry.prompt?.[3]?.extra_pnginfo?.workflow?.id !== gid) continue;
    const resp = await api.fetchApi("/fillscope/wires?prompt_id=" + encodeURIComponent(entry.id), { cache: "no-store" });
    const data = resp.ok ? await resp.json() : null;
    const nodes = data?.nodes && typeof data.nodes === "object" ? Object.entries(data.nodes) : [];
    if (!nodes.length) continue;
    if (state.promptId && state.promptId !== entry.id && state.records.size) return; // a run began meanwhile
    state.records = new Map(nodes);
    state.promptId = entry.id;
    redraw();
    return;
  }
}

app.registerExtension({
  name: "FillScope.WireShapes",
  settings: [
    { id: SETTING, name: "Shapes on links (what each wire carried in the latest run)", type: "boolean",
      defaultValue: true, category: ["FillScope", "Wires", "Shapes on links"], onChange: () => redraw() },
  ],
  async setup() {
    api.addEventListener("execution_start", (e) => {
      document.getElementById(PANEL_ID)?.remove(); // the last failure's panel goes with the next run
      state.records = new Map();
      state.places.clear();
      state.promptId = e.detail?.prompt_id ?? null;
      redraw();
    });
    api.addEventListener(EVENT, (e) => {
      const d = e.detail;
      if (!d?.record || d.node == null) return;
      if (d.prompt_id !== state.promptId) {
        state.records = new Map();
        state.promptId = d.prompt_id;
      }
      state.records.set(String(d.node), d.record);
      redraw();
    });
    // registered even where nothing is drawn of it: the pinned frontend throws on a message type nobody listens to
    api.addEventListener(EXPLAIN_EVENT, (e) => {
      state.explanation = e.detail ?? null;
      try {
        showPanel(state.explanation);
      } catch (err) {
        console.warn("[FillScope] could not show the explanation", err);
      }
      redraw();
    });
    const canvas = app.canvas;
    const before = canvas.onDrawForeground;
    canvas.onDrawForeground = function (ctx, visible) {
      const r = before?.apply(this, arguments);
      try {
        drawLabels(ctx);
      } catch (err) {
        if (!state.warned) console.warn("[FillScope] could not draw the wire labels", err); // once, not every frame
        state.warned = true;
      }
      return r;
    };
    // the canvas redraws on its own only for what it knows is hovered: a label entered or left redraws it
    canvas.canvas?.addEventListener("pointermove", () => {
      const m = canvas.graph_mouse;
      const over = m && state.labels.find((l) => m[0] >= l.x && m[0] <= l.x + l.w && m[1] >= l.y && m[1] <= l.y + l.h);
      if ((over?.link ?? null) !== state.hover) redraw();
    });
  },
  async afterConfigureGraph() {
    state.records = new Map();
    state.places.clear();
    state.promptId = null;
    restore(app.graph).catch((err) => console.warn("[FillScope] could not restore the wire labels", err));
  },
});
