"""The boundary tables of each family (FLUX Fill: REFERENCE section 1; SD3 + ControlNet; FLUX.2 [klein]: issue 11's
contract) read off shape records measured in a run."""

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


SD3_CONTROLNET_BOUNDARIES = [
    ("CLIP-L penultimate hidden", "clip_l.penultimate"),
    ("CLIP-L text_embeds", "clip_l.text_embeds"),
    ("OpenCLIP bigG penultimate hidden", "clip_g.penultimate"),
    ("OpenCLIP bigG text_embeds", "clip_g.text_embeds"),
    ("T5-XXL (max_sequence_length 256)", "t5.hidden"),
    ("CLIP-L ++ CLIP-G, zero-padded to 4096", "clip_lg.padded"),
    ("joint context = cat(clip 77, t5 256)", "joint_context"),
    ("pooled = cat(L 768, G 1280)", "pooled"),
    ("noisy latent", "initial_noise"),
    ("inpaint condition = cat(masked latents 16, mask 1)", "inpaint_condition"),
    ("ControlNet residual 0 of 23 (x2 batch under CFG)", "controlnet.residual[0]"),
    ("ControlNet residual 22 of 23", "controlnet.residual[22]"),
    ("transformer output (x2 batch under CFG)", "transformer.output"),
    ("guided velocity", "velocity.guided"),
    ("decoded image", "decoded_image"),
]

KLEIN_BOUNDARIES = [
    ("Qwen3 token ids (chat template, 512)", "qwen3.input_ids"),
    ("Qwen3 states 9/18/27 stacked", "prompt_embeds"),
    ("source latents (2x2 patches, BatchNorm-normalised)", "source_latents"),
    ("reference tokens (source at t=10, + reference image)", "reference_tokens"),
    ("token mask (one value per 16x16 px)", "token_mask"),
    ("noisy latent", "initial_noise"),
    ("transformer input = cat(noisy, reference tokens)", "transformer.input"),
    ("transformer output, kept tokens", "transformer.output.kept"),
    ("txt_ids (t, h, w, l)", "txt_ids"),
    ("img_ids (t, h, w, l)", "img_ids"),
    ("unpacked latent for decode", "latent.unpacked"),
    ("decoded image", "decoded_image"),
]

# The seed trace's shapes (shared/seeds/000, an A100 BF16 run at 1024x1024, batch 1): a static reference to
# compare a measured run against, never a figure FillScope reports as its own.
FLUX_FILL_SEED_1024 = {
    "clip_l.pooled": [1, 768],
    "t5.hidden": [1, 512, 4096],
    "masked_image_latents": [1, 16, 128, 128],
    "masked_image_latents.packed": [1, 4096, 64],
    "mask.packed": [1, 4096, 256],
    "fill_condition": [1, 4096, 320],
    "transformer.input": [1, 4096, 384],
    "transformer.output": [1, 4096, 64],
    "txt_ids": [512, 3],
    "img_ids": [4096, 3],
    "latent.unpacked": [1, 16, 128, 128],
    "decoded_image": [1, 3, 1024, 1024],
}


# Seed 001 (SD3-medium + alimama ControlNet, A100 BF16, 1024x1024, batch 1): the shapes it shows.
SD3_CONTROLNET_SEED_1024 = {
    "clip_l.penultimate": [1, 77, 768],
    "clip_g.penultimate": [1, 77, 1280],
    "t5.hidden": [1, 256, 4096],
    "joint_context": [1, 333, 4096],
    "initial_noise": [1, 16, 128, 128],
    "inpaint_condition": [1, 17, 128, 128],
    "velocity.guided": [1, 16, 128, 128],
    "decoded_image": [1, 3, 1024, 1024],
}


def all_records(documents) -> list[dict]:
    """Every node record in shapes documents (their trails and nodes), each once, in order."""
    seen, out = set(), []
    for doc in documents:
        for rec in list(doc.get("trail", [])) + [doc["node"]]:
            if rec["id"] not in seen:
                seen.add(rec["id"])
                out.append(rec)
    return out


# The boundary tables by the kind a node asks for (its record's "table", set by the node class).
TABLES = {"flux_fill": FLUX_FILL_BOUNDARIES, "sd3_controlnet": SD3_CONTROLNET_BOUNDARIES, "klein": KLEIN_BOUNDARIES}
DEFAULT_TABLE = "flux_fill"


