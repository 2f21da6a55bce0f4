// FillScope shapes tables: what a node's ui message (fillscope/trace/records.py, nodes/inspect.py, nodes/trace.py)
// says, as a short summary for the node's face and as the full table in a dialog.
//
//   summarize(message) -> {lines, big, short, rows} or null
//     lines: up to three lines for the node face, each a list of {text, tone} segments
//            (tone: "key" the key shape, "name", "dim", "warn");
//     big:   the key in one line (drawn large when the canvas is zoomed out), short: the same, shape only;
//     rows:  how many rows the full table has.
//   openTable(title, message, nodeId) / closeTable(): the full table in a dialog of its own (Escape, ✕ or a click
//   outside closes it): every tensor (role, name, shape, dtype, provenance), wall time, warnings, notes, facts; the
//   Shapes Report's boundaries with the boundary column first, wrapping rather than cut off; other text as text.
//
// The key shape: a node's largest output tensor (the last of equals: a prompt's context, a decode's image), else its
// last internal one (a condition, a sampler: what it hands on), else its last input; a loader without tensors (meta
// weights): its parameter count.
// Everything is built with createElement + textContent: data never reaches innerHTML.

const ROLE = { input: "in", output: "out", internal: "int" };
const DTYPE = { bfloat16: "bf16", float16: "fp16", float32: "fp32", float64: "fp64", int64: "i64", int32: "i32" };

export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

