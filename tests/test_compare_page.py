"""The comparison's report page (fillscope/compare/page.py, written by record.write_compare as <name>.html): two
captures made by hand with small tensors, lined up by compare_captures and written by write_compare with real
RunSpecs, and one real run of the tiny FLUX.1 Fill through `python -m fillscope compare`. The page holds both
languages, every boundary once with the first divergence marked, the three images as data: URIs and nothing from
the network; data is escaped; a shapes-only (meta) comparison shows its note and no image. In headless chromium the
language switch changes the visible heading."""

from __future__ import annotations

import base64
import html as htmllib
import json
import math
import re
from html.parser import HTMLParser

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_flux import tiny_flux_fill_job

from fillscope.cli import main
from fillscope.compare.capture import BoundaryCapture
from fillscope.compare.diff import compare_captures
from fillscope.compare.page import compare_page
from fillscope.compare.record import write_compare
from fillscope.compare.runs import RunResult
from fillscope.compare.spec import specs_from

EVIL = "<b>x</b>"
XSS_FACT = '<img src=x onerror="window.__xss=1">'
H, W = 32, 48


class _Tags(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _table_names(page: str) -> list[str]:
    """The boundary names the table shows, unescaped, in order."""
    return [htmllib.unescape(n) for n in re.findall(r'<span class="bname">(.*?)</span>', page)]


def _specs(tmp_path, b: dict):
    Image.fromarray(np.zeros((H, W, 3), np.uint8)).save(tmp_path / "img.png")
    Image.fromarray(np.full((H, W), 255, np.uint8)).save(tmp_path / "mask.png")
    a = {"family": "flux-fill", "models": "meta", "image": str(tmp_path / "img.png"),
         "mask": str(tmp_path / "mask.png"), "prompt": "a lamp", "seed": 1, "steps": 1, "dtype": "fp32"}
    return specs_from(a, b)


def _hand_captures():
    """Two captures of one made-up run: B drifts from `transformer.input` on, has a boundary of another shape, and
    each side one boundary the other lacks."""
    g = torch.Generator().manual_seed(0)
    a, b = BoundaryCapture(), BoundaryCapture()
    ids = torch.arange(77).reshape(1, 77).float()
    x = torch.randn(1, 24, 64, generator=g)
    for cap, drift in ((a, 0.0), (b, 1e-2)):
        cap("clip_l.input_ids", ids)
        cap("transformer.input", x + drift * torch.ones_like(x))
        cap(EVIL, x * (1 + drift))
        cap("img_ids", torch.zeros(24 if cap is a else 48, 3))
        cap("step[1].denoiser", x - drift)
    a("only_in_a", x)
    b("only_in_b", x)
    return a, b


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """write_compare of the hand-made comparison (mask: the centre of the image)."""
    tmp = tmp_path_factory.mktemp("page")
    spec_a, spec_b = _specs(tmp, {"storage": "fp8_e4m3fn"})
    cap_a, cap_b = _hand_captures()
    g = torch.Generator().manual_seed(1)
    image_a = torch.rand(1, H, W, 3, generator=g)
    image_b = (image_a + 0.02 * torch.randn(1, H, W, 3, generator=g)).clamp(0, 1)
    mask = torch.zeros(1, H, W)
    mask[:, 8:24, 12:36] = 1
    comparison = compare_captures(cap_a, cap_b, image_a=image_a, image_b=image_b, mask=mask)
    a = RunResult(spec_a, cap_a, image_a, mask, 1.25, {})
    b = RunResult(spec_b, cap_b, image_b, mask, 0.5, {"transformer storage": XSS_FACT})
    paths = write_compare(comparison, a, b, tmp / "out", "cmp")
    return comparison, paths, paths["html"].read_text(encoding="utf-8")


def test_write_compare_writes_the_page_beside_the_json(written):
    _, paths, page = written
    assert paths["html"].name == "cmp.html" and paths["html"].parent == paths["json"].parent
    doc = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert doc["comparison"]["image"]["heatmap_scale"] > 0  # in the JSON the page is made from
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # the JSON download is the .json file's bytes
    link = next(a for t, a in _Tags(page).tags if t == "a" and a.get("download"))
    assert link["download"] == "cmp.json"
    assert base64.b64decode(link["href"].split(",", 1)[1]) == paths["json"].read_bytes()


def test_the_page_holds_both_languages_and_every_boundary_once_with_the_first_divergence_marked(written):
    comparison, paths, page = written
    for en, zh in (("Comparison of two runs", "两次运行的对比"), ("The two runs", "两次运行"),
                   ("Image figures", "图像指标"), ("Images", "图像"), ("Boundaries", "边界")):
        assert f'<span class="l-en" lang="en">{en}</span>' in page
        assert f'<span class="l-zh" lang="zh-CN">{zh}</span>' in page
    assert comparison.first_divergence == "transformer.input"
    assert _table_names(page) == [r.name for r in comparison.rows]  # every boundary, once, in order
    first = re.findall(r'<tr class="first" data-boundary="([^"]*)"', page)
    assert first == ["transformer.input"] and page.count('class="firstmark"') == 1
    statuses = dict(re.findall(r'data-boundary="([^"]*)" data-status="([^"]*)"', page))
    assert statuses["clip_l.input_ids"] == "same" and statuses["img_ids"] == "shapes differ"
    assert statuses["only_in_a"] == "only A" and statuses["only_in_b"] == "only B"
    assert 'class="st st-differs"' in page and 'class="st st-same"' in page
    # the headline: the record's English and its Chinese, the run field that differs marked
    assert htmllib.escape(comparison.headline()) in page and "首个分歧：transformer.input" in page
    assert re.search(r'<tr class="changed" data-field="storage">', page)
    provenance = json.loads(paths["json"].read_text())["provenance"]
    assert "measured in this run" in page and "本次运行实测" in page
    assert f"{provenance['date']} · python {provenance['python']}, torch {provenance['torch']}" in page


def test_the_images_are_embedded_and_nothing_comes_from_the_network(written):
    _, paths, page = written
    tags = _Tags(page).tags
    imgs = [a for t, a in tags if t == "img"]
    assert len(imgs) == 3  # A, B, heat map; the fact's <img> is text
    for img, kind in zip(imgs, ("a", "b", "heatmap")):
        assert img["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(img["src"].split(",", 1)[1]) == paths[kind].read_bytes()
    assert not [a for t, a in tags if t == "script" and "src" in a]
    assert not [t for t, _ in tags if t in ("link", "iframe", "object", "embed", "base", "form")]
    for tag, attrs in tags:
        for k in ("src", "href", "action", "srcset", "poster"):
            assert k not in attrs or attrs[k].startswith("data:"), f"<{tag} {k}={attrs[k]!r:.60}>"
    assert "http://" not in page and "https://" not in page
    csp = next(a["content"] for t, a in tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp and "img-src data:" in csp
    scale = json.loads(paths["json"].read_text())["comparison"]["image"]["heatmap_scale"]
    assert f"99.5th percentile ({scale:.4g})" in page and htmllib.escape("cyan line is the mask's outline") in page


def test_text_from_the_record_is_escaped(written):
    _, _, page = written
    assert EVIL not in page and htmllib.escape(EVIL) in page
    assert XSS_FACT not in page and htmllib.escape(XSS_FACT) in page
    assert not any(k.startswith("on") for _, a in _Tags(page).tags for k in a)


def test_identical_runs_read_back_from_the_json_show_identical(tmp_path):
    """The JSON writes an infinite PSNR as "inf": the page says "identical" / "相同" and a black heat map."""
    spec_a, spec_b = _specs(tmp_path, {})
    cap = BoundaryCapture()
    cap("t5.hidden", torch.ones(1, 4, 8))
    image = torch.rand(1, H, W, 3, generator=torch.Generator().manual_seed(2))
    mask = torch.zeros(1, H, W)
    mask[:, 4:20, 4:20] = 1
    comparison = compare_captures(cap, cap, image_a=image, image_b=image, mask=mask)
    run_a, run_b = RunResult(spec_a, cap, image, mask, 1.0), RunResult(spec_b, cap, image, mask, 1.0)
    paths = write_compare(comparison, run_a, run_b, tmp_path / "out")
    doc = json.loads(paths["json"].read_text())
    assert doc["comparison"]["image"]["psnr_inside"] == "inf" and comparison.image["psnr_inside"] == math.inf
    page = compare_page(doc, {k: paths[k].read_bytes() for k in ("a", "b", "heatmap")})
    cell = re.search(r'<td class="r" data-key="psnr_inside"[^>]*>(.*?)</td>', page).group(1)
    assert ">identical<" in cell and ">相同<" in cell
    assert "equal at every pixel: the heat map is black" in page
    assert "no boundary over" in page and "没有边界的相对误差超过" in page


def test_a_shapes_only_comparison_shows_the_meta_note_and_no_image(tmp_path):
    spec_a, spec_b = _specs(tmp_path, {})
    a, b = BoundaryCapture(), BoundaryCapture()
    for cap, tokens in ((a, 4096), (b, 16384)):
        cap("t5.hidden", torch.empty(1, 512, 4096, device="meta"))
        cap("transformer.input", torch.empty(1, tokens, 384, device="meta"))
    comparison = compare_captures(a, b)
    assert comparison.shapes_only
    blank = torch.zeros(1, H, W, 3)
    paths = write_compare(comparison, RunResult(spec_a, a, blank, blank[..., 0], 0.1),
                          RunResult(spec_b, b, blank, blank[..., 0], 0.1), tmp_path / "out")
    page = paths["html"].read_text(encoding="utf-8")
    assert "heatmap" not in paths and 'class="meta-note"' in page
    assert "Shapes only (meta)" in page and "仅形状（meta）" in page
    assert "<img" not in page and "data:image/png" not in page and "Image figures" not in page
    assert _table_names(page) == ["t5.hidden", "transformer.input"]
    assert re.search(r'data-boundary="transformer.input" data-status="shapes differ"', page)
    assert "[1, 4096, 384]" in page and "[1, 16384, 384]" in page


def test_the_tiny_flux_fill_compare_command_writes_a_page_of_its_json(tmp_path):
    """A real run: `fillscope compare` of the tiny FLUX.1 Fill, fp32 against bf16, 1 step."""
    spec = tiny_flux_fill_job(tmp_path, steps=1)
    assert main(["compare", json.dumps(spec), '{"dtype": "bf16"}', "--out", str(tmp_path / "out")]) == 1
    out = tmp_path / "out"
    doc = json.loads((out / "compare.json").read_text())
    page = (out / "compare.html").read_text(encoding="utf-8")
    assert _table_names(page) == [r["name"] for r in doc["comparison"]["boundaries"]]
    first = doc["comparison"]["first_divergence"]
    assert re.findall(r'<tr class="first" data-boundary="([^"]*)"', page) == [first]
    assert page.count("data:image/png;base64,") == 3
    assert f"{doc['comparison']['image']['psnr_inside']:.2f} dB" in page


# ------------------------------------------------------------------------------------------- in chromium


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium through playwright, as tests/test_report_render.py opens the report (a skip outside CI,
    a failure under it: tests/conftest.py)."""
    from fillscope.trace.report import CHROMIUM_ARGS, chromium_path

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the python package playwright is not installed")
    exe = chromium_path()
    if exe is None:
        pytest.skip("chromium not found (apt-get install -y chromium, or set FILLSCOPE_CHROMIUM)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def test_in_chromium_the_language_switch_changes_the_heading_and_is_remembered(browser, written):
    comparison, paths, _ = written
    html_path = paths["html"].resolve()
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    errors, requests = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("dialog", lambda d: (errors.append(d.message), d.dismiss()))
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(html_path.as_uri())
        page.wait_for_function("window.fillscopeReport !== undefined")
        assert page.locator("#page-1 h2").inner_text() == "Comparison of two runs"
        assert page.locator("tr.first .firstmark").inner_text() == "first divergence"
        page.click('.langs [data-lang="zh"]')
        assert page.locator("#page-1 h2").inner_text() == "两次运行的对比"
        assert page.locator("tr.first .firstmark").inner_text() == "首个分歧"
        assert page.locator("tr.first .bname").inner_text() == comparison.first_divergence
        # the images load under the page's CSP (img-src data:)
        widths = page.evaluate("Array.from(document.images).map(i => i.naturalWidth)")
        assert widths == [W, W, W]
        page.goto(html_path.as_uri())  # a fresh visit: the language is remembered (localStorage)
        page.wait_for_function("window.fillscopeReport !== undefined")
        assert page.locator("#page-1 h2").inner_text() == "两次运行的对比"
        assert page.locator(f'tr[data-boundary="{EVIL}"] .bname').inner_text() == EVIL
        assert page.evaluate("window.__xss") is None
        assert not errors, errors
        own = html_path.as_uri()
        assert not [u for u in requests if not (u.split("#")[0] == own or u.startswith("data:"))], requests
    finally:
        ctx.close()
