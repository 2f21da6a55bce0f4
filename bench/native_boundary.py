"""FLUX.1 Fill's transformer boundary, FillScope against ComfyUI's own model, measured on the meta device.

    .venv/bin/python bench/native_boundary.py [--size 1024x1024] [--json OUT]

- FillScope side: the engine's whole FLUX.1 Fill pipeline (`flux_fill.run`, one step) on the production configs on
  the meta device (what `python -m fillscope trace flux-fill --weights meta` runs), with forward hooks on diffusers'
  FluxTransformer2DModel and its x_embedder / context_embedder / time_text_embed / pos_embed / first double block /
  first single block / norm_out / proj_out; the sigma and guidance it passed come from the run's own schedule.
- ComfyUI side: the config as ComfyUI's UNETLoader finds it: the same meta transformer's state dict converted to
  ComfyUI's (BFL) keys by ComfyUI's own `comfy.model_detection.convert_diffusers_mmdit` (UNETLoader's path for a
  diffusers-keyed file; flux1-fill-dev.safetensors has these BFL keys already), then
  `comfy.model_detection.model_config_from_unet` on them (-> comfy.supported_models.FluxInpaint) and its
  `get_model` under `torch.device("meta")`; `apply_model(x, sigma, c_concat, c_crossattn, y, guidance)` on meta
  tensors with hooks on comfy.ldm.flux.model.Flux and its img_in / txt_in / time_in / pe_embedder / double_blocks.0
  / single_blocks.0 / final_layer.
- Small CPU probes with real values where a row claims the two sides compute the same thing from different
  layouts: both sides' parameter-free parts only (2x2 packing and image ids, the timestep sinusoid, velocity ->
  denoised), never a weight.

Every shape, count and difference in the table is measured in the run. Meta tensors carry no values, so this says
nothing about numbers: tests/test_server_native_model.py compares the two models' outputs on tiny real weights.
Runs as a plain script: ComfyUI (.comfyui or COMFYUI_PATH) goes on sys.path; nothing of nodes/ is imported.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _benchlib when imported by a test

from _benchlib import comfyui_version, environment_lines, quiet_libraries, run_main, table  # noqa: E402

PROMPT = "a red brick fireplace"
GUIDANCE = 30.0  # FLUX.1 Fill [dev]'s tuned guidance, the engine's default; passed to both sides


def parse_size(text: str) -> tuple[int, int]:
    """'WxH' -> (width, height), multiples of 16 (FLUX's VAE 8 x patch 2)."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size {text!r}: give WIDTHxHEIGHT, e.g. 1024x1024") from None
    if w <= 0 or h <= 0 or w % 16 or h % 16:
        raise argparse.ArgumentTypeError(f"--size {text!r}: width and height must be positive multiples of 16")
    return w, h


def comfy_modules():
    """ComfyUI's modules, its root appended to sys.path (appended: its top-level nodes.py must not shadow anything
    first), in CPU mode: nothing here needs a GPU and ComfyUI's device probe would refuse a machine without one."""
    from comfy_server import comfyui_path

    root = comfyui_path()
    if not (root / "comfy" / "model_detection.py").is_file():
        raise FileNotFoundError(f"ComfyUI not found at {root} (make setup, or COMFYUI_PATH)")
    if str(root) not in sys.path:
        sys.path.append(str(root))
    import comfy.cli_args

    comfy.cli_args.args.cpu = True
    import comfy.ldm.flux.layers
    import comfy.ldm.modules.attention
    import comfy.model_detection
    import comfy.supported_models
    import comfy.utils

    return comfy


# -- recording ------------------------------------------------------------------------------------------------------


def shape_of(value):
    """A value as shapes: a tensor its shape list, tuples/lists element by element, dicts by key; numbers as they
    are; anything else by type name."""
    import torch

    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, (tuple, list)):
        return [shape_of(v) for v in value]
    if isinstance(value, dict):
        return {k: shape_of(v) for k, v in value.items() if k != "transformer_options"}
    if value is None or isinstance(value, (int, float, bool, str)):
        return value
    return type(value).__name__


