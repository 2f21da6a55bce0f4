"""The architecture viewer (web/fillscope_viewer.js) in ComfyUI's own frontend (1.32.9), in headless chromium:
example_workflows/flux_fill_trace.json runs from the canvas, the trace node shows its summary and an "Open
architecture report" button, the button opens the FillScope sidebar tab (wider than the frontend's 20%), and the
five-page report renders there in a sandboxed iframe (allow-scripts only: its own script runs, in an opaque origin)
with a hostile prompt shown as text. The report's own "⤓ JSON" button downloads its .json file (the viewer serves
it: the sandbox allows no download), the EN / 中文 choice carries into the expanded dialog, a second run writes new
files, and after a page reload the viewer shows the newest report again (from /history).

Needs playwright (Python) and a system chromium (/usr/bin/chromium, env FILLSCOPE_CHROMIUM); outside CI the
module is skipped without them, in CI (env CI set) that is a failure. Screenshots: test-artifacts/browser/viewer-*.png.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import ComfyPage, http_json, require_browser  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / "example_workflows" / "flux_fill_trace.json"
SHOTS = REPO / "test-artifacts" / "browser"
XSS = "<img src=x onerror=alert(1)>"
TAB_ID = "fillscope-architecture"
BUTTON = "Open architecture report"
EMPTY_TEXT = "Run a FillScope trace node (example_workflows/flux_fill_trace.json) to see its report here"

# Node ids in example_workflows/flux_fill_trace.json (api_workflows/graphs.py).
LOADERS = (1, 2, 3, 4)  # CLIP-L, T5, FLUX Fill transformer, VAE
TRACE = 5

RUNS: dict = {}  # the trace run's prompt id and files, for the next test

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def workflow() -> dict:
    return json.loads(WORKFLOW.read_text())


@pytest.fixture(scope="module")
def canvas(request):
    """One chromium page on the session's ComfyUI server for the module (a machine without a browser skips
    before a server is started). The server's history is emptied first: the viewer lists the reports of the
    prompts in /history, and these tests start from none."""
    require_browser("browser viewer tests")
    server = request.getfixturevalue("served_models")
    http_json(server.url + "/history", {"clear": True})
    with ComfyPage(server.url, viewport=(1920, 1080), settings={"Comfy.Window.UnloadConfirmation": False}) as cp:
        yield cp


def _assert_no_errors(cp: ComfyPage) -> None:
    assert not cp.errors(), "page errors:\n" + "\n".join(cp.errors())


def _widgets_values(wf: dict) -> dict:
    return {n["id"]: n.get("widgets_values") for n in wf["nodes"]}


# JS: a node's FillScope widgets: its face (the summary widget: its text) and table, and the report button.
NODE_JS = """(id) => {
  const n = window.app.graph.getNodeById(id);
  const ws = n.widgets || [];
  const f = ws.filter(w => w.name === 'fillscope_summary');
  const b = ws.filter(w => w.name === %s);
  const t = window.FillScope.tableOf(id);
  return {
    faces: f.length, face: f.length ? f[0].value : null, source: t && t.source,
    text: t ? (t.message.text || []).join('\\n') : null,
    tensors: t && t.message.fillscope_shapes ? t.message.fillscope_shapes[0].node.tensors.length : 0,
    buttons: b.length, buttonType: b.length ? b[0].type : null,
    buttonSerialize: b.length ? [b[0].serialize, b[0].options.serialize] : null,
  };
}""" % json.dumps(BUTTON)

VIEWER = ".fillscope-viewer[data-mode='sidebar']"


def _viewer_state(cp: ComfyPage, root: str = VIEWER) -> dict:
    return cp.page.evaluate(
        """(sel) => {
          const v = document.querySelector(sel);
          if (!v) return null;
          const body = v.querySelector('.fsv-body');
          const frame = body.querySelector('iframe');
          return {
            visible: v.getClientRects().length > 0 && v.offsetWidth > 0,
            state: body.dataset.state || null,
            bodyText: body.textContent,
            frame: frame ? {sandbox: frame.getAttribute('sandbox'), src: frame.getAttribute('src'),
                            srcdoc: frame.hasAttribute('srcdoc'), filename: frame.dataset.filename,
                            loaded: frame.dataset.loaded || null} : null,
            pre: (body.querySelector('pre') || {}).textContent || null,
            name: (v.querySelector('.fsv-name') || {}).textContent || null,
            items: [...v.querySelectorAll('.fsv-item')].map(b => ({filename: b.dataset.filename,
                      current: b.getAttribute('aria-current'), text: b.textContent})),
            openTab: (v.querySelector('.fsv-open-tab') || {}).href || null,
            json: (v.querySelector('.fsv-download-json:not([hidden])') || {}).href || null,
          };
        }""",
        root,
    )


def _click_button_widget(cp: ComfyPage, node_id: int, name: str) -> None:
    """A real mouse click on a canvas-drawn button widget (its centre, from the widget's y and the canvas' zoom)."""
    cp.center_on(node_id, 1.0)
    xy = cp.page.evaluate(
        """([id, name]) => {
          const c = window.app.canvas, n = window.app.graph.getNodeById(id);
          const w = n.widgets.find(w => w.name === name);
          const h = w.computedHeight || w.height || window.LiteGraph.NODE_WIDGET_HEIGHT || 20;
          const y = (w.y ?? w.last_y);
          const p = c.ds.convertOffsetToCanvas([n.pos[0] + n.size[0] / 2, n.pos[1] + y + h / 2]);
          const r = c.canvas.getBoundingClientRect();
          return [r.left + p[0], r.top + p[1]];
        }""",
        [node_id, name],
    )
    cp.page.mouse.click(xy[0], xy[1])


def _panel_share(cp: ComfyPage) -> float:
    """The sidebar panel's width as a share of its splitter."""
    return cp.page.evaluate("""() => { const p = document.querySelector('.side-bar-panel');
        return p.getBoundingClientRect().width / p.parentElement.getBoundingClientRect().width; }""")


