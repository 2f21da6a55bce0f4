"""A comparison's report page: one self-contained HTML file beside the comparison's JSON (record.write_compare
writes <name>.html), EN / 中文 like the Shapes Report and the five-page report.

    html = compare_page(doc, {"a": png, "b": png, "heatmap": png}, title="compare", json_text=..., json_name=...)

`doc` is record.compare_document's dict (schema fillscope.compare/1, as written to the .json: non-finite figures
are the strings "inf" / "-inf" / "nan"); `images` the PNG bytes of image A, image B and the difference heat map
(None or {} for a shapes-only comparison: nothing to show). The page holds, in both languages: the headline (the
first divergence, the image PSNR inside the mask), both runs' definitions side by side, the image figures (PSNR,
SSIM, max abs inside the mask, outside it and over the whole image), the three images with what the heat map's
brightness means, every boundary with its figures (the first divergence marked, the status coloured), and the
provenance line.

It is built with the report's parts (fillscope/trace/report): the element builder (every string escaped; data
reaches the page no other way), report.css and report.js (the language switch, remembered in the URL hash and
localStorage, and the viewer's postMessage protocol) and the same Content-Security-Policy: no network at all, only
report.js by its hash, images only as data: URIs.
"""

from __future__ import annotations

import base64
import json
import math

from ..trace.report.markup import Markup, el, en_zh
from ..trace.report.shapes_page import page_top

GENERATOR = "FillScope comparison report (fillscope.compare/1)"
IMAGE_KINDS = (("a", "A", "A"), ("b", "B", "B"), ("heatmap", "difference heat map", "差异热图"))
# the page's own rules on top of report.css: the run table, the figures, the images, the status colours
_CSS = """
.compare main{max-width:1400px}
.compare .headline{font-size:16px;font-weight:600;margin:2px 0 4px}
.compare .subline{color:var(--muted);font-size:12.5px;margin:0 0 6px}
.compare .tablewrap{overflow-x:auto;border-radius:8px}
.compare table.grid td.boundary{min-width:220px;font-family:var(--mono);font-size:12px}
.compare table.grid td.shp{font-size:12px;white-space:nowrap}
.compare table.grid td.r{font-family:var(--mono);font-size:12px}
.compare table.imagefigs th+th{text-align:right}
.compare table.runs td.field{color:var(--muted);white-space:nowrap}
.compare table.runs tr.changed td{background:#fff8e6}
.compare table.runs tr.changed td.field{color:#8a5a00;font-weight:600}
.compare .st{font-weight:600;border-radius:999px;padding:0 8px;font-size:11.5px;white-space:nowrap}
.compare .st-same{color:var(--cuda);background:var(--cuda-bg)}
.compare .st-differs,.compare .st-shapes-differ{color:#a3261b;background:#fde7e4}
.compare .st-same-shape{color:var(--host);background:var(--host-bg)}
.compare .st-only-a,.compare .st-only-b{color:var(--static);background:var(--static-bg)}
.compare table.grid tr.first td{background:#fff4f1;border-top:2px solid #d9412f;border-bottom:2px solid #d9412f}
.compare .firstmark{display:inline-block;margin-left:8px;color:#fff;background:#d9412f;border-radius:5px;
padding:0 6px;font-size:10.5px;font-family:var(--sans);font-weight:600}
.compare .images{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:12px;align-items:start}
.compare figure{margin:0;background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:8px}
.compare figure img{display:block;width:100%;height:auto;image-rendering:pixelated;border-radius:4px;background:#000}
.compare figcaption{font-size:12.5px;margin-top:6px}
.compare .heatnote{font-size:12.5px;color:#334155;margin:8px 2px;max-width:1100px}
.compare .meta-note{background:#eef3ff;border:1px solid #bfd2f5;border-radius:8px;padding:8px 12px;color:#1d3f7a}
.compare .notes li{color:#6b4a00}
.compare .totals{margin:6px 2px;font-size:12px;color:var(--muted)}
@media (max-width:900px){.compare .images{grid-template-columns:1fr}}
"""

_STATUS_ZH = {"same": "相同", "differs": "不同", "shapes differ": "形状不同", "same shape": "形状相同",
              "only A": "仅 A", "only B": "仅 B"}


