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
import sys

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
# a loader's file input -> ComfyUI's model folders it names a file in (folder_paths' keys): where a file's safetensors
# header is read for the architecture it says it is (modelspec.architecture; ss_base_model_version for a LoRA)
FILE_FOLDERS = (("ckpt_name", ("checkpoints",)), ("vae_name", ("vae",)), ("lora_name", ("loras",)),
                ("clip_name", ("text_encoders", "clip_vision")), ("control_net_name", ("controlnet",)),
                ("unet_name", ("diffusion_models",)), ("style_model_name", ("style_models",)))
HEADER_KEYS = ("modelspec.architecture", "ss_base_model_version")
SOURCE_KEYS = ("name", "ckpt", "file", "folder", "path", "image")  # a loader's inputs that say what it read
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
          "LATENT": ("LATENT", "VAE", "IMAGE"), "IMAGE": ("IMAGE", "LATENT", "VAE"), "CONTROL_NET": ("CONTROL_NET",),
          "CLIP_VISION": ("CLIP_VISION",), "CLIP_VISION_OUTPUT": ("CLIP_VISION_OUTPUT", "CLIP_VISION"),
          "STYLE_MODEL": ("STYLE_MODEL",), "GUIDER": ("MODEL", "CONDITIONING", "CLIP")}


def _node(prompt, node_id: str) -> dict:
    return prompt.get_node(node_id) if hasattr(prompt, "get_node") else prompt[node_id]


def _upstream(prompt, start: str, records: dict, follow=None):
    """(node id, node, [(link source, the link's output type)]) for node `start` and the nodes upstream of it, nearest
    first, through the links whose output type is in `follow` (all where None); at most MAX_CHAIN nodes."""
    seen, todo = set(), [str(start)]
    while todo and len(seen) < MAX_CHAIN:
        nid = todo.pop(0)
        if nid in seen:
            continue
        seen.add(nid)
        try:
            node = _node(prompt, nid)
        except Exception:  # noqa: BLE001 (a node the prompt does not hold: the chain ends there)
            continue
        links = []
        for v in node.get("inputs", {}).values():
            if isinstance(v, list) and len(v) == 2 and isinstance(v[1], int):
                outputs = (records.get(str(v[0])) or {}).get("outputs", [])
                links.append((str(v[0]), outputs[v[1]].get("type") if v[1] < len(outputs) else None))
        yield nid, node, links
        todo.extend(source for source, made in links if follow is None or made in follow)


def _sources(prompt, node_id: str, kind: str, records: dict) -> list[dict]:
    """The nodes a value of type `kind` came from, back to those that read files: the links whose outputs make such
    a value (FOLLOW: a CONDITIONING through CLIPTextEncode to its CLIP, a MODEL through its patches), followed
    upstream; the nodes whose inputs name a file or folder kept, nearest first."""
    found = []
    for nid, node, _ in _upstream(prompt, node_id, records, FOLLOW.get(kind, (kind,))):
        inputs = node.get("inputs", {})
        named = {k: v for k, v in inputs.items() if isinstance(v, str) and any(s in k for s in SOURCE_KEYS)}
        if named:
            found.append({"node": nid, "class_type": node.get("class_type", ""), "inputs": named})
            says = {k: a for k, a in ((k, file_says(k, v)) for k, v in named.items()) if a}
            if says:
                found[-1]["file says"] = says
    return found


def file_says(input_name: str, name: str) -> str | None:
    """The architecture a loader's safetensors file says it is in its header's metadata, where ComfyUI's folders
    (its folder_paths module, present in a server) hold the file; None otherwise. Reads the header only."""
    folder_paths = sys.modules.get("folder_paths")
    folders = next((f for key, f in FILE_FOLDERS if input_name.startswith(key)), ())
    if folder_paths is None or not folders or not name.lower().endswith((".safetensors", ".sft")):
        return None
    try:
        from pathlib import Path

        from ..fillscope.checkpoints.header import read_header

        for folder in folders:
            path = folder_paths.get_full_path(folder, name)
            if path:
                _, metadata = read_header(Path(path), input_name)
                return next((str(metadata[k])[:120] for k in HEADER_KEYS if metadata.get(k)), None)
    except Exception:  # noqa: BLE001 (an unreadable file, a folder ComfyUI does not know: the header says nothing)
        return None
    return None


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


