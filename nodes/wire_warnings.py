"""Silent mismatches: parts of a graph that fit by shape but not by meaning, found in the wire records of a prompt
that ran (nodes/wires.py calls `silent_mismatches` once, at ComfyUI's execution_success). Nothing fails, so ComfyUI
says nothing; the result is quietly wrong:

- an inpaint condition the MODEL cannot take: InpaintModelConditioning puts the masked image's latent and the mask
  on the CONDITIONING (concat_latent_image, concat_mask); ComfyUI drops them for a model whose input channels are
  only its latent's (comfy.model_base.BaseModel / Flux.concat_cond): FLUX.1 dev, a plain SD1.5 or SDXL checkpoint;
- a VAE of another family with the same latent shape: FLUX.1's VAE in an SD3 graph (16 channels each, other latent
  scale and shift), SD1.5's in an SDXL graph. A VAE object does not say its family: it is taken from the checkpoint
  that gave it (the MODEL beside it) or from its file or folder name, and the warning says which.
- a CONDITIONING whose text width fits no MODEL in the graph (encoded with another family's CLIP and kept, saved or
  sent on without a sampler failing on it).
(A LoRA whose keys ComfyUI could not load is caught while its node runs: wire_calls.NotLoaded.)

Each warning goes onto the record of the node whose output is at fault: {node id: [text]}.
"""

from __future__ import annotations

from .wire_explain import MODEL_FAMILIES, _node

# ComfyUI's detected model classes (comfy/supported_models.py) by the VAE family their latents belong to
VAE_FAMILY_OF_MODEL = {"SD15": "SD1.5", "SD20": "SD1.5", "SD21UnclipL": "SD1.5", "SD21UnclipH": "SD1.5",
                       "SDXL": "SDXL", "SDXLRefiner": "SDXL", "SSD1B": "SDXL", "SD3": "SD3", "Flux": "FLUX.1",
                       "FluxSchnell": "FLUX.1", "FluxInpaint": "FLUX.1", "Flux2": "FLUX.2"}
# what a VAE's file or folder name says of its family, first match wins (the published names: FLUX.1's ae.safetensors,
# SDXL's sdxl_vae, SD1.5's vae-ft-mse-840000-ema-pruned, SD3's in sd3*_medium* folders)
NAME_HINTS = (("flux2", "FLUX.2"), ("flux.2", "FLUX.2"), ("flux", "FLUX.1"),
              ("sd3", "SD3"), ("sdxl", "SDXL"), ("sd_xl", "SDXL"), ("vae-ft-mse", "SD1.5"),
              ("sd15", "SD1.5"), ("sd1.5", "SD1.5"), ("v1-5", "SD1.5"))
WHOLE_NAMES = {"ae.safetensors": "FLUX.1", "ae.sft": "FLUX.1"}  # names too short to look for inside others


def _linked_inputs(prompt, node_id: str, records: dict) -> list[tuple[str, str, int, dict]]:
    """(input name, producer node id, slot, the producer's output record) for each linked input of `node_id`."""
    try:
        inputs = _node(prompt, node_id).get("inputs", {})
    except Exception:  # noqa: BLE001 (a node the prompt does not hold)
        return []
    out = []
    for name, link in inputs.items():
        if isinstance(link, list) and len(link) == 2:
            outputs = (records.get(str(link[0])) or {}).get("outputs", [])
            if isinstance(link[1], int) and link[1] < len(outputs):
                out.append((name, str(link[0]), link[1], outputs[link[1]]))
    return out


def _value(output: dict) -> dict:
    """The summary of an output record's first value (wire_values.summarize)."""
    return (output.get("values") or [{}])[0]


def _facts(output: dict) -> dict:
    return _value(output).get("facts", {})


def _tensor_names(output: dict) -> list[str]:
    return [t["name"] for t in _value(output).get("tensors", [])]


def _inpaint_condition_dropped(prompt, records: dict) -> list[tuple[str, str]]:
    found = []
    for consumer in records:
        linked = _linked_inputs(prompt, consumer, records)
        models = [(n, p, o) for n, p, _, o in linked if o.get("type") == "MODEL"]
        if not models:
            continue
        name, model_node, model = models[0]
        facts = _facts(model)
        takes, latent = facts.get("model in channels"), facts.get("latent channels")
        if not (isinstance(takes, int) and isinstance(latent, int) and takes <= latent):
            continue
        dropped: dict[str, list[str]] = {}  # producer -> the inputs its inpaint condition came in on
        for cond_name, producer, _, output in linked:
            if output.get("type") == "CONDITIONING" and any(n.endswith("concat_latent_image")
                                                             for n in _tensor_names(output)):
                dropped.setdefault(producer, []).append(f"'{cond_name}'")
        for producer, names in dropped.items():
            family = MODEL_FAMILIES.get(str(facts.get("detected")), facts.get("detected", "this model"))
            maker = (records.get(producer) or {}).get("class_type", "")
            found.append((producer, (
                f"inpaint condition dropped: the masked image and mask {maker} node {producer} put on "
                f"{' and '.join(names)} are not used by the MODEL of node {model_node} ({family}, {takes} input "
                f"channels: its latent's {latent} only; ComfyUI's concat_cond drops them): the sampler of node "
                f"{consumer} runs plain masked img2img, as VAEEncode + SetLatentNoiseMask would. For inpainting that "
                "sees the masked image, use an inpaint model (FLUX.1 Fill, an inpainting checkpoint)")))
    return found


