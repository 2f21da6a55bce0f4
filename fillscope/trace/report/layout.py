"""Page 1's macro graph as inline SVG, laid out here rather than by a graph library (the page has no network
and the pack no layout dependency): columns left to right by node kind, barycenter ordering within columns,
dummy slots for edges that span columns, and the shape figure on every edge. Deterministic: the same report
gives the same bytes."""

from __future__ import annotations

import itertools
import json
import re

from .format import badge_key, badge_text, exact_value, format_value
from .markup import Markup, el, json_pointer
from .schema import KINDS


_KIND_LABEL = {
    "input": ("Inputs", "输入"), "encoder": ("Encoders", "编码器"), "assembly": ("Condition assembly", "条件组装"),
    "denoiser": ("Denoiser", "去噪器"), "vae": ("VAE", "VAE"), "output": ("Output", "输出"),
}
_FONT_T, _FONT_D, _FONT_E = 12.5, 10.5, 10.5  # title, detail, edge label (px in SVG units)


def _text_width(s: str, size: float, mono=False) -> float:
    w = 0.0
    for ch in s:
        o = ord(ch)
        if o >= 0x2E80:
            w += size
        elif mono:
            w += size * 0.61
        elif ch in "iIl.,:;|!'()[] ":
            w += size * 0.32
        elif ch.isupper() or ch in "mwMW@%":
            w += size * 0.7
        else:
            w += size * 0.56
    return w


def _wrap(s: str, size: float, maxw: float) -> list[str]:
    """Greedy wrap at spaces (and between CJK characters)."""
    tokens = re.findall(r"[\u2e80-\uffff]|[^\s\u2e80-\uffff]+\s*|\s+", s)
    lines, cur = [], ""
    for t in tokens:
        if cur and _text_width((cur + t).rstrip(), size) > maxw:
            lines.append(cur.rstrip())
            cur = t.lstrip()
        else:
            cur += t
    if cur.strip():
        lines.append(cur.rstrip())
    return lines or [""]


def _split_shape(text: str, limit: int = 13) -> list[str]:
    """A long shape label on two lines, split after the comma nearest the middle; the second line keeps its
    leading space so the text content still reads "[1, 3, 1024, 1024]"."""
    if len(text) <= limit or ", " not in text:
        return [text]
    cuts = [m.start() + 1 for m in re.finditer(", ", text)]
    cut = min(cuts, key=lambda c: (abs(len(text) - 2 * c), c))
    return [text[:cut], text[cut:]]


def _svg_number(f: dict, name: str, lines: list[str], x: float, y: float) -> Markup:
    """A figure value as an SVG <text class="num"> (one <tspan> per line), vertically centred on y."""
    y0 = y - 12.5 * (len(lines) - 1) / 2 + 3.7
    spans = [el("tspan", {"x": f"{x:.1f}", "y": f"{y0 + 12.5 * j:.1f}"}, t) for j, t in enumerate(lines)]
    return el("text", {"class_": "num shape" if f["unit"] == "shape" else "num", "text-anchor": "middle",
                       "data-path": json_pointer("figures", name, "value"), "data-unit": f["unit"],
                       "data-value": json.dumps(f["value"], ensure_ascii=False),
                       "title": exact_value(f["value"], f["unit"])}, spans)


def _macro_columns(nodes, edges):
    """Column index per node id (left to right by kind; within a kind, by longest path over same-kind
    edges) and a header per column. Falls back to longest-path layering over the whole graph when an edge
    runs backwards in kind order."""
    ids = [n["id"] for n in nodes]
    kind = {n["id"]: n["kind"] for n in nodes}
    preds = {i: [] for i in ids}
    for e in edges:
        preds[e["to"]].append(e["from"])

    def longest(filter_edge):
        memo, busy = {}, set()

        def depth(i):
            if i in memo:
                return memo[i]
            if i in busy:
                raise ValueError("cycle")
            busy.add(i)
            d = max((depth(p) + 1 for p in preds[i] if filter_edge(p, i)), default=0)
            busy.discard(i)
            memo[i] = d
            return d
        return {i: depth(i) for i in ids}

    rank = {k: r for r, k in enumerate(KINDS)}
    try:
        sub = longest(lambda p, i: kind[p] == kind[i])
        key = {i: (rank[kind[i]], sub[i]) for i in ids}
        if all(key[e["from"]] < key[e["to"]] for e in edges):
            keys = sorted(set(key.values()))
            col = {i: keys.index(key[i]) for i in ids}
            headers = [_KIND_LABEL[KINDS[k[0]]] for k in keys]
            return col, headers
        layer = longest(lambda p, i: True)
    except ValueError:  # a cycle: kinds only
        layer = {i: rank[kind[i]] for i in ids}
    keys = sorted(set(layer.values()))
    col = {i: keys.index(layer[i]) for i in ids}
    headers = []
    for c in range(len(keys)):
        ks = [k for k in KINDS if any(col[i] == c and kind[i] == k for i in ids)]
        headers.append((" / ".join(_KIND_LABEL[k][0] for k in ks), " / ".join(_KIND_LABEL[k][1] for k in ks)))
    return col, headers