DIMENSIONS = {"LATENT": ("batch", "channels", "height", "width"), "IMAGE": ("batch", "height", "width", "channels"),
              "MASK": ("batch", "height", "width"), "CONDITIONING": ("batch", "tokens", "width")}


def _carriers(inputs: list[dict], number: int) -> list[tuple[dict, str]]:
    """(input, what) for each input carrying `number` as a width: a CONDITIONING's text or pooled width (the pooled
    vector also with what an SDXL model appends to it), the width of a ControlNet applied to it, a CLIP vision
    output's width, a LATENT's channels, or a width fact of a MODEL, VAE or style model (a channel count also as the
    patched width: channels x patch^2)."""
    appended = {inp["facts"].get("adm appends") for inp in inputs if inp["type"] == "MODEL"} - {None}
    hits = []
    for inp in inputs:
        for t in inp["shapes"]:
            shape = t["shape"]
            if len(shape) >= 2 and inp["type"] == "CONDITIONING":
                what = "pooled width" if len(shape) == 2 else "width"
                if shape[-1] == number:
                    hits.append((inp, f"{t['name']} {what} {shape[-1]}"))
                elif len(shape) == 2 and number - shape[-1] in appended:
                    hits.append((inp, f"{t['name']} {what} {shape[-1]} (+{number - shape[-1]} size embeddings)"))
            elif len(shape) >= 2 and inp["type"] == "CLIP_VISION_OUTPUT" and shape[-1] == number:
                hits.append((inp, f"{t['name']} width {number}"))
            elif len(shape) == 4 and shape[1] == number and inp["type"] in ("LATENT",):
                hits.append((inp, f"{t['name']} channels {number}"))
        facts = inp["facts"]
        for key, value in facts.items():
            if inp["type"] == "CONDITIONING" and key.endswith("control context width") and value == number:
                hits.append((inp, f"ControlNet context width {value}"))
        patch = facts.get("patch size") if isinstance(facts.get("patch size"), int) else 1
        for key in ("context width", "model in channels", "latent channels", "latent_channels", "pooled width",
                    "adm width", "image width"):
            value = facts.get(key)
            if isinstance(value, int) and number in (value, value * patch * patch):
                hits.append((inp, f"{key} {value}" + (f" (x{patch * patch} patched)" if number != value else "")))
    return hits


def _tensors_of(inp: dict) -> list[dict]:
    if inp["type"] == "LATENT":
        return [t for t in inp["shapes"] if t["name"] == "samples"]
    if inp["type"] == "CONDITIONING":
        return [t for t in inp["shapes"] if len(t["shape"]) == 3][:1]
    return inp["shapes"][:1] if inp["type"] in DIMENSIONS else []


def _differing(kind: str, numbers: dict, inputs: list[dict]) -> list[dict]:
    """Two inputs of one type whose tensors differ where the message says (cat: in a dimension other than the one
    joined; stack: the two shapes; size match: the dimension named), as culprits: two images of other sizes into a
    batch or composite, two CONDITIONINGs of other widths into a concat."""
    for i, a in enumerate(inputs):
        for b in inputs[i + 1:]:
            if a["type"] != b["type"] or not _tensors_of(a) or not _tensors_of(b):
                continue
            sa, sb = _tensors_of(a)[0]["shape"], _tensors_of(b)[0]["shape"]
            if len(sa) != len(sb):
                continue
            if kind == "stack":
                dims = [d for d in range(len(sa)) if sa[d] != sb[d]] if {tuple(sa), tuple(sb)} == \
                    {tuple(numbers["first"]), tuple(numbers["other"])} else []
            else:
                x, y = (numbers["expected"], numbers["got"]) if kind == "cat" else (numbers["a"], numbers["b"])
                skip = numbers.get("except dimension", -99) % len(sa) if kind == "cat" else None
                named = numbers["dimension"] % len(sa) if kind == "size match" else None
                dims = [d for d in range(len(sa)) if d != skip and (named is None or d == named)
                        and {sa[d], sb[d]} == {x, y}]
            if dims:
                names = DIMENSIONS.get(a["type"], ())
                d = dims[0]
                what = names[d] if d < len(names) else f"dimension {d}"
                return [{**a, "carries": [f"{what} {sa[d]}"], "dimension": what},
                        {**b, "carries": [f"{what} {sb[d]}"], "dimension": what}]
    return []


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


