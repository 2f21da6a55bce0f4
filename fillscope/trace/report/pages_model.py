"""Pages 1-4, the model's architecture: the macro graph (1), condition encoding and branch merge (2), the full
denoiser topology with every block (3), and one block's micro-structure with the condition path (4)."""

from __future__ import annotations

from .format import badge, figure, number
from .layout import macro_svg
from .markup import Markup, el, en_zh, json_pointer
from .page_frame import heading, legend, page_section


def _edge_table(report) -> Markup:
    macro = report["pages"]["macro"]
    figs = report["figures"]
    node = {n["id"]: n for n in macro["nodes"]}
    rows = []
    for e in macro["edges"]:
        a, b = node[e["from"]], node[e["to"]]
        f = figs[e["figure"]]
        rows.append(el("tr", None,
                       el("td", None, en_zh(a["label_en"], a["label_zh"])),
                       el("td", {"class_": "arrow"}, "→"),
                       el("td", None, en_zh(b["label_en"], b["label_zh"])),
                       el("td", None, en_zh(f["label_en"], f["label_zh"])),
                       el("td", None, figure(report, e["figure"], label=False)),
                       el("td", {"class_": "method"}, f["method"])))
    return el("details", {"class_": "edges", "open": True},
              el("summary", None, en_zh(f"Edge shapes ({len(rows)})", f"边上的 shape（{len(rows)}）")),
              el("table", {"class_": "grid compact"},
                 el("thead", None, el("tr", None, el("th", None, en_zh("from", "起点")), el("th", None, ""),
                                      el("th", None, en_zh("to", "终点")), el("th", None, en_zh("tensor", "张量")),
                                      el("th", None, en_zh("shape · provenance", "shape · 来源")),
                                      el("th", None, en_zh("how obtained", "获取方式")))),
                 el("tbody", None, rows)))



def macro_page(report, meta) -> Markup:
    return page_section(report, 1, meta, [
        el("div", {"class_": "figure-wrap"}, macro_svg(report)),
        legend(),
        _edge_table(report),
    ])


def conditions_page(report, meta) -> Markup:
    cond = report["pages"]["conditions"]
    run_dev = report["run"]["device"]
    cards = []
    for i, b in enumerate(cond["branches"]):
        prov, dev = ("static-config", "") if b["static"] else ("measured", run_dev)
        arch = []
        p = ("pages", "conditions", "branches", i)
        if b.get("layers") is not None:
            arch.append(el("div", {"class_": "arch"}, en_zh("Layers ×", "层数 ×"),
                           number(b["layers"], "", json_pointer(*p, "layers"))))
        hh = []
        if b.get("hidden") is not None:
            hh.append(el("span", None, en_zh("hidden ", "hidden "), number(b["hidden"], "", json_pointer(*p, "hidden"))))
        if b.get("heads") is not None:
            hh.append(el("span", None, " · ", en_zh("heads ", "heads "), number(b["heads"], "", json_pointer(*p, "heads"))))
        if hh:
            arch.append(el("div", {"class_": "arch"}, hh))
        if arch:
            arch.append(badge(prov, dev, "layer count, width and heads from the model config" if b["static"]
                              else "read off the module tree in this run", small=True))
        cards.append(el("div", {"class_": "card branch", "data-branch": b["id"]},
                        el("div", {"class_": "ctitle"}, en_zh(b["label_en"], b["label_zh"])),
                        el("div", {"class_": "archrow"}, arch),
                        el("div", {"class_": "out"}, figure(report, b["output_figure"]))))
    m = cond["merge"]
    den = next((n for n in report["pages"]["macro"]["nodes"] if n["kind"] == "denoiser"), None)
    merge_card = el("div", {"class_": "card merge"},
                    el("div", {"class_": "ctitle"}, en_zh(m["label_en"], m["label_zh"])),
                    el("p", {"class_": "rule"}, en_zh(m["rule_en"], m["rule_zh"])),
                    el("div", {"class_": "out"}, figure(report, m["output_figure"])))
    flow = el("div", {"class_": "condflow"},
              el("div", {"class_": "branches"}, cards),
              el("div", {"class_": "bigarrow"}, "→"),
              merge_card,
              el("div", {"class_": "bigarrow"}, "→"),
              el("div", {"class_": "card sink"},
                 el("div", {"class_": "ctitle"}, en_zh(den["label_en"], den["label_zh"]) if den else en_zh("Denoiser", "去噪器")),
                 el("p", {"class_": "muted"}, en_zh(den["detail_en"], den["detail_zh"]) if den else "")))
    return page_section(report, 2, meta, [
        heading("Text condition branches", "文本条件分支"), flow,
        heading("Image condition", "图像条件"), _assembly(report),
        legend(),
    ])


