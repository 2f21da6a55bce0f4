"""The pack as the Comfy Registry sees it, checked offline and without comfy-cli (tests/test_pack.py runs
`comfy node validate` itself): the declared license and its LICENSE file, [tool.comfy], the icon the Registry shows,
the ComfyUI version the pack claims, and what `comfy node pack` puts in the archive (.comfyignore).

`comfy node pack` (comfy-cli 1.23, comfy_cli/file_utils.zip_files) zips every path `git ls-files` lists, minus the
paths .comfyignore matches: its non-blank lines that do not start with '#', stripped, given to pathspec's
"gitwildmatch" factory and matched against the path relative to the pack root. `_comfyignore_spec` reads the file
the same way; pathspec is comfy-cli's own dependency, which `make setup` installs.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import tomllib
import warnings
import zipfile
from pathlib import Path

from PIL import Image

from comfy_server import comfyui_path

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# sha256 of the Apache License 2.0 from "TERMS AND CONDITIONS FOR USE" to "END OF TERMS AND CONDITIONS", as
# apache.org publishes it (LICENSE-2.0.txt, md5 3b83ef96387f14655fc854ddc3c6bd57); the same figure from the
# verbatim copies that safetensors, huggingface_hub, frozenlist and yarl ship
APACHE_2_TERMS_SHA256 = "243932e1963a57cfc9aee6db62842b6ba89ecd63eee669a0bc80547bc600c34a"

# What ComfyUI needs at run time: the archive must keep every file here ...
RUNTIME = ("__init__.py", "nodes/", "fillscope/", "web/", "example_workflows/", "api_workflows/",
           "requirements.txt", "pyproject.toml", "README.md", "LICENSE", "docs/")
# ... and leave out every file here (development only; docs/report/ holds the README's screenshots and the H200
# trace files, shown from the repository). A file in neither list fails the test: decide where a new folder goes.
DEVELOPMENT = ("tests/", "bench/", ".ci/", "scripts/", "Makefile", "docs/report/")
# the two ignore files are harmless in the archive and say how it was made
PACK_FILES = (".gitignore", ".comfyignore")

# the archive's zip size, bounded so that a large asset committed to a run-time folder is noticed (1.0 MB measured)
ARCHIVE_BUDGET_BYTES = 3 * 1024 * 1024


def _comfyignore_spec():
    from pathspec import PathSpec

    lines = [line.strip() for line in (REPO / ".comfyignore").read_text(encoding="utf-8").splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    with warnings.catch_warnings():
        # pathspec 1.x deprecates "gitwildmatch"; comfy-cli 1.23 still uses it, and the pack is what it matches
        warnings.simplefilter("ignore", DeprecationWarning)
        return PathSpec.from_lines("gitwildmatch", patterns)


def _pack_candidates() -> list[str]:
    # what `git ls-files` will list once the working tree is committed: tracked files plus new files git does not ignore
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=True, timeout=60)
    return sorted({p for p in out.stdout.splitlines() if p and (REPO / p).is_file()})


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in prefixes)


def _bundled_comfyui_version() -> str:
    setup = (REPO / "scripts" / "setup.sh").read_text()
    return re.search(r'^COMFYUI_VERSION="([^"]+)"', setup, re.M).group(1)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_license_file_is_apache_2_with_the_authors_copyright_and_matches_pyproject():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"  # an SPDX id (PEP 639); comfy-cli reads it as the text
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.splitlines()[0] == "Copyright 2026 The FillScope authors"
    assert "Apache License\n                           Version 2.0, January 2004" in text
    start = text.index("TERMS AND CONDITIONS FOR USE")
    end = text.index("END OF TERMS AND CONDITIONS") + len("END OF TERMS AND CONDITIONS")
    assert hashlib.sha256(text[start:end].encode()).hexdigest() == APACHE_2_TERMS_SHA256  # the terms, verbatim


def test_tool_comfy_names_publisher_display_name_icon_and_comfyui_version():
    project, comfy = PYPROJECT["project"], PYPROJECT["tool"]["comfy"]
    assert comfy["PublisherId"] == "fillscope"
    assert comfy["DisplayName"] == "FillScope"
    assert comfy["includes"] == []  # every run-time file is tracked by git, nothing to force in
    assert "web" not in comfy  # would register web/ beside __init__.py's WEB_DIRECTORY (see pyproject.toml)
    # the Registry's node id rules: letters, digits, '-', '_', '.', no two specials in a row, a letter first,
    # under 100 characters, no "ComfyUI" in it
    assert re.fullmatch(r"[A-Za-z](?:[A-Za-z0-9]|[-_.](?=[A-Za-z0-9]))*", project["name"]), project["name"]
    assert len(project["name"]) < 100 and "comfyui" not in project["name"].lower()
    assert re.fullmatch(r"\d+\.\d+\.\d+", project["version"]), project["version"]
    assert project["urls"]["Repository"] == "https://github.com/fillscope/ComfyUI-FillScope"


def test_icon_url_is_this_repository_file_on_main_and_a_small_png_the_registry_takes():
    repository = PYPROJECT["project"]["urls"]["Repository"]
    prefix = repository.replace("https://github.com/", "https://raw.githubusercontent.com/") + "/main/"
    icon_url = PYPROJECT["tool"]["comfy"]["Icon"]
    assert icon_url.startswith(prefix), icon_url
    path = REPO / icon_url.removeprefix(prefix)
    assert path.is_file(), f"{icon_url} names {path}, which does not exist"
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", str(path)], timeout=60).returncode
    assert ignored == 1, f"{path} is git-ignored, so the URL would never resolve"
    with Image.open(path) as image:
        print(f"icon: {path.relative_to(REPO)} {image.format} {image.size[0]}x{image.size[1]}, "
              f"{path.stat().st_size} bytes")
        assert image.format == "PNG"
        assert image.size[0] == image.size[1] and image.size[0] <= 400  # square, within the Registry's 800x400
    assert path.stat().st_size < 20_000


def test_requires_comfyui_is_the_bundled_comfyui_the_tests_run_on():
    bundled = _bundled_comfyui_version()
    assert PYPROJECT["tool"]["comfy"]["requires-comfyui"] == f">={bundled}"
    found = re.search(r'__version__ = "([^"]+)"', (comfyui_path() / "comfyui_version.py").read_text()).group(1)
    print(f"requires-comfyui >={bundled}; the tests run on ComfyUI {found} ({comfyui_path()})")
    if comfyui_path() == REPO / ".comfyui":
        assert found == bundled
    else:  # COMFYUI_PATH: another ComfyUI, inside the declared range
        assert _version_tuple(found) >= _version_tuple(bundled)


def test_comfyignore_keeps_every_runtime_file_and_drops_tests_bench_and_screenshots():
    spec = _comfyignore_spec()
    files = _pack_candidates()
    kept = [p for p in files if not spec.match_file(p)]
    dropped = [p for p in files if spec.match_file(p)]
    assert [p for p in dropped if not _under(p, DEVELOPMENT)] == []  # nothing ComfyUI needs is left out
    assert [p for p in kept if not (_under(p, RUNTIME) and not _under(p, DEVELOPMENT)) and p not in PACK_FILES] == []
    for required in ("__init__.py", "LICENSE", "requirements.txt", "pyproject.toml", "README.md",
                     "api_workflows/fillscope_example.png", "fillscope/trace/report/report.css"):
        assert required in kept, required
    assert {p.split("/")[0] for p in dropped} >= {"tests", "bench", ".ci", "scripts", "docs"}

    # the archive as comfy-cli writes it (ZIP_DEFLATED), in memory
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for p in kept:
            archive.write(REPO / p, p)
    raw = sum((REPO / p).stat().st_size for p in kept)
    print(f"pack: {len(kept)} of {len(files)} files, {raw} bytes, zip {buffer.tell()} bytes; "
          f"left out {len(dropped)} files, {sum((REPO / p).stat().st_size for p in dropped)} bytes")
    assert buffer.tell() < ARCHIVE_BUDGET_BYTES
