"""The README and the pages under docs/: every relative link and image points at a file of this repository, the
README stays a page a newcomer reads to the end (at most 200 lines, the details live in docs/), every docs page is
reachable from it, and the test command it shows is the one CI runs."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
README_MAX_LINES = 200

# [text](target) and ![alt](target): the target up to whitespace or the closing parenthesis, an optional "title"
INLINE = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target (reference definitions) and HTML src= / href= (an <img> in a table, say)
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")
CODE_SPAN = re.compile(r"`+[^`]*`+")


def doc_files() -> list[Path]:
    # docs/report/README.md describes the screenshots beside it: held to the same rule
    return [README, *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs").glob("*/README.md"))]


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link and image outside code: a path in backticks or in a fenced block is
    text, not a link."""
    found, fence = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        if fence:
            continue
        text = CODE_SPAN.sub("", line)
        for pattern in (INLINE, REFERENCE, HTML):
            found += [(number, m.group(1)) for m in pattern.finditer(text)]
    return found


def is_external(target: str) -> bool:
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target)) or target.startswith("//")


def github_anchor(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation other than - and _ dropped, spaces to -."""
    text = CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading.strip().lstrip("#").strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, fence = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        elif not fence and re.match(r"^#{1,6}\s", line):
            out.add(github_anchor(line))
    return out


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in links(path):
        if is_external(target):
            continue
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(REPO)}:{number}: {target}"
        if REPO not in resolved.parents and resolved != REPO:
            problems.append(f"{where} leaves the repository")
        elif not resolved.exists():
            problems.append(f"{where} -> {resolved.relative_to(REPO)} does not exist")
        elif fragment and resolved.suffix == ".md" and fragment.lower() not in anchors(resolved):
            problems.append(f"{where}: no heading #{fragment} in {resolved.relative_to(REPO)}")
    return problems


def test_every_relative_link_and_image_in_readme_and_docs_resolves():
    files = doc_files()
    counted = {f.relative_to(REPO).as_posix(): len(links(f)) for f in files}
    print(f"\nlinks checked per file: {counted}")
    assert sum(counted.values()) > 20, counted  # the parser found the README's and the pages' links
    problems = [p for f in files for p in broken_links(f)]
    assert not problems, "links that point nowhere:\n" + "\n".join(problems)


def test_a_missing_file_and_a_missing_heading_are_caught(tmp_path, monkeypatch):
    # the checker itself: a page with a broken image, a broken link, a broken anchor and a link in code
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path.resolve())
    tmp_path = tmp_path.resolve()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# A page\n\n## Its `second` part\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "![pic](missing.png) [ok](there.md#its-second-part) [bad anchor](there.md#nowhere)\n"
        "[gone](../nowhere.md) `[in code](nowhere.md)` [web](https://example.com/x.md)\n"
        "```\n[in a fence](nowhere.md)\n```\n")
    problems = broken_links(page)
    assert len(problems) == 3, problems
    assert "missing.png" in problems[0] and "#nowhere" in problems[1] and "nowhere.md" in problems[2]


def test_readme_is_at_most_200_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    pages = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in sorted((REPO / "docs").glob("*.md"))}
    print(f"\nREADME.md: {len(lines)} lines; docs pages: {pages}")
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, over {README_MAX_LINES}: move the detail to a page under docs/ and link it")


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for _, t in links(README) if not is_external(t)}
    pages = sorted((REPO / "docs").glob("*.md"))
    unlinked = [p.relative_to(REPO).as_posix() for p in pages if p.resolve() not in linked]
    assert pages and not unlinked, f"docs pages the README does not link: {unlinked}"


def test_readme_shows_the_test_command_ci_runs():
    # .ci/run runs `make test`; a newcomer copying the README's command runs what CI runs
    assert re.search(r"^make test(\s|$)", README.read_text(encoding="utf-8"), re.M), "README.md lost `make test`"
    assert re.search(r"^make test\b", (REPO / ".ci" / "run").read_text(encoding="utf-8"), re.M)