def _width(carries: list[str], what: str) -> int | None:
    """The number after `what` in the first of an input's carries that names it."""
    for c in carries:
        m = re.search(re.escape(what) + r" (\d+)", c)
        if m:
            return int(m.group(1))
    return None


def _link_into(prompt, start: str, kind: str, records: dict) -> tuple[dict, dict] | None:
    """The nearest link of type `kind` upstream of node `start`: ({node, class_type} of the node it goes into,
    {node, class_type, inputs (its file or folder)} of the node it comes from); None if there is none."""
    for nid, node, links in _upstream(prompt, start, records):
        source = next((src for src, made in links if made == kind), None)
        if source is not None:
            files = _sources(prompt, source, kind, records)
            loader = files[0] if files else {"node": source, "class_type": _class_of(prompt, source), "inputs": {}}
            return {"node": nid, "class_type": node.get("class_type", "")}, loader
    return None


def _class_of(prompt, node_id: str) -> str:
    try:
        return str(_node(prompt, node_id).get("class_type", ""))
    except Exception:  # noqa: BLE001
        return ""


def _named(node: dict) -> str:
    files = ", ".join(f"{v}" for v in node.get("inputs", {}).values())
    return f"{node['class_type']} node {node['node']}" + (f", {files}" if files else "")


def _fix_control(culprits: list[dict], prompt, records: dict) -> str | None:
    """A ControlNet applied to a CONDITIONING whose text width is not the MODEL's (an SD1.5 ControlNet on SDXL)."""
    model = next((c for c in culprits if c["type"] == "MODEL"), None)
    cond = next((c for c in culprits if c["type"] == "CONDITIONING" and
                 _width(c["carries"], "ControlNet context width") is not None), None)
    if cond is None:
        return None
    takes = _width(cond["carries"], "ControlNet context width")
    text = next((t["shape"][-1] for t in cond["shapes"] if len(t["shape"]) == 3), None)
    if text is None or text == takes:
        return None
    link = _link_into(prompt, cond["node"], "CONTROL_NET", records)
    where = f" (applied by {_named(link[0])}; loaded by {_named(link[1])})" if link else ""
    family = f"; the MODEL from node {model['node']} is {model['architecture']}" if model else ""
    return (f"the ControlNet on '{cond['input']}'{where} takes {takes}-wide text; the CONDITIONING it is applied "
            f"with is {text} wide{family}: load a ControlNet made for this model's family")


def _fix_style(culprits: list[dict], prompt, records: dict) -> str | None:
    """A CLIP vision output of another width than the style model takes (the wrong CLIP vision for Redux)."""
    style = next((c for c in culprits if c["type"] == "STYLE_MODEL"), None)
    vision = next((c for c in culprits if c["type"] == "CLIP_VISION_OUTPUT"), None)
    if not (style and vision):
        return None
    takes, width = style["facts"].get("image width"), _width(vision["carries"], "width")
    if width is None or width == takes:
        return None
    link = _link_into(prompt, vision["node"], "CLIP_VISION", records)
    source = f" (encoded by the CLIP vision of {_named(link[1])})" if link else ""
    redux = " (FLUX.1 Redux: sigclip_vision_patch14_384)" if "Redux" in str(style["facts"].get("class")) else ""
    return (f"the CLIP_VISION_OUTPUT on '{vision['input']}' from node {vision['node']} is {width} wide{source}; the "
            f"STYLE_MODEL from node {style['node']} takes {takes}-wide image features: encode the image with the CLIP "
            f"vision model this style model was made for{redux}")


def _fix_pair(pair: list[dict]) -> str | None:
    """Two inputs of one type that differ where the message says."""
    if len(pair) != 2:
        return None
    a, b = pair
    what = a["dimension"]
    x, y = _width(a["carries"], what), _width(b["carries"], what)
    head = (f"the {a['type']}s on '{a['input']}' (node {a['node']}) and '{b['input']}' (node {b['node']}) differ in "
            f"{what} ({x} and {y})")
    if a["type"] == "CONDITIONING":
        return head + ": they were encoded by text encoders of different families; encode both with the CLIP of the " \
                      "model they go to"
    if what in ("height", "width"):
        return head + ": bring them to one size first (ImageScale on the images, LatentUpscale on latents)"
    if what == "channels":
        return head + ": they come from different VAEs or families; make both with the same VAE"
    return head + f": make their {what} agree first"


