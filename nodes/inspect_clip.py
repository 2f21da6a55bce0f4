"""FillScope Inspect CLIP: hands on a copy of ComfyUI's CLIP (CLIP.clone(), which clones its patcher) whose tokenize and
encode calls are wrapped on that copy's instance only, so the input CLIP and every other user of it record nothing.
The calls happen later (CLIPTextEncode ...): each call's record (token ids per tokenizer, real / special / padding
counts, which tokenizer outputs reached a text encoder and which were dropped, cond and pooled_output shapes) is
delivered by nodes/live.py `publish`; the node's own run records what is static, the encoders the CLIP holds among it
(inspect_calls.CallLog)."""

from __future__ import annotations

import copy
import logging
import time

from comfy_api.latest import io

from ..fillscope.trace.records import dtype_name
from . import common as c
from .inspect_calls import (
    CATEGORY,
    LOGS,
    Call,
    CallLog,
    CallTimer,
    InspectNode,
    call_state,
    calling_node,
    is_tensor,
    logs_of,
    outermost,
    placement_facts,
    short,
    wrap_method,
)

# ---- FillScope Inspect CLIP -------------------------------------------------------------------------------------


def sub_tokenizers(clip) -> dict:
    """{token key ("l", "g", "t5xxl" ...): ComfyUI SDTokenizer} of a CLIP's tokenizer (FluxTokenizer.clip_l ...)."""
    found = {}
    tokenizer = getattr(clip, "tokenizer", None)
    for attr, sub in vars(tokenizer).items() if tokenizer is not None else ():
        if hasattr(sub, "tokenize_with_weights") and hasattr(sub, "max_length"):
            found[attr.removeprefix("clip_")] = sub
    return found


def _tokenizer_of(subs: dict, key: str):
    return subs.get(key) or subs.get(key.removeprefix("clip_"))


def encoder_of(model, key: str):
    """(attribute, module) of the text encoder a tokenizer key ("l", "g", "t5xxl" ...) feeds in ComfyUI's CLIP model
    (SD3ClipModel.clip_g for "g", FluxClipModel.t5xxl ...): module None where the model holds that attribute empty
    (SD3ClipModel built with t5=False keeps t5xxl = None: the tokenizer still makes its tokens, encode drops them);
    (None, None) where no attribute of that name is found (nothing is claimed)."""
    for name in dict.fromkeys((key, f"clip_{key}", key.removeprefix("clip_"))):
        if model is not None and hasattr(model, name) and not callable(getattr(type(model), name, None)):
            value = getattr(model, name)
            if value is None or hasattr(value, "encode_token_weights"):
                return name, value
    return None, None


def encoders(model) -> list[str]:
    """The text encoders ComfyUI's CLIP model holds (its child modules that encode tokens), in its order."""
    children = getattr(model, "named_children", None)
    return [name for name, m in children() if hasattr(m, "encode_token_weights")] if children else []


def describe_tokenizer(sub) -> str:
    parts = [type(sub).__name__, f"max_length {sub.max_length}"]
    if getattr(sub, "pad_to_max_length", False):
        parts.append("padded to max_length")
    if getattr(sub, "min_length", None):
        parts.append(f"min_length {sub.min_length}")
    if getattr(sub, "pad_left", False):
        parts.append("padded on the left")
    return ", ".join(parts)


def _token_id(t):
    tok = t[0] if isinstance(t, (list, tuple)) else t
    return int(tok) if isinstance(tok, int) or (is_tensor(tok) and tok.ndim == 0) else "embedding"


def chunk_counts(ids: list, sub) -> tuple[int, int, int]:
    """(text tokens, special tokens, padding) of one chunk of token ids, read with the tokenizer's start, end and pad
    tokens (ComfyUI pads CLIP with its end token: the first of the trailing run is the end token)."""
    start, end, pad = (getattr(sub, a, None) for a in ("start_token", "end_token", "pad_token"))
    left = bool(getattr(sub, "pad_left", False))
    seq = ids[::-1] if not left else ids
    run = 0
    for t in seq:
        if t != pad:
            break
        run += 1
    special = 0
    if pad is not None and pad == end and run and not left:
        run -= 1  # the end token itself
    body = ids[run:] if left else ids[: len(ids) - run]
    if start is not None and body and body[0] == start:
        special += 1
    if end is not None and body and body[-1] == end and len(body) > special:
        special += 1
    return len(body) - special, special, run


