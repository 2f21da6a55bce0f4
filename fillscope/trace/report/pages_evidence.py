"""Page 5: the VAE boundary (encode/decode shapes, the channel ladder from static config) and the trace
evidence (parameters, peak memory, FLOPs, module and line traces, the run boundary, every figure)."""

from __future__ import annotations

from .format import badge, figure, number
from .markup import Markup, el, en_zh, json_pointer
from .page_frame import heading, page_section
from .schema import is_finite_number, is_json_int


def _ladder(values, path_base, prov, *, reverse=False) -> Markup:
    idx = list(range(len(values)))
    if reverse:
        idx.reverse()
    out = []
    for k, j in enumerate(idx):
        if k:
            out.append(el("span", {"class_": "lad-arrow"}, "→"))
        out.append(el("span", {"class_": "lad"}, number(values[j], "", json_pointer(*path_base, j))))
    return el("div", {"class_": "ladder"}, out, badge(prov, "", "block_out_channels from the VAE config", small=True))


# without encode_input_figure / decode_input_figure: the first of these figures the report has
_ENC_IN = ("masked_image", "source_image")
_DEC_IN = ("latent.unpacked", "latent")


def vae_evidence_page(report, meta) -> Markup:
    vae = report["pages"]["vae"]
    lad = vae["channel_ladder"]
    lp = ("pages", "vae", "channel_ladder")
    prov = vae["ladder_provenance"]
    figs = report["figures"]
    enc_in = vae.get("encode_input_figure") or next((n for n in _ENC_IN if n in figs), None)
    dec_in = vae.get("decode_input_figure") or next((n for n in _DEC_IN if n in figs), None)
    row1 = [el("div", {"class_": "card io"}, el("div", {"class_": "ctitle"}, en_zh("Source / reference image", "源图 / 参考图")),
               figure(report, enc_in, label=False) if enc_in else None),
            el("div", {"class_": "bigarrow"}, "→"),
            el("div", {"class_": "card vae"}, el("div", {"class_": "ctitle"}, en_zh("VAE encoder", "VAE 编码器")),
               el("div", {"class_": "small"}, en_zh(f"down blocks ×{len(lad)}", f"下采样块 ×{len(lad)}")),
               _ladder(lad, lp, prov)),
            el("div", {"class_": "bigarrow"}, "→"),
            el("div", {"class_": "card io"}, el("div", {"class_": "ctitle"}, en_zh("Latent", "潜变量")),
               figure(report, vae["encode_figure"]))]
    row2 = [el("div", {"class_": "card io"}, el("div", {"class_": "ctitle"}, en_zh("Denoised latent", "去噪后潜变量")),
               figure(report, dec_in, label=False) if dec_in else None),
            el("div", {"class_": "bigarrow"}, "→"),
            el("div", {"class_": "card vae"}, el("div", {"class_": "ctitle"}, en_zh("VAE decoder", "VAE 解码器")),
               el("div", {"class_": "small"}, en_zh(f"mid block + up blocks ×{len(lad)}", f"中间块 + 上采样块 ×{len(lad)}")),
               _ladder(lad, lp, prov, reverse=True)),
            el("div", {"class_": "bigarrow"}, "→"),
            el("div", {"class_": "card io"}, el("div", {"class_": "ctitle"}, en_zh("Pixel output", "像素输出")),
               figure(report, vae["decode_figure"]))]
    latent = el("div", {"class_": "latentch"}, en_zh("latent channels ", "latent 通道数 "),
                number(vae["latent_channels"], "", json_pointer("pages", "vae", "latent_channels")),
                badge(prov, "", "latent_channels from the VAE config", small=True),
                el("p", {"class_": "small"}, en_zh(vae["latent_rule_en"], vae["latent_rule_zh"]))
                if vae.get("latent_rule_en") else None)
    return page_section(report, 5, meta, [
        heading("VAE boundary", "VAE 边界"),
        el("div", {"class_": "vaeflow"}, el("div", {"class_": "vrow"}, row1), el("div", {"class_": "vrow"}, row2), latent),
        heading("Trace evidence", "运行证据"), _evidence(report),
        _figure_registry(report),
    ])


def _evcard(title, value_row, prov_badge, notes, extra=None, cls="") -> Markup:
    return el("div", {"class_": f"card ev {cls}".strip()},
              el("div", {"class_": "evtitle"}, title),
              el("div", {"class_": "evval"}, value_row, prov_badge),
              [el("p", {"class_": "evnote"}, n) for n in notes if n],
              extra)


def _component_table(rows, headers) -> Markup:
    return el("table", {"class_": "grid compact comp"},
              el("thead", None, el("tr", None, [el("th", {"class_": "r" if k else None}, h)
                                                for k, h in enumerate(headers)])),
              el("tbody", None, rows))


def _ev_ptr(*parts) -> str:
    """A JSON pointer into report.evidence."""
    return json_pointer("evidence", *parts)