# ---------------------------------------------------------------------------------------------- values


def _number(v):
    """A JSON figure -> float (the record writes non-finite ones as "inf" / "-inf" / "nan"); None stays None."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _fmt(v, spec: str = ".3e") -> str:
    x = _number(v)
    if x is None:
        return "" if v is None else str(v)
    return format(x, spec) if math.isfinite(x) else str(v)


def _shape(s) -> str:
    return "—" if s is None else "[" + ", ".join(str(d) for d in s) + "]"


def _image_value(kind: str, v) -> Markup | str:
    """One image figure: PSNR in dB (inf: the two images are equal there), SSIM, max abs; NaN (no pixel in the
    region) and a missing figure are a dash."""
    x = _number(v)
    if x is None or math.isnan(x):
        return "—"
    if kind == "psnr" and x == math.inf:
        return en_zh("identical", "相同")
    if kind == "psnr":
        return f"{x:.2f} dB"
    return f"{x:.4f}" if kind == "ssim" else f"{x:.4g}"


# ---------------------------------------------------------------------------------------------- sections


def _headline(c: dict) -> Markup:
    """The record's headline (English, verbatim) and the same facts in Chinese, built from its fields."""
    if c.get("shapes_only"):
        rows = c.get("boundaries", [])
        changed = sum(r.get("status") == "shapes differ" for r in rows)
        shared = sum(r.get("status") in ("same", "differs", "shapes differ", "same shape") for r in rows)
        zh = f"仅形状（meta）：{shared} 个共有边界中有 {changed} 个形状改变"
    else:
        image = c.get("image", {})
        rel = _number(image.get("rel_err"))
        zh = (f"首个分歧：{c['first_divergence']}" if c.get("first_divergence")
              else f"图像不同（相对误差 {rel:.3g} > {c.get('tolerance', 0):g}），但没有共有边界超过容差"
              if c.get("differs") and rel is not None else f"没有边界的相对误差超过 {c.get('tolerance', 0):g}")
        inside = "psnr_inside" in image
        psnr = image.get("psnr_inside", image.get("psnr_all"))
        if psnr is not None:
            x = _number(psnr)
            value = "inf dB（相同）" if x == math.inf else f"{x:.2f} dB" if x is not None else str(psnr)
            zh += f"；{'掩码内' if inside else ''}图像 PSNR {value}"
    en = c.get("headline", "")
    where = []
    if c.get("first_step") is not None:
        where.append(en_zh(f"first step over the tolerance: {c['first_step']}", f"首个超出容差的步：{c['first_step']}"))
    if c.get("first_block"):
        where.append(en_zh(f"first block over the tolerance: {c['first_block']}",
                           f"首个超出容差的 block：{c['first_block']}"))
    tolerance = c.get("tolerance")
    if tolerance is not None:
        where.append(en_zh(f"tolerance: relative error ≤ {tolerance:g}", f"容差：相对误差 ≤ {tolerance:g}"))
    return el("div", {"class_": "headwrap"},
              el("p", {"class_": "headline", "data-first": c.get("first_divergence")}, en_zh(en, zh)),
              el("p", {"class_": "subline"}, [(Markup(" · ") if i else None, w) for i, w in enumerate(where)]))


_RUN_FIELDS = (("describe", "run", "运行"), ("implementation", "implementation", "实现"), ("dtype", "dtype", "数据类型"),
               ("storage", "storage", "权重存储"), ("attention", "attention", "注意力后端"),
               ("step_cache", "step cache", "步缓存"), ("seconds", "time", "耗时"),
               ("boundaries", "boundaries observed", "观测到的边界"))


def _run_value(key: str, v) -> Markup | str:
    if v is None:
        return en_zh("as loaded", "按加载") if key == "attention" else "—"
    if key == "seconds" and isinstance(v, (int, float)):
        return f"{v:.2f} s"
    if key == "storage" and v == "as loaded":
        return en_zh("as loaded", "按加载")
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)