def _assembly(report, *, vertical=False) -> Markup:
    a = report["pages"]["micro"]["assembly"]
    parts = []
    for j, name in enumerate(a["parts"]):
        if j:
            parts.append(el("div", {"class_": "op"}, "+"))
        parts.append(el("div", {"class_": "card part"}, figure(report, name, cls="stack")))
    return el("div", {"class_": "assembly" + (" vertical" if vertical else "")},
              el("div", {"class_": "ctitle"}, en_zh(a["label_en"], a["label_zh"])),
              el("div", {"class_": "asmrow"}, parts, el("div", {"class_": "op"}, "↓" if vertical else "→"),
                 el("div", {"class_": "card result"}, figure(report, a["result"], cls="stack"))),
              el("p", {"class_": "rule"}, en_zh(a["rule_en"], a["rule_zh"])))


def _feeds(stages) -> dict[str, str]:
    """stage id -> id of the stage it injects residuals into: the optional `feeds` key; without it a stage whose
    id is or starts with "controlnet" feeds the first stage that is not a ControlNet (the SD3 layout)."""
    out = {s["id"]: s["feeds"] for s in stages if s.get("feeds")}
    main = [s["id"] for s in stages if not s.get("feeds") and not s["id"].lower().startswith("controlnet")]
    for s in stages:
        if s["id"] not in out and s["id"].lower().startswith("controlnet") and main:
            out[s["id"]] = main[0]
    return out


def _stage_prov(blocks) -> tuple[str, str]:
    ps = {(b["provenance"], b["device"]) for b in blocks}
    return ps.pop() if len(ps) == 1 else ("", "")


def _stage_card(report, i, s, *, side=False) -> Markup:
    blocks = s["blocks"]
    classes = []
    for b in blocks:
        if b["class"] not in classes:
            classes.append(b["class"])
    p = json_pointer("pages", "denoiser", "stages", i, "blocks") + "/*/params"
    prov, dev = _stage_prov(blocks)
    per = {b["params"] for b in blocks}
    return el("div", {"class_": "card stage" + (" side" if side else ""), "data-stage": s["id"]},
              el("div", {"class_": "stagehead"},
                 el("span", {"class_": "ctitle"}, en_zh(s["label_en"], s["label_zh"])),
                 el("span", {"class_": "mult"}, "×",
                    number(s["count"], "count", json_pointer("pages", "denoiser", "stages", i, "count")))),
              el("div", {"class_": "mono small cls"}, ", ".join(classes)),
              el("div", {"class_": "kv"}, en_zh("params ", "参数 "),
                 number(sum(b["params"] for b in blocks), "params", None, sum_of=p),
                 el("span", {"class_": "muted"}, " (", en_zh("each ", "每块 "),
                    number(blocks[0]["params"], "params", json_pointer("pages", "denoiser", "stages", i, "blocks", 0, "params")),
                    ")") if len(per) == 1 else None),
              badge(prov, dev, small=True) if prov else el("span", {"class_": "badge b-mixed sm"}, en_zh("mixed", "混合")))


def _figchips(report, names) -> Markup:
    return el("div", {"class_": "chips"}, [el("div", {"class_": "chip"}, figure(report, n, cls="stack")) for n in names])


def denoiser_page(report, meta) -> Markup:
    den = report["pages"]["denoiser"]
    stages = den["stages"]
    feeds = _feeds(stages)
    main = [(i, s) for i, s in enumerate(stages) if s["id"] not in feeds]
    side = [(i, s) for i, s in enumerate(stages) if s["id"] in feeds]
    strip = [el("div", {"class_": "card io in"}, el("div", {"class_": "ctitle"}, en_zh("Inputs", "输入")),
                _figchips(report, den["inputs"]))]
    for i, s in main:
        col = [_stage_card(report, i, s)]
        for j, b in side:
            if feeds[b["id"]] == s["id"]:
                col += [el("div", {"class_": "inject"}, "↑ ", en_zh(f"residuals into {s['label_en']}",
                                                                    f"残差注入 {s['label_zh']}")),
                        _stage_card(report, j, b, side=True)]
        strip += [el("div", {"class_": "bigarrow"}, "→"), el("div", {"class_": "stagecol"}, col)]
    strip += [el("div", {"class_": "bigarrow"}, "→"),
              el("div", {"class_": "card io out"}, el("div", {"class_": "ctitle"}, en_zh("Outputs", "输出")),
                 _figchips(report, den["outputs"]))]
    tables = [_stage_table(report, i, s) for i, s in enumerate(stages)]
    return page_section(report, 3, meta, [el("div", {"class_": "strip"}, strip), tables])


