"""The five-page architecture report (fillscope/trace/report/): schema validation, self-containment, escaping,
and, in headless chromium (playwright), that every page renders, the numbers on it equal the JSON's, page
navigation and the language switch work, and injected markup stays text. Screenshots of every page (1280x800, palette
PNG, both models) go to test-artifacts/report/<model>-page<N>.png, or with FILLSCOPE_DOCS_SCREENSHOTS=1 to
docs/report/ (the README set). With FILLSCOPE_REPORT_SCREENSHOTS=1 the render test also writes a full-page screenshot
of every page, in English and Chinese, to test-artifacts/report/<model>[-zh]-full-page<N>.png: 20 full-page shots,
about a third of this module's time, that no test reads, so they are not taken by default.

Chromium: Debian's (`apt-get install -y chromium`; env FILLSCOPE_CHROMIUM overrides the path); no browser is
ever downloaded. Without it (or without playwright) the browser tests skip, except in CI (env CI set), where
they fail.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_fixture import FIXTURE_WEIGHTS, example_report

from fillscope.trace import report as R

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "report"
FULL_PAGE_SHOTS = os.environ.get("FILLSCOPE_REPORT_SCREENSHOTS", "").lower() not in ("", "0", "false", "no")
DOCS = ROOT / "docs" / "report"
MODELS = ("flux-fill", "sd3-controlnet-inpaint")
BLOCKS = {"flux-fill": {"double": 19, "single": 38}, "sd3-controlnet-inpaint": {"joint": 24, "controlnet": 23}}

XSS_IMG = '<img src=x onerror="window.__xss=1;alert(1)">'
XSS_SCRIPT = '</script><script>window.__xss=2;alert(2)</script>'
XSS_ATTR = '"><svg onload="window.__xss=3;alert(3)">'


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


# ------------------------------------------------------------------------------------------- helpers


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.script_data: list[str] = []
        self.style_data: list[str] = []
        self._in = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in = tag if tag in ("script", "style") else None

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.script_data.append(data)
        elif self._in == "style":
            self.style_data.append(data)


def _parse(html: str) -> _Collect:
    p = _Collect()
    p.feed(html)
    p.close()
    return p


def _embedded_json(html: str) -> str:
    m = re.search(r'<script type="application/json" id="fillscope-report-data">(.*?)</script>', html, re.DOTALL)
    assert m, "embedded JSON block missing"
    return m.group(1)


def _pointer(doc, ptr: str):
    cur = doc
    for part in ptr.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    return cur


def _pointer_glob(doc, ptr: str) -> list:
    """Values at a pointer with `*` segments (every element/key)."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in ptr.split("/")[1:]]
    out = [doc]
    for part in parts:
        nxt = []
        for cur in out:
            if part == "*":
                nxt += list(cur) if isinstance(cur, list) else list(cur.values())
            else:
                nxt.append(cur[int(part)] if isinstance(cur, list) else cur[part])
        out = nxt
    return out


_SUFFIX = {
    "params": {None: 1, "K": 1e3, "M": 1e6, "B": 1e9},
    "bytes": {"bytes": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30},
    "flop": {"FLOP": 1, "MFLOP": 1e6, "GFLOP": 1e9, "TFLOP": 1e12},
    "s": {"s": 1, "ms": 1e-3, "µs": 1e-6},
    "count": {None: 1},
    "": {None: 1},
}
_DECIMALS = {"B": 3, "M": 3, "K": 3, "GiB": 2, "MiB": 2, "KiB": 2, "TFLOP": 2, "GFLOP": 2, "MFLOP": 2}


def _check_text(text: str, value, unit: str, where: str) -> None:
    """The readable text of a number equals the JSON value (independently of the renderer's formatter): shapes
    exactly; numbers within half a unit of the last printed digit, with the suffix the unit allows."""
    text = " ".join(text.split())
    if value is None:
        assert text == "—", where
        return
    if isinstance(value, list):
        assert text == "[" + ", ".join(str(d) for d in value) + "]", f"{where}: {text!r} != {value}"
        return
    if isinstance(value, str):
        assert text == value, where
        return
    m = re.fullmatch(r"(-?[\d,]+(?:\.(\d+))?)(?: (\S+))?", text)
    assert m, f"{where}: unreadable number {text!r}"
    suffix = m.group(3)
    assert suffix in _SUFFIX[unit], f"{where}: suffix {suffix!r} not allowed for unit {unit!r} ({text!r})"
    if suffix in _DECIMALS:
        assert len(m.group(2) or "") == _DECIMALS[suffix], f"{where}: {text!r} should have {_DECIMALS[suffix]} decimals"
    if unit == "count" and abs(value) >= 1000:
        assert "," in m.group(1), f"{where}: counts are grouped by thousands ({text!r})"
    num = float(m.group(1).replace(",", ""))
    scale = _SUFFIX[unit][suffix]
    tol = 0.5 * 10 ** -len(m.group(2) or "") * scale
    assert abs(num * scale - value) <= tol * (1 + 1e-9) + 1e-12 * abs(value), f"{where}: {text!r} != {value!r}"