def _runs(a: dict, b: dict) -> Markup:
    """A and B side by side, one row a field; a row where they differ (what the comparison varies) is marked."""
    rows = []
    for key, en, zh in _RUN_FIELDS:
        va, vb = a.get(key), b.get(key)
        changed = key not in ("seconds", "boundaries", "describe") and va != vb
        rows.append(el("tr", {"class_": "changed" if changed else None, "data-field": key},
                       el("td", {"class_": "field"}, en_zh(en, zh)),
                       el("td", {"class_": "mono"}, _run_value(key, va) if key in a else "—"),
                       el("td", {"class_": "mono"}, _run_value(key, vb) if key in b else "—")))
    facts_a, facts_b = a.get("facts") or {}, b.get("facts") or {}
    for key in list(facts_a) + [k for k in facts_b if k not in facts_a]:
        va, vb = facts_a.get(key), facts_b.get(key)
        rows.append(el("tr", {"class_": "fact" + (" changed" if va != vb else ""), "data-fact": key},
                       el("td", {"class_": "field"}, en_zh(f"fact: {key}", f"事实：{key}")),
                       el("td", {"class_": "mono"}, _run_value("fact", va)),
                       el("td", {"class_": "mono"}, _run_value("fact", vb))))
    head = el("tr", None, el("th", None, ""), el("th", None, en_zh("run A", "运行 A")),
              el("th", None, en_zh("run B (what it does not set it takes from A)", "运行 B（未设置的字段取自 A）")))
    return el("section", {"class_": "runs"}, el("h3", None, en_zh("The two runs", "两次运行")),
              el("div", {"class_": "tablewrap"}, el("table", {"class_": "grid runs"},
                                                    el("thead", None, head), el("tbody", None, rows))))


def _image_figures(image: dict) -> Markup | None:
    """PSNR / SSIM / max abs inside the mask, outside it and over the whole image (no mask: the whole only)."""
    if not image:
        return None
    regions = [("all", "whole image", "整幅图像")]
    if any(k.endswith("_inside") for k in image):
        inside, outside = image.get("pixels_inside"), image.get("pixels_outside")
        regions = [("inside", "inside the mask" + (f" ({inside:,} px)" if isinstance(inside, int) else ""),
                    "掩码内" + (f"（{inside:,} 像素）" if isinstance(inside, int) else "")),
                   ("outside", "outside the mask" + (f" ({outside:,} px)" if isinstance(outside, int) else ""),
                    "掩码外" + (f"（{outside:,} 像素）" if isinstance(outside, int) else ""))] + regions
    metrics = (("psnr", "PSNR", "PSNR"), ("ssim", "SSIM", "SSIM"), ("max_abs", "max |A−B|", "最大 |A−B|"))
    head = el("tr", None, el("th", None, ""), [el("th", None, en_zh(en, zh)) for _, en, zh in regions])
    body = [el("tr", {"data-metric": m}, el("td", {"class_": "field"}, en_zh(en, zh)),
               [el("td", {"class_": "r", "data-key": f"{m}_{r}", "data-value": json.dumps(image.get(f"{m}_{r}"))},
                   _image_value(m, image.get(f"{m}_{r}"))) for r, _, _ in regions])
            for m, en, zh in metrics]
    return el("section", {"class_": "figures"}, el("h3", None, en_zh("Image figures", "图像指标")),
              el("table", {"class_": "grid imagefigs"}, el("thead", None, head), el("tbody", None, body)),
              el("div", {"class_": "totals"}, en_zh(
                  "The final images, A against B, values 0..1. PSNR: higher is closer, \"identical\" where they are "
                  "equal; SSIM leaves the 5-pixel image border out.",
                  "最终图像 A 对 B，取值 0..1。PSNR 越高越接近，完全相等处为“相同”；SSIM 不计图像边缘 5 像素。")))


