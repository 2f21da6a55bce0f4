"""How a value appears on the page: its readable text (17.004 B, 22.65 GiB, 74.40 TFLOP, [1, 4096, 64]), its
exact form for the tooltip, the number element that ties it to its JSON pointer, and its provenance badge."""

from __future__ import annotations

import json

from .markup import Markup, el, en_zh, en_zh_title, json_pointer
from .schema import is_json_int


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
    if unit == "count" and (is_json_int(v) or float(v).is_integer()):
        return f"{v:,.0f}"
    if is_json_int(v) or float(v).is_integer():
        return str(int(v))
    return f"{v:.6g}"


def exact_value(value, unit: str) -> str:
    """The exact value, for the tooltip: 17,003,768,291 parameters."""
    if value is None:
        return "not measured"
    if isinstance(value, (list, str)):
        return format_value(value, unit)
    whole = is_json_int(value) or float(value).is_integer()
    num = f"{value:,.0f}" if whole else repr(value)
    word = {"params": "parameters", "bytes": "bytes", "flop": "FLOP", "s": "s", "count": ""}.get(unit, "")
    return f"{num} {word}".strip()


def dtype_short(dtype: str) -> str:
    """bfloat16 -> BF16 (the run settings line); unknown dtypes unchanged."""
    return {"bfloat16": "BF16", "float16": "FP16", "float32": "FP32", "float8_e4m3fn": "FP8"}.get(
        dtype.replace("torch.", ""), dtype)


def number(value, unit: str, path: str | None, *, sum_of: str | None = None, tag="span", cls="",
           attrs: dict | None = None) -> Markup:
    """A value on the page: readable text, exact value as tooltip, and `data-path` (its JSON pointer) or
    `data-sum` (the pointer pattern it sums) so a test can check every number against the JSON."""
    klass = ("num shape" if unit == "shape" or isinstance(value, list) else "num") + (f" {cls}" if cls else "")
    return el(tag, {**(attrs or {}), "class_": klass, "data-path": path, "data-sum": sum_of, "data-unit": unit,
                    "data-value": json.dumps(value, ensure_ascii=False), "title": exact_value(value, unit)},
              format_value(value, unit))


def badge_key(prov: str, device: str) -> str:
    """The badge's colour class (b-<key>; e-<key> on an SVG edge label)."""
    if prov == "measured":
        return "cuda" if device == "cuda" else "host"
    return {"estimated": "est", "setting": "setting"}.get(prov, "static")


def badge_text(prov: str, device: str) -> tuple[str, str]:
    """The badge's words, (en, zh)."""
    if prov == "measured":
        dev_en = {"cuda": "CUDA", "cpu": "cpu", "meta": "meta"}.get(device, device)
        dev_zh = {"cuda": "CUDA", "cpu": "CPU", "meta": "meta"}.get(device, device)
        return f"measured · {dev_en}", f"实测 · {dev_zh}"
    if prov == "estimated":
        return "estimated", "估算"
    if prov == "setting":
        return "run setting", "运行设置"
    return "static config", "静态配置"


def badge(prov: str, device: str = "", method: str | None = None, *, small=False) -> Markup:
    """A provenance badge; `method` (how the value was obtained) becomes its bilingual tooltip."""
    en, zh = badge_text(prov, device)
    attrs = {"class_": f"badge b-{badge_key(prov, device)}" + (" sm" if small else ""),
             "data-prov": prov, "data-device": device}
    if method:
        attrs.update(en_zh_title(f"{en}: {method}", f"{zh}：{method}"))
    return el("span", attrs, en_zh(en, zh))


def figure(report: dict, name: str, *, label=True, cls="") -> Markup:
    """A figure: its value (readable, exact in the tooltip), its badge, optionally its label."""
    f = report["figures"][name]
    return el("span", {"class_": "fig" + (f" {cls}" if cls else ""), "data-fig": name},
              el("span", {"class_": "fig-label"}, en_zh(f["label_en"], f["label_zh"])) if label else None,
              el("span", {"class_": "fig-val"}, number(f["value"], f["unit"], json_pointer("figures", name, "value")),
                 badge(f["provenance"], f["device"], f["method"], small=True)))

