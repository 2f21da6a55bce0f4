"""Every FillScope node's help page in ComfyUI's node-docs panel, served by a real server and opened in ComfyUI's own
frontend (1.32.9) in headless chromium.

How frontend 1.32.9 finds a custom node's help (NodeHelpService in its bundle): a node whose `python_module` is
`custom_nodes.<folder>` gets `/extensions/<folder>/docs/<NodeClass>/<locale>.md` (the locale of the `Comfy.Locale`
setting: `en`, `zh`, ...), and when that answers an error `/extensions/<folder>/docs/<NodeClass>.md`; both are files
of the pack's WEB_DIRECTORY (`web/docs/`). It renders the markdown (marked + DOMPurify) into the node library's help
page, with relative image sources resolved against `/extensions/<folder>/docs/`. A user opens it with the (i)
"info" button of the selection toolbox above a selected node (`useSelectionState().showNodeHelp`: it opens the node
library sidebar tab and `useNodeHelpStore().openHelp`), or with the "?" of a node in the node library.

So the pack ships `web/docs/<NodeClass>.md` (English, the fallback of every locale) and `web/docs/<NodeClass>/zh.md`
(Chinese). In English the frontend first asks for `<NodeClass>/en.md`, which the pack does not ship: that one 404 is
the frontend's own lookup order and is the only error the page may log here.

Needs playwright (Python) and a system chromium (/usr/bin/chromium, env FILLSCOPE_CHROMIUM) for the browser test;
outside CI it is skipped without them, in CI (env CI set) that is a failure. The HTTP test needs only the server.
"""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import ComfyPage, require_browser  # noqa: E402

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "web" / "docs"
CJK = re.compile(r"[\u4e00-\u9fff]")
# The frontend's first try in English (see the module docstring): not shipped, answered 404, then the fallback.
EN_FIRST_TRY = re.compile(r"/extensions/[^/\s]+/docs/FillScope\w+/en\.md")
# Opened in the browser: a sampler, a compositing node and a loader.
BROWSER_NODES = ("FillScopeFluxFillSampler", "FillScopeCropForInpaint", "FillScopeLoadVAE")


def pack_nodes(server) -> dict[str, dict]:
    """The nodes this pack registers, by /object_info: those whose python_module is the pack's custom_nodes folder
    (the one holding FillScopeInspect, whatever the pack's folder is called)."""
    info = server.object_info()
    module = info["FillScopeInspect"]["python_module"]
    return {name: node for name, node in info.items() if node.get("python_module") == module}


def pack_folder(node: dict) -> str:
    """The frontend's extractCustomNodeName: `custom_nodes.<folder>[@version]` -> `<folder>`."""
    parts = node["python_module"].split(".")
    assert len(parts) >= 2 and parts[0] == "custom_nodes", node["python_module"]
    return parts[1].split("@")[0]


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, ""


def input_names(node: dict) -> list[str]:
    return [name for section in ("required", "optional") for name in node["input"].get(section, {})]


def first_paragraph(markdown: str) -> str:
    """The page's first paragraph after the title, as rendered text without markdown marks or whitespace (the panel's
    innerText breaks lines elsewhere)."""
    body = markdown.split("\n", 1)[1].strip()
    para = body.split("\n\n", 1)[0]
    return re.sub(r"\s+", "", para.replace("**", "").replace("`", ""))


def test_every_registered_node_has_an_english_and_a_chinese_page_at_the_url_the_frontend_requests(comfy_server):
    nodes = pack_nodes(comfy_server)
    assert len(nodes) >= 45, sorted(nodes)
    # no page for a node the pack does not register (a renamed or removed node)
    shipped = {p.stem for p in DOCS.glob("*.md")}
    assert shipped == set(nodes), (sorted(shipped - set(nodes)), sorted(set(nodes) - shipped))
    assert {p.parent.name for p in DOCS.glob("*/zh.md")} == set(nodes)
    problems = []
    for name, node in sorted(nodes.items()):
        base = f"{comfy_server.url}/extensions/{pack_folder(node)}/docs/{name}"
        title = "# " + node["display_name"]
        for lang, url in (("en", base + ".md"), ("zh", base + "/zh.md")):
            status, text = fetch(url)
            if status != 200 or not text.strip():
                problems.append(f"{name} {lang}: HTTP {status}, {len(text)} chars at {url}")
                continue
            if text.splitlines()[0] != title:
                problems.append(f"{name} {lang}: title {text.splitlines()[0]!r}, expected {title!r}")
            # the zh page is in Chinese, the English one is not (it may name the report's 中文 switch)
            cjk = len(CJK.findall(text)) / len(text)
            if (lang == "zh") != (cjk > 0.05):
                problems.append(f"{name} {lang}: {cjk:.0%} of the page is Chinese characters")
            # every input the node takes is explained on its page (the names stay as the node shows them)
            missing = [i for i in input_names(node) if i not in text]
            if missing:
                problems.append(f"{name} {lang}: inputs not on the page: {missing}")
    print(f"\n{len(nodes)} nodes: {len(nodes)} English and {len(nodes)} Chinese pages served")
    assert not problems, "\n".join(problems)