class Hooks:
    """Forward pre-hooks and hooks (with kwargs) on named submodules; the first call's inputs and output of each as
    shapes. Always removed (context manager)."""

    def __init__(self, root, names: list[str]):
        self.root, self.names, self.seen, self.handles = root, names, {}, []

    def __enter__(self):
        modules = dict(self.root.named_modules())
        for name in self.names:
            module = modules[name]
            self.handles.append(module.register_forward_pre_hook(self._pre(name), with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post(name), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _pre(self, name):
        def hook(module, args, kwargs):
            if name not in self.seen:
                self.seen[name] = {"args": shape_of(list(args)), "kwargs": shape_of(dict(kwargs)), "out": None,
                                   "dtype": str(next((a.dtype for a in args if hasattr(a, "dtype")), None))}
        return hook

    def _post(self, name):
        def hook(module, args, kwargs, output):
            if self.seen[name]["out"] is None:
                self.seen[name]["out"] = shape_of(output)
        return hook


def arg(rec: dict, index: int, name: str):
    """A hooked call's input by position or keyword (diffusers and ComfyUI pass some of each)."""
    if index < len(rec["args"]):
        return rec["args"][index]
    return rec["kwargs"].get(name)


# -- FillScope -------------------------------------------------------------------------------------------------------

FS_MODULES = ["", "x_embedder", "context_embedder", "time_text_embed", "time_text_embed.timestep_embedder",
              "time_text_embed.guidance_embedder", "pos_embed", "transformer_blocks.0", "single_transformer_blocks.0",
              "norm_out", "proj_out"]


def fillscope_side(width: int, height: int) -> dict:
    """The engine's one-step FLUX.1 Fill run on the meta stack, the transformer hooked."""
    import torch

    from fillscope import masks
    from fillscope.pipelines import flux_fill
    from fillscope.weights import count_parameters
    from tiny_models import comfy_tokenizer_dirs

    t0 = time.perf_counter()
    stack = flux_fill.load_stack("meta", tokenizer_folders=comfy_tokenizer_dirs())
    transformer = stack["transformer"]
    observed = {}
    image = torch.rand(1, height, width, 3)
    mask = torch.zeros(1, height, width)
    mask[:, height // 4: height // 2, width // 4: width // 2] = 1
    prepared = masks.prepare_image_and_mask(image, mask)
    with Hooks(transformer.model, FS_MODULES) as hooks:
        done = flux_fill.run(stack, PROMPT, prepared, steps=1, guidance=GUIDANCE,
                             observe=lambda name, t: observed.setdefault(name, list(t.shape)))
    return {"hooks": hooks.seen, "observed": observed, "info": done.latent.info, "model": transformer.model,
            "config": dict(transformer.config), "parameters": count_parameters(transformer.model)[0],
            "dtype": str(transformer.model.dtype), "device": str(transformer.model.device),
            "seconds": time.perf_counter() - t0}


# -- ComfyUI ---------------------------------------------------------------------------------------------------------

NATIVE_MODULES = ["", "img_in", "txt_in", "time_in", "vector_in", "guidance_in", "pe_embedder", "double_blocks.0",
                  "single_blocks.0", "final_layer"]


def native_config(fs_model) -> dict:
    """ComfyUI's detection on the BFL keys of the production transformer, all on meta (no file, no values)."""
    comfy = comfy_modules()
    from fillscope.checkpoints.flux import flux_info
    from fillscope.checkpoints.shapes import Keys

    diffusers_sd = dict(fs_model.state_dict())
    n_diffusers = len(diffusers_sd)
    bfl = comfy.model_detection.convert_diffusers_mmdit(dict(diffusers_sd), "")  # pops from its argument: a copy
    model_config = comfy.model_detection.model_config_from_unet(bfl, "")
    if model_config is None:
        raise RuntimeError("comfy.model_detection.model_config_from_unet did not recognise the FLUX.1 Fill keys")
    # FillScope's own BFL detector on the same keys: the config it would load a BFL file with
    _, fs_detected, variant, _, _ = flux_info(Keys(bfl), {}, "bfl")
    return {"bfl": bfl, "model_config": model_config, "n_diffusers_keys": n_diffusers,
            "fs_detected": fs_detected, "fs_variant": variant, "weight_dtype": comfy.utils.weight_dtype(bfl)}


def attention_name(comfy) -> str:
    f = comfy.ldm.modules.attention.optimized_attention
    return f"ComfyUI's default for this process ({f.__module__}.{f.__name__})"


def where_failed(exc: BaseException) -> str:
    """The innermost frame of ComfyUI's code in the traceback, and the error."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/comfy/" in f.filename.replace("\\", "/")]
    at = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    short = at.filename.replace("\\", "/").split("/comfy/")[-1]
    return f"comfy/{short}:{at.lineno} {at.name}: {type(exc).__name__}: {exc}"


def native_side(found: dict, fs: dict, width: int, height: int) -> dict:
    """ComfyUI's FluxInpaint model from the detected config, built and called on meta."""
    import torch

    comfy = comfy_modules()
    t0 = time.perf_counter()
    mc = found["model_config"]
    # UNETLoader: the inference dtype from the weights' dtype (model_management.unet_dtype would pick fp32 on a CPU;
    # the table compares the production model, which a bf16-capable GPU runs in the file's bf16)
    mc.set_inference_dtype(found["weight_dtype"], None)
    with torch.device("meta"):
        model = mc.get_model(found["bfl"], "")
    dm = model.diffusion_model
    model_sd = dm.state_dict()
    keys_equal = set(model_sd) == set(found["bfl"])
    shapes_equal = keys_equal and all(tuple(model_sd[k].shape) == tuple(v.shape) for k, v in found["bfl"].items())

    uc = mc.unet_config
    lh, lw = height // 8, width // 8  # latent grid: ComfyUI's own LATENT is [B,16,H/8,W/8]
    latent_channels = uc["out_channels"]
    concat_channels = uc["in_channels"] - latent_channels
    text_len = fs["observed"]["t5.hidden"][1]
    sigma_value = float(fs["info"]["sigma_start"])
    meta = dict(device="meta", dtype=model.get_dtype())
    x = torch.empty(1, latent_channels, lh, lw, **meta)
    c_concat = torch.empty(1, concat_channels, lh, lw, **meta)
    context = torch.empty(1, text_len, uc["context_in_dim"], **meta)
    pooled = torch.empty(1, uc["vec_in_dim"], **meta)
    sigma = torch.full([1], sigma_value, device="meta")
    guidance = torch.full([1], GUIDANCE, device="meta")
    call = {"x": list(x.shape), "sigma": list(sigma.shape), "c_concat": list(c_concat.shape),
            "c_crossattn": list(context.shape), "y": list(pooled.shape), "guidance": list(guidance.shape)}
    attention, default_failed = attention_name(comfy), None
    try:
        with Hooks(dm, NATIVE_MODULES) as hooks:
            denoised = model.apply_model(x, sigma, c_concat=c_concat, c_crossattn=context, y=pooled,
                                         guidance=guidance)
    except Exception as exc:  # noqa: BLE001 -- where ComfyUI's default path fails on meta is itself a result
        default_failed = where_failed(exc)
        # ComfyUI's own per-call override (transformer_options["optimized_attention_override"], as attention
        # nodes use it) with its registered "pytorch" attention: torch SDPA, ComfyUI's choice on an NVIDIA GPU
        sdpa = comfy.ldm.modules.attention.get_attention_function("pytorch")
        options = {"optimized_attention_override": lambda func, *args, **kwargs: sdpa(*args, **kwargs)}
        attention = f"registered 'pytorch' ({sdpa.__module__}.{sdpa.__name__}) through optimized_attention_override"
        with Hooks(dm, NATIVE_MODULES) as hooks:
            denoised = model.apply_model(x, sigma, c_concat=c_concat, c_crossattn=context, y=pooled,
                                         guidance=guidance, transformer_options=options)
    return {"hooks": hooks.seen, "attention": attention, "default_failed": default_failed, "call": call, "out": list(denoised.shape), "model": model, "unet_config": dict(uc),
            "class": f"{type(mc).__module__}.{type(mc).__name__} -> {type(model).__module__}.{type(model).__name__}"
                     f" ({type(dm).__module__}.{type(dm).__name__})",
            "parameters": sum(p.numel() for p in dm.parameters()), "dtype": str(model.get_dtype()),
            "device": str(next(dm.parameters()).device), "keys_equal": keys_equal, "shapes_equal": shapes_equal,
            "n_keys": len(model_sd), "sigma": sigma_value, "seconds": time.perf_counter() - t0}


def probes(native: dict, fs: dict, width: int, height: int) -> dict:
    """Real-valued CPU checks of the parameter-free steps that differ in layout between the two sides."""
    import torch
    from diffusers.models.embeddings import get_timestep_embedding
    from diffusers.models.transformers.transformer_flux import FluxTransformer2DModel

    from fillscope.specs import flux_image_ids, pack_latents

    comfy = comfy_modules()
    dm, model = native["model"].diffusion_model, native["model"]
    uc = native["unet_config"]
    lh, lw = height // 8, width // 8
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, uc["out_channels"], lh, lw, generator=g)
    c_concat = torch.randn(1, uc["in_channels"] - uc["out_channels"], lh, lw, generator=g)
    # ComfyUI: channels concatenated, then the model's own 2x2 patching; FillScope: each packed, tokens concatenated
    tokens, img_ids = dm.process_img(torch.cat([x, c_concat], dim=1))
    ours = torch.cat([pack_latents(x), pack_latents(c_concat)], dim=2)
    ids_ours = flux_image_ids(lh, lw)
    # the timestep sinusoid: diffusers' forward multiplies t by 1000 (read from the installed source below) and
    # embeds with flip_sin_to_cos=True, shift 0 (its Timesteps in time_text_embed); ComfyUI embeds sigma with
    # timestep_embedding's time_factor
    sigma = torch.tensor([native["sigma"]])
    t_comfy = model.model_sampling.timestep(sigma).float()
    time_factor = inspect.signature(comfy.ldm.flux.layers.timestep_embedding).parameters["time_factor"].default
    forward_src = inspect.getsource(FluxTransformer2DModel.forward)
    diffusers_x1000 = "timestep.to(hidden_states.dtype) * 1000" in forward_src
    proj = fs["model"].time_text_embed.time_proj
    emb_fs = get_timestep_embedding(sigma * 1000, proj.num_channels, flip_sin_to_cos=proj.flip_sin_to_cos,
                                    downscale_freq_shift=proj.downscale_freq_shift, scale=proj.scale)
    emb_comfy = comfy.ldm.flux.layers.timestep_embedding(t_comfy, proj.num_channels)
    # rotary embeddings from the same ids (both modules hold no tensors): diffusers' cos/sin [N, head_dim] repeat
    # each frequency twice, ComfyUI's pe [B,1,N,head_dim/2,2,2] holds [[cos, -sin], [sin, cos]] per frequency
    ids = torch.cat([torch.zeros(fs["observed"]["txt_ids"]), ids_ours], dim=0)
    cos, sin = fs["model"].pos_embed(ids)
    pe = dm.pe_embedder(ids[None])[0, 0]
    rope_diff = max(float((cos[:, 0::2] - pe[..., 0, 0]).abs().max()), float((sin[:, 0::2] - pe[..., 1, 0]).abs().max()),
                    float((cos[:, 1::2] - pe[..., 1, 1]).abs().max()), float((sin[:, 1::2] + pe[..., 0, 1]).abs().max()))
    # apply_model's output: ComfyUI turns the model's velocity into the denoised latent
    v = torch.randn(x.shape, generator=g)
    denoised = model.model_sampling.calculate_denoised(sigma, v, x)
    return {
        "pack_max_diff": float((tokens - ours).abs().max()), "ids_max_diff": float((img_ids[0] - ids_ours).abs().max()),
        "tokens_shape": list(tokens.shape), "comfy_timestep": float(t_comfy[0]), "time_factor": float(time_factor),
        "diffusers_x1000": diffusers_x1000, "emb_max_diff": float((emb_fs - emb_comfy).abs().max()),
        "emb_shape": list(emb_comfy.shape), "rope_max_diff": rope_diff, "rope_ids": list(ids.shape), "denoised_max_diff": float((denoised - (x - sigma * v)).abs().max()),
    }


# -- the table -------------------------------------------------------------------------------------------------------


def s(shape) -> str:
    if isinstance(shape, list) and shape and all(isinstance(v, list) for v in shape):
        return " + ".join(s(v) for v in shape)
    return "[" + ",".join(str(v) for v in shape) + "]" if isinstance(shape, list) else str(shape)


def yes_no(ok: bool, why: str = "") -> str:
    return ("yes" if ok else "NO") + (f" ({why})" if why else "")


def build_rows(fs: dict, nat: dict, found: dict, probe: dict, width: int, height: int) -> tuple[list, dict]:
    """The table rows and the measured facts the test asserts on."""
    F, N = fs["hooks"], nat["hooks"]
    obs = fs["observed"]
    cfg, uc = fs["config"], nat["unet_config"]
    patch = uc["patch_size"]
    n_tokens = (height // (8 * patch)) * (width // (8 * patch))
    fs_in = arg(F[""], 0, "hidden_states")
    nat_x = arg(N[""], 0, "x")
    fs_x = F["x_embedder"]
    nat_img = N["img_in"]
    fs_txt, nat_txt = F["context_embedder"], N["txt_in"]
    fs_ids = arg(F["pos_embed"], 0, "ids")
    nat_ids = arg(N["pe_embedder"], 0, "ids")
    fs_db, nat_db = F["transformer_blocks.0"], N["double_blocks.0"]
    fs_sb, nat_sb = F["single_transformer_blocks.0"], N["single_blocks.0"]
    fs_db_in = [arg(fs_db, 0, "hidden_states"), arg(fs_db, 1, "encoder_hidden_states")]  # img, txt
    nat_db_in = [arg(nat_db, 0, "img"), arg(nat_db, 1, "txt")]
    fs_db_out = [fs_db["out"][1], fs_db["out"][0]]  # diffusers returns (txt, img)
    nat_db_out = nat_db["out"]  # ComfyUI returns (img, txt)
    fs_sb_in = [arg(fs_sb, 0, "hidden_states"), arg(fs_sb, 1, "encoder_hidden_states")]
    nat_sb_in = arg(nat_sb, 0, "x")
    fs_sb_out = [fs_sb["out"][1], fs_sb["out"][0]]
    nat_sb_out = nat_sb["out"]
    fs_out, nat_final = F["proj_out"]["out"], N["final_layer"]["out"]
    fs_temb, nat_vec = F["time_text_embed"]["out"], arg(nat_db, 2, "vec")
    joined = [1, fs_sb_in[1][1] + fs_sb_in[0][1], fs_sb_in[0][2]]  # ComfyUI's single blocks see txt + img joined
    latent_hw = [height // 8, width // 8]

    facts = {
        "size": [width, height], "tokens_expected": n_tokens, "fs_input": fs_in, "native_x": nat_x,
        "native_call": nat["call"], "fs_x_embedder": [fs_x["args"][0], fs_x["out"]],
        "native_img_in": [nat_img["args"][0], nat_img["out"]], "fs_double_in": fs_db_in, "native_double_in": nat_db_in,
        "fs_double_out": fs_db_out, "native_double_out": nat_db_out, "fs_single_in": fs_sb_in,
        "native_single_in": nat_sb_in, "fs_single_out": fs_sb_out, "native_single_out": nat_sb_out,
        "fs_output": F[""]["out"][0], "fs_proj_out": fs_out, "native_final_layer": nat_final,
        "native_model_out": N[""]["out"], "native_apply_model_out": nat["out"], "fs_text": arg(F[""], 2, "encoder_hidden_states"), "native_text": arg(N[""], 2, "context"),
        "fs_pooled": F[""]["kwargs"].get("pooled_projections"), "native_pooled": arg(N[""], 3, "y"),
        "fs_ids": fs_ids, "native_ids": nat_ids, "fs_txt_out": fs_txt["out"], "native_txt_out": nat_txt["out"],
        "fs_temb": fs_temb, "native_vec": nat_vec, "fs_parameters": fs["parameters"],
        "native_parameters": nat["parameters"], "probes": probe, "native_default_attention_failed": nat["default_failed"], "unet_config": uc,
        "native_keys_equal_detected": nat["keys_equal"], "native_shapes_equal_detected": nat["shapes_equal"],
        "fs_detector_config_equal": all(found["fs_detected"][k] == cfg[k] for k in found["fs_detected"]),
    }
    fs_hidden = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    rows = [
        ["config", f"shipped flux_fill_transformer.json: {cfg['num_layers']}+{cfg['num_single_layers']} blocks, "
                   f"width {fs_hidden}, in {cfg['in_channels']}",
         f"model_detection on {nat['n_keys']} BFL keys: {type(found['model_config']).__name__}, "
         f"{uc['depth']}+{uc['depth_single_blocks']} blocks, width {uc['hidden_size']}, in {uc['in_channels']}",
         yes_no(cfg["num_layers"] == uc["depth"] and cfg["num_single_layers"] == uc["depth_single_blocks"]
                and fs_hidden == uc["hidden_size"]
                and cfg["in_channels"] == uc["in_channels"] * patch * patch,
                f"{uc['in_channels']} x {patch}x{patch} = {uc['in_channels'] * patch * patch}")],
        ["parameters", f"{fs['parameters']:,}", f"{nat['parameters']:,}", yes_no(fs["parameters"] == nat["parameters"])],
        ["image in", f"hidden_states {s(fs_in)} (x {s(obs['noisy_latents.packed'])} + condition "
                     f"{s(obs['fill_condition'])} tokens)",
         f"x {s(nat['call']['x'])} + c_concat {s(nat['call']['c_concat'])} -> Flux x {s(nat_x)}",
         "grid vs tokens; " + yes_no(fs_in == nat_img["args"][0], f"the model packs {patch}x{patch} itself: "
                                     f"img_in gets {s(nat_img['args'][0])}")],
        ["x_embedder / img_in", f"{s(fs_x['args'][0])} -> {s(fs_x['out'])}",
         f"{s(nat_img['args'][0])} -> {s(nat_img['out'])}",
         yes_no(fs_x["args"][0] == nat_img["args"][0] and fs_x["out"] == nat_img["out"])],
        ["timestep", f"t {s(arg(F[''], 2, 'timestep'))} = sigma {fs['info']['sigma_start']:g}, "
                     f"{'x1000 in forward' if probe['diffusers_x1000'] else 'NOT x1000 in forward'} -> "
                     f"embedder {s(F['time_text_embed.timestep_embedder']['args'][0])}",
         f"sigma {s(nat['call']['sigma'])} = {nat['sigma']:g} -> timestep {probe['comfy_timestep']:g}, "
         f"x{probe['time_factor']:g} in timestep_embedding -> time_in {s(N['time_in']['args'][0])}",
         yes_no(probe["emb_max_diff"] < 1e-5 and F["time_text_embed.timestep_embedder"]["args"][0]
                == N["time_in"]["args"][0], "the same sinusoid of 1000 sigma")],
        ["guidance", f"guidance {s(F['']['kwargs'].get('guidance'))} = {GUIDANCE:g}, embedder in "
                     f"{s(F['time_text_embed.guidance_embedder']['args'][0])}",
         f"guidance {s(nat['call']['guidance'])} = {GUIDANCE:g}, guidance_in in {s(N['guidance_in']['args'][0])}",
         yes_no(F["time_text_embed.guidance_embedder"]["args"][0] == N["guidance_in"]["args"][0])],
        ["text (T5)", f"encoder_hidden_states {s(facts['fs_text'])} -> context_embedder {s(fs_txt['out'])}",
         f"c_crossattn {s(nat['call']['c_crossattn'])} -> txt_in {s(nat_txt['out'])}",
         yes_no(facts["fs_text"] == facts["native_text"] and fs_txt["out"] == nat_txt["out"])],
        ["pooled (CLIP-L)", f"pooled_projections {s(facts['fs_pooled'])}", f"y {s(facts['native_pooled'])}",
         yes_no(facts["fs_pooled"] == facts["native_pooled"])],
        ["temb / vec", f"time_text_embed out {s(fs_temb)}", f"vec {s(nat_vec)}", yes_no(fs_temb == nat_vec)],
        ["ids", f"txt_ids {s(obs['txt_ids'])} + img_ids {s(obs['img_ids'])} -> pos_embed {s(fs_ids)}",
         f"built in Flux.forward -> pe_embedder {s(nat_ids)}",
         yes_no(fs_ids == nat_ids[1:] and probe["ids_max_diff"] == 0, "+ batch dim")],
        ["rotary", f"pos_embed out (cos, sin) {s(F['pos_embed']['out'])}", f"pe {s(N['pe_embedder']['out'])}",
         yes_no(probe["rope_max_diff"] < 1e-5, "same angles, cos/sin vs 2x2 rotations")],
        ["double block 0 in", f"img {s(fs_db_in[0])}, txt {s(fs_db_in[1])}",
         f"img {s(nat_db_in[0])}, txt {s(nat_db_in[1])}", yes_no(fs_db_in == nat_db_in)],
        ["double block 0 out", f"img {s(fs_db_out[0])}, txt {s(fs_db_out[1])}",
         f"img {s(nat_db_out[0])}, txt {s(nat_db_out[1])}", yes_no(fs_db_out == nat_db_out)],
        ["single block 0 in", f"img {s(fs_sb_in[0])}, txt {s(fs_sb_in[1])} (joined inside)",
         f"x {s(nat_sb_in)} (txt + img joined)", yes_no(joined == nat_sb_in, "joined vs split")],
        ["single block 0 out", f"img {s(fs_sb_out[0])}, txt {s(fs_sb_out[1])}", f"x {s(nat_sb_out)}",
         yes_no([1, fs_sb_out[0][1] + fs_sb_out[1][1], fs_sb_out[0][2]] == nat_sb_out, "joined vs split")],
        ["proj_out / final_layer", f"{s(arg(F['proj_out'], 0, 'input'))} -> {s(fs_out)}",
         f"{s(arg(N['final_layer'], 0, 'x'))} -> {s(nat_final)}", yes_no(fs_out == nat_final)],
        ["output", f"velocity tokens {s(F['']['out'][0])}",
         f"Flux out {s(N['']['out'])} (unpacked) -> apply_model denoised {s(nat['out'])}",
         yes_no(N[""]["out"] == [1, uc["out_channels"], *latent_hw]
                and F[""]["out"][0] == [1, n_tokens, uc["out_channels"] * patch * patch],
                "unpacked; v vs denoised x - sigma*v")],
        ["dtype, device", f"{fs['dtype']}, {fs['device']}", f"{nat['dtype']}, {nat['device']}",
         yes_no(fs["dtype"] == nat["dtype"] and fs["device"] == nat["device"])],
    ]
    return rows, facts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="native_boundary.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=parse_size, default=(1024, 1024), help="WIDTHxHEIGHT (multiples of 16)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows and measured facts here")
    a = p.parse_args(argv)
    width, height = a.size
    quiet_libraries(all_warnings=True)
    import diffusers
    import torch

    t0 = time.perf_counter()
    fs = fillscope_side(width, height)
    found = native_config(fs["model"])
    nat = native_side(found, fs, width, height)
    probe = probes(nat, fs, width, height)
    rows, facts = build_rows(fs, nat, found, probe, width, height)
    header = ["boundary", "FillScope (diffusers FluxTransformer2DModel)",
              f"ComfyUI native ({type(nat['model'].diffusion_model).__module__}."
              f"{type(nat['model'].diffusion_model).__name__})", "same?"]
    env = environment_lines()
    prov = (f"provenance: meta device (no weights, no values), production configs; torch {torch.__version__}, "
            f"diffusers {diffusers.__version__}, ComfyUI {comfyui_version()}; {env[0]}")
    how = [
        f"command: .venv/bin/python bench/native_boundary.py --size {width}x{height}",
        prov,
        f"FillScope: flux_fill.run on the meta stack, 1 step, guidance {GUIDANCE:g} ({fs['seconds']:.1f} s)",
        f"ComfyUI: {nat['class']}; config by comfy.model_detection.model_config_from_unet on the BFL keys of "
        f"comfy.model_detection.convert_diffusers_mmdit ({found['n_diffusers_keys']} diffusers keys -> "
        f"{len(found['bfl'])} BFL keys; the model's own state dict: keys {'equal' if nat['keys_equal'] else 'DIFFER'}"
        f", shapes {'equal' if nat['shapes_equal'] else 'DIFFER'}); FillScope's BFL detector on the same keys: "
        f"{found['fs_variant']}, config {'equal' if facts['fs_detector_config_equal'] else 'DIFFERS'}; "
        f"inference dtype the weights' (comfy.utils.weight_dtype: {found['weight_dtype']}); apply_model on meta "
        f"({nat['seconds']:.1f} s)",
        f"ComfyUI attention: {nat['attention']}",
    ]
    if nat["default_failed"]:
        how.append(f"ComfyUI's default attention failed on meta at {nat['default_failed']} (this run used the override "
                   "above; the model's code is otherwise unchanged)")
    bar = "=" * 100
    print(bar)
    print(f"FLUX.1 Fill transformer boundary at {width}x{height}: FillScope vs ComfyUI native, meta device")
    print(bar)
    print("\n".join(how))
    print()
    print(table(rows, header))
    print(f"CPU probes (real values through the parameter-free code of both sides, max|diff|): 2x2 packing of x + "
          f"c_concat into {s(probe['tokens_shape'])} tokens {probe['pack_max_diff']:g}; img_ids "
          f"{probe['ids_max_diff']:g}; timestep sinusoid {s(probe['emb_shape'])} {probe['emb_max_diff']:.1e}; rotary "
          f"cos/sin for ids {s(probe['rope_ids'])} {probe['rope_max_diff']:.1e}; apply_model's denoised vs x - sigma*v "
          f"{probe['denoised_max_diff']:g}")
    print(f"script wall: {time.perf_counter() - t0:.1f} s")
    print(bar)
    sys.stdout.flush()
    if a.json is not None:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"header": header, "rows": rows, "how": how, "environment": env,
                                      "facts": facts}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    run_main(main, "native_boundary")