def record_tokens(call: Call, tokens, subs: dict, model=None) -> None:
    """Per tokenizer key: its chunks' shape, text / special / padding counts, the ids without padding, and whether
    they reached a text encoder of `model` (ComfyUI's CLIP model) or were made by the tokenizer and dropped."""
    if not isinstance(tokens, dict):
        call.facts["tokens"] = short(tokens)
        return
    reached, dropped = [], []
    for key in tokens:
        name, encoder = encoder_of(model, key)
        if name is not None and encoder is not None:
            reached.append(f"{key} -> {name}")
        elif name is not None:
            dropped.append(key)
            call.notes.append(f"tokens.{key}: made by the tokenizer, dropped: this CLIP has no {name} encoder")
    if reached:
        call.facts["tokens encoded"] = ", ".join(reached)
    if dropped:
        call.facts["tokens dropped"] = ", ".join(dropped)
    for key, chunks in tokens.items():
        if not isinstance(chunks, (list, tuple)):
            call.facts[f"tokens {key}"] = short(chunks)
            continue
        sub = _tokenizer_of(subs, key)
        ids = [[_token_id(t) for t in chunk] for chunk in chunks]
        longest = max((len(i) for i in ids), default=0)
        row = f"tokens.{key}" if key not in dropped else f"tokens.{key} (dropped: no encoder)"
        call.rows.append((row, [len(ids), longest], "token ids", "cpu", "input"))
        if sub is None:
            call.facts[f"tokens {key}"] = f"{len(ids)} chunk(s) x {longest}"
            call.facts[f"ids {key}"] = short(ids[0] if len(ids) == 1 else [len(i) for i in ids])
            continue
        counts = [chunk_counts(i, sub) for i in ids]
        text, special, padding = (sum(x[n] for x in counts) for n in range(3))
        call.facts[f"tokens {key}"] = (f"{len(ids)} chunk{'s' if len(ids) != 1 else ''} x {longest}: {text} text + "
                                       f"{special} special + {padding} padding")
        kept = [i[: len(i) - c[2]] if not getattr(sub, "pad_left", False) else i[c[2]:] for i, c in zip(ids, counts)]
        shown = kept[0] if len(kept) == 1 else kept
        flat = sum(len(k) for k in kept)
        call.facts[f"ids {key}"] = shown if flat <= 4 * 77 else f"{flat} ids (first: {kept[0][:16]})"
        if len(ids) > 1:
            call.notes.append(f"the {key} prompt is longer than its tokenizer's {sub.max_length} tokens: ComfyUI split it "
                              f"into {len(ids)} chunks of {longest}, encoded one by one and joined (nothing truncated)")


def record_encoded(call: Call, result) -> None:
    """What an encode returned: CONDITIONING entries (scheduled), a tensor, (cond, pooled) or a dict."""
    if isinstance(result, list):
        for i, entry in enumerate(result):
            if isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], dict):
                prefix = "cond" if len(result) == 1 else f"cond[{i}]"
                if is_tensor(entry[0]):
                    call.tensor(prefix, entry[0])
                for key, value in entry[1].items():
                    name = key if len(result) == 1 else f"{prefix}.{key}"
                    if is_tensor(value):
                        call.tensor(name, value)
                    else:
                        call.facts[name] = short(value)
        call.facts["entries"] = len(result)
    elif isinstance(result, dict):
        for key, value in result.items():
            if is_tensor(value):
                call.tensor(key, value)
            else:
                call.facts[key] = short(value)
    elif isinstance(result, tuple):
        for name, value in zip(("cond", "pooled_output", "extra"), result):
            if is_tensor(value):
                call.tensor(name, value)
    elif is_tensor(result):
        call.tensor("cond", result)


def _clip_tokenize(self, method, args, kwargs):
    timer = time.perf_counter()
    result = method(self, *args, **kwargs)
    try:
        text = args[0] if args else kwargs.get("text")
        keys = list(result) if isinstance(result, dict) else []
        pending = vars(self).setdefault("_fillscope_pending", [])
        pending.append({"chars": len(text) if isinstance(text, str) else None, "keys": keys,
                        "seconds": time.perf_counter() - timer})
        del pending[:-8]
    except Exception:
        pass
    return result


