"""The five-page architecture report: one self-contained HTML file (no network) plus its JSON.

    html = render_report(report)                         # str; validates first
    html_path, json_path = write_report(report, out_dir, "flux-fill-meta")
    validate_report(report)                              # raises ReportSchemaError naming every problem

The input is a JSON-able dict in the schema `fillscope.report/1` (see `validate_report` for the exact keys),
produced by the trace driver. The pages:

  1 macro architecture (inline SVG: left-to-right columns by node kind, the shape on every edge)
  2 condition encoding and branch merge (text branches -> merge; the image condition assembly)
  3 the full denoiser topology: every block of every stage in a table (collapsible per stage, with totals)
  4 block micro-structure (modulation, joint attention, MLP, residual) and the condition assembly/injection
  5 VAE boundary (channel ladder from static config) and the evidence: parameters, peak memory, FLOPs,
    module rows/hits, line rows/hits (with the Python version and tracer), the run boundary, every figure

Every figure carries a provenance badge ("measured · CUDA", "measured · meta"/"measured · cpu", "estimated",
"static config"), bilingual like every label (EN / 中文, switchable, remembered in the URL hash and
localStorage).

Escaping: the page is built server-side by a tiny element builder (`_el`) in which every string that is not
`_Markup` (markup this module built itself) is HTML-escaped, attribute values included; data never reaches
the page any other way. The JSON is embedded as `<script type="application/json">` with `<`, `>`, `&`, U+2028
and U+2029 written as `\\uXXXX` (so no `</script>` can end it early), and offered verbatim (the bytes of the
written .json file) as a base64 `data:` download link. A Content-Security-Policy meta tag allows only this
file's own inline script (by its sha256) and inline styles, and no network at all (`default-src 'none'`), so
even a missed escape could neither run an injected handler nor fetch anything.

Every rendered number is a `<span class="num">` (SVG: `<text class="num">`) with `data-path` (a JSON pointer
into the report), `data-value` (the exact JSON value) and the readable form as text (17.004 B, 22.65 GiB,
74.40 TFLOP, [1, 4096, 64]) with the exact value as its tooltip; sums carry `data-sum` (the pointer pattern
summed). Figures are wrapped in `.fig[data-fig=<name>]` together with their badge (`.badge[data-prov]`).
"""

from __future__ import annotations

import base64
import hashlib
import html as _html
import itertools
import json
import math
import os
import re
import shutil
from pathlib import Path

SCHEMA = "fillscope.report/1"
MODELS = ("flux-fill", "sd3-controlnet-inpaint")
PROVENANCES = ("measured", "estimated", "static-config")
DEVICES = ("cuda", "cpu", "meta")
UNITS = ("params", "bytes", "flop", "s", "shape", "count", "")
KINDS = ("input", "encoder", "assembly", "denoiser", "vae", "output")
PAGE_COUNT = 5


# ---------------------------------------------------------------------------------------------------------
# validation


