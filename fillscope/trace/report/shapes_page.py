"""The Shapes Report's page: one self-contained HTML file with the boundary table a person reads at a glance (like
torchinfo's summary: one row per boundary, its shape, dtype, where it was measured and by which node), the Inspect
Model / CLIP / VAE sections beside it, EN / 中文 like the five-page report.

It is built with the five-page report's parts: the element builder (every string escaped), report.css and
report.js (the language switch, the viewer's postMessage protocol: the page tells FillScope's viewer its language
and asks it for the .json file) and the same Content-Security-Policy (no network, only report.js by its hash).

    html = render_shapes_page(title, rows=..., sections=..., json_text=..., json_name=...)

`rows` are fillscope/trace/summary.py boundary_rows, `sections` its record_section dicts; `json_text` is the .json
file written beside the page, verbatim (offered as a data: download for the page opened on its own). A record of a
tiled run (nodes/tiled.py: its record key "tiles", read from the shapes documents in `json_text`) adds a tile map:
an inline SVG of the image with each tile's box, the sampled ones shaded."""

from __future__ import annotations

import base64
import hashlib
import json

from ..records import MEASURED
from ..summary import compare_with_seed, seed_shapes
from .document import _inline_asset
from .format import badge
from .markup import Markup, el, en_zh, en_zh_title

SHAPES_GENERATOR = "FillScope shapes report (fillscope.shapes/1)"
# the page's own few rules on top of report.css (the table's columns, the image line)
_CSS = """
.shapes main{max-width:1400px}
.shapes .tablewrap{overflow-x:auto;border-radius:8px}
.shapes table.grid td.boundary{min-width:200px}
.shapes table.grid td.shp{font-size:12px;white-space:nowrap}
.shapes table.grid td.tensor{font-family:var(--mono);font-size:11.5px;color:var(--muted)}
.shapes table.grid tr.missing td{color:var(--muted)}
.shapes .facts{display:flex;flex-wrap:wrap;gap:4px 16px;margin:4px 0 8px;font-size:12.5px}
.shapes .facts b{font-weight:600;color:var(--muted)}
.shapes .files{margin:6px 0 10px;font-size:12.5px;color:var(--muted)}
.shapes .files code{color:var(--ink)}
.shapes .warn{color:#9a2b00}
.shapes .totals{margin:6px 2px;font-size:12px;color:var(--muted)}
.shapes svg.tilemap{max-width:100%;height:auto;background:#fff;border:1px solid #ddd;border-radius:6px}
.shapes svg.tilemap rect.tile{fill:#2a6fdb;fill-opacity:.22;stroke:#1d4f9e;stroke-width:1.5}
.shapes svg.tilemap rect.tile.skipped{fill-opacity:0;stroke-dasharray:6 4}
.shapes svg.tilemap text{fill:#1d4f9e;font-family:var(--mono)}
"""
TILE_MAP_WIDTH = 560  # px on the page; the SVG's own units are the image's pixels

_HEAD = (("#", "#"), ("boundary", "边界"), ("tensor", "张量"), ("shape", "形状"), ("dtype", "数据类型"),
         ("provenance", "来源"), ("node", "节点"))


def _shape_text(row: dict) -> str:
    if row.get("shape") is None:
        return "—"
    text = "[" + ", ".join(str(d) for d in row["shape"]) + "]"
    return text + (f" ({row['size_note']})" if row.get("size_note") else "")


def _provenance(row: dict) -> Markup:
    if row.get("provenance") == MEASURED:
        return badge(MEASURED, str(row.get("device", "")), small=True)
    if row.get("provenance") == "not observed":
        return en_zh("not observed", "未观测")
    return el("span", None, str(row.get("provenance", "")))


def _table(rows: list[dict], *, seed: dict | None = None, seed_name: str = "", seed_table: dict | None = None,
           called_by: bool = False, kind: str) -> Markup:
    head = list(_HEAD) + ([(f"{seed_name} (static)", f"{seed_name}（静态）")] if seed else [])
    head += [("called by node", "调用节点")] if called_by else []
    body = []
    for i, r in enumerate(rows, 1):
        cells = [el("td", {"class_": "idx"}, str(i)), el("td", {"class_": "boundary"}, r["boundary"]),
                 el("td", {"class_": "tensor"}, r["tensor"]),
                 el("td", {"class_": "shp mono", "data-shape": _shape_text(r)}, _shape_text(r)),
                 el("td", {"class_": "mono"}, r.get("dtype", "")), el("td", None, _provenance(r)),
                 el("td", None, r.get("node", ""))]
        if seed:
            same = seed.get(r["tensor"])
            cells.append(el("td", None, "" if same is None else en_zh("same", "相同") if same else
                            en_zh(f"differs: {seed_table[r['tensor']]}", f"不同：{seed_table[r['tensor']]}")))
        if called_by:
            cells.append(el("td", None, r.get("called_by", "")))
        body.append(el("tr", {"class_": "missing" if r.get("shape") is None else None, "data-tensor": r["tensor"]},
                       cells))
    # a narrow view (the sidebar) scrolls the table sideways instead of squeezing its shapes
    return el("div", {"class_": "tablewrap"}, el("table", {"class_": "grid shapes-table", "data-table": kind},
              el("thead", None, el("tr", None, [el("th", None, en_zh(en, zh)) for en, zh in head])),
              el("tbody", None, body)))