def _frame_lang(cp: ComfyPage, selector: str) -> str:
    """The language the report in the iframe at `selector` shows (set by its own script)."""
    return cp.page.query_selector(selector).content_frame().evaluate("() => window.fillscopeReport.lang()")


def _wait_hosted(frame) -> None:
    """Until the report in `frame` got the viewer's message (its JSON link then asks the viewer)."""
    frame.wait_for_function("() => window.fillscopeReport && window.fillscopeReport.hosted()")


def test_sidebar_tab_empty_state(canvas):
    cp = canvas
    _assert_no_errors(cp)
    assert "FillScope.ShapesOnNodes" in cp.extension_names()
    tabs = cp.page.evaluate("() => window.app.extensionManager.getSidebarTabs().map(t => [t.id, t.type])")
    assert [TAB_ID, "custom"] in tabs, tabs
    assert cp.page.evaluate("() => window.FillScope.lastReport") is None
    # The tab's button in the side toolbar opens it; before any trace: the empty state.
    cp.page.click(f".{TAB_ID}-tab-button")
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state='empty']")
    st = _viewer_state(cp)
    assert st["visible"] and st["frame"] is None and st["items"] == []
    assert EMPTY_TEXT in st["bodyText"]
    cp.screenshot(SHOTS / "viewer-empty.png")
    # Wider than the frontend's 20% for a sidebar tab; another tab gets its own width back.
    assert 0.33 < _panel_share(cp) < 0.39, _panel_share(cp)
    other = cp.page.evaluate(
        "(me) => window.app.extensionManager.getSidebarTabs().map(t => t.id).find(id => id !== me)", TAB_ID)
    cp.page.click(f".{other}-tab-button")
    cp.page.wait_for_selector(VIEWER, state="detached")
    assert 0.17 < _panel_share(cp) < 0.23, _panel_share(cp)
    cp.page.click(f".{TAB_ID}-tab-button")
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state='empty']")
    assert 0.33 < _panel_share(cp) < 0.39, _panel_share(cp)
    # Resizable: the panel's gutter drags it wider, and the tab opens at that width the next time.
    gutter = cp.page.query_selector(".p-splitter-gutter").bounding_box()
    x, y = gutter["x"] + gutter["width"] / 2, gutter["y"] + gutter["height"] / 2
    cp.page.mouse.move(x, y)
    cp.page.mouse.down()
    cp.page.mouse.move(x + 200, y, steps=10)
    cp.page.mouse.up()
    dragged = _panel_share(cp)
    assert dragged > 0.43, dragged
    cp.page.click(f".{TAB_ID}-tab-button")  # toggles it closed again
    cp.page.wait_for_selector(VIEWER, state="detached")
    cp.page.click(f".{TAB_ID}-tab-button")
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state='empty']")
    cp.page.wait_for_timeout(100)
    assert abs(_panel_share(cp) - dragged) < 0.02, (_panel_share(cp), dragged)
    cp.page.click(f".{TAB_ID}-tab-button")
    cp.page.wait_for_selector(VIEWER, state="detached")
    # The pack's command opens it too (command palette / keybindings).
    cp.page.evaluate("() => window.app.extensionManager.command.execute('FillScope.OpenArchitectureReport')")
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state='empty']")
    cp.page.click(f".{TAB_ID}-tab-button")
    cp.page.wait_for_selector(VIEWER, state="detached")

    # The fallback of a frontend without registerSidebarTab: a floating button that opens the viewer as a dialog.
    cp.page.evaluate(
        """async () => {
          const exts = await (await fetch('/extensions')).json();  // the web files the frontend imported
          const url = exts.find(u => u.endsWith('/fillscope_viewer.js'));
          (await import(url)).addFallbackButton();
        }""")
    cp.page.click(".fillscope-open-viewer")
    cp.page.wait_for_selector(".fillscope-dialog .fillscope-viewer[data-mode='dialog'] .fsv-body[data-state='empty']")
    assert EMPTY_TEXT in cp.page.inner_text(".fillscope-dialog")
    cp.page.keyboard.press("Escape")
    cp.page.wait_for_selector(".fillscope-dialog", state="detached")
    cp.page.evaluate("() => document.querySelector('.fillscope-open-viewer').remove()")
    _assert_no_errors(cp)