def family_of(documents) -> str | None:
    """The model family whose boundary table the documents' graph asks for: the last record that names one; None
    where none does (records of Inspect nodes on ComfyUI's own values only)."""
    kinds = [rec["table"] for rec in all_records(documents) if rec.get("table") in TABLES]
    return kinds[-1] if kinds else None


def table_kind(documents) -> str:
    """The boundary table of the documents' graph (family_of; flux_fill where no record names one)."""
    return family_of(documents) or DEFAULT_TABLE


def boundaries_for(documents) -> list:
    """The boundary list of the model family the documents' graph ran."""
    return TABLES[table_kind(documents)]


def geometry_of(documents) -> dict | None:
    """The input geometry the graph's mask preparation recorded (the last one), or None."""
    found = [rec["geometry"] for rec in all_records(documents) if rec.get("geometry")]
    return found[-1] if found else None


def size_note(shape, geometry: dict | None) -> str:
    """'padded from WxH' / 'center crop of WxH' for a pixel tensor on a model grid that is not the input's size."""
    if not geometry or geometry.get("mode") not in ("pad", "crop") or not shape or len(shape) < 2:
        return ""
    if list(shape[-2:]) != [geometry["grid_height"], geometry["grid_width"]]:
        return ""
    size = f"{geometry['width']}x{geometry['height']}"
    return f"padded from {size}" if geometry["mode"] == "pad" else f"center crop of {size}"


def boundary_rows(documents, boundaries=None) -> list[dict]:
    """One row per boundary: the last measured tensor of that name (the sampler's ids win over earlier ones).
    A pixel tensor on a padded or cropped grid gets a `size_note` saying so."""
    if boundaries is None and family_of(documents) is None:
        return record_tensor_rows(documents)  # no family in the graph: never tabled against one's boundary list
    boundaries = boundaries or boundaries_for(documents)
    geometry = geometry_of(documents)
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
            note = size_note(t["shape"], geometry)
            if note:
                rows[-1]["size_note"] = note
        else:
            rows.append({"boundary": label, "tensor": name, "shape": None, "dtype": "", "provenance": "not observed",
                         "device": "", "node": ""})
    return rows


def record_tensor_rows(documents) -> list[dict]:
    """One row per tensor of each record, in record order: the table of documents that name no model family."""
    return [{"boundary": t["name"], "tensor": t["name"], "shape": t["shape"], "dtype": t["dtype"],
             "provenance": t["provenance"], "device": t["device"], "node": rec["title"]}
            for rec in all_records(documents) for t in rec["tensors"]]


def seed_shapes(rows) -> tuple[str, dict] | None:
    """(seed name, its shapes) for the family of these rows, when the run is 1024x1024 batch 1."""
    by_name = {r["tensor"]: r["shape"] for r in rows}
    if by_name.get("decoded_image") != [1, 3, 1024, 1024]:
        return None
    if "fill_condition" in by_name:
        return "seed 000", FLUX_FILL_SEED_1024
    if "inpaint_condition" in by_name:
        return "seed 001", SD3_CONTROLNET_SEED_1024
    return None


def compare_with_seed(rows) -> dict | None:
    """At 1024x1024 batch 1: {tensor: True/False} whether each measured shape equals the seed trace's."""
    found = seed_shapes(rows)
    if found is None:
        return None
    by_name = {r["tensor"]: r["shape"] for r in rows}
    return {name: by_name.get(name) == shape for name, shape in found[1].items()}


def crop_line(documents, rows) -> str | None:
    """'4096x3072 photo -> 1024x768 crop, scale 0.25: transformer.input [1, 3072, 384]' when the graph cropped its
    input (a node recorded the fact "crop", e.g. Crop For Inpaint), else None."""
    crops = [rec["facts"]["crop"] for rec in all_records(documents) if "crop" in rec.get("facts", {})]
    if not crops:
        return None
    # the tensor that shows the model's working size: the transformer's input (SD3's ControlNet condition)
    model = next((r for name in ("transformer.input", "inpaint_condition") for r in rows
                  if r["tensor"] == name and r["shape"]), None)
    line = str(crops[-1]).replace("\n", "; ")
    return line + (f": {model['tensor']} {model['shape']}" if model else "")