class ReportSchemaError(ValueError):
    """The report dict does not follow `fillscope.report/1`; `.problems` lists every problem found, each
    starting with the path of the offending key (e.g. "report.pages.macro.edges[2]: missing key 'figure'")."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        shown = self.problems[:25]
        more = f"\n  ... and {len(self.problems) - 25} more" if len(self.problems) > 25 else ""
        super().__init__(f"invalid {SCHEMA} report ({len(self.problems)} problem(s)):\n  "
                         + "\n  ".join(shown) + more)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Checker:
    def __init__(self):
        self.problems: list[str] = []

    def bad(self, path: str, msg: str) -> None:
        self.problems.append(f"{path}: {msg}")

    def obj(self, parent, key, path, *, nullable=False):
        """parent[key] as a dict (or None when nullable and null); records a problem otherwise."""
        if not isinstance(parent, dict):
            return None
        if key not in parent:
            self.bad(path, f"missing key '{key}'")
            return None
        v = parent[key]
        if v is None and nullable:
            return None
        if not isinstance(v, dict):
            self.bad(f"{path}.{key}", f"expected an object, got {type(v).__name__}")
            return None
        return v

    def arr(self, parent, key, path, *, nonempty=False):
        if not isinstance(parent, dict):
            return []
        if key not in parent:
            self.bad(path, f"missing key '{key}'")
            return []
        v = parent[key]
        if not isinstance(v, list):
            self.bad(f"{path}.{key}", f"expected a list, got {type(v).__name__}")
            return []
        if nonempty and not v:
            self.bad(f"{path}.{key}", "must not be empty")
        return v

    def val(self, parent, key, path, kind, *, nullable=False, choices=None):
        """kind: 'str' | 'int' | 'num' | 'bool' | 'any'."""
        if not isinstance(parent, dict):
            return None
        if key not in parent:
            self.bad(path, f"missing key '{key}'")
            return None
        v = parent[key]
        if v is None and nullable:
            return None
        ok = {"str": lambda x: isinstance(x, str), "int": _is_int, "num": _is_num,
              "bool": lambda x: isinstance(x, bool), "any": lambda x: True}[kind](v)
        if not ok:
            want = {"str": "a string", "int": "an integer", "num": "a finite number", "bool": "true/false",
                    "any": "a value"}[kind]
            self.bad(f"{path}.{key}", f"expected {want}{' or null' if nullable else ''}, got {v!r:.60}")
            return None
        if choices is not None and v not in choices:
            self.bad(f"{path}.{key}", f"{v!r} is not one of {', '.join(map(repr, choices))}")
            return None
        return v

    def prov(self, parent, path, *, device_key=True, default_device=None):
        p = self.val(parent, "provenance", path, "str", choices=PROVENANCES)
        if device_key and isinstance(parent, dict) and ("device" in parent or default_device is None):
            d = self.val(parent, "device", path, "str", choices=DEVICES + ("",))
        else:
            d = default_device
        if p == "measured" and d == "":
            self.bad(f"{path}.device", "a measured value must name the device it was measured on (cuda/cpu/meta)")


def validate_report(report) -> None:
    """Raise ReportSchemaError (a ValueError) listing every problem, or return None.

    Beyond the keys of the schema it checks: every figure referenced by a page exists; edges join existing
    nodes; a stage's `count` equals its number of listed blocks; shape figures hold lists of integers;
    measured figures name their device; the whole dict is strict JSON (no NaN/Infinity)."""
    c = _Checker()
    if not isinstance(report, dict):
        raise ReportSchemaError([f"report: expected a dict, got {type(report).__name__}"])
    c.val(report, "schema", "report", "str", choices=(SCHEMA,))
    c.val(report, "model", "report", "str", choices=MODELS)
    c.val(report, "title", "report", "str")

    run = c.obj(report, "run", "report")
    if run is not None:
        for k in ("height", "width", "batch", "steps_traced"):
            c.val(run, k, "report.run", "int")
        for k in ("dtype", "device_name", "weights", "python", "torch", "diffusers", "transformers", "created"):
            c.val(run, k, "report.run", "str")
        c.val(run, "device", "report.run", "str", choices=DEVICES)
    run_device = run.get("device") if isinstance(run, dict) else None

    figures = c.obj(report, "figures", "report") or {}
    for name, f in figures.items():
        fp = f"report.figures[{name!r}]"
        if not isinstance(f, dict):
            c.bad(fp, "expected an object")
            continue
        unit = c.val(f, "unit", fp, "str", choices=UNITS)
        if "value" not in f:
            c.bad(fp, "missing key 'value'")
        else:
            v = f["value"]
            if unit == "shape":
                if not (isinstance(v, list) and all(_is_int(d) for d in v)):
                    c.bad(f"{fp}.value", f"a shape figure holds a list of integers, got {v!r:.60}")
            elif unit in ("params", "bytes", "flop", "s", "count"):
                if not _is_num(v):
                    c.bad(f"{fp}.value", f"a {unit} figure holds a finite number, got {v!r:.60}")
            elif unit == "" and not (isinstance(v, str) or _is_num(v)
                                     or (isinstance(v, list) and all(_is_int(d) for d in v))):
                c.bad(f"{fp}.value", f"expected a number, string or list of integers, got {v!r:.60}")
        c.prov(f, fp)
        for k in ("method", "label_en", "label_zh"):
            c.val(f, k, fp, "str")

    def fig_ref(parent, key, path):
        name = c.val(parent, key, path, "str")
        if name is not None and name not in figures:
            c.bad(f"{path}.{key}", f"unknown figure {name!r} (not in report.figures)")

    def fig_list(parent, key, path):
        for i, name in enumerate(c.arr(parent, key, path)):
            if not isinstance(name, str):
                c.bad(f"{path}.{key}[{i}]", "expected a figure name")
            elif name not in figures:
                c.bad(f"{path}.{key}[{i}]", f"unknown figure {name!r} (not in report.figures)")

    def bilingual(parent, path, *stems):
        for s in stems:
            c.val(parent, f"{s}_en", path, "str")
            c.val(parent, f"{s}_zh", path, "str")

    pages = c.obj(report, "pages", "report")
    # 1 macro
    macro = c.obj(pages, "macro", "report.pages")
    node_ids: set = set()
    for i, n in enumerate(c.arr(macro, "nodes", "report.pages.macro", nonempty=True)):
        p = f"report.pages.macro.nodes[{i}]"
        if not isinstance(n, dict):
            c.bad(p, "expected an object")
            continue
        nid = c.val(n, "id", p, "str")
        if nid in node_ids:
            c.bad(f"{p}.id", f"duplicate node id {nid!r}")
        node_ids.add(nid)
        c.val(n, "kind", p, "str", choices=KINDS)
        bilingual(n, p, "label", "detail")
    for i, e in enumerate(c.arr(macro, "edges", "report.pages.macro")):
        p = f"report.pages.macro.edges[{i}]"
        if not isinstance(e, dict):
            c.bad(p, "expected an object")
            continue
        for k in ("from", "to"):
            v = c.val(e, k, p, "str")
            if v is not None and v not in node_ids:
                c.bad(f"{p}.{k}", f"unknown node id {v!r}")
        if e.get("from") is not None and e.get("from") == e.get("to"):
            c.bad(p, "an edge must join two different nodes")
        fig_ref(e, "figure", p)
    # 2 conditions
    cond = c.obj(pages, "conditions", "report.pages")
    for i, b in enumerate(c.arr(cond, "branches", "report.pages.conditions", nonempty=True)):
        p = f"report.pages.conditions.branches[{i}]"
        if not isinstance(b, dict):
            c.bad(p, "expected an object")
            continue
        c.val(b, "id", p, "str")
        bilingual(b, p, "label")
        for k in ("layers", "hidden", "heads"):
            c.val(b, k, p, "int", nullable=True)
        fig_ref(b, "output_figure", p)
        c.val(b, "static", p, "bool")
    merge = c.obj(cond, "merge", "report.pages.conditions")
    if merge is not None:
        bilingual(merge, "report.pages.conditions.merge", "label", "rule")
        fig_ref(merge, "output_figure", "report.pages.conditions.merge")
    # 3 denoiser
    den = c.obj(pages, "denoiser", "report.pages")
    stage_ids: set = set()
    stages = c.arr(den, "stages", "report.pages.denoiser", nonempty=True)
    for i, s in enumerate(stages):
        p = f"report.pages.denoiser.stages[{i}]"
        if not isinstance(s, dict):
            c.bad(p, "expected an object")
            continue
        sid = c.val(s, "id", p, "str")
        if sid in stage_ids:
            c.bad(f"{p}.id", f"duplicate stage id {sid!r}")
        stage_ids.add(sid)
        bilingual(s, p, "label")
        count = c.val(s, "count", p, "int")
        blocks = c.arr(s, "blocks", p, nonempty=True)
        if count is not None and count != len(blocks):
            c.bad(f"{p}.blocks", f"count is {count} but {len(blocks)} block(s) are listed (every block must be)")
        for j, b in enumerate(blocks):
            bp = f"{p}.blocks[{j}]"
            if not isinstance(b, dict):
                c.bad(bp, "expected an object")
                continue
            for k in ("name", "class", "inputs", "outputs"):
                c.val(b, k, bp, "str")
            c.val(b, "params", bp, "int")
            c.val(b, "hits", bp, "int")
            c.val(b, "flops", bp, "num", nullable=True)
            c.val(b, "wall_s", bp, "num", nullable=True)
            c.prov(b, bp)
    for i, s in enumerate(stages):  # optional: "feeds": id of the stage this side branch injects into
        if isinstance(s, dict) and s.get("feeds") is not None and s.get("feeds") not in stage_ids:
            c.bad(f"report.pages.denoiser.stages[{i}].feeds", f"unknown stage id {s.get('feeds')!r}")
    fig_list(den, "inputs", "report.pages.denoiser")
    fig_list(den, "outputs", "report.pages.denoiser")
    # 4 micro
    micro = c.obj(pages, "micro", "report.pages")
    c.val(micro, "block_name", "report.pages.micro", "str")
    for i, r in enumerate(c.arr(micro, "rows", "report.pages.micro", nonempty=True)):
        p = f"report.pages.micro.rows[{i}]"
        if not isinstance(r, dict):
            c.bad(p, "expected an object")
            continue
        for k in ("module", "class", "inputs", "outputs"):
            c.val(r, k, p, "str")
        c.val(r, "params", p, "int")
        c.prov(r, p)
    asm = c.obj(micro, "assembly", "report.pages.micro")
    if asm is not None:
        bilingual(asm, "report.pages.micro.assembly", "label", "rule")
        fig_list(asm, "parts", "report.pages.micro.assembly")
        fig_ref(asm, "result", "report.pages.micro.assembly")
    # 5 vae
    vae = c.obj(pages, "vae", "report.pages")
    fig_ref(vae, "encode_figure", "report.pages.vae")
    fig_ref(vae, "decode_figure", "report.pages.vae")
    for k in ("encode_input_figure", "decode_input_figure"):  # optional
        if isinstance(vae, dict) and vae.get(k) is not None:
            fig_ref(vae, k, "report.pages.vae")
    ladder = c.arr(vae, "channel_ladder", "report.pages.vae", nonempty=True)
    if not all(_is_int(x) for x in ladder):
        c.bad("report.pages.vae.channel_ladder", "expected a list of integers")
    c.val(vae, "latent_channels", "report.pages.vae", "int")
    c.val(vae, "ladder_provenance", "report.pages.vae", "str", choices=PROVENANCES)

    # evidence
    ev = c.obj(report, "evidence", "report")
    mod = c.obj(ev, "module", "report.evidence")
    if mod is not None:
        p = "report.evidence.module"
        c.val(mod, "rows", p, "int")
        c.val(mod, "hits", p, "int")
        c.val(mod, "definition", p, "str")
        c.prov(mod, p)
        pc = c.obj(mod, "per_component", p)
        for name, v in (pc or {}).items():
            if not (isinstance(v, dict) and _is_int(v.get("rows")) and _is_int(v.get("hits"))):
                c.bad(f"{p}.per_component[{name!r}]", "expected {\"rows\": int, \"hits\": int}")
    if isinstance(ev, dict) and "line" not in ev:
        c.bad("report.evidence", "missing key 'line' (null when the line tracer did not run)")
    line = c.obj(ev, "line", "report.evidence", nullable=True) if isinstance(ev, dict) and "line" in ev else None
    if line is not None:
        p = "report.evidence.line"
        c.val(line, "rows", p, "int")
        c.val(line, "hits", p, "int")
        for k in ("python", "tracer", "definition"):
            c.val(line, k, p, "str")
        c.prov(line, p)
    par = c.obj(ev, "params", "report.evidence")
    if par is not None:
        p = "report.evidence.params"
        c.val(par, "unique", p, "int")
        c.val(par, "tie_counted", p, "int")
        c.val(par, "convention_unique", p, "str")
        c.val(par, "convention_tie_counted", p, "str")
        c.prov(par, p)
        pc = c.obj(par, "per_component", p)
        for name, v in (pc or {}).items():
            ok = _is_int(v) or (isinstance(v, dict) and v and all(_is_int(x) for x in v.values()))
            if not ok:
                c.bad(f"{p}.per_component[{name!r}]", "expected an integer or {\"unique\": int, \"tie_counted\": int}")
    fl = c.obj(ev, "flops", "report.evidence")
    if fl is not None:
        c.val(fl, "per_step", "report.evidence.flops", "num", nullable=True)
        c.val(fl, "method", "report.evidence.flops", "str")
        c.prov(fl, "report.evidence.flops")
    if isinstance(ev, dict) and "peak_memory" not in ev:
        c.bad("report.evidence", "missing key 'peak_memory' (null when memory was not measured)")
    pm = (c.obj(ev, "peak_memory", "report.evidence", nullable=True)
          if isinstance(ev, dict) and "peak_memory" in ev else None)
    if pm is not None:
        c.val(pm, "bytes", "report.evidence.peak_memory", "int")
        c.val(pm, "method", "report.evidence.peak_memory", "str")
        c.prov(pm, "report.evidence.peak_memory", default_device=run_device or "")

    if not c.problems:
        try:
            json.dumps(report, allow_nan=False)
        except (TypeError, ValueError) as exc:
            c.bad("report", f"not strict JSON: {exc}")
    if c.problems:
        raise ReportSchemaError(c.problems)


# ---------------------------------------------------------------------------------------------------------
# number formatting (the readable form on the page; the exact value goes into the tooltip)


def format_value(value, unit: str) -> str:
    """The readable form of a figure value: 17.004 B (params), 22.65 GiB, 74.40 TFLOP, 12.3 ms, 2,053,
    [1, 4096, 64]; None -> "—"."""
    if value is None:
        return "—"
    if isinstance(value, list):
        return "[" + ", ".join(str(d) for d in value) + "]"
    if isinstance(value, str):
        return value
    v = value
    a = abs(v)
    if unit == "params":
        for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
            if a >= scale:
                return f"{v / scale:.3f} {suffix}"
        return f"{v:,.0f}" if float(v).is_integer() else f"{v:g}"
    if unit == "bytes":
        for scale, suffix in ((2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
            if a >= scale:
                return f"{v / scale:.2f} {suffix}"
        return f"{v:,.0f} bytes"
    if unit == "flop":
        for scale, suffix in ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP")):
            if a >= scale:
                return f"{v / scale:.2f} {suffix}"
        return f"{v:,.0f} FLOP"
    if unit == "s":
        if a >= 1 or a == 0:
            return f"{v:.2f} s"
        if a >= 1e-3:
            return f"{v * 1e3:.1f} ms"
        return f"{v * 1e6:.0f} µs"
    if unit == "count" and (_is_int(v) or float(v).is_integer()):
        return f"{v:,.0f}"
    if _is_int(v) or float(v).is_integer():
        return str(int(v))
    return f"{v:.6g}"


def exact_value(value, unit: str) -> str:
    """The exact value, for the tooltip: 17,003,768,291 parameters."""
    if value is None:
        return "not measured"
    if isinstance(value, (list, str)):
        return format_value(value, unit)
    whole = _is_int(value) or float(value).is_integer()
    num = f"{value:,.0f}" if whole else repr(value)
    word = {"params": "parameters", "bytes": "bytes", "flop": "FLOP", "s": "s", "count": ""}.get(unit, "")
    return f"{num} {word}".strip()


def _dtype_short(dtype: str) -> str:
    return {"bfloat16": "BF16", "float16": "FP16", "float32": "FP32", "float8_e4m3fn": "FP8"}.get(
        dtype.replace("torch.", ""), dtype)


# ---------------------------------------------------------------------------------------------------------
# the element builder: every str child and attribute value is escaped; only _Markup passes through


class _Markup(str):
    """HTML this module built (never data)."""


def _esc(s) -> _Markup:
    return _Markup(_html.escape(str(s), quote=True))


def _render_children(children) -> str:
    out = []
    for ch in children:
        if ch is None or ch is False:
            continue
        if isinstance(ch, _Markup):
            out.append(ch)
        elif isinstance(ch, (list, tuple)):
            out.append(_render_children(ch))
        else:
            out.append(_esc(ch))
    return "".join(out)


_VOID = {"meta", "br", "hr", "img", "input", "link", "rect", "path", "circle", "line", "polygon", "stop"}
_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9:_-]*$")


def _el(tag: str, attrs: dict | None = None, *children) -> _Markup:
    assert _NAME.match(tag), tag
    parts = [tag]
    for k, v in (attrs or {}).items():
        if v is None or v is False:
            continue
        name = k.rstrip("_").replace("_", "-") if k not in ("class_", "for_") else k[:-1]
        assert _NAME.match(name), name
        parts.append(name if v is True else f'{name}="{_esc(v)}"')
    head = "<" + " ".join(parts)
    if tag in _VOID and not children:
        return _Markup(head + (" />" if tag in ("rect", "path", "circle", "line", "polygon", "stop") else ">"))
    return _Markup(f"{head}>{_render_children(children)}</{tag}>")


def _bi(en, zh, tag="span") -> _Markup:
    """Both languages; CSS shows the current one."""
    return _Markup(_el(tag, {"class_": "l-en", "lang": "en"}, en) + _el(tag, {"class_": "l-zh", "lang": "zh-CN"}, zh))


def _bi_attrs(en: str, zh: str) -> dict:
    """A bilingual tooltip: the script swaps `title` with the language."""
    return {"title": en, "data-title-en": en, "data-title-zh": zh}


def _ptr(*parts) -> str:
    """A JSON pointer (RFC 6901)."""
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _num(value, unit: str, path: str | None, *, sum_of: str | None = None, tag="span", cls="",
         attrs: dict | None = None) -> _Markup:
    klass = ("num shape" if unit == "shape" or isinstance(value, list) else "num") + (f" {cls}" if cls else "")
    return _el(tag, {**(attrs or {}), "class_": klass, "data-path": path, "data-sum": sum_of, "data-unit": unit,
                     "data-value": json.dumps(value, ensure_ascii=False), "title": exact_value(value, unit)},
               format_value(value, unit))


# badges

def _badge_key(prov: str, device: str) -> str:
    if prov == "measured":
        return "cuda" if device == "cuda" else "host"
    return "est" if prov == "estimated" else "static"


def _badge_text(prov: str, device: str) -> tuple[str, str]:
    if prov == "measured":
        dev_en = {"cuda": "CUDA", "cpu": "cpu", "meta": "meta"}.get(device, device)
        dev_zh = {"cuda": "CUDA", "cpu": "CPU", "meta": "meta"}.get(device, device)
        return f"measured · {dev_en}", f"实测 · {dev_zh}"
    if prov == "estimated":
        return "estimated", "估算"
    return "static config", "静态配置"


def _badge(prov: str, device: str = "", method: str | None = None, *, small=False) -> _Markup:
    en, zh = _badge_text(prov, device)
    attrs = {"class_": f"badge b-{_badge_key(prov, device)}" + (" sm" if small else ""),
             "data-prov": prov, "data-device": device}
    if method:
        attrs.update(_bi_attrs(f"{en}: {method}", f"{zh}：{method}"))
    return _el("span", attrs, _bi(en, zh))


def _fig(report: dict, name: str, *, label=True, cls="") -> _Markup:
    """A figure: its value (readable, exact in the tooltip), its badge, optionally its label."""
    f = report["figures"][name]
    return _el("span", {"class_": "fig" + (f" {cls}" if cls else ""), "data-fig": name},
               _el("span", {"class_": "fig-label"}, _bi(f["label_en"], f["label_zh"])) if label else None,
               _el("span", {"class_": "fig-val"}, _num(f["value"], f["unit"], _ptr("figures", name, "value")),
                   _badge(f["provenance"], f["device"], f["method"], small=True)))


# ---------------------------------------------------------------------------------------------------------
# page 1: the macro graph as inline SVG


_KIND_LABEL = {
    "input": ("Inputs", "输入"), "encoder": ("Encoders", "编码器"), "assembly": ("Condition assembly", "条件组装"),
    "denoiser": ("Denoiser", "去噪器"), "vae": ("VAE", "VAE"), "output": ("Output", "输出"),
}
_FONT_T, _FONT_D, _FONT_E = 12.5, 10.5, 10.5  # title, detail, edge label (px in SVG units)


def _text_w(s: str, size: float, mono=False) -> float:
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
        if cur and _text_w((cur + t).rstrip(), size) > maxw:
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


def _svg_num_lines(f: dict, name: str, lines: list[str], x: float, y: float) -> _Markup:
    """A figure value as an SVG <text class="num"> (one <tspan> per line), vertically centred on y."""
    y0 = y - 12.5 * (len(lines) - 1) / 2 + 3.7
    spans = [_el("tspan", {"x": f"{x:.1f}", "y": f"{y0 + 12.5 * j:.1f}"}, t) for j, t in enumerate(lines)]
    return _el("text", {"class_": "num shape" if f["unit"] == "shape" else "num", "text-anchor": "middle",
                        "data-path": _ptr("figures", name, "value"), "data-unit": f["unit"],
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


def _macro_svg(report: dict) -> _Markup:
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
        width_need[i] = max([_text_w(s, _FONT_T) * 1.06 for s in t_en + t_zh]
                            + [_text_w(s, _FONT_D) for s in d_en + d_zh] + [64]) + 26
    label_text = [format_value(figs[e["figure"]]["value"], figs[e["figure"]]["unit"]) for e in edges]
    label_lines = [_split_shape(t) for t in label_text]
    label_w = [max(_text_w(x, _FONT_E, mono=True) for x in ls) + 12 for ls in label_lines]
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
        need += [_text_w(headers[c][0], 10.5) + 8, _text_w(headers[c][1], 10.5) + 8]
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
        parts.append(_el("text", {"class_": "colhead l-en", "x": f"{cx:.1f}", "y": "18", "text-anchor": "middle"},
                         headers[c][0]))
        parts.append(_el("text", {"class_": "colhead l-zh", "x": f"{cx:.1f}", "y": "18", "text-anchor": "middle"},
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
        bk = _badge_key(f["provenance"], f["device"])
        edge_parts.append(_el("path", {"class_": f"edge e-{bk}", "d": d_attr, "marker-end": "url(#fs-arrow)"}))
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
        bk = _badge_key(f["provenance"], f["device"])
        w = label_w[k]
        ben = _badge_text(f["provenance"], f["device"])[0]
        label_parts_k = _el(
            "g", {"class_": f"elabel fig e-{bk}", "data-fig": e["figure"], "data-edge": f"{e['from']}->{e['to']}"},
            _el("title", None, f"{e['from']} → {e['to']}: {f['label_en']} = {label_text[k]} ({ben}; {f['method']})"),
            _el("rect", {"x": f"{lx - w / 2:.1f}", "y": f"{ly - label_h[k] / 2:.1f}", "width": f"{w:.1f}",
                         "height": f"{label_h[k]:.1f}", "rx": "7"}),
            _svg_num_lines(f, e["figure"], label_lines[k], lx, ly),
        )
        edge_parts.append(label_parts_k)
    # nodes
    node_parts = []
    for n in nodes:
        i = n["id"]
        x0, y0, w, h = x_of[col[i]], y_of[i], col_w[col[i]], height[i]
        L = lines[i]
        body = [_el("rect", {"class_": "nbox", "x": f"{x0:.1f}", "y": f"{y0:.1f}", "width": f"{w:.1f}",
                             "height": f"{h:.1f}", "rx": "8"}),
                _el("rect", {"class_": "nstripe", "x": f"{x0:.1f}", "y": f"{y0:.1f}", "width": "4",
                             "height": f"{h:.1f}", "rx": "2"})]
        for lang in ("en", "zh"):
            tl, dl = L[f"t_{lang}"], L[f"d_{lang}"]
            block_h = len(tl) * 16 + len(dl) * 14
            yy = y0 + (h - block_h) / 2 + 12
            for s in tl:
                body.append(_el("text", {"class_": f"ntitle l-{lang}", "x": f"{x0 + w / 2 + 2:.1f}", "y": f"{yy:.1f}",
                                         "text-anchor": "middle"}, s))
                yy += 16
            for s in dl:
                body.append(_el("text", {"class_": f"ndetail l-{lang}", "x": f"{x0 + w / 2 + 2:.1f}",
                                         "y": f"{yy - 1:.1f}", "text-anchor": "middle"}, s))
                yy += 14
        node_parts.append(_el("g", {"class_": f"node k-{n['kind']}", "data-node": i},
                              _el("title", None, f"{n['label_en']} — {n['detail_en']}"), body))
    defs = _Markup(
        '<defs><marker id="fs-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,1 L10,5 L0,9 z" class="arrowhead" /></marker></defs>')
    return _el("svg", {"class_": "macro", "xmlns": "http://www.w3.org/2000/svg",
                       "viewBox": f"0 0 {total_w:.0f} {total_h:.0f}", "width": f"{total_w:.0f}",
                       "height": f"{total_h:.0f}", "role": "img",
                       "aria-label": f"{report['title']}: macro architecture"},
               defs, parts, node_parts, edge_parts)


# ---------------------------------------------------------------------------------------------------------
# pages


def _page_meta(model: str) -> list[dict]:
    flux = model == "flux-fill"
    return [
        {"short": ("Macro", "宏观"), "title": ("Macro architecture", "宏观架构"),
         "sub": (("From condition encoding through the full denoiser to VAE decode. Every edge carries the shape "
                  "that flowed along it and where that shape came from."),
                 "从条件编码、完整 denoiser 到 VAE 解码；每条边标注流经的 shape 及其来源。")},
        {"short": ("Conditions", "条件"), "title": ("Condition encoding and branch merge", "条件编码与分支组装"),
         "sub": (("Every text and image condition branch that ran; output shapes and the merge rule are labelled "
                  "separately."), "保留所有实际执行的文本与图像条件分支；输出 shape 与 merge 方式分别标注。")},
        {"short": ("Denoiser", "去噪器"),
         "title": (("Full FLUX transformer topology", "完整 FLUX Transformer 拓扑") if flux else
                   ("Full MMDiT topology and ControlNet branch", "完整 MMDiT 拓扑与 ControlNet 分支")),
         "sub": ("Every block at production depth, none folded: shapes, parameters, FLOPs and hits per block.",
                 "保留完整生产层数，逐块列出 shape、参数量、FLOPs 与执行次数，未折叠。")},
        {"short": ("Block", "Block"),
         "title": (("Block micro-structure and fill condition", "Block 微观结构与 Fill 条件") if flux else
                   ("Joint block micro-structure and ControlNet injection", "Joint Block 微观结构与 ControlNet 条件注入")),
         "sub": (("One block's modules by role: modulation, joint attention, MLP, residual; and how the task "
                  "condition enters the denoiser."),
                 "单个 block 的模块按职责分组：调制、联合注意力、MLP、残差；以及任务条件如何进入 denoiser。")},
        {"short": ("VAE & evidence", "VAE 与证据"), "title": ("VAE boundary and trace evidence", "VAE 边界与运行证据"),
         "sub": (("Encode/decode shapes as measured in the run; the channel ladder comes from static config. "
                  "Evidence: parameters, memory, FLOPs, module- and line-level traces, run boundary."),
                 ("Encode/Decode shape 为本次运行实测；中间通道阶梯来自固定配置。证据：参数、显存、FLOPs、"
                  "模块级与行级 trace、运行边界。"))},
    ]


def _run_line(report: dict) -> _Markup:
    run = report["run"]
    dt = _dtype_short(run["dtype"])
    steps = run["steps_traced"]
    en = (f"{dt} · {run['device_name']} · {run['width']}×{run['height']} · batch {run['batch']} · "
          f"{steps} denoiser step{'s' if steps != 1 else ''} traced")
    zh = f"{dt} · {run['device_name']} · {run['width']}×{run['height']} · batch {run['batch']} · 追踪 {steps} 个去噪步"
    return _el("div", {"class_": "runline"}, _badge("measured", run["device"]),
               _el("span", {"class_": "runtext"}, _bi(en, zh)),
               _el("span", {"class_": "weights"}, _bi("weights: ", "权重："), run["weights"]))


def _is_fixture(report: dict) -> bool:
    return "fixture" in report["run"]["weights"].lower()


def _page(report, n: int, meta: dict, body) -> _Markup:
    return _el("section", {"class_": "page", "id": f"page-{n}", "data-page": str(n),
                           "aria-labelledby": f"page-{n}-title"},
               _el("header", {"class_": "phead"},
                   _el("h2", {"id": f"page-{n}-title"}, f"{n}. ", _bi(meta["title"][0], meta["title"][1])),
                   _el("p", {"class_": "sub"}, _bi(meta["sub"][0], meta["sub"][1]))),
               body,
               _el("footer", {"class_": "pfoot"}, _run_line(report)))


def _h3(en, zh) -> _Markup:
    return _el("h3", None, _bi(en, zh))


def _edge_table(report) -> _Markup:
    macro = report["pages"]["macro"]
    figs = report["figures"]
    node = {n["id"]: n for n in macro["nodes"]}
    rows = []
    for e in macro["edges"]:
        a, b = node[e["from"]], node[e["to"]]
        f = figs[e["figure"]]
        rows.append(_el("tr", None,
                        _el("td", None, _bi(a["label_en"], a["label_zh"])),
                        _el("td", {"class_": "arrow"}, "→"),
                        _el("td", None, _bi(b["label_en"], b["label_zh"])),
                        _el("td", None, _bi(f["label_en"], f["label_zh"])),
                        _el("td", None, _fig(report, e["figure"], label=False)),
                        _el("td", {"class_": "method"}, f["method"])))
    return _el("details", {"class_": "edges", "open": True},
               _el("summary", None, _bi(f"Edge shapes ({len(rows)})", f"边上的 shape（{len(rows)}）")),
               _el("table", {"class_": "grid compact"},
                   _el("thead", None, _el("tr", None, _el("th", None, _bi("from", "起点")), _el("th", None, ""),
                                          _el("th", None, _bi("to", "终点")), _el("th", None, _bi("tensor", "张量")),
                                          _el("th", None, _bi("shape · provenance", "shape · 来源")),
                                          _el("th", None, _bi("how obtained", "获取方式")))),
                   _el("tbody", None, rows)))


def _legend() -> _Markup:
    return _el("div", {"class_": "legend"}, _el("span", {"class_": "lg-title"}, _bi("Provenance:", "来源：")),
               _badge("measured", "cuda"), _badge("measured", "meta"), _badge("measured", "cpu"),
               _badge("estimated"), _badge("static-config"),
               _el("span", {"class_": "lg-note"},
                   _bi("hover a value for its exact figure and how it was obtained",
                       "悬停查看精确数值与获取方式")))


def _page1(report, meta) -> _Markup:
    return _page(report, 1, meta, [
        _el("div", {"class_": "figure-wrap"}, _macro_svg(report)),
        _legend(),
        _edge_table(report),
    ])


def _page2(report, meta) -> _Markup:
    cond = report["pages"]["conditions"]
    run_dev = report["run"]["device"]
    cards = []
    for i, b in enumerate(cond["branches"]):
        prov, dev = ("static-config", "") if b["static"] else ("measured", run_dev)
        arch = []
        p = ("pages", "conditions", "branches", i)
        if b.get("layers") is not None:
            arch.append(_el("div", {"class_": "arch"}, _bi("Layers ×", "层数 ×"), _num(b["layers"], "", _ptr(*p, "layers"))))
        hh = []
        if b.get("hidden") is not None:
            hh.append(_el("span", None, _bi("hidden ", "hidden "), _num(b["hidden"], "", _ptr(*p, "hidden"))))
        if b.get("heads") is not None:
            hh.append(_el("span", None, " · ", _bi("heads ", "heads "), _num(b["heads"], "", _ptr(*p, "heads"))))
        if hh:
            arch.append(_el("div", {"class_": "arch"}, hh))
        if arch:
            arch.append(_badge(prov, dev, "layer count, width and heads from the model config" if b["static"]
                               else "read off the module tree in this run", small=True))
        cards.append(_el("div", {"class_": "card branch", "data-branch": b["id"]},
                         _el("div", {"class_": "ctitle"}, _bi(b["label_en"], b["label_zh"])),
                         _el("div", {"class_": "archrow"}, arch),
                         _el("div", {"class_": "out"}, _fig(report, b["output_figure"]))))
    m = cond["merge"]
    den = next((n for n in report["pages"]["macro"]["nodes"] if n["kind"] == "denoiser"), None)
    merge_card = _el("div", {"class_": "card merge"},
                     _el("div", {"class_": "ctitle"}, _bi(m["label_en"], m["label_zh"])),
                     _el("p", {"class_": "rule"}, _bi(m["rule_en"], m["rule_zh"])),
                     _el("div", {"class_": "out"}, _fig(report, m["output_figure"])))
    flow = _el("div", {"class_": "condflow"},
               _el("div", {"class_": "branches"}, cards),
               _el("div", {"class_": "bigarrow"}, "→"),
               merge_card,
               _el("div", {"class_": "bigarrow"}, "→"),
               _el("div", {"class_": "card sink"},
                   _el("div", {"class_": "ctitle"}, _bi(den["label_en"], den["label_zh"]) if den else _bi("Denoiser", "去噪器")),
                   _el("p", {"class_": "muted"}, _bi(den["detail_en"], den["detail_zh"]) if den else "")))
    return _page(report, 2, meta, [
        _h3("Text condition branches", "文本条件分支"), flow,
        _h3("Image condition", "图像条件"), _assembly(report),
        _legend(),
    ])


def _assembly(report, *, vertical=False) -> _Markup:
    a = report["pages"]["micro"]["assembly"]
    parts = []
    for j, name in enumerate(a["parts"]):
        if j:
            parts.append(_el("div", {"class_": "op"}, "+"))
        parts.append(_el("div", {"class_": "card part"}, _fig(report, name, cls="stack")))
    return _el("div", {"class_": "assembly" + (" vertical" if vertical else "")},
               _el("div", {"class_": "ctitle"}, _bi(a["label_en"], a["label_zh"])),
               _el("div", {"class_": "asmrow"}, parts, _el("div", {"class_": "op"}, "↓" if vertical else "→"),
                   _el("div", {"class_": "card result"}, _fig(report, a["result"], cls="stack"))),
               _el("p", {"class_": "rule"}, _bi(a["rule_en"], a["rule_zh"])))


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


def _stage_card(report, i, s, *, side=False) -> _Markup:
    blocks = s["blocks"]
    classes = []
    for b in blocks:
        if b["class"] not in classes:
            classes.append(b["class"])
    p = _ptr("pages", "denoiser", "stages", i, "blocks") + "/*/params"
    prov, dev = _stage_prov(blocks)
    per = {b["params"] for b in blocks}
    return _el("div", {"class_": "card stage" + (" side" if side else ""), "data-stage": s["id"]},
               _el("div", {"class_": "stagehead"},
                   _el("span", {"class_": "ctitle"}, _bi(s["label_en"], s["label_zh"])),
                   _el("span", {"class_": "mult"}, "×", _num(s["count"], "count", _ptr("pages", "denoiser", "stages", i, "count")))),
               _el("div", {"class_": "mono small cls"}, ", ".join(classes)),
               _el("div", {"class_": "kv"}, _bi("params ", "参数 "),
                   _num(sum(b["params"] for b in blocks), "params", None, sum_of=p),
                   _el("span", {"class_": "muted"}, " (", _bi("each ", "每块 "),
                       _num(blocks[0]["params"], "params", _ptr("pages", "denoiser", "stages", i, "blocks", 0, "params")),
                       ")") if len(per) == 1 else None),
               _badge(prov, dev, small=True) if prov else _el("span", {"class_": "badge b-mixed sm"}, _bi("mixed", "混合")))


def _figchips(report, names) -> _Markup:
    return _el("div", {"class_": "chips"}, [_el("div", {"class_": "chip"}, _fig(report, n, cls="stack")) for n in names])


def _page3(report, meta) -> _Markup:
    den = report["pages"]["denoiser"]
    stages = den["stages"]
    feeds = _feeds(stages)
    main = [(i, s) for i, s in enumerate(stages) if s["id"] not in feeds]
    side = [(i, s) for i, s in enumerate(stages) if s["id"] in feeds]
    strip = [_el("div", {"class_": "card io in"}, _el("div", {"class_": "ctitle"}, _bi("Inputs", "输入")),
                 _figchips(report, den["inputs"]))]
    for i, s in main:
        col = [_stage_card(report, i, s)]
        for j, b in side:
            if feeds[b["id"]] == s["id"]:
                col += [_el("div", {"class_": "inject"}, "↑ ", _bi(f"residuals into {s['label_en']}",
                                                                   f"残差注入 {s['label_zh']}")),
                        _stage_card(report, j, b, side=True)]
        strip += [_el("div", {"class_": "bigarrow"}, "→"), _el("div", {"class_": "stagecol"}, col)]
    strip += [_el("div", {"class_": "bigarrow"}, "→"),
              _el("div", {"class_": "card io out"}, _el("div", {"class_": "ctitle"}, _bi("Outputs", "输出")),
                  _figchips(report, den["outputs"]))]
    tables = [_stage_table(report, i, s) for i, s in enumerate(stages)]
    return _page(report, 3, meta, [_el("div", {"class_": "strip"}, strip), tables])


def _stage_table(report, i, s) -> _Markup:
    blocks = s["blocks"]
    base = ("pages", "denoiser", "stages", i, "blocks")
    classes = sorted({b["class"] for b in blocks})
    one_class = len(classes) == 1  # then the class is named once, in the summary
    rows = []
    for j, b in enumerate(blocks):
        rows.append(_el("tr", {"data-block": b["name"]},
                        _el("td", {"class_": "idx"}, str(j)),
                        _el("td", {"class_": "mono"}, b["name"]),
                        None if one_class else _el("td", {"class_": "mono cls"}, b["class"]),
                        _el("td", {"class_": "mono shp"}, b["inputs"]),
                        _el("td", {"class_": "mono shp"}, b["outputs"]),
                        _el("td", {"class_": "r"}, _num(b["params"], "params", _ptr(*base, j, "params"))),
                        _el("td", {"class_": "r"}, _num(b["flops"], "flop", _ptr(*base, j, "flops"))),
                        _el("td", {"class_": "r"}, _num(b["hits"], "count", _ptr(*base, j, "hits"))),
                        _el("td", {"class_": "r"}, _num(b["wall_s"], "s", _ptr(*base, j, "wall_s"))),
                        _el("td", None, _badge(b["provenance"], b["device"], small=True))))

    def total(key, unit):
        vals = [b[key] for b in blocks]
        if any(v is None for v in vals):
            return "—"
        return _num(sum(vals), unit, None, sum_of=_ptr(*base) + f"/*/{key}")
    foot = _el("tr", {"class_": "total"},
               _el("td", {"colspan": "4" if one_class else "5"}, _bi(f"Total ({len(blocks)} blocks)", f"合计（{len(blocks)} 块）")),
               _el("td", {"class_": "r"}, total("params", "params")),
               _el("td", {"class_": "r"}, total("flops", "flop")),
               _el("td", {"class_": "r"}, total("hits", "count")),
               _el("td", {"class_": "r"}, total("wall_s", "s")),
               _el("td", None, ""))
    cols = [("#", "#", "r", "c-idx"), ("block", "block", "", "c-name")]
    cols += [] if one_class else [("class", "类", "", "c-cls")]
    cols += [("inputs", "输入", "", "c-in"), ("outputs", "输出", "", "c-out"), ("params", "参数", "r", "c-num"),
             ("FLOPs", "FLOPs", "r", "c-flop"), ("hits", "执行次数", "r", "c-hits"), ("wall", "耗时", "r", "c-wall"),
             ("provenance", "来源", "", "c-bdg")]
    head = _el("tr", None, *[_el("th", {"class_": c or None}, _bi(en, zh)) for en, zh, c, _ in cols])
    colgroup = _el("colgroup", None, *[_el("col", {"class_": cc}) for *_, cc in cols])
    summary = _el("summary", None, _el("span", {"class_": "stitle"}, _bi(s["label_en"], s["label_zh"])),
                  _el("span", {"class_": "scount"}, f" ×{s['count']}"),
                  _el("span", {"class_": "mono scls"}, " · ", ", ".join(classes)) if one_class else None,
                  _el("span", {"class_": "muted"}, " · ", _bi("params ", "参数 "), total("params", "params"),
                      " · FLOPs ", total("flops", "flop")))
    return _el("details", {"class_": "stage-table", "open": True, "data-stage": s["id"]},
               summary,
               _el("div", {"class_": "scroll"},
                   _el("table", {"class_": "grid blocks"}, colgroup, _el("thead", None, head), _el("tbody", None, rows),
                       _el("tfoot", None, foot))))


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


_MOD_COLS = _Markup('<colgroup><col class="c-mod"><col class="c-cls"><col><col class="c-par"><col class="c-bdg"></colgroup>')


def _page4(report, meta) -> _Markup:
    micro = report["pages"]["micro"]
    groups: dict[str, list] = {}
    for i, r in enumerate(micro["rows"]):
        groups.setdefault(_group_of(r), []).append((i, r))
    steps = []
    for key, (ten, tzh), (den, dzh) in _GROUPS:
        rows = groups.get(key, [])
        if key == "other" and not rows:
            continue
        trs = [_el("tr", {"data-module": r["module"]},
                   _el("td", {"class_": "mono"}, r["module"]),
                   _el("td", {"class_": "mono cls"}, r["class"]),
                   _el("td", {"class_": "mono shp"}, r["inputs"], _el("span", {"class_": "to"}, " → "), r["outputs"]),
                   _el("td", {"class_": "r"}, _num(r["params"], "params", _ptr("pages", "micro", "rows", i, "params"))),
                   _el("td", None, _badge(r["provenance"], r["device"], small=True)))
               for i, r in rows]
        steps.append(_el("div", {"class_": f"step g-{key}", "data-group": key},
                         _el("div", {"class_": "steph"}, _el("span", {"class_": "stepname"}, _bi(ten, tzh)),
                             _el("span", {"class_": "muted small"}, _bi(den, dzh)) if den else None),
                         _el("table", {"class_": "grid compact mods"}, _MOD_COLS, _el("tbody", None, trs)) if trs else
                         _el("p", {"class_": "muted small"}, _bi("no module of its own (tensor adds inside the block's forward)",
                                                                 "无独立模块（block forward 内的张量相加）"))))
        steps.append(_el("div", {"class_": "down"}, "↓"))
    steps = steps[:-1]
    stages = report["pages"]["denoiser"]["stages"]
    feeds = _feeds(stages)
    block_stage = next((s for s in stages for b in s["blocks"] if b["name"] == micro["block_name"]), None)
    right = [_h3("Condition path", "条件路径"), _assembly(report, vertical=True)]
    if block_stage is not None:
        si = stages.index(block_stage)
        bj, blk = next((j, b) for j, b in enumerate(block_stage["blocks"]) if b["name"] == micro["block_name"])
        bp = ("pages", "denoiser", "stages", si, "blocks", bj)
        right.insert(0, _el("div", {"class_": "card blocksum"},
                            _el("div", {"class_": "ctitle"}, _bi("This block", "本 block"), " ",
                                _el("span", {"class_": "mono"}, blk["name"])),
                            _el("dl", None,
                                _el("dt", None, _bi("class", "类")), _el("dd", {"class_": "mono"}, blk["class"]),
                                _el("dt", None, _bi("stage", "阶段")), _el("dd", None, _bi(block_stage["label_en"], block_stage["label_zh"]),
                                                                           f" (×{block_stage['count']})"),
                                _el("dt", None, _bi("inputs", "输入")), _el("dd", {"class_": "mono"}, blk["inputs"]),
                                _el("dt", None, _bi("outputs", "输出")), _el("dd", {"class_": "mono"}, blk["outputs"]),
                                _el("dt", None, _bi("params", "参数")), _el("dd", None, _num(blk["params"], "params", _ptr(*bp, "params"))),
                                _el("dt", None, "FLOPs"), _el("dd", None, _num(blk["flops"], "flop", _ptr(*bp, "flops"))),
                                _el("dt", None, _bi("hits", "执行次数")), _el("dd", None, _num(blk["hits"], "count", _ptr(*bp, "hits")))),
                            _badge(blk["provenance"], blk["device"], small=True)))
        right.insert(0, _h3("Block summary", "Block 概要"))
    for i, s in enumerate(stages):
        if s["id"] in feeds:
            t = next(x for x in stages if x["id"] == feeds[s["id"]])
            right.append(_el("div", {"class_": "card inj"},
                             _el("div", {"class_": "ctitle"}, _bi(s["label_en"], s["label_zh"]), f" ×{s['count']}"),
                             _el("div", {"class_": "small"}, "↓ ", _bi(f"per-layer residual → {t['label_en']} ×{t['count']}",
                                                                       f"逐层残差 → {t['label_zh']} ×{t['count']}"))))
    left = [_el("h3", None, _bi("Block ", "Block "), _el("span", {"class_": "mono"}, micro["block_name"]),
                _el("span", {"class_": "muted"}, " · ", _bi(block_stage["label_en"], block_stage["label_zh"]))
                if block_stage else None),
            _el("div", {"class_": "steps"}, steps)]
    return _page(report, 4, meta, _el("div", {"class_": "two"}, _el("div", {"class_": "col"}, left),
                                       _el("div", {"class_": "col"}, right, _legend())))


def _ladder(values, path_base, prov, *, reverse=False) -> _Markup:
    idx = list(range(len(values)))
    if reverse:
        idx.reverse()
    out = []
    for k, j in enumerate(idx):
        if k:
            out.append(_el("span", {"class_": "lad-arrow"}, "→"))
        out.append(_el("span", {"class_": "lad"}, _num(values[j], "", _ptr(*path_base, j))))
    return _el("div", {"class_": "ladder"}, out, _badge(prov, "", "block_out_channels from the VAE config", small=True))


# without encode_input_figure / decode_input_figure: the first of these figures the report has
_ENC_IN = ("masked_image", "source_image")
_DEC_IN = ("latent.unpacked", "latent")


def _page5(report, meta) -> _Markup:
    vae = report["pages"]["vae"]
    lad = vae["channel_ladder"]
    lp = ("pages", "vae", "channel_ladder")
    prov = vae["ladder_provenance"]
    figs = report["figures"]
    enc_in = vae.get("encode_input_figure") or next((n for n in _ENC_IN if n in figs), None)
    dec_in = vae.get("decode_input_figure") or next((n for n in _DEC_IN if n in figs), None)
    row1 = [_el("div", {"class_": "card io"}, _el("div", {"class_": "ctitle"}, _bi("Source / reference image", "源图 / 参考图")),
                _fig(report, enc_in, label=False) if enc_in else None),
            _el("div", {"class_": "bigarrow"}, "→"),
            _el("div", {"class_": "card vae"}, _el("div", {"class_": "ctitle"}, _bi("VAE encoder", "VAE 编码器")),
                _el("div", {"class_": "small"}, _bi(f"down blocks ×{len(lad)}", f"下采样块 ×{len(lad)}")),
                _ladder(lad, lp, prov)),
            _el("div", {"class_": "bigarrow"}, "→"),
            _el("div", {"class_": "card io"}, _el("div", {"class_": "ctitle"}, _bi("Latent", "潜变量")),
                _fig(report, vae["encode_figure"]))]
    row2 = [_el("div", {"class_": "card io"}, _el("div", {"class_": "ctitle"}, _bi("Denoised latent", "去噪后潜变量")),
                _fig(report, dec_in, label=False) if dec_in else None),
            _el("div", {"class_": "bigarrow"}, "→"),
            _el("div", {"class_": "card vae"}, _el("div", {"class_": "ctitle"}, _bi("VAE decoder", "VAE 解码器")),
                _el("div", {"class_": "small"}, _bi(f"mid block + up blocks ×{len(lad)}", f"中间块 + 上采样块 ×{len(lad)}")),
                _ladder(lad, lp, prov, reverse=True)),
            _el("div", {"class_": "bigarrow"}, "→"),
            _el("div", {"class_": "card io"}, _el("div", {"class_": "ctitle"}, _bi("Pixel output", "像素输出")),
                _fig(report, vae["decode_figure"]))]
    latent = _el("div", {"class_": "latentch"}, _bi("latent channels ", "latent 通道数 "),
                 _num(vae["latent_channels"], "", _ptr("pages", "vae", "latent_channels")),
                 _badge(prov, "", "latent_channels from the VAE config", small=True))
    return _page(report, 5, meta, [
        _h3("VAE boundary", "VAE 边界"),
        _el("div", {"class_": "vaeflow"}, _el("div", {"class_": "vrow"}, row1), _el("div", {"class_": "vrow"}, row2), latent),
        _h3("Trace evidence", "运行证据"), _evidence(report),
        _figure_registry(report),
    ])


def _evcard(title, value_row, badge, notes, extra=None, cls="") -> _Markup:
    return _el("div", {"class_": f"card ev {cls}".strip()},
               _el("div", {"class_": "evtitle"}, title),
               _el("div", {"class_": "evval"}, value_row, badge),
               [_el("p", {"class_": "evnote"}, n) for n in notes if n],
               extra)


def _component_table(rows, headers) -> _Markup:
    return _el("table", {"class_": "grid compact comp"},
               _el("thead", None, _el("tr", None, [_el("th", {"class_": "r" if k else None}, h) for k, h in enumerate(headers)])),
               _el("tbody", None, rows))


def _evidence(report) -> _Markup:
    ev = report["evidence"]
    run = report["run"]
    cards = []
    # parameters
    par = ev["params"]
    comp_rows = []
    pc = par.get("per_component") or {}
    sub_keys: list[str] = []
    for v in pc.values():
        if isinstance(v, dict):
            sub_keys += [k for k in v if k not in sub_keys]
    for name, v in pc.items():
        if isinstance(v, dict):
            comp_rows.append(_el("tr", None, _el("td", {"class_": "mono"}, name),
                                 [_el("td", {"class_": "r"}, _num(v[k], "params", _ptr("evidence", "params", "per_component", name, k))
                                      if k in v else "—") for k in sub_keys]))
        else:
            comp_rows.append(_el("tr", None, _el("td", {"class_": "mono"}, name),
                                 _el("td", {"class_": "r"}, _num(v, "params", _ptr("evidence", "params", "per_component", name)))))
    heads = [_bi("component", "组件")] + ([k for k in sub_keys] if sub_keys else [_bi("params", "参数")])
    used = None
    if _is_int(par.get("unique_used")):  # optional: what the pipeline computes with
        used = _el("span", {"class_": "evpair", "data-ev": "params.unique_used"},
                   _num(par["unique_used"], "params", _ptr("evidence", "params", "unique_used"), cls="big"),
                   _el("span", {"class_": "evk"}, _bi("used", "实际使用")))
    cards.append(_evcard(
        _bi("Parameters", "实例化参数合计"),
        [_el("span", {"class_": "evpair", "data-ev": "params.unique"}, _num(par["unique"], "params", _ptr("evidence", "params", "unique"), cls="big"),
             _el("span", {"class_": "evk"}, _bi("unique", "去重"))),
         _el("span", {"class_": "evpair", "data-ev": "params.tie_counted"}, _num(par["tie_counted"], "params", _ptr("evidence", "params", "tie_counted"), cls="big"),
             _el("span", {"class_": "evk"}, _bi("tie-counted", "共享权重重复计数"))), used],
        _badge(par["provenance"], par["device"]),
        [_el("span", None, _el("b", None, _bi("unique: ", "去重：")), par["convention_unique"]),
         _el("span", None, _el("b", None, _bi("tie-counted: ", "重复计数：")), par["convention_tie_counted"]),
         _el("span", None, _el("b", None, _bi("used: ", "实际使用：")), par["convention_unique_used"])
         if used and isinstance(par.get("convention_unique_used"), str) else None],
        _component_table(comp_rows, heads) if comp_rows else None, cls="wide"))
    # peak memory
    pm = ev["peak_memory"]
    if pm is None:
        cards.append(_evcard(_bi("Peak memory", "峰值显存"),
                             _el("span", {"class_": "evpair notrun", "data-ev": "peak_memory"}, _bi("not measured", "未测量")),
                             None, [_bi("Memory was not measured or estimated for this report.", "本报告未测量或估算显存。")]))
    else:
        pm_dev = pm.get("device", run["device"] if pm["provenance"] == "measured" else "")
        pm_title = (("Peak CUDA memory allocated", "峰值 CUDA allocated") if pm["provenance"] == "measured" and pm_dev == "cuda"
                    else ("Peak memory", "峰值显存"))
        parts = pm.get("parts")
        prow = [_el("tr", None, _el("td", {"class_": "mono"}, k),
                    _el("td", {"class_": "r"}, _num(v, "bytes", _ptr("evidence", "peak_memory", "parts", k))))
                for k, v in parts.items() if _is_num(v)] if isinstance(parts, dict) else []
        cards.append(_evcard(_bi(*pm_title),
                             _el("span", {"class_": "evpair", "data-ev": "peak_memory.bytes"},
                                 _num(pm["bytes"], "bytes", _ptr("evidence", "peak_memory", "bytes"), cls="big")),
                             _badge(pm["provenance"], pm_dev), [pm["method"]],
                             _component_table(prow, [_bi("part", "组成"), _bi("bytes", "字节")]) if prow else None))
    # flops
    fl = ev["flops"]
    cards.append(_evcard(_bi("FLOPs per denoiser step", "每个去噪步 FLOPs"),
                         _el("span", {"class_": "evpair", "data-ev": "flops.per_step"},
                             _num(fl["per_step"], "flop", _ptr("evidence", "flops", "per_step"), cls="big")),
                         _badge(fl["provenance"], fl["device"]), [fl["method"]]))
    # module trace
    mod = ev["module"]
    mrows = [_el("tr", None, _el("td", {"class_": "mono"}, name),
                 _el("td", {"class_": "r"}, _num(v["rows"], "count", _ptr("evidence", "module", "per_component", name, "rows"))),
                 _el("td", {"class_": "r"}, _num(v["hits"], "count", _ptr("evidence", "module", "per_component", name, "hits"))))
             for name, v in (mod.get("per_component") or {}).items()]
    cards.append(_evcard(
        _bi("Module-level shapes", "模块级 shape"),
        _el("span", {"class_": "evpair", "data-ev": "module"},
            _num(mod["rows"], "count", _ptr("evidence", "module", "rows"), cls="big"), _el("span", {"class_": "evk"}, _bi(" rows / ", " rows / ")),
            _num(mod["hits"], "count", _ptr("evidence", "module", "hits"), cls="big"), _el("span", {"class_": "evk"}, _bi(" hits", " hits"))),
        _badge(mod["provenance"], mod["device"]), [mod["definition"]],
        _component_table(mrows, [_bi("component", "组件"), "rows", "hits"]) if mrows else None))
    # line trace
    line = ev["line"]
    if line is None:
        cards.append(_evcard(_bi("Line-level shapes", "行级 shape"),
                             _el("span", {"class_": "evpair notrun", "data-ev": "line"}, _bi("not run", "未运行")), None,
                             [_bi("The line tracer did not run for this report.", "本报告未运行行级追踪。")]))
    else:
        cards.append(_evcard(
            _bi("Line-level shapes", "行级 shape"),
            _el("span", {"class_": "evpair", "data-ev": "line"},
                _num(line["rows"], "count", _ptr("evidence", "line", "rows"), cls="big"), _el("span", {"class_": "evk"}, " rows / "),
                _num(line["hits"], "count", _ptr("evidence", "line", "hits"), cls="big"), _el("span", {"class_": "evk"}, " hits"),
                _el("span", {"class_": "pytracer"}, "Python ", _el("span", {"class_": "mono", "data-ev": "line.python"}, line["python"]),
                    " · ", _el("span", {"class_": "mono", "data-ev": "line.tracer"}, line["tracer"]))),
            _badge(line["provenance"], line["device"]), [line["definition"]]))
    # run boundary
    kv = [
        (("Size (W × H)", "尺寸（宽 × 高）"), [_num(run["width"], "", _ptr("run", "width")), " × ",
                                              _num(run["height"], "", _ptr("run", "height"))]),
        (("Batch", "batch"), _num(run["batch"], "", _ptr("run", "batch"))),
        (("dtype", "dtype"), _el("span", {"class_": "mono"}, run["dtype"])),
        (("Device", "设备"), [_el("span", {"class_": "mono"}, run["device"]),
                              [" · ", run["device_name"]] if run["device_name"] != run["device"] else None]),
        (("Weights", "权重"), run["weights"]),
        (("Denoiser steps traced", "追踪去噪步数"), _num(run["steps_traced"], "", _ptr("run", "steps_traced"))),
        (("Versions", "版本"), _el("span", {"class_": "mono"}, f"Python {run['python']} · torch {run['torch']} · "
                                    f"diffusers {run['diffusers']} · transformers {run['transformers']}")),
        (("Created", "生成时间"), _el("span", {"class_": "mono"}, run["created"])),
    ]
    if _is_num(run.get("wall_s")):  # optional run keys
        kv.insert(6, (("Traced run wall time", "追踪运行耗时"), _num(run["wall_s"], "s", _ptr("run", "wall_s"))))
    for key, label in (("prompt", ("Prompt", "提示词")), ("negative_prompt", ("Negative prompt", "反向提示词"))):
        if isinstance(run.get(key), str):
            kv.append((label, _el("span", {"class_": "prompt", "data-run": key}, run[key] or "∅")))
    cards.append(_el("div", {"class_": "card ev runb wide3"},
                     _el("div", {"class_": "evtitle"}, _bi("Run boundary", "运行边界")),
                     _el("dl", None, [[_el("dt", None, _bi(*k)), _el("dd", None, v)] for k, v in kv]),
                     _el("p", {"class_": "evnote"}, _bi("Structure and shape evidence; says nothing about generation quality.",
                                                        "结构 / shape 学习证据；不代表生成质量。"))))
    return _el("div", {"class_": "evgrid"}, cards)


def _figure_registry(report) -> _Markup:
    rows = []
    for name, f in report["figures"].items():
        rows.append(_el("tr", None, _el("td", {"class_": "mono"}, name),
                        _el("td", None, _bi(f["label_en"], f["label_zh"])),
                        _el("td", None, _fig(report, name, label=False)),
                        _el("td", {"class_": "method"}, f["method"])))
    return _el("details", {"class_": "registry", "open": True},
               _el("summary", None, _bi(f"Every figure in this report ({len(rows)})", f"本报告全部数值（{len(rows)}）")),
               _el("table", {"class_": "grid compact"},
                   _el("thead", None, _el("tr", None, _el("th", None, _bi("figure", "名称")), _el("th", None, _bi("label", "说明")),
                                          _el("th", None, _bi("value · provenance", "数值 · 来源")),
                                          _el("th", None, _bi("how obtained", "获取方式")))),
                   _el("tbody", None, rows)))


# ---------------------------------------------------------------------------------------------------------
# the document


def report_json_text(report: dict) -> str:
    """The report's JSON exactly as write_report writes it (and the download link holds)."""
    return json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _script_json(report: dict) -> str:
    s = json.dumps(report, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, rep in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(ch, rep)
    return s


def render_report(report: dict, *, json_name: str | None = None) -> str:
    """The five-page report as one self-contained HTML document (validates the report first)."""
    validate_report(report)
    model = report["model"]
    metas = _page_meta(model)
    json_text = report_json_text(report)
    json_name = json_name or f"fillscope-report-{model}.json"
    data_uri = "data:application/json;charset=utf-8;base64," + base64.b64encode(json_text.encode("utf-8")).decode("ascii")
    script_hash = base64.b64encode(hashlib.sha256(_JS.encode("utf-8")).digest()).decode("ascii")
    csp = (f"default-src 'none'; script-src 'sha256-{script_hash}'; style-src 'unsafe-inline'; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    tabs = [_el("button", {"type": "button", "class_": "tab", "data-goto": str(n), **_bi_attrs(m["title"][0], m["title"][1])},
                _el("span", {"class_": "tabn"}, str(n)), _bi(m["short"][0], m["short"][1]))
            for n, m in enumerate(metas, 1)]
    nav = _el("nav", {"class_": "pager", "aria-label": "pages"},
              _el("button", {"type": "button", "class_": "prev", "data-step": "-1"}, _bi("◀ Prev", "◀ 上一页")),
              _el("div", {"class_": "tabs"}, tabs),
              _el("button", {"type": "button", "class_": "next", "data-step": "1"}, _bi("Next ▶", "下一页 ▶")),
              _el("span", {"class_": "counter", "aria-live": "polite"}, f"1 / {PAGE_COUNT}"))
    top = _el("header", {"class_": "top"},
              _el("div", {"class_": "brand"}, "FillScope", _el("span", None, _bi("architecture report", "架构报告"))),
              _el("h1", None, report["title"]),
              _el("span", {"class_": "modelchip mono"}, model),
              _el("div", {"class_": "tools"},
                  _el("div", {"class_": "langs", "role": "group", "aria-label": "language"},
                      _el("button", {"type": "button", "data-lang": "en", "aria-pressed": "true"}, "EN"),
                      _el("button", {"type": "button", "data-lang": "zh", "aria-pressed": "false", "lang": "zh-CN"}, "中文")),
                  _el("a", {"class_": "dl", "href": data_uri, "download": json_name, **_bi_attrs(
                      f"the report's JSON, verbatim ({json_name})", f"报告 JSON 原文（{json_name}）")},
                      _bi("⤓ JSON", "⤓ JSON"))))
    banner = None
    if _is_fixture(report):
        banner = _el("div", {"class_": "banner"}, _bi(
            "Fixture data: synthetic values for tests and layout, not the result of a real trace.",
            "测试夹具数据：用于测试与版式的合成数值，并非真实 trace 结果。"))
    pages = [_page1(report, metas[0]), _page2(report, metas[1]), _page3(report, metas[2]),
             _page4(report, metas[3]), _page5(report, metas[4])]
    doc = (
        "<!DOCTYPE html>\n"
        + _el("html", {"lang": "en", "data-lang": "en"},
              _el("head", None,
                  _Markup('<meta charset="utf-8">'),
                  _el("meta", {"http-equiv": "Content-Security-Policy", "content": csp}),
                  _el("meta", {"name": "viewport", "content": "width=device-width, initial-scale=1"}),
                  _el("meta", {"name": "generator", "content": f"FillScope report ({SCHEMA})"}),
                  _el("title", None, f"{report['title']} · FillScope architecture report"),
                  _el("style", None, _Markup(_CSS))),
              _el("body", None, top, nav, banner, _el("main", None, pages),
                  _el("script", {"type": "application/json", "id": "fillscope-report-data"}, _Markup(_script_json(report))),
                  _el("script", None, _Markup(_JS))))
        + "\n")
    return doc