def _section(s: dict) -> Markup:
    title = f"{s['title']} (node {s['node']})" + (f": {s['class']}" if s.get("class") else "")
    facts = el("div", {"class_": "facts"}, [el("span", None, el("b", None, f"{k}: "), str(v))
                                            for k, v in s.get("facts", {}).items()]) if s.get("facts") else None
    warnings = [el("div", {"class_": "warn"}, en_zh("warning: ", "警告："), w) for w in s.get("warnings", [])]
    rows = s.get("rows", [])
    table = (_table(rows, called_by=any("called_by" in r for r in rows), kind="inspect") if rows
             else el("p", {"class_": "muted"}, en_zh("no tensor recorded", "没有记录到张量")))
    return el("section", {"class_": "inspect", "data-node": s["node"]}, el("h3", None, title), facts, warnings, table)


def tile_maps(json_text: str) -> list[tuple[str, dict]]:
    """(node title, its "tiles" entry) of every record of the report's shapes documents (`shapes`, `shapes_2`) that
    ran by tiles (nodes/tiled.py record_tiles: width, height, tile, overlap, mode, tiles [{index, box, sampled, ...}]),
    each record once; none for a report of another graph or a text that is not the report's JSON."""
    try:
        report = json.loads(json_text)
    except (TypeError, ValueError):
        return []
    out, seen = [], set()
    docs = [report.get(key) for key in ("shapes_2", "shapes")] if isinstance(report, dict) else []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        trail = doc.get("trail") if isinstance(doc.get("trail"), list) else []
        for rec in trail + [doc.get("node")]:
            if isinstance(rec, dict) and isinstance(rec.get("tiles"), dict) and rec.get("id") not in seen:
                seen.add(rec.get("id"))
                out.append((str(rec.get("title", "")), rec["tiles"]))
    return out


def _tile_map(title: str, m: dict) -> Markup | None:
    """One tiled run's map: the image's rectangle, each tile's box (shaded when sampled, dashed when not) with its
    index; its size and settings above it. None when the entry holds no tile."""
    tiles = [t for t in m.get("tiles", []) if isinstance(t, dict) and len(t.get("box") or ()) == 4]
    if not tiles:
        return None
    width, height = int(m.get("width", 0)), int(m.get("height", 0))
    span_x = max([width] + [int(t["box"][2]) for t in tiles])  # mode shared: boxes on the padded model grid
    span_y = max([height] + [int(t["box"][3]) for t in tiles])
    font = max(span_x, span_y) / 32
    shapes = [el("rect", {"class_": "image", "x": 0, "y": 0, "width": width, "height": height, "fill": "#f3f1ec",
                          "stroke": "#777", "stroke-width": 1.5, "vector-effect": "non-scaling-stroke"})]
    for t in tiles:
        x0, y0, x1, y1 = (int(v) for v in t["box"])
        about = (f"tile {t.get('index')}: x {x0}-{x1}, y {y0}-{y1}, " +
                 (f"{t.get('tokens')} tokens" if t.get("sampled") else "not sampled"))
        shapes.append(el("g", {"class_": "tile", "data-index": t.get("index")},
                         el("title", None, about),
                         el("rect", {"class_": "tile" + ("" if t.get("sampled") else " skipped"), "x": x0, "y": y0,
                                     "width": x1 - x0, "height": y1 - y0, "vector-effect": "non-scaling-stroke"}),
                         el("text", {"x": f"{x0 + font * 0.4:.1f}", "y": f"{y0 + font * 1.1:.1f}",
                                     "font-size": f"{font:.1f}"},
                            str(t.get("index")))))
    sampled = sum(1 for t in tiles if t.get("sampled"))
    line_en = (f"{width}x{height} px, {len(tiles)} tiles of {m.get('tile')} px, overlap {m.get('overlap')}, mode "
               f"{m.get('mode')}: {sampled} sampled (shaded), {len(tiles) - sampled} not (dashed)")
    line_zh = (f"{width}x{height} 像素，{len(tiles)} 个 {m.get('tile')} 像素分块，重叠 {m.get('overlap')}，模式 "
               f"{m.get('mode')}：{sampled} 个已采样（阴影），{len(tiles) - sampled} 个未采样（虚线）")
    svg = el("svg", {"class_": "tilemap", "xmlns": "http://www.w3.org/2000/svg", "viewBox": f"0 0 {span_x} {span_y}",
                     "width": TILE_MAP_WIDTH, "height": round(TILE_MAP_WIDTH * span_y / max(span_x, 1)),
                     "role": "img", "aria-label": f"tile map of {title}"}, shapes)
    return el("section", {"class_": "tiles", "data-node": title},
              el("h3", None, en_zh(f"Tile map: {title}", f"分块图：{title}")),
              el("div", {"class_": "facts"}, en_zh(line_en, line_zh)), svg)


