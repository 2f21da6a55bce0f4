"""The FLUX Fill boundary table (REFERENCE section 1) read off shape records measured in a run."""

from __future__ import annotations

from .records import MEASURED

# (label, tensor name in the records), in pipeline order.
FLUX_FILL_BOUNDARIES = [
    ("CLIP-L pooled (pooler_output)", "clip_l.pooled"),
    ("T5-XXL last hidden state", "t5.hidden"),
    ("VAE encode of masked image (scaled)", "masked_image_latents"),
    ("packed masked-image latents (2x2 patches)", "masked_image_latents.packed"),
    ("pixel mask, 8x8 blocks -> 64 ch, packed 2x2", "mask.packed"),
    ("fill condition = cat(latents 64, mask 256)", "fill_condition"),
    ("transformer input = cat(noisy 64, condition 320)", "transformer.input"),
    ("transformer output (noise prediction, packed)", "transformer.output"),
    ("txt_ids", "txt_ids"),
    ("img_ids", "img_ids"),
    ("unpacked latent for decode", "latent.unpacked"),
    ("decoded image", "decoded_image"),
]


def all_records(documents) -> list[dict]:
    """Every node record in shapes documents (their trails and nodes), each once, in order."""
    seen, out = set(), []
    for doc in documents:
        for rec in list(doc.get("trail", [])) + [doc["node"]]:
            if rec["id"] not in seen:
                seen.add(rec["id"])
                out.append(rec)
    return out


def boundary_rows(documents, boundaries=FLUX_FILL_BOUNDARIES) -> list[dict]:
    """One row per boundary: the last measured tensor of that name (the sampler's ids win over earlier ones)."""
    found: dict[str, tuple[dict, dict]] = {}
    for rec in all_records(documents):
        for t in rec["tensors"]:
            found[t["name"]] = (rec, t)
    rows = []
    for label, name in boundaries:
        if name in found:
            rec, t = found[name]
            rows.append({"boundary": label, "tensor": name, "shape": t["shape"], "dtype": t["dtype"],
                         "provenance": t["provenance"], "device": t["device"], "node": rec["title"]})
        else:
            rows.append({"boundary": label, "tensor": name, "shape": None, "dtype": "", "provenance": "not observed",
                         "device": "", "node": ""})
    return rows


def format_rows(rows) -> str:
    w = max(len(r["boundary"]) for r in rows)
    lines = [f"{'boundary':<{w}}  {'shape':<22} {'dtype':<9} provenance"]
    lines.append("-" * (w + 50))
    for r in rows:
        prov = f"{r['provenance']} on {r['device']}" if r["provenance"] == MEASURED else r["provenance"]
        lines.append(f"{r['boundary']:<{w}}  {str(r['shape']):<22} {r['dtype']:<9} {prov} ({r['node']})")
    return "\n".join(lines)
