"""FillScope Inspect VAE: hands on a shallow copy of ComfyUI's VAE (sharing its weights and patcher, so ComfyUI loads
and unloads them once) whose encode / decode / encode_tiled / decode_tiled calls, and the tiled fallbacks after an
out-of-memory error, are wrapped on that copy's instance only. Each call's record (shapes in and out, dtype, tiling,
time, the calling node) is delivered by nodes/live.py `publish`; the node's own run records what is static."""

from __future__ import annotations

import copy
import logging

from comfy_api.latest import io

from ..fillscope.trace.records import dtype_name
from . import common as c
from .inspect_calls import (
    CATEGORY,
    LOGS,
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

# ---- FillScope Inspect VAE --------------------------------------------------------------------------------------

VAE_CALLS = {"encode": ("pixels", "latent", False), "decode": ("latent", "image", False),
             "encode_tiled": ("pixels", "latent", True), "decode_tiled": ("latent", "image", True)}
VAE_TILE_HELPERS = ("encode_tiled_", "decode_tiled_", "encode_tiled_1d", "decode_tiled_1d", "encode_tiled_3d",
                    "decode_tiled_3d")  # what encode/decode fall back to after running out of memory


def _vae_call(kind: str):
    src, dst, tiled = VAE_CALLS[kind]

    def around(self, method, args, kwargs):
        logs = logs_of(self)
        if not logs or not outermost("vae"):
            return method(self, *args, **kwargs)
        call_state.vae, call_state.vae_tiles = kind, []
        timer = CallTimer()
        try:
            result = method(self, *args, **kwargs)
        finally:
            tiles, call_state.vae, call_state.vae_tiles = call_state.vae_tiles, None, None
        try:
            given = args[0] if args else next((kwargs[k] for k in ("pixel_samples", "samples", "samples_in") if k in kwargs),
                                              None)
            options = {k: v for k, v in kwargs.items() if k not in ("pixel_samples", "samples", "samples_in")}
            call = timer.stop()
            call.kind, call.facts["method"] = kind.split("_")[0], kind
            caller = calling_node()
            if caller is not None:
                call.facts["called by node"] = caller
            if is_tensor(given):
                call.tensor(src, given, "input")
            if is_tensor(result):
                call.tensor(dst, result, "output")
            if tiled:
                shown = {k: v for k, v in options.items() if v is not None}
                call.facts["tiled"] = "yes" + (f" ({', '.join(f'{k}={v}' for k, v in shown.items())})" if shown else "")
            elif tiles:
                call.facts["tiled"] = f"yes: fell back to {tiles[0]} (out of memory)"
                call.notes.append(f"ran out of memory and fell back to tiles ({tiles[0]})")
            else:
                call.facts["tiled"] = "no"
            for log in logs:
                log.add(copy.deepcopy(call))
        except Exception as e:
            logging.warning(f"[FillScope] Inspect VAE could not record a {kind}: {type(e).__name__}: {e}")
        return result

    return around


def _vae_tile_helper(self, method, args, kwargs):
    tiles = getattr(call_state, "vae_tiles", None)
    if tiles is not None:
        tiles.append(method.__name__)
    return method(self, *args, **kwargs)


def install_vae(vae, logs: tuple) -> None:
    vars(vae)[LOGS] = tuple(logs)
    for name in VAE_CALLS:
        if hasattr(type(vae), name):
            wrap_method(vae, name, _vae_call(name))
    for name in VAE_TILE_HELPERS:
        if hasattr(type(vae), name):
            wrap_method(vae, name, _vae_tile_helper)


def inspected_vae(vae, log: CallLog):
    """A shallow copy of `vae` (the same first_stage_model and ModelPatcher: ComfyUI loads and unloads the one set of
    weights) whose encode/decode calls report to `log` (and to an Inspect VAE's upstream); `vae` is not touched."""
    new = copy.copy(vae)  # a new instance dict; wrappers copied from an inspected input are replaced below
    install_vae(new, logs_of(vae) + (log,))
    return new


def vae_static(vae) -> dict:
    model = getattr(vae, "first_stage_model", None)
    facts = {"class": type(model).__name__, "VAE object": type(vae).__name__}
    for attr in ("latent_channels", "downscale_ratio", "upscale_ratio", "output_channels", "latent_dim"):
        value = getattr(vae, attr, None)
        if isinstance(value, tuple):  # a video VAE's (frames formula, height, width)
            value = ["f(frames)" if callable(v) else v for v in value]
        if value is not None:
            facts[attr] = short(value) if not callable(value) else "f(frames)"
    dtype = getattr(vae, "vae_dtype", None)
    if dtype is not None:
        facts["dtype"] = dtype_name(dtype)
    facts.update(placement_facts(vae, model))
    return facts


class InspectVAE(InspectNode):
    title = "Inspect VAE"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeInspectVAE",
            display_name="Inspect VAE",
            category=CATEGORY,
            description=("Hands on a copy of the VAE that records each encode / decode a later node makes (VAEEncode, "
                         "VAEDecode, the tiled ones ...): input and output shapes, dtype, whether it tiled, time. "
                         "The same weights; the input VAE records nothing."),
            inputs=[io.Vae.Input("vae", tooltip="ComfyUI's VAE (VAELoader, a checkpoint's VAE); it is not changed: a "
                                                 "copy sharing its weights is handed on.")],
            outputs=[io.Vae.Output("inspected"), c.shapes_output()],
            hidden=[io.Hidden.unique_id],
        )

    @classmethod
    def run(cls, rec, vae):
        note = ("each encode / decode through this VAE (VAEEncode, VAEDecode ...) adds its shapes to this node's table "
                "as it happens")
        return inspected_vae(vae, cls.call_log(rec, vae_static(vae), note))


NODES = [InspectVAE]