def _readable(value, unit) -> str:
    """What a figure must look like on the page (used to find it in the page text)."""
    return R.format_value(value, unit)


def _xss_report() -> dict:
    r = example_report("flux-fill")
    r["title"] = f"FLUX {XSS_IMG} {XSS_SCRIPT}"
    r["run"]["weights"] = FIXTURE_WEIGHTS + " " + XSS_IMG + " https://example.invalid/w.safetensors"
    r["run"]["device_name"] = XSS_ATTR
    r["pages"]["micro"]["rows"][0]["module"] = XSS_IMG
    r["pages"]["micro"]["rows"][1]["class"] = XSS_SCRIPT
    r["pages"]["denoiser"]["stages"][0]["blocks"][0]["name"] = XSS_IMG
    r["pages"]["micro"]["block_name"] = XSS_IMG
    r["pages"]["macro"]["nodes"][0]["label_en"] = XSS_SCRIPT
    r["pages"]["macro"]["nodes"][0]["detail_zh"] = XSS_IMG
    r["pages"]["conditions"]["merge"]["rule_en"] = XSS_ATTR
    r["evidence"]["module"]["per_component"][XSS_IMG] = {"rows": 1, "hits": 2}
    f = r["figures"]["clip_l.pooled"]
    f["label_en"], f["method"] = XSS_IMG, XSS_ATTR
    evil = 'evil"><img src=x onerror=alert(4)>'
    r["figures"][evil] = {"value": XSS_SCRIPT, "unit": "", "provenance": "static-config", "device": "",
                          "method": XSS_IMG, "label_en": XSS_ATTR, "label_zh": XSS_IMG}
    r["pages"]["macro"]["edges"].append({"from": "prompt", "to": "output", "figure": evil})
    return r


# ------------------------------------------------------------------------------------------- without a browser


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("device", ["meta", "cpu", "cuda"])
def test_fixture_is_schema_valid_with_every_block(model, device):
    r = example_report(model, device)
    R.validate_report(r)
    assert "fixture" in r["run"]["weights"]
    stages = {s["id"]: s for s in r["pages"]["denoiser"]["stages"]}
    assert {k: len(s["blocks"]) for k, s in stages.items()} == BLOCKS[model]
    for s in stages.values():
        assert len({b["name"] for b in s["blocks"]}) == s["count"]


@pytest.mark.parametrize("mutate, expected", [
    (lambda r: r["run"].pop("dtype"), "report.run: missing key 'dtype'"),
    (lambda r: r.pop("evidence"), "report: missing key 'evidence'"),
    (lambda r: r["evidence"].pop("line"), "report.evidence: missing key 'line'"),
    (lambda r: r["pages"]["macro"]["edges"][2].pop("figure"), "report.pages.macro.edges[2]: missing key 'figure'"),
    (lambda r: r["pages"]["macro"]["edges"][0].update(figure="nope"), "edges[0].figure: unknown figure 'nope'"),
    (lambda r: r["pages"]["macro"]["edges"][0].update(to="nowhere"), "edges[0].to: unknown node id 'nowhere'"),
    (lambda r: r["pages"]["denoiser"]["stages"][1]["blocks"].pop(), "count is 38 but 37 block(s) are listed"),
    (lambda r: r["pages"]["denoiser"]["stages"][0]["blocks"][3].pop("params"),
     "report.pages.denoiser.stages[0].blocks[3]: missing key 'params'"),
    (lambda r: r["figures"]["t5.hidden"].update(device=""), "measured value must name the device"),
    (lambda r: r["figures"]["t5.hidden"].update(value=[1, "512"]), "a shape figure holds a list of integers"),
    (lambda r: r["figures"]["t5.hidden"].update(provenance="guessed"), "'guessed' is not one of"),
    (lambda r: r["evidence"]["flops"].update(per_step=float("nan")), "report.evidence.flops.per_step"),
    (lambda r: r.update(schema="fillscope.report/2"), "report.schema"),
    (lambda r: r["pages"]["micro"]["assembly"]["parts"].append("ghost"), "unknown figure 'ghost'"),
])
def test_validation_names_the_problem(mutate, expected):
    r = example_report("flux-fill")
    mutate(r)
    with pytest.raises(R.ReportSchemaError) as exc:
        R.render_report(r)
    assert expected in str(exc.value), str(exc.value)
    assert isinstance(exc.value, ValueError)


