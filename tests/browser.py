"""Drive ComfyUI's own frontend (the canvas) in headless chromium through playwright, for tests.

    with ComfyPage(server.url) as cp:          # chromium at /usr/bin/chromium (env FILLSCOPE_CHROMIUM)
        cp.load_workflow(json.load(open("example_workflows/x.json")))
        assert not cp.missing_node_types() and not cp.open_dialogs()
        pid = cp.queue()                        # the canvas' Queue: app.queuePrompt(0, 1)
        cp.wait_history(pid)                    # GET /history/<pid> until finished
        cp.wait_executed(pid)                   # the page got the websocket's execution_success
        assert not cp.errors()                  # page errors + console errors + JS dialogs

What it relies on in ComfyUI's frontend (1.32.x, `comfyui-frontend-package`):
  - `window.comfyAPI.app.app` / `window.app` (the ComfyApp; scripts/app.js re-exports window.comfyAPI.app.app),
    `app.graph` (the LGraph), `app.loadGraphData(workflow)`, `app.queuePrompt(number, batchCount)`
    (graphToPrompt + POST /prompt; its boolean result is unusable: false even on success, since it returns
    `!node_errors` and the server answers `node_errors: {}`; the POST /prompt response is read instead),
    `app.graph.serialize()` (the UI-format workflow as saved);
  - `window.comfyAPI.api.api` (scripts/api.js), an EventTarget with the websocket's events
    (`execution_success`, `execution_error`, `executed`), detail.prompt_id;
  - `window.LiteGraph.registered_node_types` (node types the canvas knows);
  - the new-user check in GraphView: a user without the setting `Comfy.TutorialCompleted` gets the
    Templates dialog; preset it with POST /settings/Comfy.TutorialCompleted before the page loads.
No browser is ever downloaded: Debian's chromium is used (apt-get install chromium).

Two frontends are tested (tests/test_browser_frontends.py): the pinned one (ComfyUI 0.3.75's requirement, 1.32.9, in
.venv) and the newest on PyPI (NEWEST_FRONTEND, pinned in scripts/setup.sh, which unpacks it under
tests/.cache/frontends/; ComfyServer(front_end_root=newest_frontend_root())). What differs in 1.58.1, and how this
helper reads both:
  - its dialogs are reka-ui's (role=dialog, no `.p-dialog` class), and missing nodes / models are no dialog but an
    issues card (`[data-testid=error-overlay]`, role=status): DIALOG_SELECTOR covers all of them;
  - the sidebar's tab buttons carry `data-testid="<tab id>-tab-button"` instead of the class `<tab id>-tab-button`:
    sidebar_tab_button(tab_id) matches either;
  - it reads the queue and history through ComfyUI's Jobs API (GET /api/jobs), which 0.3.75 does not have: the
    404s' console errors are filtered by name (JOBS_API_404_ERRORS), nothing broader;
  - a node without widgets serialises no `widgets_values` (1.32.9: []).
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path

from fillscope.trace.report import chromium_path

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def playwright_available() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


def http_json(url: str, body=None, timeout: float = 30.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"} if body is not None else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


class BrowserError(RuntimeError):
    pass


# Settings preset for the page's user before it loads: no Templates dialog on first start, and nothing else that
# pops up for a new user or reaches the internet.
DEFAULT_SETTINGS = {
    "Comfy.TutorialCompleted": True,  # else: the Templates dialog (GraphView's loadDefaultWorkflow)
    "Comfy.Notification.ShowVersionUpdates": False,
    "Comfy.Minimap.Visible": False,  # screenshots: the minimap covers the canvas' bottom right corner
    # the litegraph canvas unless a test asks for Nodes 2.0: settings are the server's, per user, so a page that turned
    # it on would otherwise leave it on for the next page on the same server (the default is off in 1.32.9 and 1.58.1)
    "Comfy.VueNodes.Enabled": False,
}

VUE_NODES = "Comfy.VueNodes.Enabled"  # the setting behind "Modern Node Design (Nodes 2.0)": DOM nodes, not canvas-drawn

# The app's dialogs, on both frontends: PrimeVue's `.p-dialog` (1.32.9), reka-ui's role=dialog / alertdialog
# (1.58.1), and 1.58.1's issues card, which lists missing nodes and models where 1.32.9 opened a dialog.
DIALOG_SELECTOR = ".p-dialog, [role=dialog], [role=alertdialog], [data-testid='error-overlay']"


# ComfyUI's own templates' thumbnails (frontend: getTemplateThumbnailUrl, `/templates/<name>-<n>.<mediaSubtype>`;
# a custom pack's are /api/workflow_templates/<pack>/<name>.jpg and never match):
# ComfyPage.stub_core_template_thumbnails
CORE_TEMPLATE_THUMBNAILS = re.compile(r"^[^?#]*/templates/[^/?#]+\.webp([?#].*)?$")
TINY_WEBP = base64.b64decode("UklGRh4AAABXRUJQVlA4TBEAAAAvAAAAAAdQwAIWsP+BiOh/AAA=")  # 1x1 grey, lossless


def _tiny_webp(route) -> None:
    route.fulfill(status=200, content_type="image/webp", body=TINY_WEBP)


def sidebar_tab_button(tab_id: str) -> str:
    """The selector of a sidebar tab's button: class `<id>-tab-button` (1.32.9) or data-testid (1.58.1)."""
    return f".{tab_id}-tab-button, [data-testid='{tab_id}-tab-button']"


