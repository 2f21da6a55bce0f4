"""The document: the five pages in one self-contained HTML file (inline style and script, the report's JSON
embedded and offered as a download), its Content-Security-Policy, and writing the .html/.json pair."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from .markup import Markup, el, en_zh, en_zh_title
from .page_frame import page_meta
from .pages_evidence import vae_evidence_page
from .pages_model import block_page, conditions_page, denoiser_page, macro_page
from .schema import PAGE_COUNT, SCHEMA, validate_report


def _inline_asset(name: str) -> str:
    """report.css / report.js (package data next to this module) as inlined into the page. Read at every render,
    so the script's CSP hash is always computed from the text the page actually holds. The leading newline
    starts the file on the line after the opening tag; it is part of the hashed script text."""
    return "\n" + Path(__file__).with_name(name).read_text(encoding="utf-8")


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
    metas = page_meta(model)
    json_text = report_json_text(report)
    json_name = json_name or f"fillscope-report-{model}.json"
    css, js = _inline_asset("report.css"), _inline_asset("report.js")
    data_uri = "data:application/json;charset=utf-8;base64," + base64.b64encode(json_text.encode("utf-8")).decode("ascii")
    # the script is pinned by its hash; styles stay 'unsafe-inline' (CSS can run nothing, and with
    # default-src 'none' it can fetch nothing either)
    script_hash = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")
    csp = (f"default-src 'none'; script-src 'sha256-{script_hash}'; style-src 'unsafe-inline'; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    tabs = [el("button", {"type": "button", "class_": "tab", "data-goto": str(n), **en_zh_title(m["title"][0], m["title"][1])},
               el("span", {"class_": "tabn"}, str(n)), en_zh(m["short"][0], m["short"][1]))
            for n, m in enumerate(metas, 1)]
    nav = el("nav", {"class_": "pager", "aria-label": "pages"},
             el("button", {"type": "button", "class_": "prev", "data-step": "-1"}, en_zh("◀ Prev", "◀ 上一页")),
             el("div", {"class_": "tabs"}, tabs),
             el("button", {"type": "button", "class_": "next", "data-step": "1"}, en_zh("Next ▶", "下一页 ▶")),
             el("span", {"class_": "counter", "aria-live": "polite"}, f"1 / {PAGE_COUNT}"))
    top = el("header", {"class_": "top"},
             el("div", {"class_": "brand"}, "FillScope", el("span", None, en_zh("architecture report", "架构报告"))),
             el("h1", None, report["title"]),
             el("span", {"class_": "modelchip mono"}, model),
             el("div", {"class_": "tools"},
                el("div", {"class_": "langs", "role": "group", "aria-label": "language"},
                   el("button", {"type": "button", "data-lang": "en", "aria-pressed": "true"}, "EN"),
                   el("button", {"type": "button", "data-lang": "zh", "aria-pressed": "false", "lang": "zh-CN"}, "中文")),
                el("a", {"class_": "dl", "href": data_uri, "download": json_name, **en_zh_title(
                    f"the report's JSON, verbatim ({json_name})", f"报告 JSON 原文（{json_name}）")},
                   en_zh("⤓ JSON", "⤓ JSON"))))
    banner = None
    if _is_fixture(report):
        banner = el("div", {"class_": "banner"}, en_zh(
            "Fixture data: synthetic values for tests and layout, not the result of a real trace.",
            "测试夹具数据：用于测试与版式的合成数值，并非真实 trace 结果。"))
    pages = [macro_page(report, metas[0]), conditions_page(report, metas[1]), denoiser_page(report, metas[2]),
             block_page(report, metas[3]), vae_evidence_page(report, metas[4])]
    doc = (
        "<!DOCTYPE html>\n"
        + el("html", {"lang": "en", "data-lang": "en"},
             el("head", None,
                Markup('<meta charset="utf-8">'),
                el("meta", {"http-equiv": "Content-Security-Policy", "content": csp}),
                el("meta", {"name": "viewport", "content": "width=device-width, initial-scale=1"}),
                el("meta", {"name": "generator", "content": f"FillScope report ({SCHEMA})"}),
                el("title", None, f"{report['title']} · FillScope architecture report"),
                el("style", None, Markup(css))),
             el("body", None, top, nav, banner, el("main", None, pages),
                el("script", {"type": "application/json", "id": "fillscope-report-data"}, Markup(_script_json(report))),
                el("script", None, Markup(js))))
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


def _is_fixture(report: dict) -> bool:
    """Fixture reports say so in `run.weights`; their page carries a banner so they are never taken for a trace."""
    return "fixture" in report["run"]["weights"].lower()