def _stage_table(report, i, s) -> Markup:
    blocks = s["blocks"]
    base = ("pages", "denoiser", "stages", i, "blocks")
    classes = sorted({b["class"] for b in blocks})
    one_class = len(classes) == 1  # then the class is named once, in the summary
    rows = []
    for j, b in enumerate(blocks):
        rows.append(el("tr", {"data-block": b["name"]},
                       el("td", {"class_": "idx"}, str(j)),
                       el("td", {"class_": "mono"}, b["name"]),
                       None if one_class else el("td", {"class_": "mono cls"}, b["class"]),
                       el("td", {"class_": "mono shp"}, b["inputs"]),
                       el("td", {"class_": "mono shp"}, b["outputs"]),
                       el("td", {"class_": "r"}, number(b["params"], "params", json_pointer(*base, j, "params"))),
                       el("td", {"class_": "r"}, number(b["flops"], "flop", json_pointer(*base, j, "flops"))),
                       el("td", {"class_": "r"}, number(b["hits"], "count", json_pointer(*base, j, "hits"))),
                       el("td", {"class_": "r"}, number(b["wall_s"], "s", json_pointer(*base, j, "wall_s"))),
                       el("td", None, badge(b["provenance"], b["device"], small=True))))

    def total(key, unit):
        vals = [b[key] for b in blocks]
        if any(v is None for v in vals):
            return "—"
        return number(sum(vals), unit, None, sum_of=json_pointer(*base) + f"/*/{key}")
    foot = el("tr", {"class_": "total"},
              el("td", {"colspan": "4" if one_class else "5"}, en_zh(f"Total ({len(blocks)} blocks)", f"合计（{len(blocks)} 块）")),
              el("td", {"class_": "r"}, total("params", "params")),
              el("td", {"class_": "r"}, total("flops", "flop")),
              el("td", {"class_": "r"}, total("hits", "count")),
              el("td", {"class_": "r"}, total("wall_s", "s")),
              el("td", None, ""))
    cols = [("#", "#", "r", "c-idx"), ("block", "block", "", "c-name")]
    cols += [] if one_class else [("class", "类", "", "c-cls")]
    cols += [("inputs", "输入", "", "c-in"), ("outputs", "输出", "", "c-out"), ("params", "参数", "r", "c-num"),
             ("FLOPs", "FLOPs", "r", "c-flop"), ("hits", "执行次数", "r", "c-hits"), ("wall", "耗时", "r", "c-wall"),
             ("provenance", "来源", "", "c-bdg")]
    head = el("tr", None, *[el("th", {"class_": c or None}, en_zh(en, zh)) for en, zh, c, _ in cols])
    colgroup = el("colgroup", None, *[el("col", {"class_": cc}) for *_, cc in cols])
    summary = el("summary", None, el("span", {"class_": "stitle"}, en_zh(s["label_en"], s["label_zh"])),
                 el("span", {"class_": "scount"}, f" ×{s['count']}"),
                 el("span", {"class_": "mono scls"}, " · ", ", ".join(classes)) if one_class else None,
                 el("span", {"class_": "muted"}, " · ", en_zh("params ", "参数 "), total("params", "params"),
                    " · FLOPs ", total("flops", "flop")))
    return el("details", {"class_": "stage-table", "open": True, "data-stage": s["id"]},
              summary,
              el("div", {"class_": "scroll"},
                 el("table", {"class_": "grid blocks"}, colgroup, el("thead", None, head), el("tbody", None, rows),
                    el("tfoot", None, foot))))


_GROUPS = [
    ("modulation", ("Modulation (AdaLN)", "调制（AdaLN）"),
     ("timestep + pooled condition → shift / scale / gate per stream", "时间步 + pooled 条件 → 每个流的 shift / scale / gate")),
    ("attention", ("Joint attention", "联合注意力"),
     ("separate QKV per stream, one attention over the joined sequence", "每个流独立 QKV，在拼接序列上共享一次注意力")),
    ("mlp", ("MLP", "MLP（前馈）"), ("per-stream feed-forward", "各流独立的前馈网络")),
    ("residual", ("Residual update", "残差更新"),
     ("x ← x + gate · attn(x);  x ← x + gate · mlp(x)", "x ← x + gate · attn(x)；x ← x + gate · mlp(x)")),
    ("other", ("Other modules", "其他模块"), ("", "")),
]


def _group_of(row) -> str:
    g = row.get("group")
    if g in {k for k, _, _ in _GROUPS}:
        return g
    m = row["module"].split(".")
    head = m[0]
    if row["class"].startswith("AdaLayerNorm") or head in ("norm1", "norm1_context", "norm"):
        return "modulation"
    if head.startswith("attn"):
        return "attention"
    if head.startswith(("ff", "norm2", "proj_mlp", "act_mlp", "mlp")):
        return "mlp"
    if head in ("proj_out",):
        return "residual"
    return "other"


_MOD_COLS = Markup('<colgroup><col class="c-mod"><col class="c-cls"><col><col class="c-par"><col class="c-bdg"></colgroup>')