def test_trace_report_in_viewer(canvas, workflow):
    cp = canvas
    t_start = time.monotonic()
    cp.load_workflow(workflow)
    assert cp.missing_node_types() == []
    assert cp.open_dialogs() == [], "a dialog opened on load (missing nodes/models?)"
    cp.full_detail()
    cp.set_widget(TRACE, "line_trace", False)  # the module tracer only: a few seconds faster
    cp.set_widget(TRACE, "prompt", XSS)

    cp.free_cache()  # the session's server may have run this prompt for another test
    t0 = time.monotonic()
    pid = cp.queue()
    entry = cp.wait_history(pid, timeout=300)
    assert cp.wait_executed(pid) == "success"
    run_s = time.monotonic() - t0
    assert entry["prompt"][2][str(TRACE)]["inputs"]["prompt"] == XSS
    assert entry["prompt"][2][str(TRACE)]["inputs"]["line_trace"] is False
    files = entry["outputs"][str(TRACE)]["fillscope_report"]
    html_file = next(f for f in files if f["filename"].endswith(".html"))
    json_file = next(f for f in files if f["filename"].endswith(".json"))

    # The loaders show their shapes tables (facts, on meta weights), the trace node its summary and the button.
    for nid in LOADERS:
        p = cp.page.evaluate(NODE_JS, nid)
        assert p["faces"] == 1 and p["source"] == "run", (nid, p)
        assert p["tensors"] or "params" in p["face"], (nid, p)  # loaders on meta weights: the parameter count
        assert p["buttons"] == 0, (nid, p)
    tr = cp.page.evaluate(NODE_JS, TRACE)
    assert tr["faces"] == 1 and "module rows/hits" in tr["face"] and "parameters:" in tr["text"], tr
    assert tr["buttons"] == 1 and tr["buttonType"] == "button", tr
    assert tr["buttonSerialize"] == [False, False], tr
    last = cp.page.evaluate("() => window.FillScope.lastReport")
    assert last == {"filename": html_file["filename"], "subfolder": html_file["subfolder"], "type": "output"}

    # Display-only widgets: the saved workflow carries the file's values (and the two edits), the prompt no button.
    saved = _widgets_values(cp.serialize())
    expected = _widgets_values(workflow)
    expected[TRACE] = [1024, 1024, XSS, False, expected[TRACE][4]]
    assert saved == expected
    prompt = cp.page.evaluate("async () => (await window.app.graphToPrompt()).output")
    assert all(BUTTON not in n["inputs"] and "fillscope_table" not in n["inputs"] for n in prompt.values())

    # /view serves .html as a download (application/octet-stream): the viewer cannot use it as an iframe src.
    ctype = cp.page.evaluate(
        "async (f) => (await fetch('/api/view?' + new URLSearchParams(f))).headers.get('content-type')", html_file)
    assert not ctype.startswith("text/html"), ctype

    # The node's button (a real click on the canvas) opens the sidebar tab on this report.
    cp.center_on(TRACE, 1.0)  # also lets a frame draw: the widget's y is laid out
    cp.screenshot(SHOTS / "viewer-trace-node.png")
    _click_button_widget(cp, TRACE, BUTTON)
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state='loaded'] iframe.fsv-frame[data-loaded='true']",
                              timeout=20_000)
    assert cp.page.evaluate("() => window.app.extensionManager.sidebarTab.activeSidebarTabId") == TAB_ID
    st = _viewer_state(cp)
    assert st["visible"]
    assert st["frame"]["sandbox"] == "allow-scripts" and st["frame"]["src"] is None and st["frame"]["srcdoc"]
    assert st["frame"]["filename"] == html_file["filename"]
    assert st["name"].endswith(html_file["filename"])
    assert st["items"][0]["filename"] == html_file["filename"] and st["items"][0]["current"] == "true"
    assert html_file["filename"] in st["items"][0]["text"]
    assert st["openTab"].startswith("blob:"), st["openTab"]
    assert st["json"] and json_file["filename"] in st["json"], st["json"]

    # Inside the iframe: the report's own script ran (pager "1 / 5"), page 1 shows the macro graph.
    fl = cp.page.frame_locator(f"{VIEWER} iframe.fsv-frame")
    fl.locator("section#page-1 svg.macro").wait_for(state="visible")
    assert fl.locator("html.js").count() == 1  # set by the report's script: it ran (its CSP hash still matches)
    assert fl.locator(".pager .counter").inner_text() == "1 / 5"
    assert "FLUX transformer" in fl.locator("section#page-1").inner_text()
    cp.screenshot(SHOTS / "viewer-report-page1.png")
    # Page 3 (the full denoiser topology): the transformer's input shape.
    fl.locator(".pager [data-goto='3']").click()
    fl.locator("section#page-3").wait_for(state="visible")
    assert fl.locator(".pager .counter").inner_text() == "3 / 5"
    page3 = fl.locator("section#page-3").inner_text()
    seen = {n: "[1, 4096, 384]" in fl.locator(f"section#page-{n}").text_content() for n in range(1, 6)}
    assert any(seen.values()), seen
    # Page 5: the run boundary shows the hostile prompt as text.
    fl.locator(".pager [data-goto='5']").click()
    fl.locator("section#page-5").wait_for(state="visible")
    prompt_span = fl.locator("section#page-5 span.prompt[data-run='prompt']")
    assert prompt_span.inner_text() == XSS

    # Sandboxed: an opaque origin that cannot reach ComfyUI's document; no handler attribute anywhere, no dialog.
    frame = cp.page.query_selector(f"{VIEWER} iframe.fsv-frame").content_frame()
    probe = frame.evaluate(
        """() => ({origin: window.origin, url: location.href, img: document.querySelectorAll('img').length,
                   onerror: document.querySelectorAll('[onerror]').length,
                   parent: (() => { try { return typeof parent.document; } catch (e) { return 'blocked'; } })(),
                   storage: (() => { try { localStorage.length; return 'open'; } catch (e) { return 'blocked'; } })()})""")
    assert probe == {"origin": "null", "url": "about:srcdoc#page=5&lang=en", "img": 0, "onerror": 0, "parent": "blocked", "storage": "blocked"}, probe
    assert cp.page.evaluate("() => document.querySelectorAll('[onerror]').length") == 0
    assert cp.dialogs == [], cp.dialogs

    # The report's own "⤓ JSON" button (a data: link the sandbox would not download): the viewer downloads the
    # report's .json file, byte for byte the file the trace node wrote.
    served = cp.page.evaluate("async (f) => await (await fetch('/view?' + new URLSearchParams(f))).text()", json_file)
    _wait_hosted(frame)
    with cp.page.expect_download() as got:
        fl.locator("header a.dl").click()
    assert got.value.suggested_filename == json_file["filename"]
    assert Path(got.value.path()).read_text(encoding="utf-8") == served
    # The report's message alone, without a click (no user activation), starts no download.
    downloads = []

    def on_download(d):
        downloads.append(d)

    cp.page.on("download", on_download)
    # Past the click's activation and this evaluate's (playwright's evaluate counts as a user gesture; chromium's
    # transient activation lasts 5 s): the message 5.2 s later, its sending seen on the console (no evaluate meanwhile),
    # then long enough for a download it started to be reported.
    with cp.page.expect_console_message(lambda m: m.text == "fillscope-test: posted", timeout=30_000):
        frame.evaluate("""() => setTimeout(() => { parent.postMessage({fillscope: 'report', download: 'json'}, '*');
                                                    console.log('fillscope-test: posted'); }, 5200)""")
    cp.page.wait_for_timeout(800)
    cp.page.remove_listener("download", on_download)
    assert downloads == []

    # "Open in new tab": a blob: page that holds only the same sandboxed iframe; the JSON button works there too.
    with cp.page.expect_popup() as pop:
        cp.page.click(f"{VIEWER} .fsv-open-tab")
    tab = pop.value
    tab.wait_for_load_state()
    assert tab.evaluate("() => [...document.querySelectorAll('iframe')].map(f => f.getAttribute('sandbox'))") == [
        "allow-scripts"]
    tab.frame_locator("iframe").locator("section#page-1 svg.macro").wait_for(state="visible")
    _wait_hosted(tab.query_selector("iframe").content_frame())
    with tab.expect_download() as got:
        tab.frame_locator("iframe").locator("header a.dl").click()
    assert got.value.suggested_filename == json_file["filename"]
    assert Path(got.value.path()).read_text(encoding="utf-8") == served
    tab.close()

    # Live: a new report (here the JSON companion, as a Shapes Report node's would be) re-renders the viewer at
    # once, as text; the session list keeps both; a list button goes back.
    cp.page.evaluate("(f) => { window.FillScope.lastReport = f; }", json_file)
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state='loaded'] pre.fsv-text")
    st = _viewer_state(cp)
    assert '"schema": "fillscope.report/1"' in st["pre"]
    assert [i["filename"] for i in st["items"]] == [json_file["filename"], html_file["filename"]]
    cp.page.click(f"{VIEWER} .fsv-item[data-filename='{html_file['filename']}']")
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state='loaded'] iframe.fsv-frame[data-loaded='true']")
    st = _viewer_state(cp)
    assert [i["current"] for i in st["items"]] == ["false", "true"]
    assert fl.locator(".pager .counter").inner_text() == "1 / 5"

    # A hostile file name stays text in the list and the error message (the file does not exist).
    cp.page.evaluate("(x) => { window.FillScope.lastReport = {filename: x + '.html', subfolder: x}; }", XSS)
    cp.page.wait_for_selector(f"{VIEWER} .fsv-body[data-state='error']")
    st = _viewer_state(cp)
    assert st["items"][0]["filename"] == XSS + ".html" and (XSS + ".html") in st["items"][0]["text"]
    assert "HTTP 4" in st["bodyText"]
    assert cp.page.evaluate("() => document.querySelectorAll('.fillscope-viewer img, [onerror]').length") == 0
    cp.page.click(f"{VIEWER} .fsv-item[data-filename='{html_file['filename']}']")
    cp.page.wait_for_selector(f"{VIEWER} iframe.fsv-frame[data-loaded='true']")
    cp.screenshot(SHOTS / "viewer-session-list.png")

    # "Expand": the same viewer in a large dialog, in the language chosen in the sidebar (中文 here).
    fl.locator(".langs button[data-lang='zh']").click()
    assert _frame_lang(cp, f"{VIEWER} iframe.fsv-frame") == "zh"
    cp.page.wait_for_function("() => window.FillScope.reportLang() === 'zh'")
    cp.page.click(f"{VIEWER} .fsv-expand")
    cp.page.frame_locator(".fillscope-dialog iframe.fsv-frame").locator("section#page-1 svg.macro").wait_for(
        state="visible")
    assert _frame_lang(cp, ".fillscope-dialog iframe.fsv-frame") == "zh"
    dl = cp.page.frame_locator(".fillscope-dialog iframe.fsv-frame")
    assert dl.locator("html[data-lang='zh']").count() == 1 and "上一页" in dl.locator(".pager .prev").inner_text()
    cp.screenshot(SHOTS / "viewer-dialog-zh.png")
    # and back: EN in the dialog switches the sidebar's report too
    dl.locator(".langs button[data-lang='en']").click()
    cp.page.wait_for_function("() => window.FillScope.reportLang() === 'en'")
    fl.locator("html[data-lang='en']").wait_for(state="attached")
    cp.screenshot(SHOTS / "viewer-dialog.png")
    dl.locator(".pager .next").click()
    dl.locator("section#page-2").wait_for(state="visible")  # the report's Next button works too
    dl.locator(".pager [data-goto='5']").click()
    span = dl.locator("section#page-5 span.prompt[data-run='prompt']")
    assert span.inner_text() == XSS
    span.evaluate("e => e.scrollIntoView({block: 'center'})")
    cp.page.wait_for_timeout(200)
    cp.screenshot(SHOTS / "viewer-dialog-page5-prompt.png")
    cp.page.click(".fillscope-dialog .fsv-close")  # (Escape too, while the focus is not inside the report)
    cp.page.wait_for_selector(".fillscope-dialog", state="detached")
    assert _viewer_state(cp)["visible"]  # the sidebar tab stays

    assert cp.dialogs == [], cp.dialogs
    _assert_no_errors(cp)
    print(f"\n[browser] trace run {run_s:.1f}s; viewer test {time.monotonic() - t_start:.1f}s; page 3: {len(page3)} chars")
    RUNS["trace"] = (pid, html_file, json_file)