def _heat_note(scale) -> Markup:
    x = _number(scale)
    if x == 0:
        en = "A and B are equal at every pixel: the heat map is black (the mask's outline aside)."
        zh = "A 与 B 每个像素都相等：热图全黑（掩码轮廓除外）。"
    else:
        at_en = f" ({x:.4g})" if x is not None else ""
        at_zh = f"（{x:.4g}）" if x is not None else ""
        en = (f"Heat map: per pixel the largest |A−B| over the three channels, divided by its 99.5th percentile"
              f"{at_en} and clipped: black where A and B are equal, brighter where they differ more, bright yellow at "
              "that value or above.")
        zh = (f"热图：每个像素取三个通道中最大的 |A−B|，除以其 99.5 百分位数{at_zh}并截断：A 与 B 相等处为黑色，差异越大"
              "越亮，达到或超过该值为亮黄色。")
    return el("p", {"class_": "heatnote", "data-scale": json.dumps(scale)},
              en_zh(en + " The cyan line is the mask's outline.", zh + "青色线为掩码轮廓。"))


def _images(images: dict, doc: dict) -> Markup | None:
    shown = [(k, en, zh) for k, en, zh in IMAGE_KINDS if images.get(k)]
    if not shown:
        return None
    figures = []
    for kind, en, zh in shown:
        uri = "data:image/png;base64," + base64.b64encode(images[kind]).decode("ascii")
        if kind in ("a", "b"):
            describe = doc.get(kind, {}).get("describe", "")
            caption = en_zh(f"{en}: {describe}", f"{zh}：{describe}")
        else:
            caption = en_zh(f"{en} (|A−B|)", f"{zh}（|A−B|）")
        figures.append(el("figure", {"data-image": kind},
                          el("img", {"src": uri, "alt": f"image {kind}"}), el("figcaption", None, caption)))
    scale = doc.get("comparison", {}).get("image", {}).get("heatmap_scale")
    return el("section", {"class_": "pictures"}, el("h3", None, en_zh("Images", "图像")),
              el("div", {"class_": "images"}, figures),
              _heat_note(scale) if images.get("heatmap") else None)


def _status(status: str) -> Markup:
    key = "st-" + status.lower().replace(" ", "-")
    return el("span", {"class_": f"st {key}"}, en_zh(status, _STATUS_ZH.get(status, status)))


def _boundaries(c: dict) -> Markup:
    """Every boundary, in run A's order then those only B has; the first divergence's row marked."""
    rows = c.get("boundaries", [])
    first = c.get("first_divergence")
    head = (("#", "#"), ("boundary", "边界"), ("shape A", "形状 A"), ("shape B", "形状 B"), ("status", "状态"),
            ("rel err", "相对误差"), ("max abs", "最大绝对差"), ("cosine", "余弦相似度"))
    body = []
    for i, r in enumerate(rows, 1):
        is_first = r.get("name") == first
        body.append(el("tr", {"class_": "first" if is_first else None, "data-boundary": r.get("name"),
                              "data-status": r.get("status")},
                       el("td", {"class_": "idx"}, str(i)),
                       el("td", {"class_": "boundary"}, el("span", {"class_": "bname"}, r.get("name", "")),
                          el("span", {"class_": "firstmark"}, en_zh("first divergence", "首个分歧"))
                          if is_first else None),
                       el("td", {"class_": "shp mono"}, _shape(r.get("shape_a"))),
                       el("td", {"class_": "shp mono"}, _shape(r.get("shape_b"))),
                       el("td", None, _status(str(r.get("status", "")))),
                       el("td", {"class_": "r"}, _fmt(r.get("rel_err"))),
                       el("td", {"class_": "r"}, _fmt(r.get("max_abs"))),
                       el("td", {"class_": "r"}, _fmt(r.get("cosine"), ".7f"))))
    counts: dict = {}
    for r in rows:
        counts[r.get("status")] = counts.get(r.get("status"), 0) + 1
    total_en = ", ".join(f"{n} {s}" for s, n in counts.items())
    total_zh = "，".join(f"{_STATUS_ZH.get(s, s)} {n} 个" for s, n in counts.items())
    return el("section", {"class_": "boundaries"},
              el("h3", None, en_zh("Boundaries", "边界")),
              el("div", {"class_": "tablewrap"},
                 el("table", {"class_": "grid compare-table"},
                    el("thead", None, el("tr", None, [el("th", None, en_zh(en, zh)) for en, zh in head])),
                    el("tbody", None, body))),
              el("div", {"class_": "totals"}, en_zh(
                  f"{len(rows)} boundaries: {total_en}. rel err = ||A−B|| / ||B||; the first divergence is the "
                  "first boundary in A's order over the tolerance or of another shape.",
                  f"共 {len(rows)} 个边界：{total_zh}。相对误差 = ||A−B|| / ||B||；首个分歧是按 A 的顺序第一个超出容差或形状"
                  "不同的边界。")))