def write_report(report: dict, out_dir, stem: str) -> tuple[Path, Path]:
    """Write <out_dir>/<stem>.html and <out_dir>/<stem>.json (the same bytes the page's download link holds)."""
    html_text = render_report(report, json_name=f"{stem}.json")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html_path, json_path = out / f"{stem}.html", out / f"{stem}.json"
    json_path.write_text(report_json_text(report), encoding="utf-8")
    html_path.write_text(html_text, encoding="utf-8")
    return html_path, json_path


# ---------------------------------------------------------------------------------------------------------
# screenshots (headless chromium through playwright; imported only here)

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def chromium_path() -> str | None:
    """The chromium executable (env FILLSCOPE_CHROMIUM, else /usr/bin/chromium, else on PATH), or None.
    Never downloads a browser."""
    env = os.environ.get("FILLSCOPE_CHROMIUM")
    if env:
        return env if os.path.isfile(env) else None
    for cand in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if cand and os.path.isfile(cand):
            return cand
    return None


def screenshot_report(html_path, out_dir, stem: str, *, lang: str = "en", full_page: bool = False,
                      viewport=(1280, 800), optimize: bool = True, browser=None) -> list[Path]:
    """One PNG per page: <out_dir>/<stem>-page<N>.png. `full_page=False` shoots the viewport only (README
    images); `optimize` quantizes to a 256-colour palette (Pillow) to keep them small. Pass an open playwright
    `browser` to reuse it; otherwise chromium_path() is launched and closed."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    url = Path(html_path).resolve().as_uri() + f"#page=1&lang={lang}"
    paths = []

    def shoot(b):
        page = b.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        try:
            page.goto(url)
            for n in range(1, PAGE_COUNT + 1):
                page.evaluate(f"window.fillscopeReport.show({n})")
                p = out / f"{stem}-page{n}.png"
                page.screenshot(path=str(p), full_page=full_page)
                if optimize:
                    _optimize_png(p)
                paths.append(p)
        finally:
            page.close()

    if browser is not None:
        shoot(browser)
    else:
        from playwright.sync_api import sync_playwright

        exe = chromium_path()
        if exe is None:
            raise RuntimeError("chromium not found (apt-get install chromium, or set FILLSCOPE_CHROMIUM)")
        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
            try:
                shoot(b)
            finally:
                b.close()
    return paths


def _optimize_png(path: Path) -> None:
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        q = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    q.save(path, optimize=True)


# ---------------------------------------------------------------------------------------------------------
# CSS and JS (inline; the JS is allowed by its sha256 in the page's Content-Security-Policy)

_CSS = r"""
:root{--bg:#f4f6f9;--panel:#fff;--ink:#17202c;--muted:#5d6878;--line:#dfe4ea;--soft:#eef1f5;--accent:#2e5bd1;
--cuda:#157347;--cuda-bg:#e2f4ea;--host:#1d5fc0;--host-bg:#e5eefc;--est:#9a5b00;--est-bg:#fdf0d5;
--static:#56606d;--static-bg:#e9ecf0;
--sans:system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Liberation Sans","Noto Sans CJK SC","PingFang SC","Microsoft YaHei",sans-serif;
--mono:ui-monospace,"SFMono-Regular","DejaVu Sans Mono","Liberation Mono",Menlo,Consolas,"Noto Sans Mono CJK SC",monospace}
*{box-sizing:border-box}
html{background:var(--bg);color:var(--ink);font:14px/1.45 var(--sans)}
body{margin:0}
html[data-lang="zh"] .l-en{display:none!important}
html:not([data-lang="zh"]) .l-zh{display:none!important}
.mono,.num.shape,code{font-family:var(--mono);font-size:.92em}
.muted{color:var(--muted)} .small{font-size:12px}
.top{display:flex;align-items:center;gap:14px;padding:10px 22px;background:#16202e;color:#f3f6fa;flex-wrap:wrap}
.brand{font-weight:700;letter-spacing:.02em;font-size:15px}
.brand span{font-weight:400;color:#a9b6c8;margin-left:8px;font-size:12px}
.top h1{font-size:17px;margin:0;font-weight:600}
.modelchip{background:#2a3648;color:#cfe0ff;border-radius:5px;padding:2px 8px;font-size:12px}
.tools{margin-left:auto;display:flex;gap:10px;align-items:center}
.langs{display:inline-flex;border:1px solid #45546b;border-radius:7px;overflow:hidden}
.langs button{background:transparent;color:#c9d4e3;border:0;padding:4px 11px;font:inherit;font-size:12.5px;cursor:pointer}
.langs button[aria-pressed="true"]{background:#e9eef6;color:#16202e;font-weight:600}
a.dl{color:#cfe0ff;text-decoration:none;font-size:12.5px;border:1px solid #45546b;border-radius:7px;padding:3px 10px}
a.dl:hover{background:#253247}
.pager{display:flex;align-items:center;gap:8px;padding:8px 22px;background:var(--panel);border-bottom:1px solid var(--line);
position:sticky;top:0;z-index:5}
.pager button{font:inherit;font-size:13px;border:1px solid var(--line);background:var(--panel);color:var(--ink);border-radius:7px;
padding:5px 11px;cursor:pointer}
.pager button:hover:not(:disabled){border-color:#b9c3cf;background:var(--soft)}
.pager button:disabled{opacity:.45;cursor:default}
.tabs{display:flex;gap:6px;flex-wrap:wrap}
.tab .tabn{display:inline-block;min-width:18px;height:18px;line-height:18px;border-radius:9px;background:var(--soft);
color:var(--muted);font-size:11px;text-align:center;margin-right:6px;font-weight:600}
.tab[aria-current="page"]{border-color:var(--accent);color:var(--accent);background:#eef3ff;font-weight:600}
.tab[aria-current="page"] .tabn{background:var(--accent);color:#fff}
.counter{margin-left:auto;color:var(--muted);font-variant-numeric:tabular-nums;font-size:13px}
.banner{background:#fff5dc;color:#6b4a00;border-bottom:1px solid #f0dca5;padding:6px 22px;font-size:12.5px}
main{padding:14px 22px 28px;max-width:1500px;margin:0 auto}
section.page[hidden]{display:none}
.phead h2{margin:4px 0 2px;font-size:21px;font-weight:650;letter-spacing:-.01em}
.phead .sub{margin:0 0 12px;color:var(--muted);max-width:1100px}
h3{font-size:14.5px;margin:16px 0 8px;font-weight:650}
.card{background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:10px 12px}
.ctitle{font-weight:650;margin-bottom:4px}
.figure-wrap{background:var(--panel);border:1px solid var(--line);border-radius:12px;padding:8px;overflow-x:auto}
svg.macro{display:block;width:100%;height:auto;max-width:none;font-family:var(--sans)}
svg.macro .colhead{font-size:10.5px;fill:var(--muted);text-transform:uppercase;letter-spacing:.06em;font-weight:600}
svg.macro .nbox{fill:#fbfcfe;stroke:#c8d1dc;stroke-width:1}
svg.macro .nstripe{fill:#8d99a8}
svg.macro .k-input .nstripe{fill:#8a94a3} svg.macro .k-encoder .nstripe{fill:#6f5bd6}
svg.macro .k-assembly .nstripe{fill:#d08a1c} svg.macro .k-denoiser .nstripe{fill:#2e5bd1}
svg.macro .k-vae .nstripe{fill:#1c9a8a} svg.macro .k-output .nstripe{fill:#3b7a3b}
svg.macro .k-denoiser .nbox{fill:#f1f5ff;stroke:#9fb4ea}
svg.macro .ntitle{font-size:12.5px;font-weight:650;fill:var(--ink)}
svg.macro .ndetail{font-size:10.5px;fill:var(--muted)}
svg.macro .edge{fill:none;stroke:#8a96a6;stroke-width:1.4}
svg.macro .arrowhead{fill:#8a96a6}
svg.macro .elabel rect{fill:#fff;stroke-width:1.2}
svg.macro .elabel text{font-family:var(--mono);font-size:10.5px}
svg.macro .e-cuda rect{stroke:var(--cuda);fill:var(--cuda-bg)} svg.macro .e-cuda text{fill:var(--cuda)}
svg.macro .e-host rect{stroke:var(--host);fill:var(--host-bg)} svg.macro .e-host text{fill:var(--host)}
svg.macro .e-est rect{stroke:var(--est);fill:var(--est-bg)} svg.macro .e-est text{fill:var(--est)}
svg.macro .e-static rect{stroke:var(--static);fill:var(--static-bg)} svg.macro .e-static text{fill:var(--static)}
.badge{display:inline-flex;align-items:center;gap:4px;border-radius:999px;padding:1px 8px;font-size:11.5px;font-weight:600;
white-space:nowrap;border:1px solid transparent;vertical-align:middle;line-height:1.5}
.badge::before{content:"";width:6px;height:6px;border-radius:3px;background:currentColor;display:inline-block}
.badge.sm{font-size:10.5px;padding:0 6px;font-weight:600}
.b-cuda{color:var(--cuda);background:var(--cuda-bg);border-color:#b7e0c8}
.b-host{color:var(--host);background:var(--host-bg);border-color:#bfd2f5}
.b-est{color:var(--est);background:var(--est-bg);border-color:#f0d49a}
.b-static{color:var(--static);background:var(--static-bg);border-color:#d3d8df}
.b-mixed{color:#6b3fa0;background:#f1e9fb;border-color:#dac8f1}
.fig{display:inline-flex;align-items:center;gap:6px;flex-wrap:wrap}
.fig-label{color:var(--muted);font-size:12px}
.fig-val{display:inline-flex;align-items:center;gap:6px;white-space:nowrap}
.fig .num{font-weight:600}
.fig.stack{display:flex;flex-direction:column;align-items:flex-start;gap:2px}
.fig.stack .fig-label{font-size:11.5px;line-height:1.3}
.legend{display:flex;gap:8px;align-items:center;flex-wrap:wrap;margin:10px 2px;font-size:12px}
.lg-title{font-weight:600;color:var(--muted)} .lg-note{color:var(--muted)}
table.grid{border-collapse:collapse;width:100%;background:var(--panel);font-size:12.5px}
table.grid th{text-align:left;font-weight:600;color:var(--muted);font-size:11.5px;background:var(--soft);
border-bottom:1px solid var(--line);padding:5px 8px;position:sticky;top:0;z-index:1}
table.grid td{border-bottom:1px solid var(--soft);padding:4px 8px;vertical-align:top}
table.grid .r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.grid td.shp{font-size:11px;color:#334155;word-break:break-word}
table.grid td.cls{color:#4b3ca8}
table.grid td.idx{color:var(--muted);text-align:right}
table.blocks{table-layout:fixed}
table.blocks col.c-idx{width:34px} table.blocks col.c-name{width:205px} table.blocks col.c-cls{width:190px}
table.blocks col.c-out{width:22%} table.blocks col.c-num{width:84px} table.blocks col.c-flop{width:100px}
table.blocks col.c-hits{width:50px} table.blocks col.c-wall{width:66px} table.blocks col.c-bdg{width:142px}
table.blocks td{overflow-wrap:anywhere}
.scls{color:#4b3ca8;font-weight:500;font-size:12px}
table.grid td.arrow{color:var(--muted);width:16px}
table.grid td.method{color:var(--muted);font-size:11.5px}
table.grid .fig{flex-wrap:nowrap}
table.grid tr.total td{font-weight:650;border-top:2px solid var(--line);background:#fafbfc}
details{background:var(--panel);border:1px solid var(--line);border-radius:10px;margin:12px 0;overflow:hidden}
details>summary{cursor:pointer;padding:8px 12px;font-weight:600;background:#fafbfc;border-bottom:1px solid var(--line);list-style-position:inside}
details:not([open])>summary{border-bottom:0}
details .scroll{max-height:420px;overflow:auto}
.stitle{font-weight:650} .scount{color:var(--accent);font-weight:700}
.condflow{display:grid;grid-template-columns:minmax(260px,1.25fr) 36px minmax(220px,1fr) 36px minmax(180px,.8fr);align-items:center;gap:6px}
.branches{display:flex;flex-direction:column;gap:8px}
.card.branch .archrow{display:flex;gap:10px;align-items:center;flex-wrap:wrap;font-size:12.5px;margin-bottom:4px}
.card.merge{border-color:#f0d49a;background:#fffbf0}
.card.sink{border-color:#9fb4ea;background:#f1f5ff}
.rule{margin:4px 0 6px;font-size:12.5px;color:#3c4654}
.bigarrow{font-size:22px;color:#9aa5b3;text-align:center}
.assembly{background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:10px 12px}
.asmrow{display:flex;align-items:center;gap:8px;flex-wrap:wrap;margin:6px 0}
.asmrow .op{font-size:18px;color:#9aa5b3;font-weight:600}
.card.part{background:#fafbfc}
.card.result{border-color:#9fb4ea;background:#f1f5ff}
.strip{display:flex;align-items:stretch;gap:8px}
.strip .bigarrow{align-self:center}
.card.io.in{flex:0 1 430px;min-width:0}
.card.io.out{flex:0 1 230px;min-width:0}
.stagecol{flex:1 1 0;display:flex;flex-direction:column;gap:4px;min-width:0}
.card.stage{border-color:#9fb4ea;background:#f6f8ff;flex:1 1 auto}
.card.stage.side{border-color:#c9bdf0;background:#f8f6ff}
.stagehead{display:flex;justify-content:space-between;align-items:baseline;gap:8px}
.card.stage .mult{font-size:24px;font-weight:700;color:var(--accent);line-height:1.1}
.card.stage.side .mult{color:#6b4fcf}
.card.stage .cls{color:#4b3ca8;margin:2px 0 4px}
.card.stage .kv{font-size:12.5px;margin:3px 0 6px}
.chips{display:grid;grid-template-columns:1fr;gap:6px}
.card.io.in .chips{grid-template-columns:repeat(auto-fill,minmax(185px,1fr))}
.chips .fig-val{white-space:normal;flex-wrap:wrap}
.inject{color:#6b4fcf;font-weight:600;font-size:12.5px;text-align:center}
.two{display:grid;grid-template-columns:minmax(0,1.55fr) minmax(0,1fr);gap:18px;align-items:start}
.steps{display:flex;flex-direction:column;gap:0}
.step{background:var(--panel);border:1px solid var(--line);border-left:4px solid #8d99a8;border-radius:9px;padding:8px 10px}
.step.g-modulation{border-left-color:#6f5bd6} .step.g-attention{border-left-color:#2e5bd1}
.step.g-mlp{border-left-color:#1c9a8a} .step.g-residual{border-left-color:#d08a1c}
.steph{display:flex;gap:10px;align-items:baseline;flex-wrap:wrap;margin-bottom:4px}
.stepname{font-weight:650}
.step table.grid{font-size:12px}
table.mods{table-layout:fixed}
table.mods col.c-mod{width:150px} table.mods col.c-cls{width:124px} table.mods col.c-par{width:70px} table.mods col.c-bdg{width:134px}
table.mods td{overflow-wrap:anywhere}
.step table.grid td{padding:3px 6px}
.to{color:var(--muted)}
.down{text-align:center;color:#9aa5b3;font-size:16px;line-height:18px}
.card.inj{margin-top:10px;border-color:#c9bdf0;background:#f8f6ff}
.assembly.vertical .asmrow{flex-direction:column;align-items:stretch;gap:4px}
.assembly.vertical .op{text-align:center;line-height:1}
.card.blocksum dl{display:grid;grid-template-columns:auto 1fr;gap:3px 12px;margin:6px 0 8px;font-size:12.5px}
.card.blocksum dt{color:var(--muted)} .card.blocksum dd{margin:0;overflow-wrap:anywhere}
.card.blocksum dd.mono{font-size:11.5px}
.vaeflow{display:flex;flex-direction:column;gap:10px}
.vrow{display:grid;grid-template-columns:minmax(0,1fr) 30px minmax(0,1.25fr) 30px minmax(0,1fr);align-items:center;gap:6px}
.card.vae{border-color:#9ed6cd;background:#f0faf8}
.ladder{display:flex;align-items:center;gap:5px;flex-wrap:wrap;margin-top:4px}
.lad{font-family:var(--mono);background:#fff;border:1px solid #cfe6e2;border-radius:5px;padding:0 6px;font-size:12px}
.lad-arrow{color:#9aa5b3}
.latentch{font-size:12.5px;display:flex;gap:6px;align-items:center}
.evgrid{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:10px}
.card.ev.wide{grid-row:span 2}
.card.ev.wide3{grid-column:1 / -1}
.evtitle{font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);font-weight:650}
.evval{display:flex;align-items:center;gap:10px;flex-wrap:wrap;margin:4px 0}
.evpair{display:inline-flex;align-items:baseline;gap:4px;flex-wrap:wrap}
.num.big{font-size:20px;font-weight:700;font-variant-numeric:tabular-nums}
.evk{color:var(--muted);font-size:12px}
.pytracer{display:inline-block;background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:0 7px;
color:#334155;font-size:12px;margin-left:6px;white-space:nowrap}
.evnote{margin:4px 0 0;color:var(--muted);font-size:12px}
table.comp{margin-top:8px}
.card.runb dl{display:grid;grid-template-columns:auto 1fr auto 1fr;gap:3px 14px;margin:6px 0 0;font-size:12.5px}
.card.runb dt{color:var(--muted)} .card.runb dd{margin:0;word-break:break-word}
.notrun{color:var(--muted);font-weight:600}
.pfoot{margin-top:16px;border-top:1px solid var(--line);padding-top:8px}
.runline{display:flex;gap:10px;align-items:center;flex-wrap:wrap;font-size:12px;color:var(--muted)}
.runline .runtext{font-family:var(--mono);color:#334155}
@media (max-width:1000px){.two,.evgrid{grid-template-columns:1fr}.condflow,.vrow{grid-template-columns:1fr}
.strip{flex-direction:column}.card.io.in,.card.io.out{flex:none}.bigarrow{transform:rotate(90deg)}
.card.runb dl{grid-template-columns:auto 1fr}}
@media print{
 html{background:#fff;font-size:11px}
 .pager,.tools,.banner{display:none!important}
 .top{background:#fff;color:#000;border-bottom:1px solid #999}
 .top .brand span,.modelchip{color:#333;background:#fff}
 section.page,section.page[hidden]{display:block!important;break-before:page}
 section.page:first-child{break-before:auto}
 details .scroll{max-height:none;overflow:visible}
 table.grid th{position:static}
 .card,details,.figure-wrap,.step{break-inside:avoid-page}
 details.stage-table,details.registry{break-inside:auto}
}
"""

_JS = r"""
(function () {
  "use strict";
  var root = document.documentElement;
  var pages = Array.prototype.slice.call(document.querySelectorAll("section.page"));
  var n = pages.length, cur = 1, lang = "en";
  var tabs = Array.prototype.slice.call(document.querySelectorAll("[data-goto]"));
  var prev = document.querySelector(".pager .prev"), next = document.querySelector(".pager .next");
  var counter = document.querySelector(".pager .counter");
  function parseHash() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i > 0) { out[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1)); }
    });
    return out;
  }
  function writeHash() {
    var h = "#page=" + cur + "&lang=" + lang;
    if (location.hash === h) { return; }
    // The hash only bookmarks the page; where it cannot be written (a srcdoc or sandboxed frame) skip it:
    // navigating instead would load the embedding page's URL into the frame.
    try { history.replaceState(null, "", h); } catch (e) { /* not bookmarkable here */ }
  }
  function show(p) {
    p = Math.max(1, Math.min(n, parseInt(p, 10) || 1));
    cur = p;
    pages.forEach(function (s, i) { s.hidden = (i + 1) !== p; });
    tabs.forEach(function (t) {
      if (parseInt(t.getAttribute("data-goto"), 10) === p) { t.setAttribute("aria-current", "page"); }
      else { t.removeAttribute("aria-current"); }
    });
    prev.disabled = p === 1; next.disabled = p === n;
    counter.textContent = p + " / " + n;
    writeHash();
  }
  function setLang(l) {
    lang = l === "zh" ? "zh" : "en";
    root.setAttribute("data-lang", lang);
    root.setAttribute("lang", lang === "zh" ? "zh-CN" : "en");
    Array.prototype.forEach.call(document.querySelectorAll("[data-title-en]"), function (el) {
      el.setAttribute("title", el.getAttribute(lang === "zh" ? "data-title-zh" : "data-title-en"));
    });
    Array.prototype.forEach.call(document.querySelectorAll(".langs button"), function (b) {
      b.setAttribute("aria-pressed", String(b.getAttribute("data-lang") === lang));
    });
    try { localStorage.setItem("fillscope.report.lang", lang); } catch (e) {}
    writeHash();
  }
  tabs.forEach(function (t) {
    t.addEventListener("click", function () { show(t.getAttribute("data-goto")); window.scrollTo(0, 0); });
  });
  [prev, next].forEach(function (b) {
    b.addEventListener("click", function () { show(cur + parseInt(b.getAttribute("data-step"), 10)); window.scrollTo(0, 0); });
  });
  Array.prototype.forEach.call(document.querySelectorAll(".langs button"), function (b) {
    b.addEventListener("click", function () { setLang(b.getAttribute("data-lang")); });
  });
  document.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) { return; }
    var t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) { return; }
    if (e.key === "ArrowRight") { show(cur + 1); e.preventDefault(); }
    else if (e.key === "ArrowLeft") { show(cur - 1); e.preventDefault(); }
    else if (e.key === "Home") { show(1); e.preventDefault(); }
    else if (e.key === "End") { show(n); e.preventDefault(); }
  });
  window.addEventListener("hashchange", function () {
    var h = parseHash();
    if (h.lang && h.lang !== lang) { setLang(h.lang); }
    if (h.page && parseInt(h.page, 10) !== cur) { show(h.page); }
  });
  window.addEventListener("beforeprint", function () {
    Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) { d.open = true; });
  });
  var h = parseHash(), stored = null;
  try { stored = localStorage.getItem("fillscope.report.lang"); } catch (e) {}
  root.classList.add("js");
  setLang(h.lang || stored || "en");
  show(h.page || 1);
  window.fillscopeReport = { show: show, setLang: setLang,
    page: function () { return cur; }, lang: function () { return lang; } };
})();
"""