def _clip_encode(kind: str):
    def around(self, method, args, kwargs):
        logs = logs_of(self)
        if not logs or not outermost("clip"):
            return method(self, *args, **kwargs)
        call_state.clip = kind
        timer = CallTimer()
        try:
            result = method(self, *args, **kwargs)
        finally:
            call_state.clip = None
        try:
            call = timer.stop()
            call.kind, call.facts["method"] = "encode", kind
            caller = calling_node()
            if caller is not None:
                call.facts["called by node"] = caller
            pending = vars(self).get("_fillscope_pending") or []
            if pending:
                call.facts["prompt characters"] = [p["chars"] for p in pending] if len(pending) > 1 else pending[0]["chars"]
                call.facts["tokenize time"] = f"{sum(p['seconds'] for p in pending) * 1000:.1f} ms"
            vars(self)["_fillscope_pending"] = []
            record_tokens(call, args[0] if args else kwargs.get("tokens"), sub_tokenizers(self),
                          getattr(self, "cond_stage_model", None))
            record_encoded(call, result)
            for log in logs:
                log.add(copy.deepcopy(call))
        except Exception as e:
            logging.warning(f"[FillScope] Inspect CLIP could not record an encode: {type(e).__name__}: {e}")
        return result

    return around


def _clip_clone(self, method, args, kwargs):
    new = method(self, *args, **kwargs)
    install_clip(new, logs_of(self))  # a clone of the inspected CLIP (CLIPSetLastLayer, a LoRA ...) records too
    return new


CLIP_METHODS = {"tokenize": _clip_tokenize, "encode_from_tokens": _clip_encode("encode_from_tokens"),
                "encode_from_tokens_scheduled": _clip_encode("encode_from_tokens_scheduled"), "clone": _clip_clone}


def install_clip(clip, logs: tuple) -> None:
    vars(clip)[LOGS] = tuple(logs)
    for name, around in CLIP_METHODS.items():
        if hasattr(type(clip), name):
            wrap_method(clip, name, around)


def inspected_clip(clip, log: CallLog):
    """A clone of `clip` (its own ModelPatcher clone, the same weights) whose calls report to `log` (and to the logs
    of an Inspect CLIP upstream); `clip` itself is not touched."""
    new = clip.clone()
    install_clip(new, logs_of(new) + (log,))
    return new


def clip_static(clip) -> dict:
    model = getattr(clip, "cond_stage_model", None)
    facts = {"class": type(model).__name__, "CLIP object": type(clip).__name__,
             "tokenizer": type(getattr(clip, "tokenizer", None)).__name__}
    facts["encoders"] = ", ".join(encoders(model)) or "?"
    absent = []
    for key, sub in sub_tokenizers(clip).items():
        facts[f"tokenizer {key}"] = describe_tokenizer(sub)
        name, encoder = encoder_of(model, key)
        if name is not None and encoder is None:
            absent.append(name)
    if absent:
        facts["encoders absent"] = (f"{', '.join(absent)}: the tokenizer makes {'its' if len(absent) == 1 else 'their'}"
                                    f" tokens, each encode drops them")
    facts["layer_idx"] = getattr(clip, "layer_idx", None)
    if getattr(clip, "tokenizer_options", None):
        facts["tokenizer options"] = short([f"{k}={v}" for k, v in clip.tokenizer_options.items()])
    dtypes = getattr(model, "dtypes", None)
    if dtypes:
        facts["dtype"] = ", ".join(sorted({dtype_name(d) for d in dtypes}))
    facts.update(placement_facts(clip, model))
    return facts


class InspectCLIP(InspectNode):
    title = "Inspect CLIP"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeInspectCLIP",
            display_name="Inspect CLIP",
            category=CATEGORY,
            description=("Hands on a clone of the CLIP that records each tokenize / encode a later node makes "
                         "(CLIPTextEncode ...): token ids per tokenizer, real tokens and padding, the hidden states' "
                         "and pooled output's shapes, time. The input CLIP records nothing."),
            inputs=[io.Clip.Input("clip", tooltip="ComfyUI's CLIP (DualCLIPLoader, CLIPLoader, a checkpoint's CLIP); "
                                                   "it is not changed: a clone is handed on.")],
            outputs=[io.Clip.Output("inspected"), c.shapes_output()],
            hidden=[io.Hidden.unique_id],
        )

    @classmethod
    def run(cls, rec, clip):
        note = ("each encode through this CLIP (CLIPTextEncode, CLIPTextEncodeFlux ...) adds its tokens and shapes to "
                "this node's table as it happens")
        return inspected_clip(clip, cls.call_log(rec, clip_static(clip), note))


NODES = [InspectCLIP]