def page_top(title: str, kind: tuple, json_text: str, json_name: str, what: tuple, extra_css: str = ""):
    """What every one-page FillScope page starts with: (css, js, Content-Security-Policy, header). The header holds
    the brand and `kind` (en, zh), the title, the EN / 中文 switch (report.js) and the JSON download (`what`: its
    label in en, zh) carrying `json_text` verbatim; the policy lets in only report.js (by its hash) and data: images."""
    css, js = _inline_asset("report.css") + extra_css, _inline_asset("report.js")
    script_hash = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")
    csp = (f"default-src 'none'; script-src 'sha256-{script_hash}'; style-src 'unsafe-inline'; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    data_uri = "data:application/json;charset=utf-8;base64," + base64.b64encode(json_text.encode("utf-8")).decode("ascii")
    top = el("header", {"class_": "top"},
             el("div", {"class_": "brand"}, "FillScope", el("span", None, en_zh(*kind))),
             el("h1", None, title),
             el("div", {"class_": "tools"},
                el("div", {"class_": "langs", "role": "group", "aria-label": "language"},
                   el("button", {"type": "button", "data-lang": "en", "aria-pressed": "true"}, "EN"),
                   el("button", {"type": "button", "data-lang": "zh", "aria-pressed": "false", "lang": "zh-CN"}, "中文")),
                el("a", {"class_": "dl", "href": data_uri, "download": json_name, **en_zh_title(
                    f"{what[0]}, verbatim ({json_name})", f"{what[1]}（{json_name}）")}, "⤓ JSON")))
    return css, js, csp, top


def render_shapes_page(title: str, *, rows: list[dict], sections: list[dict], json_text: str, json_name: str,
                       crop: str | None = None, not_recorded: list[str] = (), images: list[str] = (),
                       prompt_id: str | None = None) -> str:
    """The page (str). `title`: the report's file stem; `images`: the image files saved with it (same stem)."""
    css, js, csp, top = page_top(title, ("shapes report", "形状报告"), json_text, json_name,
                                 ("the report's JSON", "报告 JSON 原文"), _CSS)
    files = None
    if images:
        files = el("div", {"class_": "files"}, en_zh("image of this run: ", "本次运行的图像："),
                   [(Markup(", ") if i else None, el("code", {"class_": "image-file"}, name))
                    for i, name in enumerate(images)])
    parts = []
    if not_recorded:
        parts.append(el("p", {"class_": "warn not-recorded"}, en_zh(
            f"no record in this prompt from {', '.join(not_recorded)}: what calls their MODEL / CLIP / VAE ran from "
            "ComfyUI's cache or after this report",
            f"本次 prompt 中 {', '.join(not_recorded)} 没有记录："
            "调用其 MODEL / CLIP / VAE 的节点来自 ComfyUI 缓存，或在本报告之后运行")))
    for s in sections:
        parts.append(_section(s))
    parts += [_tile_map(name, m) for name, m in tile_maps(json_text)]
    if rows:
        seed = compare_with_seed(rows)
        seed_name, seed_table = seed_shapes(rows) or ("", {})
        measured = sum(1 for r in rows if r.get("shape") is not None)
        parts.append(el("section", {"class_": "boundaries"},
                        el("h3", None, en_zh("Boundary shapes", "边界形状")),
                        _table(rows, seed=seed, seed_name=seed_name, seed_table=seed_table, kind="boundaries"),
                        el("div", {"class_": "totals"}, en_zh(
                            f"{measured} of {len(rows)} boundaries measured in this run",
                            f"本次运行实测 {measured} / {len(rows)} 个边界"),
                           [Markup(" · "), en_zh(
                               f"{sum(seed.values())}/{len(seed)} boundaries equal the seed trace's shapes",
                               f"{sum(seed.values())}/{len(seed)} 个边界与种子 trace 的形状相同")] if seed else None),
                        el("p", {"class_": "crop"}, en_zh("crop: ", "裁剪："), crop) if crop else None))
    page = el("section", {"class_": "page", "id": "page-1", "data-page": "1"},
              el("header", {"class_": "phead"},
                 el("h2", None, en_zh("Shapes of this run", "本次运行的形状")),
                 el("p", {"class_": "sub"}, en_zh(
                     "Every boundary tensor the graph's nodes measured, in pipeline order"
                     + (f" (prompt {prompt_id})" if prompt_id else "") + ".",
                     "图中各节点实测的每个边界张量，按流水线顺序" + (f"（prompt {prompt_id}）" if prompt_id else "") + "。"))),
              files, parts)
    return ("<!DOCTYPE html>\n"
            + el("html", {"lang": "en", "data-lang": "en", "class_": "shapes"},
                 el("head", None,
                    Markup('<meta charset="utf-8">'),
                    el("meta", {"http-equiv": "Content-Security-Policy", "content": csp}),
                    el("meta", {"name": "viewport", "content": "width=device-width, initial-scale=1"}),
                    el("meta", {"name": "generator", "content": SHAPES_GENERATOR}),
                    el("title", None, f"{title} · FillScope shapes report"),
                    el("style", None, Markup(css))),
                 el("body", None, top, el("main", None, page), el("script", None, Markup(js))))
            + "\n")
