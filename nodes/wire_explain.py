"""A shape failure explained by the wires into the failing node (issue 34, first part).

When a node fails, ComfyUI reports the bare torch message ("mat1 and mat2 shapes cannot be multiplied (154x2048 and
768x320)"). The wire recorder (nodes/wires.py) holds what came into that node: the records of the outputs its inputs
are linked to. `explain(error, prompt, records)` reads the numbers out of the message, finds which inputs carry each
(a tensor's dimension, or a MODEL's / VAE's width as ComfyUI detected it), follows each culprit's links back to the
node that loaded it (and the file names on that node), and, for a mismatch it knows, writes the fix in one line.

Honest when unsure: a message it does not recognise, or numbers no input carries, get the shapes into the failing
node listed and no culprit, no fix. It runs only for a prompt that failed (PromptExecutor's execution_error
message); ComfyUI's own error is reported as it was.

EXPLANATION = {"prompt_id", "node", "class_type", "message", "kind" (matmul, conv channels, size match, cat, stack,
view, state dict, or "unrecognised"), "numbers": {...}, "inputs": [INPUT], "culprits": [CULPRIT], "fix"};
INPUT = {"input", "node", "slot", "type", "shapes": [{"name", "shape"}], "facts": {...}, "architecture", "source":
[{"node", "class_type", "inputs": {name: file or folder}}], "called with": [{"network", "name", "shape"}] (what the
failing node's calls to a MODEL / CLIP / VAE on it got, up to the failure)}; CULPRIT = INPUT's keys plus "carries" (what of it
matches which number of the message).
"""

from __future__ import annotations

import re

