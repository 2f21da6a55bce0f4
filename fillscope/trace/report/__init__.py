"""The five-page architecture report: one self-contained HTML file (no network) plus its JSON.

    html = render_report(report)                         # str; validates first
    html_path, json_path = write_report(report, out_dir, "flux-fill-meta")
    validate_report(report)                              # raises ReportSchemaError naming every problem

The input is a JSON-able dict in the schema `fillscope.report/1` (schema.py; see `validate_report` for the exact
keys), produced by the trace driver. The pages:

  1 macro architecture (inline SVG: left-to-right columns by node kind, the shape on every edge)
  2 condition encoding and branch merge (text branches -> merge; the image condition assembly)
  3 the full denoiser topology: every block of every stage in a table (collapsible per stage, with totals)
  4 block micro-structure (modulation, joint attention, MLP, residual) and the condition assembly/injection
  5 VAE boundary (channel ladder from static config) and the evidence: parameters, peak memory, FLOPs,
    module rows/hits, line rows/hits (with the Python version and tracer), the run boundary, every figure

Every figure carries a provenance badge ("measured · CUDA", "measured · meta"/"measured · cpu", "estimated",
"static config", "run setting"), bilingual like every label (EN / 中文, switchable, remembered in the URL hash
and localStorage; inside FillScope's viewer, a sandboxed frame without storage or downloads, the page tells the viewer
its page and language by postMessage and its JSON link asks the viewer for the .json file: web/fillscope_viewer_dom.js).
The run settings in every page's footer (size, batch, dtype, device, steps) are badged as
run settings: they are what the run was asked to do, not something it measured.

Escaping: the page is built server-side by a tiny element builder (`markup.el`) in which every string that is
not `Markup` (markup this package built itself) is HTML-escaped, attribute values included; data never reaches
the page any other way. The JSON is embedded as `<script type="application/json">` with `<`, `>`, `&`, U+2028
and U+2029 written as `\\uXXXX` (so no `</script>` can end it early), and offered verbatim (the bytes of the
written .json file) as a base64 `data:` download link. A Content-Security-Policy meta tag allows only the
page's own inline script (by the sha256 of report.js as inlined, computed at render) and inline styles, and no
network at all (`default-src 'none'`), so even a missed escape could neither run an injected handler nor fetch
anything.

Every rendered number is a `<span class="num">` (SVG: `<text class="num">`) with `data-path` (a JSON pointer
into the report), `data-value` (the exact JSON value) and the readable form as text (17.004 B, 22.65 GiB,
74.40 TFLOP, [1, 4096, 64]) with the exact value as its tooltip; sums carry `data-sum` (the pointer pattern
summed). Figures are wrapped in `.fig[data-fig=<name>]` together with their badge (`.badge[data-prov]`).

The modules: schema (schema and validator), format (readable values, number elements, badges), markup (the
element builder), layout (page 1's graph), page_frame (what every page shares), pages_model (pages 1-4),
pages_evidence (page 5), document (assembly, CSP, writing), screenshot (PNGs in chromium); report.css and
report.js are package data inlined into every page.
"""

from __future__ import annotations

from .document import render_report, report_json_text, write_report
from .format import badge_key, exact_value, format_value
from .schema import (DEVICES, KINDS, MODELS, PAGE_COUNT, PROVENANCES, SCHEMA, UNITS, ReportSchemaError,
                     validate_report)
from .screenshot import CHROMIUM_ARGS, chromium_path, screenshot_report

__all__ = [
    "CHROMIUM_ARGS", "DEVICES", "KINDS", "MODELS", "PAGE_COUNT", "PROVENANCES", "SCHEMA", "UNITS",
    "ReportSchemaError", "badge_key", "chromium_path", "exact_value", "format_value", "render_report",
    "report_json_text", "screenshot_report", "validate_report", "write_report",
]
