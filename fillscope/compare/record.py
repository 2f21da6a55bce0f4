"""A comparison's record: the JSON (schema fillscope.compare/1), the boundary table as text, the images (A, B
and the difference heat map) as PNGs and the report page (page.py: HTML, the images embedded), each written whole or
not at all.

The JSON holds both runs' definitions (what each spec said, B completed from A), their seconds and facts (storage,
attention), the comparison (diff.Comparison.as_dict: every boundary with its figures, the first divergence, step and
block, the image figures inside and outside the mask) and the provenance: measured in this run, on this device,
with these versions.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

SCHEMA = "fillscope.compare/1"


def _versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("torch", "diffusers", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def compare_document(comparison, a, b) -> dict:
    """The JSON record of a comparison (a, b: runs.RunResult)."""
    import datetime

    def run(label, r):  # r.spec: the CLI's spec.RunSpec or a node's run definition, each with its summary()
        return {"label": label, **r.spec.summary(), "seconds": round(r.seconds, 3), "facts": r.facts,
                "boundaries": len(r.capture.seen)}

    return {"schema": SCHEMA, "provenance": {
                "measured": "in this run", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"), **_versions()},
            "a": run("A", a), "b": run("B", b), "comparison": comparison.as_dict()}


def write_compare(comparison, a, b, out_dir, name: str = "compare") -> dict:
    """Writes <name>.json, <name>.txt, <name>_a.png, <name>_b.png, <name>_heatmap.png (no images for a shapes-only
    comparison) and <name>.html (page.compare_page: the report page, the images embedded) into out_dir; returns
    {kind: path}."""
    from ..batch.runner import png_bytes, write_atomic
    from .diff import format_table
    from .metrics import difference_heatmap
    from .page import compare_page

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = compare_document(comparison, a, b)
    images = {}
    if not comparison.shapes_only and tuple(a.image.shape) == tuple(b.image.shape):
        heat, scale = difference_heatmap(a.image, b.image, a.mask)
        images = {kind: png_bytes(img[0], {"fillscope_compare": kind})
                  for kind, img in (("a", a.image), ("b", b.image), ("heatmap", heat))}
        doc["comparison"]["image"]["heatmap_scale"] = scale  # before the JSON is written: the page reads it there
    paths = {"json": out / f"{name}.json", "text": out / f"{name}.txt"}
    json_text = json.dumps(doc, indent=1, default=str)
    write_atomic(paths["json"], json_text.encode("utf-8"))
    text = "\n".join([f"A: {a.spec.describe()} ({a.seconds:.2f} s)", f"B: {b.spec.describe()} ({b.seconds:.2f} s)",
                      comparison.headline(), "", format_table(comparison)] + [f"note: {n}" for n in comparison.notes])
    write_atomic(paths["text"], (text + "\n").encode("utf-8"))
    for kind, data in images.items():
        paths[kind] = out / f"{name}_{kind}.png"
        write_atomic(paths[kind], data)
    paths["html"] = out / f"{name}.html"
    write_atomic(paths["html"], compare_page(doc, images, title=name, json_text=json_text,
                                             json_name=paths["json"].name).encode("utf-8"))
    return paths