MAX_CHAIN = 24  # nodes followed back from a culprit to its loader
PATTERNS = (
    ("matmul", re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")),
    ("conv channels", re.compile(r"expected input\[([\d, ]+)\] to have (\d+) channels, but got (\d+) channels")),
    ("size match", re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at "
                              r"non-singleton dimension (\d+)")),
    ("cat", re.compile(r"Sizes of tensors must match except in dimension (\d+)\. Expected size (\d+) but got size "
                       r"(\d+)")),
    ("stack", re.compile(r"stack expects each tensor to be equal size, but got \[([\d, ]+)\] at entry \d+ and "
                         r"\[([\d, ]+)\] at entry \d+")),
    ("view", re.compile(r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)")),
    ("state dict", re.compile(r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\(\[([\d, ]+)\]\) "
                              r"from checkpoint, the shape in current model is torch\.Size\(\[([\d, ]+)\]\)")),
)
# CLIP classes (comfy/text_encoders, comfy/sd1_clip.py; ComfyUI subclasses them with a trailing "_") and ComfyUI's
# detected model classes (comfy/supported_models.py) by the family a person knows them as
CLIP_FAMILIES = {"SD1ClipModel": "SD1.5", "SD2ClipModel": "SD2", "SDXLClipModel": "SDXL", "SDXLRefinerClipModel":
                 "SDXL refiner", "SD3ClipModel": "SD3", "FluxClipModel": "FLUX.1", "Flux2TEModel": "FLUX.2",
                 "KleinTEModel": "FLUX.2 [klein]", "Qwen3_4BModel": "FLUX.2 [klein] 4B"}
MODEL_FAMILIES = {"SD15": "SD1.5", "SD20": "SD2", "SD21UnclipL": "SD2", "SDXL": "SDXL", "SDXLRefiner": "SDXL refiner",
                  "SD3": "SD3", "Flux": "FLUX.1 dev", "FluxSchnell": "FLUX.1 schnell", "FluxInpaint": "FLUX.1 Fill",
                  "Flux2": "FLUX.2"}
SOURCE_KEYS = ("name", "ckpt", "file", "folder", "path")  # a loader's inputs that say what it read
# the numbers of each message that two sides disagree on (the others, a matmul's rows and out width, say nothing of
# which input is wrong)
MATCHED = {"matmul": ("input width", "layer width"), "conv channels": ("layer channels", "input channels"),
           "size match": ("a", "b"), "cat": ("expected", "got")}


def parse(message: str) -> tuple[str, dict]:
    """(kind, the numbers the message gives) for the shape errors known here; ("unrecognised", {}) otherwise."""
    for kind, pattern in PATTERNS:
        m = pattern.search(message or "")
        if m is None:
            continue
        g = m.groups()
        ints = lambda text: [int(x) for x in text.replace(" ", "").split(",") if x]  # noqa: E731
        if kind == "matmul":
            return kind, {"input width": int(g[1]), "layer width": int(g[2]), "rows": int(g[0]), "out": int(g[3])}
        if kind == "conv channels":
            return kind, {"input shape": ints(g[0]), "layer channels": int(g[1]), "input channels": int(g[2])}
        if kind == "size match":
            return kind, {"a": int(g[0]), "b": int(g[1]), "dimension": int(g[2])}
        if kind == "cat":
            return kind, {"expected": int(g[1]), "got": int(g[2]), "except dimension": int(g[0])}
        if kind == "stack":
            return kind, {"first": ints(g[0]), "other": ints(g[1])}
        if kind == "view":
            return kind, {"shape": ints(g[0]), "size": int(g[1])}
        return kind, {"key": g[0], "checkpoint": ints(g[1]), "model": ints(g[2])}
    return "unrecognised", {}


def _family(facts: dict, kind: str) -> str:
    if kind == "MODEL":
        name = str(facts.get("detected", ""))
        return MODEL_FAMILIES.get(name, name or str(facts.get("class", "")))
    if kind == "CLIP":
        name = str(facts.get("class", "")).rstrip("_")
        return CLIP_FAMILIES.get(name, name)
    return str(facts.get("class", ""))


# what a value of each type is made from: the links followed back from it to the files it was loaded from
FOLLOW = {"CONDITIONING": ("CONDITIONING", "CLIP"), "CLIP": ("CLIP",), "MODEL": ("MODEL",), "VAE": ("VAE",),
          "LATENT": ("LATENT", "VAE"), "IMAGE": ("IMAGE", "LATENT", "VAE"), "CONTROL_NET": ("CONTROL_NET",),
          "CLIP_VISION": ("CLIP_VISION",), "CLIP_VISION_OUTPUT": ("CLIP_VISION_OUTPUT", "CLIP_VISION"),
          "STYLE_MODEL": ("STYLE_MODEL",), "GUIDER": ("MODEL", "CONDITIONING", "CLIP")}


def _node(prompt, node_id: str) -> dict:
    return prompt.get_node(node_id) if hasattr(prompt, "get_node") else prompt[node_id]


def _sources(prompt, node_id: str, kind: str, records: dict) -> list[dict]:
    """The nodes a value of type `kind` came from, back to those that read files: the links whose outputs make such
    a value (FOLLOW: a CONDITIONING through CLIPTextEncode to its CLIP, a MODEL through its patches), followed
    upstream; the nodes whose inputs name a file or folder kept, nearest first."""
    follow = FOLLOW.get(kind, (kind,))
    found, seen, todo = [], set(), [str(node_id)]
    while todo and len(seen) < MAX_CHAIN:
        nid = todo.pop(0)
        if nid in seen:
            continue
        seen.add(nid)
        try:
            inputs = _node(prompt, nid).get("inputs", {})
            class_type = _node(prompt, nid).get("class_type", "")
        except Exception:  # noqa: BLE001 (a node the prompt does not hold: the chain ends there)
            continue
        named = {k: v for k, v in inputs.items() if isinstance(v, str) and any(s in k for s in SOURCE_KEYS)}
        if named:
            found.append({"node": nid, "class_type": class_type, "inputs": named})
        for v in inputs.values():
            if isinstance(v, list) and len(v) == 2:
                outputs = (records.get(str(v[0])) or {}).get("outputs", [])
                made = outputs[int(v[1])].get("type") if int(v[1]) < len(outputs) else None
                if made in follow:
                    todo.append(str(v[0]))
    return found


def describe_inputs(prompt, node_id: str, records: dict) -> list[dict]:
    """What came into node `node_id` on each linked input, from the producing nodes' records."""
    try:
        inputs = _node(prompt, str(node_id))["inputs"]
    except Exception:  # noqa: BLE001
        return []
    out = []
    for name, link in inputs.items():
        if not (isinstance(link, list) and len(link) == 2):
            continue
        source, slot = str(link[0]), int(link[1])
        record = records.get(source)
        outputs = record.get("outputs", []) if record else []
        if slot >= len(outputs):
            out.append({"input": name, "node": source, "slot": slot, "type": "?", "shapes": [], "facts": {},
                        "architecture": "", "source": [], "note": "no record of this output"})
            continue
        output = outputs[slot]
        value = (output.get("values") or [{}])[0]
        facts = value.get("facts", {})
        called = [{"network": c.get("part"), "name": r["name"], "shape": r["shape"]}
                  for c in output.get("calls", []) if str(c.get("consumer")) == str(node_id) for r in c.get("rows", [])]
        out.append({"input": name, "node": source, "slot": slot, "type": output.get("type", "?"),
                    "class_type": record.get("class_type", ""),
                    "shapes": [{"name": t["name"], "shape": t["shape"]} for t in value.get("tensors", [])],
                    "called with": called,  # what the failing node's calls to this MODEL / CLIP / VAE got
                    "facts": facts, "architecture": _family(facts, output.get("type", "")),
                    "source": _sources(prompt, source, output.get("type", ""), records)})
    return out


def _carriers(inputs: list[dict], number: int) -> list[tuple[dict, str]]:
    """(input, what) for each input carrying `number`: a tensor's last or channel dimension, or a width fact (a
    channel count also as the patched width: channels x patch^2)."""
    hits = []
    for inp in inputs:
        for t in inp["shapes"]:
            shape = t["shape"]
            if len(shape) >= 2 and shape[-1] == number and inp["type"] == "CONDITIONING":
                what = "pooled width" if len(shape) == 2 else "width"
                hits.append((inp, f"{t['name']} {what} {number}"))
            elif len(shape) == 4 and shape[1] == number and inp["type"] in ("LATENT",):
                hits.append((inp, f"{t['name']} channels {number}"))
        facts = inp["facts"]
        patch = facts.get("patch size") if isinstance(facts.get("patch size"), int) else 1
        for key in ("context width", "model in channels", "latent channels", "latent_channels", "pooled width"):
            value = facts.get(key)
            if isinstance(value, int) and number in (value, value * patch * patch):
                hits.append((inp, f"{key} {value}" + (f" (x{patch * patch} patched)" if number != value else "")))
    return hits


def _latent_against_model(culprits: list[dict], inputs: list[dict]) -> list[dict]:
    """A MODEL that carries the failing layer's width as its input channels, and a LATENT input whose channels are not
    the model's latent channels (ComfyUI concatenates an inpaint condition to the latent first, so the message's
    numbers are the sums): the LATENT joins the culprits."""
    model = next((c for c in culprits if c["type"] == "MODEL" and any("in channels" in w for w in c["carries"])), None)
    wants = model["facts"].get("latent channels") if model else None
    for inp in inputs:
        channels = [s["shape"][1] for s in inp["shapes"] if s["name"] == "samples" and len(s["shape"]) == 4]
        if inp["type"] == "LATENT" and channels and isinstance(wants, int) and channels[0] != wants and \
                all(c["input"] != inp["input"] for c in culprits):
            culprits.append({**inp, "carries": [f"samples channels {channels[0]} (the model's latents: {wants})"]})
    return culprits


def _fix(kind: str, numbers: dict, culprits: list[dict]) -> str | None:
    """One line for the mismatches known here; None where the culprits do not make one of them."""
    by_type: dict[str, dict] = {}
    for c in culprits:  # the first input of each type (positive before negative)
        by_type.setdefault(c["type"], c)
    cond, model, latent, vae = (by_type.get(k) for k in ("CONDITIONING", "MODEL", "LATENT", "VAE"))
    carried = (model or {}).get("carries", [])
    widths = [w for w in ("context width", "pooled width") if any(c.startswith(w) for c in carried)]
    pooled = bool(widths) and widths[0] == "pooled width"
    width = next((int(c.split()[-1]) for c in (cond or {}).get("carries", []) if ("pooled width" in c) == pooled), None)
    takes = model["facts"].get(widths[0]) if widths else None
    if cond and model and width is not None and width != takes:  # equal widths agree: not this mismatch
        clip = cond["source"][0] if cond["source"] else None
        where = f" (from {clip['class_type']} node {clip['node']})" if clip else ""
        what = "pooled vector" if pooled else "text"
        return (f"the CONDITIONING on '{cond['input']}' is {width} wide{where}; the MODEL from node {model['node']} "
                f"({model['architecture']}) takes {takes}-wide {what}: encode the prompt with the CLIP that belongs "
                "to this model (a checkpoint's own CLIP, or the text encoders its family needs)")
    other = model or vae
    channels = next((s["shape"][1] for s in (latent or {}).get("shapes", []) if s["name"] == "samples"), None)
    wants = other["facts"].get("latent channels", other["facts"].get("latent_channels")) if other else None
    if latent and other and channels is not None and channels != wants:
        maker = {16: "EmptySD3LatentImage (16 channels: SD3, FLUX.1)", 4: "EmptyLatentImage (4 channels: SD1.5, SDXL)"}
        what = f"the MODEL from node {model['node']} ({model['architecture']})" if model else \
            f"the VAE from node {vae['node']} ({vae['architecture']})"
        tail = f": make the latent with {maker[wants]}" if wants in maker else ""
        return (f"the LATENT on '{latent['input']}' from node {latent['node']} has {channels} channels; {what} works "
                f"on {wants}-channel latents{tail}, or use the {'VAE' if vae else 'model'} of the family that made it")
    return None


def explain(error: dict, prompt, records: dict) -> dict:
    """The explanation of ComfyUI's execution_error `error` (its node_id, node_type, exception_message), from the
    prompt (a DynamicPrompt or an API prompt dict) and the prompt's wire records {node id: record}."""
    node_id = str(error.get("node_id", ""))
    message = str(error.get("exception_message", ""))
    kind, numbers = parse(message)
    inputs = describe_inputs(prompt, node_id, records)
    culprits: list[dict] = []
    if kind != "unrecognised":
        wanted = [numbers[k] for k in MATCHED.get(kind, ())]
        for number in wanted:
            for inp, what in _carriers(inputs, number):
                existing = next((c for c in culprits if c["input"] == inp["input"]), None)
                if existing is None:
                    culprits.append({**inp, "carries": [what]})
                elif what not in existing["carries"]:
                    existing["carries"].append(what)
    culprits = _latent_against_model(culprits, inputs)
    fix = _fix(kind, numbers, culprits) if culprits else None
    if fix is None:
        culprits = []  # numbers that some inputs happen to carry, without a known mismatch: no guess
    return {"prompt_id": error.get("prompt_id"), "node": node_id, "class_type": error.get("node_type", ""),
            "message": message, "kind": kind, "numbers": numbers, "inputs": inputs, "culprits": culprits, "fix": fix}


def log_lines(explanation: dict) -> list[str]:
    """A few lines for the server log, after ComfyUI's traceback."""
    head = f"[FillScope] explain: node {explanation['node']} ({explanation['class_type']}) failed on shapes"
    if explanation["fix"]:
        lines = [head + ": " + explanation["fix"]]
        lines += [f"  culprit '{c['input']}' from node {c['node']} ({c['type']}, {c['architecture'] or '?'}): "
                  f"{', '.join(c['carries'])}" + (f"; read from {c['source'][0]['inputs']}" if c["source"] else "")
                  for c in explanation["culprits"]]
        return lines
    lines = [head if explanation["kind"] != "unrecognised" else
             f"[FillScope] explain: node {explanation['node']} ({explanation['class_type']}) failed; no known shape "
             "mismatch in its message. What came into it:"]
    for inp in explanation["inputs"]:
        shapes = ", ".join(f"{s['name']} {s['shape']}" for s in inp["shapes"][:4]) or inp["architecture"] or inp["type"]
        lines.append(f"  '{inp['input']}' from node {inp['node']} ({inp['type']}): {shapes}")
    return lines