def open_help(cp: ComfyPage, node_id: int) -> None:
    """Select the node with a mouse click on its title and press the selection toolbox's (i) button, as a user does
    (wait_help then waits for the page's text)."""
    x, y = cp.page.evaluate(
        """(id) => { const c = window.app.canvas, n = window.app.graph.getNodeById(id);
             const r = c.canvas.getBoundingClientRect();
             const p = c.ds.convertOffsetToCanvas([n.pos[0] + 30, n.pos[1] - 15]);  // on the title bar
             return [r.left + p[0], r.top + p[1]]; }""", node_id)
    cp.page.mouse.click(x, y)
    cp.page.wait_for_function("(id) => Object.keys(window.app.canvas.selected_nodes || {}).map(Number).includes(id)",
                              arg=node_id, timeout=10_000)
    cp.page.locator('[data-testid="info-button"]').first.click()


def node_id(cp: ComfyPage, node_type: str) -> int:
    return cp.page.evaluate("(t) => window.app.graph.nodes.find(n => n.type === t).id", node_type)


def switch_locale(cp: ComfyPage, locale: str) -> None:
    """Set Comfy.Locale as the settings dialog's Language menu does. The frontend then loads that locale's messages,
    refreshes the node definitions and reloads the current workflow (GraphView's watch on the setting): wait for
    the translated interface and for those requests to end before clicking on the canvas again."""
    cp.page.evaluate("async (l) => { await window.app.ui.settings.setSettingValueAsync('Comfy.Locale', l); }", locale)
    if locale == "zh":
        cp.page.wait_for_function("() => /[\\u4e00-\\u9fff]/.test(document.body.innerText)", timeout=20_000)
    cp.page.wait_for_load_state("networkidle")
    cp.page.wait_for_timeout(500)


def wait_help(cp: ComfyPage, text: str) -> str:
    """The help panel's text once it holds `text` (whitespace ignored): the page fetched and rendered."""
    cp.page.wait_for_function(
        """(want) => { const e = document.querySelector('.node-help-content');
             return !!e && e.innerText.replace(/\\s+/g, '').includes(want); }""", arg=text, timeout=20_000)
    return cp.page.locator(".node-help-content").first.inner_text()


def test_the_help_panel_shows_the_node_page_in_english_and_in_chinese(comfy_server):
    require_browser("browser node-docs tests")
    nodes = pack_nodes(comfy_server)
    with ComfyPage(comfy_server.url, settings={"Comfy.Window.UnloadConfirmation": False,
                                               "Comfy.Locale": "en"}) as cp:
        requested = []
        cp.page.on("response", lambda r: "/docs/" in r.url and requested.append((r.url.split("/extensions/", 1)[-1],
                                                                                 r.status)))
        cp.page.evaluate(
            """(types) => { const g = window.app.graph, c = window.app.canvas; g.clear();
                 c.ds.scale = 1; c.ds.offset[0] = 0; c.ds.offset[1] = 0;
                 // right of the sidebar the help panel opens in, one below the other
                 let y = 120;  // each node 90 px below the one above's real height (the crop node is tall)
                 types.forEach((t) => { const n = window.LiteGraph.createNode(t);
                   n.pos = [700, y]; g.add(n); y += n.size[1] + 90; });
                 c.setDirty(true, true); }""", list(BROWSER_NODES))
        try:
            for lang, order in (("en", BROWSER_NODES), ("zh", BROWSER_NODES[:2])):
                if lang == "zh":
                    switch_locale(cp, "zh")
                for name in order:
                    page_md = (DOCS / (f"{name}.md" if lang == "en" else f"{name}/zh.md")).read_text("utf-8")
                    open_help(cp, node_id(cp, name))
                    shown = wait_help(cp, first_paragraph(page_md))
                    assert shown.splitlines()[0].strip() == nodes[name]["display_name"], shown[:200]
                    if lang == "zh":
                        assert CJK.search(shown), shown[:300]
                    # the inputs section of the page is rendered too, not only its head
                    assert ("Inputs" if lang == "en" else "输入") in shown, shown[:300]
                    print(f"\n{lang} {name}: {len(shown)} characters shown")
        finally:  # the session's other browser tests share this server's user settings
            switch_locale(cp, "en")
        folder = pack_folder(nodes[BROWSER_NODES[0]])
        for name in BROWSER_NODES:
            assert (f"{folder}/docs/{name}/en.md", 404) in requested and (f"{folder}/docs/{name}.md", 200) in requested
        for name in BROWSER_NODES[:2]:
            assert (f"{folder}/docs/{name}/zh.md", 200) in requested
        print("requests:", requested)
        errors = [e for e in cp.errors() if not EN_FIRST_TRY.search(e)]
        assert not errors, "page errors:\n" + "\n".join(errors)