def _evidence(report) -> Markup:
    ev, run = report["evidence"], report["run"]
    cards = [_params_card(ev["params"]), _memory_card(ev["peak_memory"], run), _flops_card(ev["flops"]),
             _module_card(ev["module"]), _line_card(ev["line"]), _run_boundary_card(run)]
    return el("div", {"class_": "evgrid"}, cards)


def _params_card(par: dict) -> Markup:
    comp_rows = []
    pc = par.get("per_component") or {}
    sub_keys: list[str] = []
    for v in pc.values():
        if isinstance(v, dict):
            sub_keys += [k for k in v if k not in sub_keys]
    for name, v in pc.items():
        if isinstance(v, dict):
            comp_rows.append(el("tr", None, el("td", {"class_": "mono"}, name),
                                [el("td", {"class_": "r"},
                                    number(v[k], "params", _ev_ptr("params", "per_component", name, k))
                                    if k in v else "—") for k in sub_keys]))
        else:
            comp_rows.append(el("tr", None, el("td", {"class_": "mono"}, name),
                                el("td", {"class_": "r"}, number(v, "params", _ev_ptr("params", "per_component", name)))))
    heads = [en_zh("component", "组件")] + ([k for k in sub_keys] if sub_keys else [en_zh("params", "参数")])
    used = None
    if is_json_int(par.get("unique_used")):  # optional: what the pipeline computes with
        used = el("span", {"class_": "evpair", "data-ev": "params.unique_used"},
                  number(par["unique_used"], "params", _ev_ptr("params", "unique_used"), cls="big"),
                  el("span", {"class_": "evk"}, en_zh("used", "实际使用")))
    return _evcard(
        en_zh("Parameters", "实例化参数合计"),
        [el("span", {"class_": "evpair", "data-ev": "params.unique"},
            number(par["unique"], "params", _ev_ptr("params", "unique"), cls="big"),
            el("span", {"class_": "evk"}, en_zh("unique", "去重"))),
         el("span", {"class_": "evpair", "data-ev": "params.tie_counted"},
            number(par["tie_counted"], "params", _ev_ptr("params", "tie_counted"), cls="big"),
            el("span", {"class_": "evk"}, en_zh("tie-counted", "共享权重重复计数"))), used],
        badge(par["provenance"], par["device"]),
        [el("span", None, el("b", None, en_zh("unique: ", "去重：")), par["convention_unique"]),
         el("span", None, el("b", None, en_zh("tie-counted: ", "重复计数：")), par["convention_tie_counted"]),
         el("span", None, el("b", None, en_zh("used: ", "实际使用：")), par["convention_unique_used"])
         if used and isinstance(par.get("convention_unique_used"), str) else None],
        _component_table(comp_rows, heads) if comp_rows else None, cls="wide")


def _memory_card(pm: dict | None, run: dict) -> Markup:
    if pm is None:
        return _evcard(en_zh("Peak memory", "峰值显存"),
                       el("span", {"class_": "evpair notrun", "data-ev": "peak_memory"}, en_zh("not measured", "未测量")),
                       None, [en_zh("Memory was not measured or estimated for this report.", "本报告未测量或估算显存。")])
    pm_dev = pm.get("device", run["device"] if pm["provenance"] == "measured" else "")
    pm_title = (("Peak CUDA memory allocated", "峰值 CUDA allocated") if pm["provenance"] == "measured" and pm_dev == "cuda"
                else ("Peak memory", "峰值显存"))
    parts = pm.get("parts")
    prow = [el("tr", None, el("td", {"class_": "mono"}, k),
               el("td", {"class_": "r"}, number(v, "bytes", _ev_ptr("peak_memory", "parts", k))))
            for k, v in parts.items() if is_finite_number(v)] if isinstance(parts, dict) else []
    return _evcard(en_zh(*pm_title),
                   el("span", {"class_": "evpair", "data-ev": "peak_memory.bytes"},
                      number(pm["bytes"], "bytes", _ev_ptr("peak_memory", "bytes"), cls="big")),
                   badge(pm["provenance"], pm_dev), [pm["method"]],
                   _component_table(prow, [en_zh("part", "组成"), en_zh("bytes", "字节")]) if prow else None)


def _flops_card(fl: dict) -> Markup:
    return _evcard(en_zh("FLOPs per denoiser step", "每个去噪步 FLOPs"),
                   el("span", {"class_": "evpair", "data-ev": "flops.per_step"},
                      number(fl["per_step"], "flop", _ev_ptr("flops", "per_step"), cls="big")),
                   badge(fl["provenance"], fl["device"]), [fl["method"]])