def vae_family(record: dict, prompt) -> tuple[str, str] | None:
    """(family, how it was told) of the VAE a node gave: the MODEL ComfyUI detected beside it (a checkpoint), or its
    file or folder name; None where neither tells."""
    for output in record.get("outputs", []):
        detected = _facts(output).get("detected") if output.get("type") == "MODEL" else None
        if detected in VAE_FAMILY_OF_MODEL:
            return VAE_FAMILY_OF_MODEL[detected], f"the checkpoint's MODEL is {detected}"
    try:
        inputs = _node(prompt, record["node"]).get("inputs", {})
    except Exception:  # noqa: BLE001
        return None
    return next((told for value in inputs.values() if isinstance(value, str) and (told := family_by_name(value))), None)


def family_by_name(name: str) -> tuple[str, str] | None:
    """(VAE family, how it was told) from a file or folder name (NAME_HINTS, WHOLE_NAMES); None where it says
    nothing."""
    whole = WHOLE_NAMES.get(name.replace("\\", "/").rsplit("/", 1)[-1].lower())
    if whole:
        return whole, f"its file name '{name}' says so"
    for hint, family in NAME_HINTS:
        if hint in name.lower():
            return family, f"its file or folder name '{name}' says so"
    return None


def _vae_of_another_family(prompt, records: dict) -> list[tuple[str, str]]:
    models = {}  # VAE family -> (node, detected, facts) of the graph's MODELs
    for node_id, record in records.items():
        for output in record.get("outputs", []):
            detected = _facts(output).get("detected") if output.get("type") == "MODEL" else None
            if detected in VAE_FAMILY_OF_MODEL:
                models.setdefault(VAE_FAMILY_OF_MODEL[detected], (node_id, detected, _facts(output)))
    if len(models) != 1:  # no MODEL of a known family, or several families in one graph: nothing to hold it to
        return []
    ((wanted, (model_node, detected, facts)),) = models.items()
    found, seen = [], set()
    for consumer in records:
        for name, producer, slot, output in _linked_inputs(prompt, consumer, records):
            if output.get("type") != "VAE" or producer in seen:
                continue
            seen.add(producer)
            told = vae_family(records.get(producer, {}), prompt)
            channels = _facts(output).get("latent_channels")
            if told is None or told[0] == wanted or channels != facts.get("latent channels"):
                continue  # unknown, the right family, or another latent shape (that one fails loudly)
            scale = facts.get("latent scale")
            shift = facts.get("latent shift")
            numbers = f" (ComfyUI's {detected} latent format: scale {scale}, shift {shift})" if scale else ""
            found.append((producer, (
                f"VAE of another family: this VAE is {told[0]}'s ({told[1]}); the graph's MODEL (node {model_node}) is "
                f"{detected}, whose latents have the same {channels} channels but another scale{numbers}: nothing "
                f"fails, the images come out wrong. Use {wanted}'s VAE")))
    return found


def _conditioning_fits_no_model(records: dict) -> list[tuple[str, str]]:
    widths, known = {}, True  # context width -> a MODEL node taking it
    for node_id, record in records.items():
        for output in record.get("outputs", []):
            if output.get("type") != "MODEL":
                continue
            facts = _facts(output)
            if facts.get("detected") not in MODEL_FAMILIES or not isinstance(facts.get("context width"), int):
                known = False  # a model whose text width is not known here: hold nothing against it
            else:
                widths.setdefault(facts["context width"], (node_id, MODEL_FAMILIES[facts["detected"]]))
    if not widths or not known:
        return []
    found = []
    for node_id, record in records.items():
        for output in record.get("outputs", []):
            text = [t for t in _value(output).get("tensors", [])
                    if output.get("type") == "CONDITIONING" and len(t["shape"]) == 3 and t["name"].endswith("[0]")]
            if text and text[0]["shape"][-1] not in widths:
                models = ", ".join(f"node {n} ({family}) takes {w}" for w, (n, family) in widths.items())
                found.append((node_id, f"CONDITIONING of no model here: it is {text[0]['shape'][-1]} wide; the "
                                       f"graph's MODEL {models}: encode with the CLIP of the model it is for"))
                break
    return found


def silent_mismatches(prompt, records: dict) -> dict[str, list[str]]:
    """{node id: [warning]} for the silent mismatches of a prompt that ran (see the module's text)."""
    out: dict[str, list[str]] = {}
    found = _inpaint_condition_dropped(prompt, records) + _vae_of_another_family(prompt, records) + \
        _conditioning_fits_no_model(records)
    for node_id, text in found:
        if text not in out.setdefault(node_id, []):
            out[node_id].append(text)
    return out