def macro_svg(report: dict) -> Markup:
    macro = report["pages"]["macro"]
    figs = report["figures"]
    nodes = macro["nodes"]
    edges = macro["edges"]
    node = {n["id"]: n for n in nodes}
    col, headers = _macro_columns(nodes, edges)
    ncol = len(headers)

    # chains through dummy slots for edges spanning more than one column
    columns: list[list[str]] = [[] for _ in range(ncol)]
    for n in nodes:
        columns[col[n["id"]]].append(n["id"])
    chains = []
    item_col = dict(col)
    pred_items: dict[str, list[str]] = {i: [] for i in col}
    succ_items: dict[str, list[str]] = {i: [] for i in col}
    for k, e in enumerate(edges):
        a, b = e["from"], e["to"]
        ca, cb = col[a], col[b]
        chain = [a]
        step = 1 if cb > ca else -1
        for c in range(ca + step, cb, step):
            d = f"\x00{k}:{c}"
            columns[c].append(d)
            item_col[d] = c
            pred_items[d], succ_items[d] = [], []
            chain.append(d)
        chain.append(b)
        for x, y in itertools.pairwise(chain):
            succ_items[x].append(y)
            pred_items[y].append(x)
        chains.append(chain)

    # order within columns: barycenter sweeps (deterministic: stable sorts, fixed number of sweeps)
    pos = {i: idx for c in columns for idx, i in enumerate(c)}
    for sweep in range(4):
        rng = range(1, ncol) if sweep % 2 == 0 else range(ncol - 2, -1, -1)
        for c in rng:
            nb = pred_items if sweep % 2 == 0 else succ_items

            def bary(i, nb=nb):
                ps = [pos[p] for p in nb[i] if item_col[p] != item_col[i]]
                return sum(ps) / len(ps) if ps else pos[i]
            columns[c] = sorted(columns[c], key=lambda i: (bary(i), pos[i]))
            for idx, i in enumerate(columns[c]):
                pos[i] = idx

    # sizes
    box_maxw = 152.0
    lines: dict[str, dict] = {}
    width_need = {}
    for n in nodes:
        i = n["id"]
        t_en = _wrap(n["label_en"], _FONT_T * 1.06, box_maxw - 20)
        t_zh = _wrap(n["label_zh"], _FONT_T * 1.06, box_maxw - 20)
        d_en = _wrap(n["detail_en"], _FONT_D, box_maxw - 20) if n["detail_en"] else []
        d_zh = _wrap(n["detail_zh"], _FONT_D, box_maxw - 20) if n["detail_zh"] else []
        lines[i] = {"t_en": t_en, "t_zh": t_zh, "d_en": d_en, "d_zh": d_zh}
        width_need[i] = max([_text_width(s, _FONT_T) * 1.06 for s in t_en + t_zh]
                            + [_text_width(s, _FONT_D) for s in d_en + d_zh] + [64]) + 26
    label_text = [format_value(figs[e["figure"]]["value"], figs[e["figure"]]["unit"]) for e in edges]
    label_lines = [_split_shape(t) for t in label_text]
    label_w = [max(_text_width(x, _FONT_E, mono=True) for x in ls) + 12 for ls in label_lines]
    label_h = [6 + 12.5 * len(ls) for ls in label_lines]
    # where each edge's label sits: in its first dummy slot (column space) or in the gap before the target
    label_at: list[tuple] = []
    for k, chain in enumerate(chains):
        if len(chain) > 2:
            label_at.append(("slot", chain[1]))
        else:
            label_at.append(("gap", min(col[chain[0]], col[chain[1]])))
    col_w = []
    for c in range(ncol):
        need = [width_need[i] for i in columns[c] if i in node]
        need += [label_w[k] + 8 for k, (w, where) in enumerate(label_at) if w == "slot" and item_col[where] == c]
        need += [_text_width(headers[c][0], 10.5) + 8, _text_width(headers[c][1], 10.5) + 8]
        col_w.append(max(need + [80.0]))
    gap_w = []
    for g in range(ncol - 1):
        need = [label_w[k] + 12 for k, (w, where) in enumerate(label_at) if w == "gap" and where == g]
        gap_w.append(max(need + [48.0]))

    n_in = {i: 0 for i in item_col}
    n_out = {i: 0 for i in item_col}
    for chain in chains:
        n_out[chain[0]] += 1
        n_in[chain[-1]] += 1
    height = {}
    for i in item_col:
        if i in node:
            L = lines[i]
            t = max(len(L["t_en"]), len(L["t_zh"]))
            d = max(len(L["d_en"]), len(L["d_zh"]))
            h = 14 + t * 16 + d * 14 + 10
            height[i] = max(h, 20 * max(n_in[i], n_out[i]) + 12, 46)
        else:
            height[i] = 22
    vgap = 18.0
    col_h = [sum(height[i] for i in c) + vgap * max(0, len(c) - 1) for c in columns]
    top_pad, margin = 30.0, 6.0
    inner_h = max(col_h)
    x_of = []
    x = margin
    for c in range(ncol):
        x_of.append(x)
        x += col_w[c] + (gap_w[c] if c < ncol - 1 else 0)
    total_w = x + margin
    total_h = top_pad + inner_h + margin + 6
    y_of = {}
    for c, items in enumerate(columns):
        y = top_pad + (inner_h - col_h[c]) / 2
        for i in items:
            y_of[i] = y
            y += height[i] + vgap

    # ports: spread edges on a box's side in the order of the item at the other end
    def port_ys(i, ends):
        order = sorted(range(len(ends)), key=lambda k: (y_of[ends[k]] + height[ends[k]] / 2, k))
        ys = [0.0] * len(ends)
        for rank_, k in enumerate(order):
            ys[k] = y_of[i] + height[i] * (rank_ + 1) / (len(ends) + 1)
        return ys

    out_ends = {i: [] for i in item_col}
    in_ends = {i: [] for i in item_col}
    out_idx, in_idx = {}, {}
    for k, chain in enumerate(chains):
        out_idx[k] = len(out_ends[chain[0]])
        out_ends[chain[0]].append(chain[1])
        in_idx[k] = len(in_ends[chain[-1]])
        in_ends[chain[-1]].append(chain[-2])
    out_y = {i: port_ys(i, out_ends[i]) for i in item_col}
    in_y = {i: port_ys(i, in_ends[i]) for i in item_col}

    parts = []
    # column headers
    spans: list[list] = []
    for c in range(ncol):
        if spans and headers[spans[-1][0]] == headers[c]:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    for c0, c1 in spans:
        c = c0
        cx = (x_of[c0] + x_of[c1] + col_w[c1]) / 2
        parts.append(el("text", {"class_": "colhead l-en", "x": f"{cx:.1f}", "y": "18", "text-anchor": "middle"},
                        headers[c][0]))
        parts.append(el("text", {"class_": "colhead l-zh", "x": f"{cx:.1f}", "y": "18", "text-anchor": "middle"},
                        headers[c][1]))
    # edges
    edge_parts, label_parts = [], []
    gap_labels: dict[int, list] = {}
    for k, (chain, e) in enumerate(zip(chains, edges)):
        a, b = chain[0], chain[-1]
        fwd = col[b] > col[a]
        pts = []
        xa = x_of[col[a]] + (col_w[col[a]] if fwd else 0)
        pts.append((xa, out_y[a][out_idx[k]]))
        for d in chain[1:-1]:
            cy = y_of[d] + height[d] / 2
            c = item_col[d]
            pts.append((x_of[c] if fwd else x_of[c] + col_w[c], cy))
            pts.append((x_of[c] + col_w[c] if fwd else x_of[c], cy))
        xb = x_of[col[b]] if fwd else x_of[col[b]] + col_w[col[b]]
        pts.append((xb - (3 if fwd else -3), in_y[b][in_idx[k]]))
        d_attr = f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"
        for j in range(1, len(pts)):
            (x1, y1), (x2, y2) = pts[j - 1], pts[j]
            if j % 2 == 1:  # across a gap: a smooth S with horizontal tangents
                mx = (x1 + x2) / 2
                d_attr += f" C{mx:.1f},{y1:.1f} {mx:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
            else:  # straight through a dummy slot
                d_attr += f" L{x2:.1f},{y2:.1f}"
        f = figs[e["figure"]]
        bk = badge_key(f["provenance"], f["device"])
        edge_parts.append(el("path", {"class_": f"edge e-{bk}", "d": d_attr, "marker-end": "url(#fs-arrow)"}))
        where = label_at[k]
        if where[0] == "slot":
            lx = x_of[item_col[where[1]]] + col_w[item_col[where[1]]] / 2
            ly = y_of[where[1]] + height[where[1]] / 2
            label_parts.append((k, lx, ly))
        else:
            (x1, y1), (x2, y2) = pts[0], pts[1]
            gap_labels.setdefault(where[1], []).append([k, (x1 + x2) / 2, (y1 + y2) / 2])
    # labels sharing a gap: keep them apart vertically
    for g, labs in gap_labels.items():
        labs.sort(key=lambda t: (t[2], t[0]))
        for j in range(1, len(labs)):
            need = (label_h[labs[j][0]] + label_h[labs[j - 1][0]]) / 2 + 3
            if labs[j][2] - labs[j - 1][2] < need:
                labs[j][2] = labs[j - 1][2] + need
        label_parts += [tuple(t) for t in labs]
    for k, lx, ly in sorted(label_parts):
        e = edges[k]
        f = figs[e["figure"]]
        bk = badge_key(f["provenance"], f["device"])
        w = label_w[k]
        ben = badge_text(f["provenance"], f["device"])[0]
        label_parts_k = el(
            "g", {"class_": f"elabel fig e-{bk}", "data-fig": e["figure"], "data-edge": f"{e['from']}->{e['to']}"},
            el("title", None, f"{e['from']} → {e['to']}: {f['label_en']} = {label_text[k]} ({ben}; {f['method']})"),
            el("rect", {"x": f"{lx - w / 2:.1f}", "y": f"{ly - label_h[k] / 2:.1f}", "width": f"{w:.1f}",
                        "height": f"{label_h[k]:.1f}", "rx": "7"}),
            _svg_number(f, e["figure"], label_lines[k], lx, ly),
        )
        edge_parts.append(label_parts_k)
    # nodes
    node_parts = []
    for n in nodes:
        i = n["id"]
        x0, y0, w, h = x_of[col[i]], y_of[i], col_w[col[i]], height[i]
        L = lines[i]
        body = [el("rect", {"class_": "nbox", "x": f"{x0:.1f}", "y": f"{y0:.1f}", "width": f"{w:.1f}",
                            "height": f"{h:.1f}", "rx": "8"}),
                el("rect", {"class_": "nstripe", "x": f"{x0:.1f}", "y": f"{y0:.1f}", "width": "4",
                            "height": f"{h:.1f}", "rx": "2"})]
        for lang in ("en", "zh"):
            tl, dl = L[f"t_{lang}"], L[f"d_{lang}"]
            block_h = len(tl) * 16 + len(dl) * 14
            yy = y0 + (h - block_h) / 2 + 12
            for s in tl:
                body.append(el("text", {"class_": f"ntitle l-{lang}", "x": f"{x0 + w / 2 + 2:.1f}", "y": f"{yy:.1f}",
                                        "text-anchor": "middle"}, s))
                yy += 16
            for s in dl:
                body.append(el("text", {"class_": f"ndetail l-{lang}", "x": f"{x0 + w / 2 + 2:.1f}",
                                        "y": f"{yy - 1:.1f}", "text-anchor": "middle"}, s))
                yy += 14
        node_parts.append(el("g", {"class_": f"node k-{n['kind']}", "data-node": i},
                             el("title", None, f"{n['label_en']} — {n['detail_en']}"), body))
    defs = Markup(
        '<defs><marker id="fs-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,1 L10,5 L0,9 z" class="arrowhead" /></marker></defs>')
    return el("svg", {"class_": "macro", "xmlns": "http://www.w3.org/2000/svg",
                      "viewBox": f"0 0 {total_w:.0f} {total_h:.0f}", "width": f"{total_w:.0f}",
                      "height": f"{total_h:.0f}", "role": "img",
                      "aria-label": f"{report['title']}: macro architecture"},
              defs, parts, node_parts, edge_parts)

