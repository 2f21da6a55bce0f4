"""PNG screenshots of a written report, one per page, in headless chromium through playwright. playwright is
imported only when no browser is passed in, so rendering a report never needs it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .schema import PAGE_COUNT


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