def test_line_evidence_may_be_null():
    r = example_report("sd3-controlnet-inpaint")
    r["evidence"]["line"] = None
    html = R.render_report(r)
    assert 'data-ev="line"' in html and "not run" in html


@pytest.mark.parametrize("model", MODELS)
def test_html_is_well_formed_self_contained_and_embeds_the_json(model, tmp_path):
    r = example_report(model)
    html_path, json_path = R.write_report(r, tmp_path, f"{model}-fixture")
    html = html_path.read_text(encoding="utf-8")
    assert html == R.render_report(r, json_name=f"{model}-fixture.json"), "rendering is deterministic"
    assert json.loads(json_path.read_text(encoding="utf-8")) == r

    p = _parse(html)
    tags = [t for t, _ in p.tags]
    assert tags.count("section") == R.PAGE_COUNT
    for banned in ("img", "iframe", "object", "embed", "link", "base", "form"):
        assert banned not in tags, f"<{banned}> in the report"
    scripts = [a for t, a in p.tags if t == "script"]
    assert len(scripts) == 2 and all("src" not in a for a in scripts)
    assert scripts[0].get("type") == "application/json"
    for tag, attrs in p.tags:
        for k, v in attrs.items():
            if k == "xmlns":
                continue
            assert not re.search(r"https?://|//[a-z]", v or "", re.IGNORECASE) or k == "href" and v.startswith("data:"), \
                f"<{tag} {k}={v!r:.80}>"
            if k in ("src", "href", "action", "poster", "srcset"):
                assert (v or "").startswith(("data:", "#")), f"<{tag} {k}={v!r:.80}> is not local"
    css = "".join(p.style_data)
    assert "url(" not in css and "@import" not in css and "@font-face" not in css
    # outside the embedded JSON, no address at all (the SVG namespace aside)
    outside = html.replace(_embedded_json(html), "").replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "http://" not in outside and "https://" not in outside

    # the embedded JSON: the same data, no '<' that could end the script
    embedded = _embedded_json(html)
    assert "<" not in embedded and ">" not in embedded
    assert json.loads(embedded) == r
    # the download link holds the .json file's bytes verbatim
    link = next(a for t, a in p.tags if t == "a" and a.get("download"))
    assert link["download"] == f"{model}-fixture.json"
    prefix = "data:application/json;charset=utf-8;base64,"
    assert link["href"].startswith(prefix)
    assert base64.b64decode(link["href"][len(prefix):]) == json_path.read_bytes()
    # the page's one script is allowed by its hash, nothing else (no network at all)
    csp = next(a["content"] for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    js = p.script_data[-1]
    digest = base64.b64encode(hashlib.sha256(js.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp


def test_markup_in_data_is_escaped_server_side():
    r = _xss_report()
    html = R.render_report(r)
    for payload in (XSS_IMG, XSS_SCRIPT, XSS_ATTR):
        assert payload not in html
    assert "&lt;img src=x onerror=" in html
    p = _parse(html)
    tags = [t for t, _ in p.tags]
    assert "img" not in tags and tags.count("script") == 2
    assert not any(k.startswith("on") for _, a in p.tags for k in a), "an event-handler attribute got through"
    assert json.loads(_embedded_json(html)) == r


@pytest.mark.parametrize("device", ["meta", "cuda"])
def test_run_settings_are_badged_as_settings_not_measurements(device):
    """Every page's footer repeats the run settings (dtype, device, size, batch, steps traced): what the run was
    asked to do, so their badge says "run setting", never "measured"."""
    html = R.render_report(example_report("sd3-controlnet-inpaint", device))
    footers = re.findall(r'<footer class="pfoot">(.*?)</footer>', html, re.DOTALL)
    assert len(footers) == R.PAGE_COUNT
    for foot in footers:
        badges = [a for t, a in _parse(foot).tags if "badge" in (a.get("class") or "").split()]
        assert [(b["data-prov"], b["class"]) for b in badges] == [("setting", "badge b-setting")], foot
        assert "run setting" in foot and "运行设置" in foot
        assert "measured ·" not in foot and "实测" not in foot
    # measured figures keep their measured badge
    assert f'data-prov="measured" data-device="{device}"' in html


def test_a_figure_may_be_a_run_setting():
    r = example_report("flux-fill")
    r["figures"]["run.steps"] = {"value": 28, "unit": "count", "provenance": "setting", "device": "",
                                 "method": "the sampler's step count for this run", "label_en": "steps",
                                 "label_zh": "步数"}
    R.validate_report(r)
    html = R.render_report(r)
    m = re.search(r'<span class="fig" data-fig="run.steps">.*?<span class="badge ([^"]*)" data-prov="([^"]*)"', html)
    assert m and m.groups() == ("b-setting sm", "setting")


def test_number_formats():
    f = R.format_value
    assert f(17_003_768_291, "params") == "17.004 B"
    assert f(339_738_624, "params") == "339.739 M"
    assert f(int(22.65 * 2 ** 30), "bytes") == "22.65 GiB"
    assert f(7.44e13, "flop") == "74.40 TFLOP"
    assert f(0.0123, "s") == "12.3 ms"
    assert f(87837, "count") == "87,837"
    assert f([1, 4096, 64], "shape") == "[1, 4096, 64]"
    assert R.exact_value(17_003_768_291, "params") == "17,003,768,291 parameters"


# ------------------------------------------------------------------------------------------- in chromium


@pytest.fixture(scope="module")
def browser():
    reason = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        reason = "the python package playwright is not installed"
    exe = R.chromium_path()
    if reason is None and exe is None:
        reason = "chromium not found (apt-get install -y chromium, or set FILLSCOPE_CHROMIUM)"
    if reason:
        if _in_ci():
            pytest.fail(reason + " -- required in CI", pytrace=False)
        pytest.skip(reason)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=R.CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def written():
    """The reports on disk: one per model (meta), a CUDA variant and the XSS report."""
    out = ARTIFACTS
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for model in MODELS:
        paths[model] = R.write_report(example_report(model), out, f"{model}-fixture")
    paths["cuda"] = R.write_report(example_report("sd3-controlnet-inpaint", "cuda"), out, "sd3-cuda-fixture")
    paths["xss"] = R.write_report(_xss_report(), out, "xss-fixture")
    return paths


class _Watch:
    """Everything a page must not do: dialogs, errors, requests off the file."""

    def __init__(self, page):
        self.dialogs, self.errors, self.requests = [], [], []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("request", lambda req: self.requests.append(req.url))

    def assert_clean(self, html_path: Path):
        assert not self.dialogs, f"dialogs fired: {self.dialogs}"
        assert not self.errors, f"page errors: {self.errors}"
        own = html_path.resolve().as_uri()
        foreign = [u for u in self.requests if not (u.split("#")[0] == own or u.startswith("data:"))]
        assert not foreign, f"the report requested {foreign}"


def _open(browser, html_path: Path, hash_: str = "", viewport=(1280, 800)):
    ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    page = ctx.new_page()
    watch = _Watch(page)
    page.goto(html_path.resolve().as_uri() + hash_)
    page.wait_for_function("window.fillscopeReport !== undefined")
    return ctx, page, watch


def _visible_pages(page) -> list[int]:
    return [n for n in range(1, R.PAGE_COUNT + 1) if page.locator(f"#page-{n}").is_visible()]


_NUMS_JS = """() => Array.from(document.querySelectorAll('.num')).map(e => ({
    path: e.getAttribute('data-path'), sum: e.getAttribute('data-sum'), unit: e.getAttribute('data-unit'),
    value: e.getAttribute('data-value'), text: e.textContent, title: e.getAttribute('title')}))"""

_FIGS_JS = """() => Array.from(document.querySelectorAll('.fig[data-fig]')).map(e => ({
    name: e.getAttribute('data-fig'),
    num: (e.querySelector('.num') || {}).textContent,
    badges: Array.from(e.querySelectorAll('.badge')).map(b => [b.getAttribute('data-prov'), b.getAttribute('data-device')]),
    svg: e.namespaceURI === 'http://www.w3.org/2000/svg',
    svgClass: e.getAttribute('class')}))"""


@pytest.mark.parametrize("model", MODELS)
def test_every_page_renders_and_its_numbers_equal_the_json(browser, written, model):
    html_path, json_path = written[model]
    data = json.loads(json_path.read_text(encoding="utf-8"))  # the JSON file, not the dict we rendered
    ctx, page, watch = _open(browser, html_path)
    try:
        texts = {}
        for n in range(1, R.PAGE_COUNT + 1):
            page.click(f'.pager [data-goto="{n}"]')
            assert _visible_pages(page) == [n]
            texts[n] = page.locator(f"#page-{n}").inner_text()
            assert len(texts[n]) > 200, f"page {n} is (nearly) empty"
            if FULL_PAGE_SHOTS:
                page.screenshot(path=str(ARTIFACTS / f"{model}-full-page{n}.png"), full_page=True)
        page.click('.langs [data-lang="zh"]')
        zh_texts = {}
        for n in range(1, R.PAGE_COUNT + 1):
            page.click(f'.pager [data-goto="{n}"]')
            zh_texts[n] = page.locator(f"#page-{n}").inner_text()
            if FULL_PAGE_SHOTS:
                page.screenshot(path=str(ARTIFACTS / f"{model}-zh-full-page{n}.png"), full_page=True)
        nums = page.evaluate(_NUMS_JS)
        figs = page.evaluate(_FIGS_JS)
        block_rows = page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll('details.stage-table'))
            .map(d => [d.getAttribute('data-stage'), d.querySelectorAll('tbody tr[data-block]').length]))""")
        line_pair = page.locator('[data-ev="line"]').inner_text()
        watch.assert_clean(html_path)
    finally:
        ctx.close()

    # 1. every number on the page is the JSON's (by pointer), and reads as that value
    seen_paths = set()
    for n in nums:
        assert n["path"] or n["sum"], f"a number without provenance in the JSON: {n}"
        if n["path"]:
            expected = _pointer(data, n["path"])
            assert json.loads(n["value"]) == expected, n
            seen_paths.add(n["path"])
        else:
            expected = sum(_pointer_glob(data, n["sum"]))
            assert math.isclose(json.loads(n["value"]), expected, rel_tol=1e-12), n
        _check_text(n["text"], expected, n["unit"], n["path"] or n["sum"])
        if isinstance(expected, int) and not isinstance(expected, bool) and n["unit"] in ("params", "bytes"):
            assert f"{expected:,}" in n["title"], f"exact value missing from the tooltip: {n}"

    # 2. what must be on the pages: every figure (with its badge), every block, every evidence number
    for name, f in data["figures"].items():
        assert f"/figures/{name.replace('~', '~0').replace('/', '~1')}/value" in seen_paths, f"figure {name} not shown"
        shown = [x for x in figs if x["name"] == name]
        assert shown, name
        for x in shown:
            if x["svg"]:  # the SVG edge label: coloured by provenance, the badge's text is in the edge table
                assert f"e-{R.badge_key(f['provenance'], f['device'])}" in x["svgClass"]
            else:
                assert x["badges"] == [[f["provenance"], f["device"]]], (name, x)
        flat = " ".join(" ".join(texts.values()).split())
        assert _readable(f["value"], f["unit"]) in flat, f"figure {name} not in the page text"
        assert _readable(f["value"], f["unit"]) in " ".join(" ".join(zh_texts.values()).split())
    for i, s in enumerate(data["pages"]["denoiser"]["stages"]):
        assert block_rows[s["id"]] == s["count"] == len(s["blocks"])
        for j, _ in enumerate(s["blocks"]):
            for k in ("params", "flops", "hits", "wall_s"):
                assert f"/pages/denoiser/stages/{i}/blocks/{j}/{k}" in seen_paths
    assert sum(block_rows.values()) == sum(BLOCKS[model].values())
    ev = data["evidence"]
    must = ["/evidence/params/unique", "/evidence/params/tie_counted", "/evidence/module/rows", "/evidence/module/hits",
            "/evidence/line/rows", "/evidence/line/hits", "/evidence/flops/per_step", "/evidence/peak_memory/bytes",
            "/run/width", "/run/height", "/run/batch"]
    for name, v in ev["params"]["per_component"].items():
        must += [f"/evidence/params/per_component/{name}/{k}" for k in v] if isinstance(v, dict) else \
            [f"/evidence/params/per_component/{name}"]
    for name in ev["module"]["per_component"]:
        must += [f"/evidence/module/per_component/{name}/rows", f"/evidence/module/per_component/{name}/hits"]
    for p in must:
        assert p in seen_paths, f"evidence {p} not shown"
    # line hits next to the Python version and the tracer
    assert f"{ev['line']['hits']:,}" in line_pair
    assert f"Python {ev['line']['python']}" in line_pair and ev["line"]["tracer"] in line_pair
    # headings in both languages
    assert "Macro architecture" in texts[1] and "宏观架构" in zh_texts[1]
    assert "Macro architecture" not in zh_texts[1]
    # the run boundary on page 5
    for key in ("dtype", "weights", "python", "torch", "diffusers", "transformers"):
        assert data["run"][key] in texts[5]


def test_navigation_buttons_keys_tabs_and_hash(browser, written):
    html_path, _ = written["flux-fill"]
    ctx, page, watch = _open(browser, html_path)
    try:
        assert _visible_pages(page) == [1]
        assert page.locator(".pager .prev").is_disabled()
        page.click(".pager .next")
        assert _visible_pages(page) == [2]
        assert page.locator(".pager .counter").inner_text() == "2 / 5"
        page.keyboard.press("ArrowRight")
        assert _visible_pages(page) == [3]
        page.keyboard.press("ArrowLeft")
        assert _visible_pages(page) == [2]
        page.click('.pager [data-goto="5"]')
        assert _visible_pages(page) == [5]
        assert page.locator(".pager .next").is_disabled()
        page.keyboard.press("ArrowRight")  # stays on the last page
        assert _visible_pages(page) == [5]
        assert "page=5" in page.evaluate("location.hash")
        assert page.locator('.pager [data-goto="5"]').get_attribute("aria-current") == "page"
        page.keyboard.press("Home")
        assert _visible_pages(page) == [1]
        # a stage table collapses and opens again
        page.click('.pager [data-goto="3"]')
        details = page.locator("details.stage-table").first
        first_row = details.locator("tbody tr").first
        assert first_row.is_visible()
        details.locator("summary").click()
        assert not first_row.is_visible()
        details.locator("summary").click()
        assert first_row.is_visible()
        watch.assert_clean(html_path)
    finally:
        ctx.close()
    # a link to a page opens that page
    ctx, page, watch = _open(browser, html_path, "#page=4")
    try:
        assert _visible_pages(page) == [4]
        watch.assert_clean(html_path)
    finally:
        ctx.close()


def test_language_switch_changes_labels_and_is_remembered(browser, written):
    html_path, _ = written["sd3-controlnet-inpaint"]
    ctx, page, watch = _open(browser, html_path)
    try:
        assert page.evaluate("document.documentElement.getAttribute('data-lang')") == "en"
        assert page.locator("#page-1 h2").inner_text() == "1. Macro architecture"
        assert page.locator(".pager .next").inner_text() == "Next ▶"
        page.click('.langs [data-lang="zh"]')
        assert page.evaluate("document.documentElement.getAttribute('data-lang')") == "zh"
        assert page.locator("#page-1 h2").inner_text() == "1. 宏观架构"
        assert page.locator(".pager .next").inner_text() == "下一页 ▶"
        text = page.locator("#page-1").inner_text()
        assert "提示词" in text and "Prompt" not in text
        badge = page.locator("#page-1 .badge").first.inner_text()
        assert badge.startswith("实测"), badge
        # tooltips follow the language too
        assert page.locator(".pager [data-goto='1']").get_attribute("title") == "宏观架构"
        assert "lang=zh" in page.evaluate("location.hash")
        page.click('.pager [data-goto="3"]')
        assert "完整 MMDiT 拓扑" in page.locator("#page-3 h2").inner_text()
        # remembered: a reload (the hash) and a fresh visit in the same context (localStorage)
        page.reload()
        page.wait_for_function("window.fillscopeReport !== undefined")
        assert page.evaluate("window.fillscopeReport.lang()") == "zh" and _visible_pages(page) == [3]
        page.goto(html_path.resolve().as_uri())
        page.wait_for_function("window.fillscopeReport !== undefined")
        assert page.evaluate("window.fillscopeReport.lang()") == "zh"
        page.click('.langs [data-lang="en"]')
        assert page.locator("#page-1 h2").inner_text() == "1. Macro architecture"
        watch.assert_clean(html_path)
    finally:
        ctx.close()


def test_injected_markup_renders_as_text_and_never_runs(browser, written):
    html_path, _ = written["xss"]
    ctx, page, watch = _open(browser, html_path)
    try:
        for lang in ("en", "zh"):
            page.click(f'.langs [data-lang="{lang}"]')
            for n in range(1, R.PAGE_COUNT + 1):
                page.click(f'.pager [data-goto="{n}"]')
                page.locator(f"#page-{n}").inner_text()
        page.wait_for_timeout(200)
        assert page.evaluate("window.__xss") is None
        assert page.evaluate("document.querySelectorAll('img, iframe, object, embed, body svg svg').length") == 0
        assert page.evaluate("document.scripts.length") == 2
        assert page.locator("header.top h1").inner_text() == f"FLUX {XSS_IMG} {XSS_SCRIPT}"
        assert page.locator("[data-module]").first.locator("td").first.inner_text() == XSS_IMG
        assert page.locator("tr[data-block]").first.locator("td").nth(1).text_content() == XSS_IMG
        page.click('.pager [data-goto="5"]')
        assert XSS_IMG in page.locator("#page-5").inner_text()
        watch.assert_clean(html_path)  # no dialog, no error, no request for "x" or example.invalid
    finally:
        ctx.close()


def test_cuda_run_shows_green_badges(browser, written):
    html_path, json_path = written["cuda"]
    data = json.loads(json_path.read_text(encoding="utf-8"))
    assert data["evidence"]["peak_memory"]["provenance"] == "measured"
    ctx, page, watch = _open(browser, html_path)
    try:
        page.click('.pager [data-goto="5"]')
        badge = page.locator('#page-5 .evgrid .badge[data-prov="measured"][data-device="cuda"]').first
        assert badge.inner_text() == "measured · CUDA"
        color = badge.evaluate("e => getComputedStyle(e).color")
        r, g, b = map(int, re.findall(r"\d+", color)[:3])
        assert g > r and g > b, f"the CUDA badge is not green: {color}"
        assert "peak cuda memory allocated" in page.locator("#page-5").inner_text().lower()
        watch.assert_clean(html_path)
    finally:
        ctx.close()


def test_every_page_screenshots_small_enough_for_the_docs(browser, written):
    """FILLSCOPE_DOCS_SCREENSHOTS=1 writes them to docs/report/ (what the README shows), else to test-artifacts/report/
    (every page of both models: the screenshots this module leaves by default)."""
    out = DOCS if os.environ.get("FILLSCOPE_DOCS_SCREENSHOTS") else ARTIFACTS
    for model in MODELS:
        paths = R.screenshot_report(written[model][0], out, model, browser=browser, viewport=(1280, 800))
        assert [p.name for p in paths] == [f"{model}-page{n}.png" for n in range(1, R.PAGE_COUNT + 1)]
        for p in paths:
            assert p.stat().st_size < 400_000, f"{p} is large"


def test_figure_inventory_matches_fixture():
    """Guard for the tests above: the fixture references the figures it defines (so 'every figure shown' is
    not vacuous) and one figure per macro edge exists."""
    for model in MODELS:
        r = example_report(model)
        used = {e["figure"] for e in r["pages"]["macro"]["edges"]}
        assert used <= set(r["figures"]) and len(used) >= 10


def test_print_shows_every_page_without_navigation(browser, written):
    html_path, _ = written["flux-fill"]
    ctx, page, watch = _open(browser, html_path)
    try:
        page.emulate_media(media="print")
        page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
        assert _visible_pages(page) == list(range(1, R.PAGE_COUNT + 1))
        assert not page.locator("nav.pager").is_visible()
        assert page.evaluate("Array.from(document.querySelectorAll('details')).every(d => d.open)")
        pdf = page.pdf(format="A4", landscape=True)
        assert pdf[:5] == b"%PDF-" and len(pdf) > 50_000
        (ARTIFACTS / "flux-fill-print.pdf").write_bytes(pdf)
        watch.assert_clean(html_path)
    finally:
        ctx.close()