def test_second_run_and_reload(canvas, workflow):
    """A second run writes new files (the counter advances; the first run's stay); after a page reload the trace
    node shows its summary and button again, and the viewer its newest report (both from /history)."""
    cp = canvas
    if "trace" not in RUNS:
        pytest.skip("needs test_trace_report_in_viewer's run")
    _, first_html, first_json = RUNS["trace"]
    cp.set_widget(TRACE, "prompt", "a second run")
    pid = cp.queue()
    entry = cp.wait_history(pid, timeout=300)
    assert cp.wait_executed(pid) == "success"
    files = entry["outputs"][str(TRACE)]["fillscope_report"]
    html_file = next(f for f in files if f["filename"].endswith(".html"))
    assert html_file["filename"] != first_html["filename"], (first_html, html_file)
    assert next(f for f in files if f["filename"].endswith(".json"))["filename"] != first_json["filename"]
    for f in (first_html, first_json, *files):
        assert cp.page.evaluate("async (f) => (await fetch('/view?' + new URLSearchParams(f))).status", f) == 200, f
    cp.page.wait_for_selector(f"{VIEWER} iframe.fsv-frame[data-filename='{html_file['filename']}'][data-loaded='true']")

    cp.page.reload(wait_until="domcontentloaded")
    cp.wait_ready()
    cp.page.wait_for_function("(id) => { const t = window.FillScope.tableOf(id); return t && t.source === 'restored'; }",
                              arg=TRACE)
    tr = cp.page.evaluate(NODE_JS, TRACE)
    assert tr["buttons"] == 1 and tr["faces"] == 1 and "module rows/hits" in tr["face"], tr
    assert cp.page.evaluate("() => window.FillScope.lastReport") == {**html_file, "type": "output"}
    if cp.page.evaluate("(id) => window.app.extensionManager.sidebarTab.activeSidebarTabId !== id", TAB_ID):
        cp.page.click(f".{TAB_ID}-tab-button")
    cp.page.wait_for_selector(f"{VIEWER} iframe.fsv-frame[data-filename='{html_file['filename']}'][data-loaded='true']")
    st = _viewer_state(cp)
    assert [i["filename"] for i in st["items"]][:2] == [html_file["filename"], first_html["filename"]], st["items"]
    cp.screenshot(SHOTS / "viewer-after-reload.png")
    _assert_no_errors(cp)