def _module_card(mod: dict) -> Markup:
    mrows = [el("tr", None, el("td", {"class_": "mono"}, name),
                el("td", {"class_": "r"}, number(v["rows"], "count", _ev_ptr("module", "per_component", name, "rows"))),
                el("td", {"class_": "r"}, number(v["hits"], "count", _ev_ptr("module", "per_component", name, "hits"))))
             for name, v in (mod.get("per_component") or {}).items()]
    return _evcard(
        en_zh("Module-level shapes", "模块级 shape"),
        el("span", {"class_": "evpair", "data-ev": "module"},
           number(mod["rows"], "count", _ev_ptr("module", "rows"), cls="big"),
           el("span", {"class_": "evk"}, en_zh(" rows / ", " rows / ")),
           number(mod["hits"], "count", _ev_ptr("module", "hits"), cls="big"),
           el("span", {"class_": "evk"}, en_zh(" hits", " hits"))),
        badge(mod["provenance"], mod["device"]), [mod["definition"]],
        _component_table(mrows, [en_zh("component", "组件"), "rows", "hits"]) if mrows else None)


def _line_card(line: dict | None) -> Markup:
    if line is None:
        return _evcard(en_zh("Line-level shapes", "行级 shape"),
                       el("span", {"class_": "evpair notrun", "data-ev": "line"}, en_zh("not run", "未运行")), None,
                       [en_zh("The line tracer did not run for this report.", "本报告未运行行级追踪。")])
    return _evcard(
        en_zh("Line-level shapes", "行级 shape"),
        el("span", {"class_": "evpair", "data-ev": "line"},
           number(line["rows"], "count", _ev_ptr("line", "rows"), cls="big"), el("span", {"class_": "evk"}, " rows / "),
           number(line["hits"], "count", _ev_ptr("line", "hits"), cls="big"), el("span", {"class_": "evk"}, " hits"),
           el("span", {"class_": "pytracer"},
              "Python ", el("span", {"class_": "mono", "data-ev": "line.python"}, line["python"]),
              " · ", el("span", {"class_": "mono", "data-ev": "line.tracer"}, line["tracer"]))),
        badge(line["provenance"], line["device"]), [line["definition"]])


def _run_boundary_card(run: dict) -> Markup:
    """What the run was given and ran with (settings, weights, versions); no badge: none of it is measured
    except the optional wall time, which shows as a plain number."""
    kv = [
        (("Size (W × H)", "尺寸（宽 × 高）"), [number(run["width"], "", json_pointer("run", "width")), " × ",
                                          number(run["height"], "", json_pointer("run", "height"))]),
        (("Batch", "batch"), number(run["batch"], "", json_pointer("run", "batch"))),
        (("dtype", "dtype"), el("span", {"class_": "mono"}, run["dtype"])),
        (("Device", "设备"), [el("span", {"class_": "mono"}, run["device"]),
                            [" · ", run["device_name"]] if run["device_name"] != run["device"] else None]),
        (("Weights", "权重"), run["weights"]),
        (("Denoiser steps traced", "追踪去噪步数"), number(run["steps_traced"], "", json_pointer("run", "steps_traced"))),
        (("Versions", "版本"), el("span", {"class_": "mono"}, f"Python {run['python']} · torch {run['torch']} · "
                                                              f"diffusers {run['diffusers']} · transformers {run['transformers']}")),
        (("Created", "生成时间"), el("span", {"class_": "mono"}, run["created"])),
    ]
    if is_finite_number(run.get("wall_s")):  # optional run keys
        kv.insert(6, (("Traced run wall time", "追踪运行耗时"), number(run["wall_s"], "s", json_pointer("run", "wall_s"))))
    for key, label in (("prompt", ("Prompt", "提示词")), ("negative_prompt", ("Negative prompt", "反向提示词"))):
        if isinstance(run.get(key), str):
            kv.append((label, el("span", {"class_": "prompt", "data-run": key}, run[key] or "∅")))
    return el("div", {"class_": "card ev runb wide3"},
              el("div", {"class_": "evtitle"}, en_zh("Run boundary", "运行边界")),
              el("dl", None, [[el("dt", None, en_zh(*k)), el("dd", None, v)] for k, v in kv]),
              el("p", {"class_": "evnote"}, en_zh("Structure and shape evidence; says nothing about generation quality.",
                                                  "结构 / shape 学习证据；不代表生成质量。")))


def _figure_registry(report) -> Markup:
    rows = []
    for name, f in report["figures"].items():
        rows.append(el("tr", None, el("td", {"class_": "mono"}, name),
                       el("td", None, en_zh(f["label_en"], f["label_zh"])),
                       el("td", None, figure(report, name, label=False)),
                       el("td", {"class_": "method"}, f["method"])))
    return el("details", {"class_": "registry", "open": True},
              el("summary", None, en_zh(f"Every figure in this report ({len(rows)})", f"本报告全部数值（{len(rows)}）")),
              el("table", {"class_": "grid compact"},
                 el("thead", None, el("tr", None, el("th", None, en_zh("figure", "名称")), el("th", None, en_zh("label", "说明")),
                                      el("th", None, en_zh("value · provenance", "数值 · 来源")),
                                      el("th", None, en_zh("how obtained", "获取方式")))),
                 el("tbody", None, rows)))