def _fix_text_width(culprits: list[dict], prompt, records: dict) -> str | None:
    """A CONDITIONING whose text or pooled width is not the MODEL's (a CLIP of another family)."""
    cond = next((c for c in culprits if c["type"] == "CONDITIONING"), None)  # positive before negative
    model = next((c for c in culprits if c["type"] == "MODEL"), None)
    if not (cond and model):
        return None
    carried = model["carries"]
    pooled = not any(c.startswith("context width") for c in carried) and \
        any(c.startswith(("pooled width", "adm width")) for c in carried)
    if not pooled and not any(c.startswith("context width") for c in carried):
        return None
    width = next((_width([c], "width") for c in cond["carries"]
                  if ("pooled width" in c) == pooled and "ControlNet" not in c), None)
    takes = model["facts"].get("pooled width" if pooled else "context width")
    if width is None or width == takes:  # equal widths agree: not this mismatch
        return None
    link = _link_into(prompt, cond["node"], "CLIP", records)  # the CLIP it was encoded with, by file where one is named
    where = f" (from {link[1]['class_type']} node {link[1]['node']})" if link else ""
    what = "pooled vector" if pooled else "text"
    return (f"the CONDITIONING on '{cond['input']}' is {width} wide{where}; the MODEL from node {model['node']} "
            f"({model['architecture']}) takes {takes}-wide {what}: encode the prompt with the CLIP that belongs "
            "to this model (a checkpoint's own CLIP, or the text encoders its family needs)")


def _fix_latent_channels(culprits: list[dict]) -> str | None:
    """A LATENT whose channels are not the MODEL's or VAE's (a 4-channel latent into FLUX)."""
    model, latent, vae = (next((c for c in culprits if c["type"] == k), None) for k in ("MODEL", "LATENT", "VAE"))
    other = model or vae
    channels = next((s["shape"][1] for s in (latent or {}).get("shapes", []) if s["name"] == "samples"), None)
    wants = other["facts"].get("latent channels", other["facts"].get("latent_channels")) if other else None
    if not (latent and other) or channels is None or channels == wants:
        return None
    maker = {16: "EmptySD3LatentImage (16 channels: SD3, FLUX.1)", 4: "EmptyLatentImage (4 channels: SD1.5, SDXL)"}
    what = f"the MODEL from node {model['node']} ({model['architecture']})" if model else \
        f"the VAE from node {vae['node']} ({vae['architecture']})"
    tail = f": make the latent with {maker[wants]}" if wants in maker else ""
    return (f"the LATENT on '{latent['input']}' from node {latent['node']} has {channels} channels; {what} works "
            f"on {wants}-channel latents{tail}, or use the {'VAE' if vae else 'model'} of the family that made it")


def _fix(culprits: list[dict], prompt, records: dict) -> str | None:
    """One line for the mismatches known here; None where the culprits do not make one of them."""
    if culprits and "dimension" in culprits[0]:
        return _fix_pair(culprits)
    return (_fix_control(culprits, prompt, records) or _fix_style(culprits, prompt, records)
            or _fix_text_width(culprits, prompt, records) or _fix_latent_channels(culprits))


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
    if kind in ("cat", "stack", "size match"):
        culprits = _differing(kind, numbers, inputs) or culprits
    culprits = _latent_against_model(culprits, inputs)
    fix = _fix(culprits, prompt, records) if culprits else None
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
                  + (f" (the file says {c['source'][0]['file says']})" if c["source"] and "file says" in c["source"][0]
                     else "")
                  for c in explanation["culprits"]]
        return lines
    lines = [head if explanation["kind"] != "unrecognised" else
             f"[FillScope] explain: node {explanation['node']} ({explanation['class_type']}) failed; no known shape "
             "mismatch in its message. What came into it:"]
    for inp in explanation["inputs"]:
        shapes = ", ".join(f"{s['name']} {s['shape']}" for s in inp["shapes"][:4]) or inp["architecture"] or inp["type"]
        lines.append(f"  '{inp['input']}' from node {inp['node']} ({inp['type']}): {shapes}")
    return lines