def format_rows(rows) -> str:
    if not rows:  # records of no family and without a tensor (a loader's shapes): nothing to table
        return "(no tensor recorded)"
    w = max(len(r["boundary"]) for r in rows)
    seed = compare_with_seed(rows)
    seed_name, seed_table = seed_shapes(rows) or ("", {})
    provs = [f"{r['provenance']} on {r['device']} ({r['node']})" if r["provenance"] == MEASURED else r["provenance"]
             for r in rows]
    pw = max(len(p) for p in provs)
    shapes = [str(r["shape"]) + (f" ({r['size_note']})" if r.get("size_note") else "") for r in rows]
    sw = max([22] + [len(s) for s in shapes])
    extra = f"  {seed_name} (static)" if seed else ""
    lines = [f"{'boundary':<{w}}  {'shape':<{sw}} {'dtype':<9} {'provenance':<{pw}}{extra}"]
    lines.append("-" * (w + sw + 12 + pw + len(extra)))
    for r, shape, prov in zip(rows, shapes, provs):
        cmp = ""
        if seed and r["tensor"] in seed:
            cmp = "  same" if seed[r["tensor"]] else f"  DIFFERS: {seed_table[r['tensor']]}"
        lines.append(f"{r['boundary']:<{w}}  {shape:<{sw}} {r['dtype']:<9} {prov:<{pw}}{cmp}")
    if seed:
        lines.append(f"{sum(seed.values())}/{len(seed)} boundaries equal the seed trace's shapes")
    return "\n".join(lines)


# ---- records of native models (the Inspect records a Shapes Report tables beside FillScope's boundaries) --------

# The boundary of a native diffusion model as its Inspect record names the tensors, in the order of one model call:
# (label, tensor name). A record asks for it by its "table" ("native_model"); its rows beyond these (control
# residuals, a later call's own shapes marked "(call n)", list arguments) follow under their own names.
NATIVE_MODEL_BOUNDARIES = [
    ("sampler latent", "x (sampler latent)"),
    ("sigma", "sigma"),
    ("concatenated condition", "c_concat (concatenated to x)"),
    ("diffusion model in", "x (diffusion model in)"),
    ("timestep", "timestep"),
    ("text context", "context"),
    ("pooled vector", "y (pooled)"),
    ("guidance", "guidance"),
    ("diffusion model out", "diffusion model out"),
    ("denoised", "denoised (apply_model out)"),
]
RECORD_TABLES = {"native_model": NATIVE_MODEL_BOUNDARIES}
# the facts of a record shown in its section's head, when it has them
HEAD_FACTS = ("provenance", "diffusion model", "sampled by", "steps seen", "calls per step", "cfg batches", "calls",
              "VAE object", "CLIP object")
ROLE_WORD = {"input": "in", "output": "out"}


def record_rows(node_id: str, record: dict) -> list[dict]:
    """The rows of one node's record (a native model's, CLIP's or VAE's, measured while other nodes called it), in
    the boundary_rows form plus `inspect_node` (the node's id in the graph), `class` (the native class) and `role`:
    the record's table order first (RECORD_TABLES), then its other tensors in record order. Only what was measured
    has a row: a native model that takes no c_concat or guidance simply has none."""
    tensors = [t for t in record.get("tensors", []) if isinstance(t, dict)]
    by_name = {t["name"]: t for t in tensors}
    labels = dict((name, label) for label, name in RECORD_TABLES.get(record.get("table"), []))
    order = [by_name[name] for name in labels if name in by_name]
    order += [t for t in tensors if t["name"] not in labels]
    facts = record.get("facts", {})
    cls = str(facts.get("class", ""))
    node = f"{record.get('title', record.get('node', '?'))} (node {node_id}{', ' + cls if cls else ''})"
    rows = []
    for t in order:
        label = labels.get(t["name"])
        if label is None:
            word = ROLE_WORD.get(t.get("role"))
            label = f"{t['name']} {word}" if word else t["name"]
        elif t["name"] == "x (diffusion model in)" and "c_concat (concatenated to x)" in by_name:
            label += " = cat(x, c_concat)"
        rows.append({"boundary": label, "tensor": t["name"], "shape": t["shape"], "dtype": t["dtype"],
                     "provenance": t["provenance"], "device": t["device"], "node": node,
                     "inspect_node": str(node_id), "class": cls, "role": t.get("role", "")})
        # a recorded call ("decode 1: latent") names the node that made it in its facts ("decode 1: called by node")
        caller = facts.get(t["name"].split(": ", 1)[0] + ": called by node") if ": " in t["name"] else None
        if caller is not None:
            rows[-1]["called_by"] = str(caller)
    return rows