def block_page(report, meta) -> Markup:
    micro = report["pages"]["micro"]
    groups: dict[str, list] = {}
    for i, r in enumerate(micro["rows"]):
        groups.setdefault(_group_of(r), []).append((i, r))
    steps = []
    for key, (ten, tzh), (den, dzh) in _GROUPS:
        rows = groups.get(key, [])
        if key == "other" and not rows:
            continue
        trs = [el("tr", {"data-module": r["module"]},
                  el("td", {"class_": "mono"}, r["module"]),
                  el("td", {"class_": "mono cls"}, r["class"]),
                  el("td", {"class_": "mono shp"}, r["inputs"], el("span", {"class_": "to"}, " → "), r["outputs"]),
                  el("td", {"class_": "r"}, number(r["params"], "params", json_pointer("pages", "micro", "rows", i, "params"))),
                  el("td", None, badge(r["provenance"], r["device"], small=True)))
               for i, r in rows]
        steps.append(el("div", {"class_": f"step g-{key}", "data-group": key},
                        el("div", {"class_": "steph"}, el("span", {"class_": "stepname"}, en_zh(ten, tzh)),
                           el("span", {"class_": "muted small"}, en_zh(den, dzh)) if den else None),
                        el("table", {"class_": "grid compact mods"}, _MOD_COLS, el("tbody", None, trs)) if trs else
                        el("p", {"class_": "muted small"}, en_zh("no module of its own (tensor adds inside the block's forward)",
                                                                 "无独立模块（block forward 内的张量相加）"))))
        steps.append(el("div", {"class_": "down"}, "↓"))
    steps = steps[:-1]
    stages = report["pages"]["denoiser"]["stages"]
    feeds = _feeds(stages)
    block_stage = next((s for s in stages for b in s["blocks"] if b["name"] == micro["block_name"]), None)
    right = [heading("Condition path", "条件路径"), _assembly(report, vertical=True)]
    if block_stage is not None:
        right.insert(0, _block_summary(stages, block_stage, micro["block_name"]))
        right.insert(0, heading("Block summary", "Block 概要"))
    for i, s in enumerate(stages):
        if s["id"] in feeds:
            t = next(x for x in stages if x["id"] == feeds[s["id"]])
            right.append(el("div", {"class_": "card inj"},
                            el("div", {"class_": "ctitle"}, en_zh(s["label_en"], s["label_zh"]), f" ×{s['count']}"),
                            el("div", {"class_": "small"}, "↓ ", en_zh(f"per-layer residual → {t['label_en']} ×{t['count']}",
                                                                       f"逐层残差 → {t['label_zh']} ×{t['count']}"))))
    left = [el("h3", None, en_zh("Block ", "Block "), el("span", {"class_": "mono"}, micro["block_name"]),
               el("span", {"class_": "muted"}, " · ", en_zh(block_stage["label_en"], block_stage["label_zh"]))
               if block_stage else None),
            el("div", {"class_": "steps"}, steps)]
    return page_section(report, 4, meta, el("div", {"class_": "two"}, el("div", {"class_": "col"}, left),
                                            el("div", {"class_": "col"}, right, legend())))


def _block_summary(stages, stage, block_name) -> Markup:
    """The card for the block page 4 dissects: its class, stage, shapes and totals from the page-3 table."""
    si = stages.index(stage)
    bj, blk = next((j, b) for j, b in enumerate(stage["blocks"]) if b["name"] == block_name)
    bp = ("pages", "denoiser", "stages", si, "blocks", bj)
    return el("div", {"class_": "card blocksum"},
              el("div", {"class_": "ctitle"}, en_zh("This block", "本 block"), " ", el("span", {"class_": "mono"}, blk["name"])),
              el("dl", None,
                 el("dt", None, en_zh("class", "类")), el("dd", {"class_": "mono"}, blk["class"]),
                 el("dt", None, en_zh("stage", "阶段")),
                 el("dd", None, en_zh(stage["label_en"], stage["label_zh"]), f" (×{stage['count']})"),
                 el("dt", None, en_zh("inputs", "输入")), el("dd", {"class_": "mono"}, blk["inputs"]),
                 el("dt", None, en_zh("outputs", "输出")), el("dd", {"class_": "mono"}, blk["outputs"]),
                 el("dt", None, en_zh("params", "参数")),
                 el("dd", None, number(blk["params"], "params", json_pointer(*bp, "params"))),
                 el("dt", None, "FLOPs"), el("dd", None, number(blk["flops"], "flop", json_pointer(*bp, "flops"))),
                 el("dt", None, en_zh("hits", "执行次数")),
                 el("dd", None, number(blk["hits"], "count", json_pointer(*bp, "hits")))),
              badge(blk["provenance"], blk["device"], small=True))
