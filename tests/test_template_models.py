"""The model files each shipped template declares for ComfyUI's Missing Models dialog (the workflow's top-level `models`
and each node's properties.models, as api_workflows/graphs.py writes them): a Hugging Face download URL whose file
name is the entry's `name` (the name the loader's source reads, and the one the dialog saves the download under),
the one published-under-another-name file excepted by name; the same file from the same URL in every template; and
every file only a gated repository publishes named in the template's read-me note with what to do. No network: the
URLs' evidence (ComfyUI's own templates) is cited next to them in graphs.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workflow_helpers import EXAMPLES, WORKFLOWS  # noqa: E402

sys.path.insert(0, str(WORKFLOWS))
import graphs  # noqa: E402

NAMES = sorted(g.name for g in graphs.GRAPHS)
GATED_WORDS = "gated: accept the licence on Hugging Face and log in before downloading"


def declared(ui: dict) -> list[dict]:
    """Every model entry of a UI workflow: its top-level list and each node's properties.models."""
    return list(ui.get("models", [])) + [m for n in ui["nodes"] for m in n.get("properties", {}).get("models", [])]


def note_text(ui: dict) -> str:
    return "\n".join(str(v) for n in ui["nodes"] if n["type"] in graphs.NOTE_TYPES for v in n["widgets_values"])


@pytest.mark.parametrize("name", NAMES)
def test_each_model_entry_downloads_from_hugging_face_under_its_own_name(name):
    ui = json.loads((EXAMPLES / f"{name}.json").read_text())
    for m in declared(ui):
        url = urlparse(m["url"])
        assert (url.scheme, url.netloc) == ("https", "huggingface.co"), m
        assert "/resolve/" in url.path and not url.query, m  # a direct download, no ?download=true
        file_name = url.path.rsplit("/", 1)[-1]
        assert file_name == m["name"] or m["name"] in graphs.RENAMED, m
        assert m["name"].endswith(".safetensors") and m["directory"], m


@pytest.mark.parametrize("name", NAMES)
def test_every_gated_file_is_named_in_the_templates_note(name):
    """A file whose only copy is gated (graphs.GATED) is in the note with what to do before the download works; a
    template with none says nothing about gating."""
    ui = json.loads((EXAMPLES / f"{name}.json").read_text())
    text = note_text(ui)
    gated = sorted({m["name"] for m in declared(ui) if m["name"] in graphs.GATED})
    for file_name in gated:
        line = next((ln for ln in text.splitlines() if GATED_WORDS in ln), "")
        assert f"`{file_name}`" in line, (file_name, text)
    if not gated:
        assert "gated" not in text, text


def test_a_file_name_has_one_url_in_all_templates():
    """The same file (directory and name) is offered from one URL wherever it is declared, ungated where an ungated
    copy is published: FLUX.1 Fill [dev], its VAE and klein come from Comfy-Org's repackaged files, as ComfyUI's own
    templates have them; only sd3_medium is gated."""
    urls: dict = {}
    for name in NAMES:
        ui = json.loads((EXAMPLES / f"{name}.json").read_text())
        for m in declared(ui):
            urls.setdefault((m["directory"], m["name"]), set()).add(m["url"])
    print({k: sorted(v) for k, v in urls.items()})
    clashes = {k: v for k, v in urls.items() if len(v) > 1}
    # clip_l and t5xxl_fp16 are shared by FLUX (ComfyUI's FLUX Fill template: comfyanonymous/flux_text_encoders) and SD3
    # (ComfyUI's SD3 examples: Comfy-Org/stable-diffusion-3.5-fp8); either copy serves both.
    assert set(clashes) <= {("text_encoders", "clip_l.safetensors"), ("text_encoders", "t5xxl_fp16.safetensors")}, clashes
    hosts = {k: {urlparse(u).path.split("/")[1] for u in v} for k, v in urls.items()}
    assert hosts[("diffusion_models", "flux1-fill-dev.safetensors")] == {"Comfy-Org"}
    assert hosts[("vae", "ae.safetensors")] == {"Comfy-Org"}
    assert hosts[("diffusion_models", "flux-2-klein-4b.safetensors")] == {"Comfy-Org"}
    assert {k[1] for k, v in hosts.items() if "stabilityai" in v or "black-forest-labs" in v} == graphs.GATED