def record_section(node_id: str, record: dict) -> dict:
    """One node's part of a report: its id, title, native class, head facts, warnings, rows and the whole record."""
    facts = record.get("facts", {})
    return {"node": str(node_id), "title": record.get("title", ""), "class": facts.get("class", ""),
            "facts": {k: facts[k] for k in HEAD_FACTS if k in facts}, "warnings": list(record.get("warnings", [])),
            "rows": record_rows(node_id, record), "record": record}


def format_sections(sections) -> str:
    """Text tables of record sections, one block each: the node, its class and head facts, then its rows."""
    blocks = []
    for s in sections:
        head = [f"{s['title']} (node {s['node']})" + (f": {s['class']}" if s["class"] else "")]
        head += [f"  {k}: {v}" for k, v in s["facts"].items()]
        head += [f"  WARNING: {w}" for w in s["warnings"]]
        rows = s["rows"]
        if not rows:
            blocks.append("\n".join(head + ["  (no tensor recorded)"]))
            continue
        w = max(len(r["boundary"]) for r in rows)
        shapes = [str(r["shape"]) for r in rows]
        sw = max([18] + [len(x) for x in shapes])
        provs = [f"{r['provenance']} on {r['device']}" if r["provenance"] == MEASURED else r["provenance"] for r in rows]
        pw = max(len(p) for p in provs)
        callers = any("called_by" in r for r in rows)
        lines = [f"  {'boundary':<{w}}  {'shape':<{sw}} {'dtype':<9} {'provenance':<{pw}}"
                 + ("  called by node" if callers else "")]
        lines.append("  " + "-" * (w + sw + 12 + pw + (16 if callers else 0)))
        lines += [(f"  {r['boundary']:<{w}}  {shape:<{sw}} {r['dtype']:<9} {prov:<{pw}}"
                   + (f"  {r.get('called_by', '')}" if callers else "")).rstrip()
                  for r, shape, prov in zip(rows, shapes, provs)]
        blocks.append("\n".join(head + lines))
    return "\n\n".join(blocks)


WIRE_FACTS = 6  # facts of a MODEL / CLIP / VAE (or a plain value) a wire section's head shows per output


def wire_section(record: dict) -> dict:
    """One node's outputs as the wire recorder (nodes/wires.py) wrote them, as a record_section: a row per tensor of
    each output ("<output>: <path>") and per row of each call a later node made to the MODEL / CLIP / VAE on it
    ("<output> -> <network>: <row>", `called_by` that node); MODEL / CLIP / VAE facts and plain values in the head."""
    node_id, cls = str(record.get("node", "?")), str(record.get("class_type", ""))
    where = f"{cls} (node {node_id})"
    rows, facts = [], {"cached": True} if record.get("cached") else {}

    def row(boundary, t, role, **extra):
        rows.append({"boundary": boundary, "tensor": t["name"], "shape": t["shape"], "dtype": t["dtype"],
                     "provenance": MEASURED, "device": t["device"], "node": where, "inspect_node": node_id,
                     "class": cls, "role": role, **extra})

    for out in record.get("outputs", []):
        name = str(out.get("name") or out.get("type"))
        items = out.get("values", [])
        if out.get("items", len(items)) > 1:
            facts[f"{name} items"] = out["items"]
        for value in items[:1]:
            for t in value.get("tensors", []):
                row(f"{name}: {t['name']}", t, "output")
            if not value.get("tensors"):
                for key, fact in list(value.get("facts", {}).items())[:WIRE_FACTS]:
                    facts[f"{name} {key}" if key != "value" else name] = fact
        for call in out.get("calls", []):
            for r in call.get("rows", []):
                row(f"{name} -> {call.get('part')}: {r['name']}", r, r.get("role", ""), called_by=str(call.get("consumer")))
    return {"node": node_id, "title": cls, "class": "", "facts": facts, "warnings": list(record.get("warnings", [])),
            "rows": rows, "record": record}