def _provenance(doc: dict) -> Markup:
    p = doc.get("provenance", {})
    versions = ", ".join(f"{k} {v}" for k, v in p.items() if k not in ("measured", "date") and v)
    measured = str(p.get("measured", ""))
    zh_measured = "本次运行实测" if measured == "in this run" else measured
    return el("footer", {"class_": "pfoot"},
              el("div", {"class_": "runline provenance"},
                 el("span", {"class_": "badge b-host", "data-prov": "measured"},
                    en_zh(f"measured {measured}", zh_measured)),
                 el("span", {"class_": "runtext"}, f"{p.get('date', '')} · {versions}")))


# ---------------------------------------------------------------------------------------------- the page


def compare_page(doc: dict, images: dict | None = None, *, title: str = "compare", json_text: str | None = None,
                 json_name: str | None = None) -> str:
    """The page (str). `doc`: record.compare_document's dict; `images`: {"a", "b", "heatmap": PNG bytes} or None;
    `title`: the record's file stem; `json_text`: the .json file's text, offered verbatim as a data: download
    (default: `doc` as record.py writes it); `json_name`: that file's name (default <title>.json)."""
    images = images or {}
    c = doc.get("comparison", {})
    json_text = json_text if json_text is not None else json.dumps(doc, indent=1, default=str)
    json_name = json_name or f"{title}.json"
    css, js, csp, top = page_top(title, ("comparison report", "对比报告"), json_text, json_name,
                                 ("the comparison's JSON", "对比 JSON 原文"), _CSS)
    a, b = doc.get("a", {}), doc.get("b", {})
    meta_note = None
    if c.get("shapes_only"):
        meta_note = el("p", {"class_": "meta-note"}, en_zh(
            "Shapes only (meta): a run on the meta device has shapes but no values, so only the shapes are "
            "compared; there are no figures and no images.",
            "仅形状（meta）：meta 设备上的运行只有形状、没有数值，因此只比较形状；没有数值指标，也没有图像。"))
    notes = [n for n in c.get("notes", []) if not (c.get("shapes_only") and "meta device" in n)]
    notes_el = el("ul", {"class_": "notes"}, [el("li", None, en_zh("note: ", "注："), n) for n in notes]) if notes else None
    page = el("section", {"class_": "page", "id": "page-1", "data-page": "1", "aria-labelledby": "page-1-title"},
              el("header", {"class_": "phead"},
                 el("h2", {"id": "page-1-title"}, en_zh("Comparison of two runs", "两次运行的对比")),
                 el("p", {"class_": "sub"}, en_zh(
                     f"One job run two ways — A: {a.get('describe', '')}; B: {b.get('describe', '')} — compared "
                     "boundary by boundary.",
                     f"同一任务的两种运行方式——A：{a.get('describe', '')}；B：{b.get('describe', '')}——逐个边界对比。"))),
              _headline(c), meta_note, notes_el, _runs(a, b),
              None if c.get("shapes_only") else _image_figures(c.get("image", {})),
              None if c.get("shapes_only") else _images(images, doc),
              _boundaries(c), _provenance(doc))
    return ("<!DOCTYPE html>\n"
            + el("html", {"lang": "en", "data-lang": "en", "class_": "compare"},
                 el("head", None,
                    Markup('<meta charset="utf-8">'),
                    el("meta", {"http-equiv": "Content-Security-Policy", "content": csp}),
                    el("meta", {"name": "viewport", "content": "width=device-width, initial-scale=1"}),
                    el("meta", {"name": "generator", "content": GENERATOR}),
                    el("title", None, f"{title} · FillScope comparison report"),
                    el("style", None, Markup(css))),
                 el("body", None, top, el("main", None, page), el("script", None, Markup(js))))
            + "\n")
