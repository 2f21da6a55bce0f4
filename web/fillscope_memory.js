// FillScope: a node's last shapes table, found again in ComfyUI's own /history.
//
// ComfyUI sends `executed` (with the node's ui) only for the nodes it runs. A node it takes from its cache is named in
// `execution_cached` and nothing else, and after a page reload the canvas holds no ui at all. Both are answered from
// GET /history (the server's record of the prompts it ran: each with its API prompt, its extra data, the ui of
// every node it executed, and its status messages, `execution_cached` among them):
//
//   - a cached node's table: ComfyUI reuses an output when the node's class and inputs are the same, its upstream
//     nodes' included (its cache key); `signatures(prompt)` computes that identity for the nodes of an API prompt
//     (class_type and inputs, a link replaced by its source node's identity, recursively; the node id and title
//     left out), and the table is the newest ui of a node with the same identity in the history;
//   - after a reload or on loading a workflow: each node gets what it showed after the latest run of this very
//     workflow (the run's extra_pnginfo.workflow.id is the graph's id) that ran it or took it from the cache;
//     a node that no run of this workflow reached gets the table of a node with the same identity run elsewhere.
//
// Only the newest HISTORY_ITEMS prompts are read. Nothing is stored in the workflow or in the browser.
import { api } from "../../scripts/api.js";

const HISTORY_ITEMS = 64;

function isLink(v) {
  return Array.isArray(v) && v.length === 2 && typeof v[0] === "string" && Number.isInteger(v[1]);
}

/** cyrb53: a 53-bit string hash, as base-36 text. */
function hash(s) {
  let h1 = 0xdeadbeef, h2 = 0x41c6ce57;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return (4294967296 * (2097151 & h2) + (h1 >>> 0)).toString(36);
}

/** For an API-format prompt: id -> the node's identity (what ComfyUI's output cache keys on). */
export function signatures(prompt) {
  const memo = new Map();
  const visiting = new Set();
  const sig = (id) => {
    id = String(id);
    if (memo.has(id)) return memo.get(id);
    const node = prompt && typeof prompt === "object" ? prompt[id] : null;
    if (!node || typeof node !== "object" || visiting.has(id)) return "?" + id;
    visiting.add(id);
    const inputs = node.inputs && typeof node.inputs === "object" ? node.inputs : {};
    const parts = Object.keys(inputs).sort().map((k) => {
      const v = inputs[k];
      return [k, isLink(v) ? ["@", sig(v[0]), v[1]] : v];
    });
    visiting.delete(id);
    const s = hash(JSON.stringify([String(node.class_type), parts]));
    memo.set(id, s);
    return s;
  };
  return sig;
}

function isFillScope(type) {
  return typeof type === "string" && type.startsWith("FillScope");
}

function statusMessage(entry, type) {
  const m = Array.isArray(entry?.status?.messages) ? entry.status.messages.find((x) => Array.isArray(x) && x[0] === type) : null;
  return m && m[1] && typeof m[1] === "object" ? m[1] : null;
}

/** When the prompt finished (ms since the epoch), from its status messages; 0 when unknown. */
export function entryTime(entry) {
  const m = statusMessage(entry, "execution_success") ?? statusMessage(entry, "execution_error") ?? statusMessage(entry, "execution_start");
  return typeof m?.timestamp === "number" ? m.timestamp : 0;
}

/** The newest prompts of GET /history, newest first: [{id, prompt, outputs, status}]; [] when it fails. */
export async function fetchHistory(maxItems = HISTORY_ITEMS) {
  try {
    const resp = await api.fetchApi("/history?max_items=" + maxItems, { cache: "no-store" });
    if (!resp.ok) return [];
    const data = await resp.json();
    if (!data || typeof data !== "object") return [];
    return Object.entries(data).filter(([, e]) => e && typeof e === "object" && Array.isArray(e.prompt))
      .map(([id, e]) => ({ ...e, id })).reverse();
  } catch (err) {
    console.warn("[FillScope] could not read /history", err);
    return [];
  }
}

/** identity -> {ui, promptId, nodeId, time}: the newest ui of each FillScope node identity in `entries`. */
export function indexBySignature(entries) {
  const map = new Map();
  for (const e of entries) {
    const prompt = e.prompt?.[2];
    if (!prompt || typeof prompt !== "object" || !e.outputs || typeof e.outputs !== "object") continue;
    const sig = signatures(prompt);
    for (const [nid, ui] of Object.entries(e.outputs)) {
      if (!ui || typeof ui !== "object" || !isFillScope(prompt[nid]?.class_type)) continue;
      const s = sig(nid);
      if (!map.has(s)) map.set(s, { ui, promptId: e.id, nodeId: nid, time: entryTime(e) });
    }
  }
  return map;
}

/** The prompt (API format) of a queued or running prompt, from GET /queue; null when it is not there. */
export async function queuedPrompt(promptId) {
  try {
    const resp = await api.fetchApi("/queue", { cache: "no-store" });
    const q = await resp.json();
    for (const item of [...(q?.queue_running ?? []), ...(q?.queue_pending ?? [])]) {
      if (Array.isArray(item) && item[1] === promptId && item[2] && typeof item[2] === "object") return item[2];
    }
  } catch (err) {
    console.warn("[FillScope] could not read /queue", err);
  }
  return null;
}

/** Tables for nodes `ids` of `prompt` (a prompt that took them from the cache): Map id -> {ui, promptId, ...}. */
export async function cachedTables(prompt, ids, entries) {
  entries = entries ?? (await fetchHistory());
  const bySig = indexBySignature(entries);
  const sig = signatures(prompt);
  const out = new Map();
  for (const id of ids) {
    const found = bySig.get(sig(id));
    if (found) out.set(String(id), found);
  }
  return out;
}

/** What the FillScope nodes of `graph` showed after their latest run (see the header). `prompt`: the graph as an
 *  API prompt (app.graphToPrompt().output), for nodes no run of this workflow reached. Map id -> {ui, ...}. */
export function lastTables(graph, prompt, entries) {
  const bySig = indexBySignature(entries);
  const types = new Map((graph?.nodes ?? []).filter((n) => isFillScope(n.type)).map((n) => [String(n.id), n.type]));
  const out = new Map();
  const gid = graph?.id;
  for (const e of entries) {
    if (out.size === types.size) break;
    if (!gid || e.prompt?.[3]?.extra_pnginfo?.workflow?.id !== gid) continue;
    const run = e.prompt[2];
    if (!run || typeof run !== "object") continue;
    const sig = signatures(run);
    const cached = new Set((statusMessage(e, "execution_cached")?.nodes ?? []).map(String));
    for (const [id, type] of types) {
      if (out.has(id) || run[id]?.class_type !== type) continue;
      const ui = e.outputs?.[id];
      const found = ui && typeof ui === "object" ? { ui, promptId: e.id, nodeId: id, time: entryTime(e) }
        : cached.has(id) ? bySig.get(sig(id)) : null;
      if (found) out.set(id, found);
    }
  }
  if (prompt && typeof prompt === "object") {
    const sig = signatures(prompt);
    for (const id of types.keys()) {
      if (out.has(id) || !prompt[id]) continue;
      const found = bySig.get(sig(id));
      if (found) out.set(id, found);
    }
  }
  return out;
}
