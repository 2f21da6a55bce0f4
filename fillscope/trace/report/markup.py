"""The element builder the whole page is made with: every str child and every attribute value is
HTML-escaped; only `Markup` (HTML this package built itself) passes through, so data reaches the page no other
way."""

from __future__ import annotations

import html
import re


class Markup(str):
    """HTML this package built (never data)."""


def escape(s) -> Markup:
    return Markup(html.escape(str(s), quote=True))


def _render_children(children) -> str:
    out = []
    for ch in children:
        if ch is None or ch is False:
            continue
        if isinstance(ch, Markup):
            out.append(ch)
        elif isinstance(ch, (list, tuple)):
            out.append(_render_children(ch))
        else:
            out.append(escape(ch))
    return "".join(out)


_VOID_TAGS = {"meta", "br", "hr", "img", "input", "link", "rect", "path", "circle", "line", "polygon", "stop"}
_XML_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9:_-]*$")


def el(tag: str, attrs: dict | None = None, *children) -> Markup:
    """<tag attrs>children</tag>. Attribute keys: `class_`/`for_` lose the underscore, other underscores become
    hyphens; None/False values and children are left out, True is a bare attribute; lists nest."""
    assert _XML_NAME.match(tag), tag
    parts = [tag]
    for k, v in (attrs or {}).items():
        if v is None or v is False:
            continue
        name = k.rstrip("_").replace("_", "-") if k not in ("class_", "for_") else k[:-1]
        assert _XML_NAME.match(name), name
        parts.append(name if v is True else f'{name}="{escape(v)}"')
    head = "<" + " ".join(parts)
    if tag in _VOID_TAGS and not children:
        return Markup(head + (" />" if tag in ("rect", "path", "circle", "line", "polygon", "stop") else ">"))
    return Markup(f"{head}>{_render_children(children)}</{tag}>")


def en_zh(en, zh, tag="span") -> Markup:
    """Both languages; CSS shows the current one."""
    return Markup(el(tag, {"class_": "l-en", "lang": "en"}, en) + el(tag, {"class_": "l-zh", "lang": "zh-CN"}, zh))


def en_zh_title(en: str, zh: str) -> dict:
    """A bilingual tooltip: the script swaps `title` with the language."""
    return {"title": en, "data-title-en": en, "data-title-zh": zh}


def json_pointer(*parts) -> str:
    """A JSON pointer (RFC 6901)."""
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)