# ---- the frontends under test -----------------------------------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent
FRONTENDS_CACHE = REPO / "tests" / ".cache" / "frontends"  # scripts/setup.sh unpacks the newest frontend here


def _newest_frontend_pin() -> str:
    """NEWEST_FRONTEND="x.y.z" in scripts/setup.sh: the one place that version is pinned."""
    import re

    m = re.search(r'^NEWEST_FRONTEND="([0-9][0-9A-Za-z.]*)"', (REPO / "scripts" / "setup.sh").read_text(), re.M)
    if not m:
        raise RuntimeError('scripts/setup.sh has no NEWEST_FRONTEND="x.y.z" line (the newest frontend\'s pin)')
    return m.group(1)


NEWEST_FRONTEND = _newest_frontend_pin()


def newest_frontend_root() -> Path | None:
    """tests/.cache/frontends/<NEWEST_FRONTEND>/static when `make setup` unpacked it (its stamp written last), else
    None."""
    folder = FRONTENDS_CACHE / NEWEST_FRONTEND
    root = folder / "static"
    return root if (folder / ".fillscope-frontend").is_file() and (root / "index.html").is_file() else None


def pinned_frontend_version() -> str:
    """The frontend ComfyUI requires (`comfyui-frontend-package==x.y.z` in its requirements.txt; 1.32.9 for 0.3.75):
    the one `make setup` installs into .venv and a server without front_end_root serves."""
    from comfy_server import comfyui_path

    for line in (comfyui_path() / "requirements.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip().replace("_", "-").lower() == "comfyui-frontend-package":
            return version.split(";")[0].strip()
    raise RuntimeError(f"no comfyui-frontend-package pin in {comfyui_path() / 'requirements.txt'}")


FRONTENDS = ("pinned", "newest")  # the frontends the browser tests run on (see the module docstring)


def frontend_ids() -> list[str]:
    """The test ids of FRONTENDS: their versions (the pinned one read from ComfyUI's requirements, "pinned" where
    ComfyUI is not installed: its tests then skip, or fail under CI)."""
    try:
        pinned = pinned_frontend_version()
    except (OSError, RuntimeError):
        pinned = "pinned"
    return [pinned, NEWEST_FRONTEND]


def frontend_server(request, which: str, pinned_fixture: str = "comfy_server"):
    """The server for a test on frontend `which`: the session's fixture `pinned_fixture` (the frontend in .venv), or
    tests/conftest.py's newest_frontend_server (skipped, or failed under CI, when the newest frontend is missing)."""
    return request.getfixturevalue(pinned_fixture if which == "pinned" else "newest_frontend_server")


def require_newest_frontend() -> Path:
    """The newest frontend's static folder; skipped with the reason when `make setup` could not unpack it (a failure
    under CI, tests/conftest.py: a missing frontend never passes CI silently)."""
    import pytest

    root = newest_frontend_root()
    if root is None:
        pytest.skip(f"frontend {NEWEST_FRONTEND} is not unpacked at {FRONTENDS_CACHE / NEWEST_FRONTEND / 'static'}: "
                    f"`make setup` downloads comfyui-frontend-package=={NEWEST_FRONTEND} from PyPI (see its warning)")
    return root

# localStorage preset before any page script runs: the "Nodes 2.0" banner stays closed (TryVueNodeBanner).
LOCAL_STORAGE = {"vueNodesBannerDismissed": "true"}


# Frontend 1.58.1 reads the queue and the history through ComfyUI's Jobs API (GET /api/jobs?status=...&limit=...),
# which ComfyUI 0.3.75 does not serve: every websocket status message (start-up, each queued prompt) makes it log
# these, with a JobsApiError "Failed to fetch jobs: 404" (its fetchJobsRaw; getQueue / the assets store's update).
# The 404 responses themselves (path /api/jobs) are failed resource loads, ignored as every non-extension one is.
# FillScope reads /history and /queue itself (web/fillscope_memory.js), which 0.3.75 serves.
JOBS_API_PATH = "/api/jobs"
JOBS_API_404_ERRORS = (
    "[Jobs API] Error fetching jobs: JobsApiError: Failed to fetch jobs: 404",
    "Failed to fetch queue: JobsApiError: Failed to fetch jobs: 404",
)


def ignorable_console_error(text: str, url: str) -> bool:
    """Console errors that are not the page's doing:
    - failed loads of resources the offline test server does not have (user.css, favicon, empty userdata
      listings, api.comfy.org registry look-ups); a failed load of an extension's file (/extensions/...) counts;
    - frontend 1.32.9's own start-up TypeError: GraphView's useRenderModeSetting sets
      LiteGraph.Canvas.MinFontSizeForLOD (vue 0 / litegraph 8) before that setting is registered, and the
      setting store's onChange reads `.id` of the missing definition. It is logged on every page load, with
      or without custom nodes, whatever the stored value (measured: presetting 0 or 8 does not avoid it);
    - frontend 1.58.1's Jobs API 404s on ComfyUI 0.3.75 (JOBS_API_404_ERRORS: those two messages exactly)."""
    if text.startswith("Failed to load resource"):
        return "/extensions/" not in url
    if text.startswith(JOBS_API_404_ERRORS):
        return True
    return (text.startswith("TypeError: Cannot read properties of undefined (reading 'id')")
            and "at onChange (" in text and "at load (" in text and "/GraphView-" in text)


_SHARED: dict = {}  # {"pw": playwright, "browser": Browser, "executable": path}: one chromium for the test process


def shared_browser(executable: str):
    """One chromium for the whole test process (each page is its own browser context: its own localStorage, cookies
    and cache, as a new browser's): launching chromium costs seconds, and ~20 pages open in a `make test`. Started
    on first use, started again if it died, stopped when the process exits or a test that is not a browser module's
    starts (tests/conftest.py: the report's own renderer starts a sync playwright of its own, and one thread can run
    only one)."""
    import atexit

    from playwright.sync_api import sync_playwright

    browser = _SHARED.get("browser")
    if browser is not None and browser.is_connected() and _SHARED.get("executable") == executable:
        return browser
    stop_shared_browser()
    _SHARED["pw"] = sync_playwright().start()
    _SHARED["browser"] = _SHARED["pw"].chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    _SHARED["executable"] = executable
    if not _SHARED.get("atexit"):
        atexit.register(stop_shared_browser)
        _SHARED["atexit"] = True
    return _SHARED["browser"]


# Idle browser contexts of the shared chromium, by the server URL their last page was on: a page on the same server
# takes one back, so ComfyUI's frontend scripts come from the context's HTTP cache (revalidated: ComfyUI sends them
# no-cache) with V8's code for them, instead of being fetched and compiled again. Measured here (2026-12-07, a quiet
# machine): a page load 10.5 s of CPU (chromium, the server, playwright) in a new context, 6.8 s in a used one. What a
# new context would not carry over, and the page starts without: the origin's localStorage (cleared by the page's
# init script), routes (unrouted here), the pages (closed here); nothing of the frontend's uses cookies or IndexedDB.
_IDLE_CONTEXTS: dict[tuple, list] = {}
_IDLE_CONTEXTS_MAX = 4


def _take_context(browser, key: tuple):
    """A context of `browser` with no page open: an idle one whose last page had `key` (its server URL, the viewport's
    width and height), else a new one with that viewport."""
    idle = _IDLE_CONTEXTS.get(key) or []
    while idle:
        context = idle.pop()
        if context.browser is browser and not context.pages:
            return context
        _close_quietly(context)
    return browser.new_context(viewport={"width": key[1], "height": key[2]})


def _give_back_context(context, page, key: tuple) -> None:
    """`page` closed and its context kept idle for the next page with `key` (at most _IDLE_CONTEXTS_MAX in all; a
    context that fails to clean up is closed)."""
    try:
        if page is not None:
            page.close()
        context.unroute_all(behavior="ignoreErrors")
        for other in list(context.pages):
            other.close()
        if sum(map(len, _IDLE_CONTEXTS.values())) < _IDLE_CONTEXTS_MAX:
            _IDLE_CONTEXTS.setdefault(key, []).append(context)
            return
    except Exception:
        pass
    _close_quietly(context)


def _close_quietly(context) -> None:
    try:
        context.close()
    except Exception:
        pass


def stop_shared_browser() -> None:
    for contexts in _IDLE_CONTEXTS.values():
        for context in contexts:
            _close_quietly(context)
    _IDLE_CONTEXTS.clear()
    for key, meth in (("browser", "close"), ("pw", "stop")):
        obj = _SHARED.pop(key, None)
        if obj is not None:
            try:
                getattr(obj, meth)()
            except Exception:
                pass


class ComfyPage:
    def __init__(self, url: str, *, viewport=(1600, 1000), settings: dict | None = None,
                 executable: str | None = None, timeout_s: float = 60.0):
        """A page in its own browser context of the process's one chromium (shared_browser)."""
        self.url = url.rstrip("/")
        self.viewport = {"width": viewport[0], "height": viewport[1]}
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.executable = executable or chromium_path()
        self.timeout_ms = int(timeout_s * 1000)
        self.page_errors: list[str] = []
        self.console_errors: list[str] = []
        self.ignored_console_errors: list[str] = []  # see ignorable_console_error
        self.http_errors: list[str] = []  # responses >= 400 from the pack's extension files
        self.dialogs: list[str] = []  # JS alert/confirm/prompt dialogs (dismissed)
        self._pw = None
        self.browser = None
        self.context = None
        self.page = None

    # ---- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> "ComfyPage":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "ComfyPage":
        if not self.executable:
            raise BrowserError("chromium not found (apt-get install chromium, or set FILLSCOPE_CHROMIUM)")
        self.preset_settings(self.settings)
        try:
            self.browser = shared_browser(self.executable)
            self._pw = _SHARED["pw"]
            self.context = _take_context(self.browser, self._context_key())
            self.page = self.context.new_page()
            self.page.add_init_script(
                # runs in every frame, sandboxed ones (no storage: SecurityError) included. A context taken from the
                # pool (_take_context) keeps the origin's localStorage of the page before: this page's first
                # document clears it (sessionStorage is the tab's own and outlives a reload, so a reload keeps it)
                "(() => { const kv = %s; try { if (!sessionStorage.getItem('fillscopeTestPage')) {"
                " localStorage.clear(); sessionStorage.setItem('fillscopeTestPage', '1'); }"
                " for (const k in kv) localStorage.setItem(k, kv[k]); } catch (e) {} })()"
                % json.dumps(LOCAL_STORAGE)
            )
            self.page.set_default_timeout(self.timeout_ms)
            self.page.on("pageerror", lambda e: self.page_errors.append(f"{e.name}: {e.message}\n{e.stack or ''}"))
            self.page.on("console", self._on_console)
            self.page.on("dialog", self._on_dialog)
            self.page.on("response", self._on_response)
            self.page.goto(self.url + "/", wait_until="domcontentloaded")
            self.wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def _context_key(self) -> tuple:
        # a context is made with its pages' viewport (a page resized afterwards lays the report dialog out otherwise)
        return self.url, self.viewport["width"], self.viewport["height"]

    def close(self) -> None:
        """Closes this page; its context goes back to the pool for the next page (_give_back_context), the shared
        chromium stays."""
        if self.context is not None:
            _give_back_context(self.context, self.page, self._context_key())
        self.browser = self._pw = self.context = self.page = None

    def _on_console(self, msg) -> None:
        if msg.type == "error":
            loc = msg.location or {}
            line = f"{msg.text} ({loc.get('url', '')}:{loc.get('lineNumber', '')})"
            if ignorable_console_error(msg.text, loc.get("url", "")):
                self.ignored_console_errors.append(line)
            else:
                self.console_errors.append(line)

    def _on_response(self, response) -> None:
        if response.status >= 400 and "/extensions/" in response.url:
            self.http_errors.append(f"HTTP {response.status} {response.url}")

    def _on_dialog(self, dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        try:
            dialog.dismiss()
        except Exception:
            pass

    def errors(self) -> list[str]:
        """Everything that went wrong in the page so far: page errors, console errors, JS dialogs."""
        return ([f"pageerror: {e}" for e in self.page_errors] + [f"console.error: {e}" for e in self.console_errors]
                + [f"dialog: {d}" for d in self.dialogs] + self.http_errors)

    # ---- server side ----------------------------------------------------------------------------
    def preset_settings(self, settings: dict) -> None:
        """POST /settings/<id> for each setting (the server's per-user settings file), before the page loads; and an
        empty /history: a server shared with other test modules may hold a refused prompt with a NaN widget, which
        ComfyUI serialises as bare NaN, and the frontend's own JSON.parse of /history then logs a SyntaxError."""
        http_json(f"{self.url}/history", {"clear": True})
        for key, value in settings.items():
            http_json(f"{self.url}/settings/{urllib.parse.quote(key, safe='')}", value)

    def history(self, prompt_id: str) -> dict:
        return http_json(f"{self.url}/history/{urllib.parse.quote(prompt_id, safe='')}").get(prompt_id, {})

    def wait_history(self, prompt_id: str, timeout: float = 120.0, poll: float = 0.05) -> dict:
        """GET /history/<prompt_id> until the prompt finished; its entry. BrowserError on an execution error."""
        deadline = time.monotonic() + timeout
        while True:
            entry = self.history(prompt_id)
            status = entry.get("status") or {}
            if entry and (status.get("completed") or status.get("status_str") in ("success", "error")):
                if status.get("status_str") == "error":
                    raise BrowserError(f"prompt {prompt_id} failed: {json.dumps(status, indent=1)[:4000]}")
                return entry
            if time.monotonic() > deadline:
                raise TimeoutError(f"prompt {prompt_id} not in /history after {timeout:.0f}s")
            time.sleep(poll)

    def free_cache(self, settle_s: float = 1.0) -> None:
        """POST /free {free_memory, unload_models}: the server drops its cached node outputs, so the next prompt
        executes every node (a cached node whose consumer re-runs is not visited and sends no `executed`).
        The server's worker applies the flag when it next wakes (at once when idle); `settle_s` lets it."""
        http_json(f"{self.url}/free", {"free_memory": True, "unload_models": True})
        time.sleep(settle_s)

    # ---- page ---------------------------------------------------------------------------------
    def wait_ready(self) -> None:
        """Until the app is set up: window.app, app.graph, the canvas, the node definitions and the websocket
        listeners installed by this helper."""
        self.page.wait_for_function(
            "() => window.app && window.app.graph && window.app.canvas && window.LiteGraph"
            " && Object.keys(window.LiteGraph.registered_node_types || {}).length > 0"
            " && window.comfyAPI && window.comfyAPI.api && window.comfyAPI.api.api"
        )
        self.page.evaluate(
            """() => {
              if (window.__fsTest) return;
              window.__fsTest = {done: {}, executed: [], cached: {}};
              const api = window.comfyAPI.api.api;
              api.addEventListener('execution_success', e => { window.__fsTest.done[e.detail.prompt_id] = 'success'; });
              api.addEventListener('execution_error', e => { window.__fsTest.done[e.detail.prompt_id] = 'error'; });
              api.addEventListener('execution_cached', e => { window.__fsTest.cached[e.detail.prompt_id] = e.detail.nodes; });
              api.addEventListener('executed', e => { window.__fsTest.executed.push(String(e.detail.display_node || e.detail.node)); });
            }"""
        )
        self.dismiss_dialogs()

    def open_dialogs(self) -> list[str]:
        """Text of the app's visible dialogs (DIALOG_SELECTOR, outermost only), e.g. Templates or the missing-nodes
        warning (1.58.1: its issues card)."""
        return self.page.evaluate(
            """(sel) => [...document.querySelectorAll(sel)]
                   .filter(d => !(d.parentElement && d.parentElement.closest(sel)))
                   .filter(d => d.offsetParent !== null || d.getClientRects().length)
                   .map(d => (d.innerText || '').trim().slice(0, 500))""", DIALOG_SELECTOR
        )

    def dismiss_dialogs(self, attempts: int = 3) -> None:
        """Close the app's dialogs (Escape, then their close buttons)."""
        for _ in range(attempts):
            if not self.open_dialogs():
                return
            self.page.keyboard.press("Escape")
            self.page.wait_for_timeout(200)
            for btn in self.page.query_selector_all(
                    ".p-dialog .p-dialog-close-button, [role=dialog] button[aria-label='Close dialog'],"
                    " [role=dialog] button[aria-label=Close], [data-testid='error-overlay'] button[aria-label=Close]"):
                try:
                    btn.click(timeout=1000)
                except Exception:
                    pass
            self.page.wait_for_timeout(200)

    def load_workflow(self, workflow: dict, settle_ms: int = 500) -> None:
        """app.loadGraphData(workflow): a UI-format workflow onto the canvas. The app's warning dialogs (missing
        nodes/models) are opened by loadGraphData itself; `settle_ms` lets them render before open_dialogs()."""
        self.page.evaluate("async (wf) => { await window.app.loadGraphData(wf); }", workflow)
        self.page.wait_for_timeout(settle_ms)

    def wait_dialog(self, text: str, timeout: float = 10.0) -> None:
        """Until an app dialog containing `text` is shown."""
        self.page.wait_for_function(
            "([t, sel]) => [...document.querySelectorAll(sel)].some(d => (d.innerText || '').includes(t))",
            arg=[text, DIALOG_SELECTOR], timeout=timeout * 1000)

    def missing_node_types(self) -> list[str]:
        """Types of the graph's nodes that LiteGraph has no registration for."""
        return self.page.evaluate(
            """() => window.app.graph.nodes
                   .map(n => n.type)
                   .filter(t => !(t in window.LiteGraph.registered_node_types))"""
        )

    def serialize(self) -> dict:
        """The workflow as the canvas saves it (app.graph.serialize())."""
        return self.page.evaluate("() => JSON.parse(JSON.stringify(window.app.graph.serialize()))")

    def set_widget(self, node_id: int, name: str, value) -> None:
        ok = self.page.evaluate(
            """([id, name, value]) => {
                 const n = window.app.graph.getNodeById(id);
                 const w = n && n.widgets && n.widgets.find(w => w.name === name);
                 if (!w) return false;
                 w.value = value; w.callback && w.callback(w.value);
                 return true;
               }""",
            [node_id, name, value],
        )
        if not ok:
            raise BrowserError(f"node {node_id} has no widget {name!r}")

    def queue(self, timeout: float = 30.0) -> str:
        """Press Queue: app.queuePrompt(0, 1). Returns the prompt_id from the server's answer to POST /prompt."""
        with self.page.expect_response(
            lambda r: r.request.method == "POST" and urllib.parse.urlparse(r.url).path.endswith("/prompt"),
            timeout=timeout * 1000,
        ) as resp_info:
            ok = self.page.evaluate("async () => await window.app.queuePrompt(0, 1)")
        resp = resp_info.value
        body = resp.json()
        # Not `ok`: 1.32.9's queuePrompt returns !lastNodeErrors, and the server's `node_errors: {}` is truthy.
        if resp.status != 200 or body.get("node_errors") or "prompt_id" not in body:
            raise BrowserError(f"queue failed (HTTP {resp.status}, queuePrompt -> {ok}): {json.dumps(body)[:4000]}")
        return body["prompt_id"]

    def wait_executed(self, prompt_id: str, timeout: float = 60.0) -> str:
        """Until the page's websocket delivered execution_success/error for prompt_id; returns which."""
        self.page.wait_for_function("(pid) => !!window.__fsTest.done[pid]", arg=prompt_id, timeout=timeout * 1000)
        return self.page.evaluate("(pid) => window.__fsTest.done[pid]", prompt_id)

    def executed_nodes(self) -> list[str]:
        """Node ids of every `executed` websocket message so far."""
        return self.page.evaluate("() => window.__fsTest.executed.slice()")

    def cached_nodes(self, prompt_id: str) -> list[str]:
        """Node ids the server took from its cache for prompt_id (websocket `execution_cached`)."""
        return self.page.evaluate("(pid) => window.__fsTest.cached[pid] || []", prompt_id)

    def frontend_version(self) -> str:
        """The frontend's version as the page reports it (window.__COMFYUI_FRONTEND_VERSION__)."""
        return self.page.evaluate("() => window.__COMFYUI_FRONTEND_VERSION__")

    def vue_nodes(self) -> bool:
        """Whether the page draws Nodes 2.0 (setting Comfy.VueNodes.Enabled) rather than the litegraph canvas."""
        return bool(self.page.evaluate("(id) => window.app.ui.settings.getSettingValue(id)", VUE_NODES))

    def open_sidebar_tab(self, tab_id: str) -> None:
        """Click the tab's button in the side toolbar (either frontend's) until the tab is the active one."""
        self.page.click(sidebar_tab_button(tab_id))
        self.page.wait_for_function("(id) => window.app.extensionManager.sidebarTab.activeSidebarTabId === id",
                                    arg=tab_id)

    def extension_names(self) -> list[str]:
        """Names of the frontend extensions registered with app.registerExtension (app.extensions)."""
        return self.page.evaluate("() => window.app.extensions.map(e => e.name)")

    def full_detail(self) -> None:
        """Draw node text at every zoom (setting LiteGraph.Canvas.MinFontSizeForLOD = 0), for screenshots."""
        self.page.evaluate("async () => { await window.app.ui.settings.setSettingValueAsync("
                           "'LiteGraph.Canvas.MinFontSizeForLOD', 0); }")

    def center_on(self, node_id: int, scale: float = 1.0) -> None:
        """Put node `node_id` at the top left of the view at `scale` (for close-up screenshots)."""
        self.page.evaluate(
            """([id, scale]) => { const c = window.app.canvas, n = window.app.graph.getNodeById(id);
                 c.ds.scale = scale; c.ds.offset[0] = 90 / scale - n.pos[0]; c.ds.offset[1] = 140 / scale - n.pos[1];
                 c.setDirty(true, true); }""",
            [node_id, scale],
        )
        self.page.wait_for_timeout(300)

    def fit_view(self) -> None:
        """Zoom the canvas so the whole graph is visible (for screenshots)."""
        self.page.evaluate(
            """() => { const c = window.app.canvas;
                 if (c.ds && c.ds.fitToBounds && window.app.graph.nodes.length) {
                   const ns = window.app.graph.nodes;
                   const x0 = Math.min(...ns.map(n => n.pos[0])), y0 = Math.min(...ns.map(n => n.pos[1] - 40));
                   const x1 = Math.max(...ns.map(n => n.pos[0] + n.size[0])), y1 = Math.max(...ns.map(n => n.pos[1] + n.size[1]));
                   c.ds.fitToBounds([x0, y0, x1 - x0, y1 - y0]);
                 }
                 c.setDirty(true, true); }"""
        )
        self.page.wait_for_timeout(300)

    def zoom_out_to(self, scale: float) -> float:
        """Zoom out about the view's centre to `scale` where the view is closer than that (a whole graph that fits at
        a readable zoom, seen zoomed out); the scale now."""
        now = self.page.evaluate(
            """(s) => { const c = window.app.canvas, r = c.canvas.getBoundingClientRect();
                 if (c.ds.scale > s) c.ds.changeScale(s, [r.width / 2, r.height / 2]);
                 c.setDirty(true, true); return c.ds.scale; }""", scale)
        self.page.wait_for_timeout(300)
        return now

    def stub_core_template_thumbnails(self, on: bool = True) -> None:
        """Answer ComfyUI's own templates' thumbnails with a 1x1 WebP, in this page's context only (`on=False`: from
        the server again).

        The template browser opens on All Templates every time (24 cards a page, ComfyUI 0.3.75's
        comfyui-workflow-templates packages: 186 templates, 80 of their thumbnails over 500 kB, many animated, the
        compare-slider and dissolve cards two each), and each open fetches, decodes and animates them: seconds per
        open on a loaded machine, in a module that opens it once per card. Only those are answered here, by path
        (/templates/<name>-<n>.webp, CORE_TEMPLATE_THUMBNAILS): the template list (/templates/index*.json), the
        templates' JSON and a custom node pack's cards and pictures (/api/workflow_templates/<pack>/...) still come
        from the server. Playwright serves no routed context from the HTTP cache: call it only where the page is
        not reloaded, or a reload fetches every script again; or around the template browser only."""
        if on:
            self.context.route(CORE_TEMPLATE_THUMBNAILS, _tiny_webp)
        else:
            self.context.unroute(CORE_TEMPLATE_THUMBNAILS, _tiny_webp)

    def screenshot(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path))
        return path


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def require_browser(what: str) -> None:
    """Skip (outside CI) or fail (in CI) when playwright or Debian's chromium is missing; no browser is downloaded."""
    import pytest

    missing = []
    if not playwright_available():
        missing.append("the playwright Python package (pip install playwright)")
    if not chromium_path():
        missing.append("chromium (apt-get install chromium, or set FILLSCOPE_CHROMIUM)")
    if missing:
        msg = f"{what} need " + " and ".join(missing) + "; no browser is downloaded"
        if in_ci():
            pytest.fail(msg + " -- required in CI", pytrace=False)
        pytest.skip(msg)