export function str(v) {
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

export function fmtShape(shape) {
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

function fmtCount(text) {
  const n = Number(String(text).replace(/[,_\s]/g, ""));
  if (!isFinite(n) || n <= 0) return str(text);
  for (const [unit, div] of [["B", 1e9], ["M", 1e6], ["K", 1e3]]) if (n >= div) return (n / div).toFixed(n >= 100 * div ? 0 : 1) + " " + unit;
  return String(n);
}

// ---- the summary on the node's face --------------------------------------------------------------
function recordSummary(record) {
  const tensors = (Array.isArray(record?.tensors) ? record.tensors : []).filter((t) => t && typeof t === "object");
  const by = (role) => tensors.filter((t) => t.role === role);
  const outs = by("output");
  const numel = (t) => (Array.isArray(t.shape) ? t.shape.reduce((a, b) => a * (Number(b) || 0), 1) : 0);
  const largest = outs.reduce((best, t) => (best && numel(best) > numel(t) ? best : t), null); // the last of equals
  const key = largest ?? by("internal").at(-1) ?? by("input").at(-1) ?? null;
  const warnings = Array.isArray(record?.warnings) ? record.warnings : [];
  const facts = record?.facts && typeof record.facts === "object" ? record.facts : {};
  const lines = [];
  let big, short;
  if (key) {
    const shape = fmtShape(key.shape);
    lines.push([{ text: str(key.name) + " ", tone: "name" }, { text: shape, tone: "key" },
      { text: " " + (DTYPE[str(key.dtype)] ?? str(key.dtype)), tone: "dim" }]);
    big = str(key.name) + " " + shape;
    short = shape.replace(/ /g, "");
    // the next output: the first recorded after the key (a prompt's pooled after its context), else before it
    const at = outs.indexOf(key);
    const next = outs[at + 1] ?? outs[at - 1];
    if (next) lines.push([{ text: str(next.name) + " ", tone: "name" }, { text: fmtShape(next.shape), tone: "key" },
      { text: outs.length > 2 ? ` +${outs.length - 2} out` : "", tone: "dim" }]);
  } else {
    const params = facts["parameters (unique)"];
    big = short = params !== undefined ? fmtCount(params) + " params" : str(record?.title) || "no tensors";
    lines.push([{ text: big, tone: "key" }, { text: facts.class ? " " + str(facts.class) : "", tone: "dim" }]);
    const where = [facts.dtype, facts.weights ?? facts.device].filter((x) => x !== undefined).map(str).join(" · ");
    if (where) lines.push([{ text: where, tone: "dim" }]);
  }
  let tail = `${tensors.length} tensor${tensors.length === 1 ? "" : "s"} · wall ${fmtTime(record?.wall_s)}`;
  if (typeof record?.peak_cuda_bytes === "number") tail += " · peak " + fmtBytes(record.peak_cuda_bytes);
  lines.push(warnings.length ? [{ text: "⚠ " + str(warnings[0]), tone: "warn" }] : [{ text: tail, tone: "dim" }]);
  const rows = tensors.length + warnings.length + Object.keys(facts).length + (record?.notes?.length ?? 0);
  return { lines: lines.slice(0, 3), big, short, rows };
}

function boundarySummary(rows, text) {
  const list = rows.filter((r) => r && typeof r === "object");
  const seen = list.filter((r) => Array.isArray(r.shape));
  const last = seen.at(-1);
  const big = `${seen.length}/${list.length} boundaries`;
  const lines = [[{ text: big, tone: "key" }, { text: " observed", tone: "dim" }]];
  if (last) lines.push([{ text: str(last.tensor) + " ", tone: "name" }, { text: fmtShape(last.shape), tone: "key" }]);
  const verdict = text.split("\n").at(-1);
  if (/boundaries equal/.test(verdict)) lines.push([{ text: verdict, tone: /^(\d+)\/\1 /.test(verdict) ? "dim" : "warn" }]);
  return { lines, big, short: big, rows: list.length };
}

function textSummary(text) {
  const lines = text.split("\n").filter((l) => l.trim());
  const flops = lines.find((l) => /FLOPs/.test(l));
  const big = flops ? flops.replace(/^.*?:\s*/, "") + " / step" : lines[0] ?? "";
  return { lines: lines.slice(0, 3).map((l, i) => [{ text: l, tone: i ? "dim" : "key" }]), big, short: big, rows: lines.length };
}

function textOf(message) {
  return Array.isArray(message?.text) ? message.text.map(str).join("\n") : "";
}

function recordOf(message) {
  const doc = Array.isArray(message?.fillscope_shapes) ? message.fillscope_shapes[0] : undefined;
  return doc && typeof doc === "object" && doc.node && typeof doc.node === "object" ? doc.node : null;
}

/** The summary for a node's face, or null when the message carries nothing FillScope shows. */
export function summarize(message) {
  const record = recordOf(message);
  if (record) return recordSummary(record);
  if (Array.isArray(message?.fillscope_boundaries)) return boundarySummary(message.fillscope_boundaries, textOf(message));
  const text = textOf(message);
  return text ? textSummary(text) : null;
}

// ---- the full table ----------------------------------------------------------------------------------
function badge(provenance, device) {
  const p = str(provenance);
  if (p === "measured") {
    const d = str(device);
    return el("span", "fs-badge fs-measured", d ? "measured·" + d : "measured");
  }
  if (p === "static-config") return el("span", "fs-badge fs-config", "config");
  return el("span", "fs-badge fs-other", p || "?");
}

function table(headers, rowCells, rowClass, decorate) {
  const t = el("table");
  const hr = el("tr");
  for (const h of headers) hr.appendChild(el("th", null, h));
  t.appendChild(el("thead")).appendChild(hr);
  const tbody = t.appendChild(el("tbody"));
  rowCells.forEach((cells, i) => {
    const tr = el("tr", rowClass(i));
    for (const cell of cells) {
      const td = el("td", cell.cls);
      if (cell.badge) td.appendChild(cell.badge);
      else td.textContent = cell.text;
      tr.appendChild(td);
    }
    decorate?.(tr, i);
    tbody.appendChild(tr);
  });
  return t;
}

function buildRecord(record) {
  const box = el("div", "fs-record");
  const tensors = (Array.isArray(record?.tensors) ? record.tensors : []).filter((t) => t && typeof t === "object");
  if (tensors.length) {
    box.appendChild(table(["", "tensor", "shape", "dtype", "provenance"], tensors.map((t) => [
      { cls: "fs-role", text: ROLE[t.role] ?? str(t.role) },
      { cls: "fs-name", text: str(t.name) },
      { cls: "fs-shape", text: fmtShape(t.shape) },
      { cls: "fs-dtype", text: str(t.dtype) },
      { cls: "fs-prov", badge: badge(t.provenance, t.device) },
    ]), () => "fs-row", (tr, i) => { tr.dataset.tensor = str(tensors[i].name); }));
  }
  let timing = "wall " + fmtTime(record?.wall_s);
  if (typeof record?.peak_cuda_bytes === "number") timing += " · peak CUDA " + fmtBytes(record.peak_cuda_bytes);
  box.appendChild(el("div", "fs-meta fs-timing", timing));
  for (const w of Array.isArray(record?.warnings) ? record.warnings : []) box.appendChild(el("div", "fs-warning", "⚠ " + str(w)));
  for (const n of Array.isArray(record?.notes) ? record.notes : []) box.appendChild(el("div", "fs-dim fs-note", "note: " + str(n)));
  const facts = record?.facts && typeof record.facts === "object" ? Object.entries(record.facts) : [];
  for (const [k, v] of facts) box.appendChild(el("div", "fs-dim fs-fact", str(k) + ": " + str(v)));
  return box;
}

function buildBoundaries(rows, text) {
  const box = el("div", "fs-boundaries");
  const list = rows.filter((r) => r && typeof r === "object");
  box.appendChild(table(["boundary", "tensor", "shape", "dtype", "provenance", "node"], list.map((r) => {
    const observed = Array.isArray(r.shape);
    return [
      { cls: "fs-boundary", text: str(r.boundary) },
      { cls: "fs-name", text: str(r.tensor) },
      // a pixel tensor on a padded / cropped model grid says so (summary.py size_note): "(padded from 1000x600)"
      { cls: "fs-shape", text: observed ? fmtShape(r.shape) + (r.size_note ? ` (${str(r.size_note)})` : "") : "not observed" },
      { cls: "fs-dtype", text: str(r.dtype) },
      observed ? { cls: "fs-prov", badge: badge(r.provenance, r.device) } : { cls: "fs-prov", text: "" },
      { cls: "fs-node fs-dim", text: str(r.node) },
    ];
  }), (i) => (Array.isArray(list[i].shape) ? "fs-row" : "fs-row fs-missing"),
  (tr, i) => { tr.dataset.tensor = str(list[i].tensor); }));
  const verdict = text.split("\n").at(-1);
  if (/boundaries equal/.test(verdict)) box.appendChild(el("div", "fs-meta fs-verdict", verdict));
  return box;
}

/** The full table of a message as an element (null when it carries nothing FillScope shows). */
export function buildTable(message) {
  const record = recordOf(message);
  if (record) return buildRecord(record);
  if (Array.isArray(message?.fillscope_boundaries)) return buildBoundaries(message.fillscope_boundaries, textOf(message));
  const text = textOf(message);
  return text ? el("pre", "fs-text", text) : null;
}

// ---- the dialog --------------------------------------------------------------------------------------
function ensureStyle() {
  if (document.getElementById("fillscope-table-style")) return;
  const style = el("style");
  style.id = "fillscope-table-style";
  style.textContent = `
.fillscope-table-backdrop { position: fixed; inset: 0; z-index: 3000; background: rgba(0,0,0,.5); display: flex; }
.fillscope-table-dialog { margin: auto; max-width: min(1400px, 96vw); max-height: 90vh; display: flex; flex-direction: column;
  background: var(--comfy-menu-bg, #353535); color: var(--input-text, #ddd); border: 1px solid var(--border-color, #4e4e4e);
  border-radius: 8px; box-shadow: 0 10px 40px rgba(0,0,0,.5); font: 13px/1.4 system-ui, sans-serif; }
.fillscope-table-dialog .fst-head { display: flex; align-items: center; gap: 10px; padding: 8px 12px; border-bottom: 1px solid var(--border-color, #4e4e4e); }
.fillscope-table-dialog .fst-title { font-weight: 600; flex: 1; }
.fillscope-table-dialog .fst-source { opacity: .6; font-size: 12px; }
.fillscope-table-dialog button { font: inherit; font-size: 12px; color: inherit; background: var(--comfy-input-bg, #222);
  border: 1px solid var(--border-color, #4e4e4e); border-radius: 5px; padding: 3px 8px; cursor: pointer; }
.fillscope-table-dialog .fst-body { overflow: auto; padding: 8px 12px 12px;
  font: 12px/17px ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; }
.fillscope-table-dialog table { border-collapse: collapse; }
.fillscope-table-dialog th { text-align: left; font-weight: 600; opacity: .7; position: sticky; top: -8px; background: var(--comfy-menu-bg, #353535); }
.fillscope-table-dialog td, .fillscope-table-dialog th { padding: 1px 12px 1px 0; white-space: nowrap; vertical-align: top; }
.fillscope-table-dialog td.fs-boundary { white-space: normal; min-width: 24ch; max-width: 52ch; }
.fillscope-table-dialog td.fs-role { opacity: .55; }
.fillscope-table-dialog td.fs-shape { color: #9cdcfe; }
.fillscope-table-dialog tr.fs-missing td { opacity: .45; }
.fillscope-table-dialog .fs-badge { border-radius: 3px; padding: 0 3px; }
.fillscope-table-dialog .fs-measured { background: #1f4d2e; color: #b6f0c6; }
.fillscope-table-dialog .fs-config { background: #4d3d12; color: #ffe08a; }
.fillscope-table-dialog .fs-other { background: #444; color: #ccc; }
.fillscope-table-dialog .fs-meta { margin-top: 4px; opacity: .85; }
.fillscope-table-dialog .fs-warning { margin-top: 2px; padding: 0 4px; background: #5a1d1d; color: #ffd0d0; border-left: 3px solid #ff6b6b; white-space: pre-wrap; }
.fillscope-table-dialog .fs-dim { opacity: .65; white-space: pre-wrap; }
.fillscope-table-dialog pre.fs-text { margin: 0; white-space: pre; }
`;
  document.head.appendChild(style);
}

let open = null; // {backdrop, onKey}

/** Show `message`'s full table in a dialog titled `title` (the node's title); `source` says where it came from. */
export function openTable(title, message, nodeId, source) {
  closeTable();
  const content = buildTable(message);
  if (!content) return null;
  ensureStyle();
  const backdrop = el("div", "fillscope-table-backdrop");
  const box = el("div", "fillscope-table-dialog");
  box.setAttribute("role", "dialog");
  box.setAttribute("aria-label", "FillScope shapes: " + str(title));
  box.dataset.nodeId = str(nodeId);
  const head = el("div", "fst-head");
  const close = el("button", "fst-close", "✕ Close");
  close.type = "button";
  close.addEventListener("click", () => closeTable());
  head.append(el("span", "fst-title", str(title)), el("span", "fst-source", source ? str(source) : ""), close);
  const body = el("div", "fst-body");
  body.appendChild(content);
  body.addEventListener("wheel", (e) => e.stopPropagation(), { passive: true });
  box.append(head, body);
  backdrop.appendChild(box);
  backdrop.addEventListener("mousedown", (e) => {
    if (e.target === backdrop) closeTable();
  });
  const onKey = (e) => {
    if (e.key === "Escape") {
      e.stopPropagation();
      closeTable();
    }
  };
  document.addEventListener("keydown", onKey, true);
  document.body.appendChild(backdrop);
  open = { backdrop, onKey };
  return box;
}

export function closeTable() {
  if (!open) return;
  document.removeEventListener("keydown", open.onKey, true);
  open.backdrop.remove();
  open = null;
}
