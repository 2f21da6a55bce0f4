"""Trace one shape-equivalent denoiser step of a loaded stack and assemble the architecture report
(schema `fillscope.report/1`, rendered by trace/report.py).

What runs, under the module tracer (and optionally the line tracer): the text encoders on the prompt (and, for
SD3, the negative prompt), the VAE encode of the masked image, exactly one denoiser step (FLUX: one transformer
forward; SD3: ControlNet + transformer under CFG) and the VAE decode: what the seed documents call
"1 shape-equivalent denoiser timestep". Every figure in the report names its provenance: measured in this run
(on cuda, cpu or meta), estimated (meta memory), or static config.
"""

from __future__ import annotations

import platform
import re
import time
from contextlib import nullcontext
from datetime import datetime, timezone

from .. import flux_fill, masks, sd3_inpaint, text
from ..latents import decode_to_image
from ..placement import weight_bytes
from ..weights import Component, count_parameters

MODELS = {"flux-fill": "FLUX.1 Fill [dev]", "sd3-controlnet-inpaint": "SD3 + alimama inpainting ControlNet"}

# (figure name, English label, Chinese label) of the tensors the report shows
LABELS = {
    "clip_l.input_ids": ("CLIP-L token ids", "CLIP-L 词元 ID"),
    "t5.input_ids": ("T5 token ids", "T5 词元 ID"),
    "clip_l.pooled": ("CLIP-L pooled", "CLIP-L 池化向量"),
    "clip_l.penultimate": ("CLIP-L penultimate hidden", "CLIP-L 倒数第二层隐状态"),
    "clip_g.penultimate": ("CLIP-G penultimate hidden", "CLIP-G 倒数第二层隐状态"),
    "clip_l.text_embeds": ("CLIP-L text_embeds", "CLIP-L 投影向量"),
    "clip_g.text_embeds": ("CLIP-G text_embeds", "CLIP-G 投影向量"),
    "t5.hidden": ("T5-XXL last hidden state", "T5-XXL 最后隐状态"),
    "clip_lg.padded": ("CLIP-L ++ CLIP-G, padded to 4096", "CLIP-L ++ CLIP-G，填充至 4096"),
    "joint_context": ("joint context", "联合上下文"),
    "pooled": ("pooled (L ++ G)", "池化向量 (L ++ G)"),
    "source_image": ("source image", "源图像"),
    "masked_image": ("masked image", "遮罩后图像"),
    "masked_image_latents": ("VAE encode of the masked image", "遮罩图像 VAE 编码"),
    "masked_image_latents.packed": ("packed masked-image latents", "打包的遮罩图像潜变量"),
    "mask.packed": ("packed 8x8-block mask", "打包的 8x8 块遮罩"),
    "keep_mask.latent": ("keep mask on the latent grid", "潜空间保留遮罩"),
    "fill_condition": ("fill condition", "Fill 条件"),
    "inpaint_condition": ("inpaint condition", "修复条件"),
    "noisy_latents.packed": ("noisy latents (packed)", "加噪潜变量（打包）"),
    "initial_noise": ("noisy latent", "加噪潜变量"),
    "transformer.input": ("transformer input", "Transformer 输入"),
    "transformer.output": ("transformer output", "Transformer 输出"),
    "velocity.guided": ("guided velocity (after CFG)", "CFG 后的速度"),
    "controlnet.residual[0]": ("ControlNet residual 0", "ControlNet 残差 0"),
    "controlnet.residual[22]": ("ControlNet residual 22", "ControlNet 残差 22"),
    "txt_ids": ("txt_ids", "文本位置 ID"),
    "img_ids": ("img_ids", "图像位置 ID"),
    "latent.unpacked": ("unpacked latent", "解包潜变量"),
    "latent": ("denoised latent", "去噪潜变量"),
    "decoded_image": ("decoded image", "解码图像"),
}


def _versions() -> dict:
    import diffusers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__}


def _device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    if device == "cpu":
        return platform.processor() or platform.machine()
    return device


class Figures:
    """The report's figures: each value with its provenance, device and method."""

    def __init__(self):
        self.items: dict[str, dict] = {}

    def tensor(self, name, t):
        en, zh = LABELS.get(name, (name, name))
        self.items[name] = {"value": list(t.shape), "unit": "shape", "provenance": "measured", "device": t.device.type,
                            "method": f"shape of the tensor in this run ({str(t.dtype).replace('torch.', '')})",
                            "label_en": en, "label_zh": zh}

    def add(self, name, value, unit, provenance, device, method, en, zh):
        self.items[name] = {"value": value, "unit": unit, "provenance": provenance, "device": device,
                            "method": method, "label_en": en, "label_zh": zh}


def _stack_device(stack: dict[str, Component]) -> str:
    return next(iter(stack.values())).device


def _tracers(models: dict, line_trace: bool):
    from .lines import LineTracer
    from .modules import ModuleTracer

    return ModuleTracer(models), (LineTracer() if line_trace else nullcontext())


def _block_rows(tracer, component: str, pattern: str, model) -> list[dict]:
    """Every block whose qualified name matches `pattern`, in order, with its traced shapes and its params."""
    rows = []
    rx = re.compile(pattern)
    for row in tracer.rows:
        if row["component"] == component and rx.fullmatch(row["module"]):
            params = sum(p.numel() for p in model.get_submodule(row["module"]).parameters())
            rows.append({"name": row["module"], "class": row["class"], "inputs": row["inputs"], "outputs": row["outputs"],
                         "params": params, "hits": row["hits"], "wall_s": round(row["wall_s"], 6)})
    rows.sort(key=lambda r: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", r["name"])])
    return rows


def _micro_rows(tracer, component: str, block: str, model, device: str) -> list[dict]:
    out = []
    for row in tracer.rows:
        if row["component"] == component and row["module"].startswith(block + ".") and row["module"].count(".") <= block.count(".") + 2:
            params = sum(p.numel() for p in model.get_submodule(row["module"]).parameters())
            out.append({"module": row["module"][len(block) + 1:], "class": row["class"], "inputs": row["inputs"],
                        "outputs": row["outputs"], "params": params, "provenance": "measured", "device": device})
    return out


def _finish_stages(stages, per_module: dict, device: str) -> list:
    """Each block gets its FLOPs (FlopCounterMode's per-module total) and its provenance."""
    for stage in stages:
        for b in stage["blocks"]:
            b["flops"] = next((v for k, v in per_module.items() if k.endswith("." + b["name"]) or k == b["name"]), None)
            b.update(provenance="measured", device=device)
    return stages


def _run_boundary(tr: Component, height, width, device, wall, **extra) -> dict:
    return {"height": height, "width": width, "batch": 1, "dtype": str(tr.model.dtype).replace("torch.", ""),
            "device": device, "device_name": _device_name(device), "weights": tr.provenance, "steps_traced": 1,
            "wall_s": round(wall, 3), **extra, "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **_versions()}


def _evidence(tracer, lines, params: dict, flops_total, flops_method, peak: dict, device: str) -> dict:
    ev = {
        "module": {"rows": len(tracer.rows), "hits": tracer.hits, "per_component": tracer.per_component(),
                   "definition": "row = (component, qualified module name, class, input and output shape signature); "
                                 "hit = one forward call (hooks with kwargs)",
                   "provenance": "measured", "device": device},
        "line": None,
        "params": {**params, "provenance": "measured", "device": device},
        "flops": {"per_step": flops_total, "provenance": "measured", "device": device, "method": flops_method},
        "peak_memory": peak,
    }
    if lines is not None and hasattr(lines, "rows"):
        ev["line"] = {"rows": len(lines.rows), "hits": lines.hits, "python": lines.python, "tracer": lines.tracer,
                      "definition": "row = (file, line, shapes of the tensor locals); hit = one executed line of "
                                    "diffusers/transformers code", "provenance": "measured", "device": device}
    return ev


def _params(stack: dict[str, Component], unused: dict[str, int], used_note: str) -> dict:
    per = {}
    unique = tied = 0
    for name, comp in stack.items():
        u, t = count_parameters(comp.model)
        per[name] = {"unique": u, "tie_counted": t}
        unique, tied = unique + u, tied + t
    return {
        "unique": unique,
        "tie_counted": tied,
        "unique_used": unique - sum(unused.values()),
        "convention_unique": "every instantiated parameter once (a tied tensor counts once)",
        "convention_tie_counted": "every instantiated parameter, tied tensors counted under each name (T5's shared "
                                  "embedding twice): the seed documents' convention",
        "convention_unique_used": used_note,
        "per_component": per,
    }


def _component_peaks(stages, stack, device: str) -> dict:
    """Per stage, what its components would need alone: their weight bytes + the activation peak of the stage
    (on CUDA the peak allocated above what was allocated before it; on meta the estimator's activation peak)."""
    from .cost import estimate_peak_memory, measure_peak_cuda

    out = {}
    for label, keys, fn in stages:
        weights = sum(weight_bytes(stack[k].model) for k in keys)
        if device == "cuda":
            raw = measure_peak_cuda(fn)
            activations = raw["bytes"] - raw["before_bytes"]
        else:
            activations = estimate_peak_memory(fn)["parts"]["activations_peak"]
        out[f"{label} alone: weights + activations"] = weights + activations
    return out


def _peak_memory(fn, device: str, stages=None, stack=None) -> dict:
    from .cost import estimate_peak_memory, measure_peak_cuda

    # cost.py words provenance as prose ("measured on CUDA", "estimated on meta (...)"); the report schema
    # wants the category, with the prose as the method
    raw = measure_peak_cuda(fn) if device == "cuda" else estimate_peak_memory(fn)
    category = "measured" if raw["provenance"].startswith("measured") else "estimated"
    parts = {k: v for k, v in raw.get("parts", {}).items() if k != "ops"}  # (ops is a count, not bytes)
    if stages:
        parts.update(_component_peaks(stages, stack, device))
    method = raw["provenance"] + ("; per stage: the components' weight bytes + that stage's activation peak"
                                  if stages else "")
    return {**raw, "parts": parts, "provenance": category, "device": device, "method": method}


def flux_graph_stages(stack, prompt, prepared, flux_text, cond, out, seed=0) -> list:
    """The FLUX Fill graph's stages as (label, components, callable) from the intermediates of one run:
    what the per-stage memory figures measure."""
    return [
        ("text encoders", ["clip_l", "t5"], lambda: (text.encode_clip(stack["clip_l"], prompt, project=False),
                                                     text.encode_t5(stack["t5"], prompt))),
        ("VAE encode", ["vae"], lambda: flux_fill.build_fill_condition(stack["vae"], prepared)),
        ("denoiser step", ["transformer"],
         lambda: flux_fill.sample_flux_fill(stack["transformer"], flux_text, cond, steps=1, seed=seed)),
        ("VAE decode", ["vae"], lambda: decode_to_image(stack["vae"], out)),
    ]


def sd3_condition(stack, prompt: str):
    """One prompt's SD3 text condition (CLIP-L, CLIP-G, T5 at 256 tokens)."""
    return text.sd3_text_condition(text.encode_clip(stack["clip_l"], prompt), text.encode_clip(stack["clip_g"], prompt),
                                   text.encode_t5(stack["t5"], prompt, 256))


def sd3_graph_stages(stack, prompt, negative, prepared, pos, neg, cond, out, seed=0) -> list:
    """The SD3 ControlNet graph's stages, as flux_graph_stages."""
    return [
        ("text encoders", ["clip_l", "clip_g", "t5"], lambda: (sd3_condition(stack, prompt), sd3_condition(stack, negative))),
        ("VAE encode", ["vae"], lambda: sd3_inpaint.build_inpaint_condition(stack["vae"], prepared)),
        ("denoiser step", ["transformer", "controlnet"],
         lambda: sd3_inpaint.sample_sd3_controlnet_inpaint(stack["transformer"], stack["controlnet"], pos, neg, cond,
                                                           steps=1, seed=seed)),
        ("VAE decode", ["vae"], lambda: decode_to_image(stack["vae"], out)),
    ]


def trace_flux_fill(stack: dict[str, Component], *, height=1024, width=1024, prompt="a red brick fireplace",
                    mask_fraction=0.5, seed=0, line_trace=True, memory=True) -> dict:
    """stack: clip_l, t5, transformer, vae (from fillscope loaders, any weight source)."""
    from .cost import count_flops

    figs = Figures()
    device = _stack_device(stack)
    image, mask = masks.synthetic_image_and_mask(width, height, mask_fraction)
    prepared = masks.prepare_image_and_mask(image, mask)
    figs.tensor("source_image", prepared.image)
    models = {k: c.model for k, c in stack.items()}
    models["clip_l"] = text.clip_text_model(stack["clip_l"].model)  # what FLUX runs: the pooled output, no projection
    mtracer, ltracer = _tracers(models, line_trace)
    t0 = time.perf_counter()
    with mtracer as mt, ltracer as lt:
        clip = text.encode_clip(stack["clip_l"], prompt, project=False)
        t5 = text.encode_t5(stack["t5"], prompt)
        for name, t in (("clip_l.input_ids", clip.input_ids), ("t5.input_ids", t5.input_ids),
                        ("clip_l.pooled", clip.pooled), ("t5.hidden", t5.hidden)):
            figs.tensor(name, t)
        flux_text = text.flux_text_condition(t5, clip)
        cond = flux_fill.build_fill_condition(stack["vae"], prepared, observe=figs.tensor)
        out = flux_fill.sample_flux_fill(stack["transformer"], flux_text, cond, steps=1, seed=seed, observe=figs.tensor)
        decode_to_image(stack["vae"], out, observe=figs.tensor)
    wall = time.perf_counter() - t0
    stages_ = flux_graph_stages(stack, prompt, prepared, flux_text, cond, out, seed)
    flops_total, per_module = count_flops(stages_[2][2])  # the denoiser step
    proj = getattr(stack["clip_l"].model, "text_projection", None)
    params = _params(stack, {"clip_l.text_projection": proj.weight.numel() if proj is not None else 0},
                     "what FLUX Fill computes with: as unique, less CLIP-L's text projection (FLUX uses the pooled "
                     "output, not text_embeds)")

    def whole_run():
        c = text.encode_clip(stack["clip_l"], prompt, project=False)
        t = text.encode_t5(stack["t5"], prompt)
        fc = flux_fill.build_fill_condition(stack["vae"], prepared)
        o = flux_fill.sample_flux_fill(stack["transformer"], text.flux_text_condition(t, c), fc, steps=1, seed=seed)
        decode_to_image(stack["vae"], o)

    peak = _peak_memory(whole_run, device, stages_, stack) if memory else None
    tr = stack["transformer"]
    cfg = tr.config
    stages = [
        {"id": "double", "label_en": "Double-stream blocks", "label_zh": "双流块", "count": cfg.get("num_layers"),
         "blocks": _block_rows(mt, "transformer", r"transformer_blocks\.\d+", tr.model)},
        {"id": "single", "label_en": "Single-stream blocks", "label_zh": "单流块", "count": cfg.get("num_single_layers"),
         "blocks": _block_rows(mt, "transformer", r"single_transformer_blocks\.\d+", tr.model)},
    ]
    _finish_stages(stages, per_module, device)
    clip_cfg, t5_cfg, vae_cfg = stack["clip_l"].config, stack["t5"].config, stack["vae"].config
    report = {
        "schema": "fillscope.report/1",
        "model": "flux-fill",
        "title": MODELS["flux-fill"],
        "run": _run_boundary(tr, height, width, device, wall, prompt=prompt),
        "figures": figs.items,
        "pages": {
            "macro": {
                "nodes": [
                    {"id": "prompt", "label_en": "Prompt", "label_zh": "提示词", "kind": "input", "detail_en": "token ids", "detail_zh": "词元 ID"},
                    {"id": "image", "label_en": "Image + mask", "label_zh": "图像 + 遮罩", "kind": "input", "detail_en": "repaint = 1", "detail_zh": "1 = 重绘"},
                    {"id": "clip_l", "label_en": "CLIP-L", "label_zh": "CLIP-L", "kind": "encoder", "detail_en": "pooled", "detail_zh": "池化"},
                    {"id": "t5", "label_en": "T5-XXL", "label_zh": "T5-XXL", "kind": "encoder", "detail_en": "512 tokens", "detail_zh": "512 词元"},
                    {"id": "vae_encode", "label_en": "VAE encode", "label_zh": "VAE 编码", "kind": "encoder", "detail_en": "masked image, mean", "detail_zh": "遮罩图像，均值"},
                    {"id": "fill", "label_en": "Fill condition", "label_zh": "Fill 条件", "kind": "assembly", "detail_en": "latents 64 + mask 256", "detail_zh": "潜变量 64 + 遮罩 256"},
                    {"id": "transformer", "label_en": "FLUX transformer", "label_zh": "FLUX Transformer", "kind": "denoiser",
                     "detail_en": f"{cfg.get('num_layers')} double + {cfg.get('num_single_layers')} single", "detail_zh": f"{cfg.get('num_layers')} 双流 + {cfg.get('num_single_layers')} 单流"},
                    {"id": "vae_decode", "label_en": "VAE decode", "label_zh": "VAE 解码", "kind": "vae", "detail_en": "latent -> pixels", "detail_zh": "潜变量 → 像素"},
                    {"id": "output", "label_en": "Image", "label_zh": "输出图像", "kind": "output", "detail_en": "input size", "detail_zh": "输入尺寸"},
                ],
                "edges": [
                    {"from": "prompt", "to": "clip_l", "figure": "clip_l.input_ids"},
                    {"from": "prompt", "to": "t5", "figure": "t5.input_ids"},
                    {"from": "image", "to": "vae_encode", "figure": "masked_image"},
                    {"from": "vae_encode", "to": "fill", "figure": "masked_image_latents.packed"},
                    {"from": "image", "to": "fill", "figure": "mask.packed"},
                    {"from": "clip_l", "to": "transformer", "figure": "clip_l.pooled"},
                    {"from": "t5", "to": "transformer", "figure": "t5.hidden"},
                    {"from": "fill", "to": "transformer", "figure": "fill_condition"},
                    {"from": "transformer", "to": "vae_decode", "figure": "latent.unpacked"},
                    {"from": "vae_decode", "to": "output", "figure": "decoded_image"},
                ],
            },
            "conditions": {
                "branches": [
                    {"id": "clip_l", "label_en": "CLIP-L", "label_zh": "CLIP-L", "layers": clip_cfg.get("num_hidden_layers"),
                     "hidden": clip_cfg.get("hidden_size"), "heads": clip_cfg.get("num_attention_heads"), "output_figure": "clip_l.pooled", "static": True},
                    {"id": "t5", "label_en": "T5-XXL", "label_zh": "T5-XXL", "layers": t5_cfg.get("num_layers"),
                     "hidden": t5_cfg.get("d_model"), "heads": t5_cfg.get("num_heads"), "output_figure": "t5.hidden", "static": True},
                ],
                "merge": {"label_en": "Dual condition", "label_zh": "双重条件",
                          "rule_en": "T5 sequence -> joint attention (encoder_hidden_states); CLIP-L pooled -> timestep/guidance modulation (pooled_projections)",
                          "rule_zh": "T5 序列 → 联合注意力；CLIP-L 池化向量 → 时间步/引导调制",
                          "output_figure": "t5.hidden"},
            },
            "denoiser": {"stages": stages, "inputs": ["transformer.input", "t5.hidden", "clip_l.pooled", "img_ids", "txt_ids"],
                         "outputs": ["transformer.output"]},
            "micro": {"block_name": "transformer_blocks.0",
                      "rows": _micro_rows(mt, "transformer", "transformer_blocks.0", tr.model, device),
                      "assembly": {"label_en": "Fill input assembly", "label_zh": "Fill 输入拼接",
                                   "parts": ["noisy_latents.packed", "fill_condition"], "result": "transformer.input",
                                   "rule_en": "cat on channels: noisy 64 + condition 320 (masked latents 64 + mask 256) = 384",
                                   "rule_zh": "通道拼接：噪声 64 + 条件 320（遮罩潜变量 64 + 遮罩 256）= 384"}},
            "vae": {"encode_figure": "masked_image_latents", "decode_figure": "decoded_image",
                    "channel_ladder": list(vae_cfg.get("block_out_channels", [])), "latent_channels": vae_cfg.get("latent_channels"),
                    "ladder_provenance": "static-config"},
        },
        "evidence": _evidence(mt, lt, params, flops_total, "torch.utils.flop_counter.FlopCounterMode over one denoiser step", peak, device),
    }
    return report


def trace_sd3_controlnet(stack: dict[str, Component], *, height=1024, width=1024, prompt="a red brick fireplace",
                         negative="", mask_fraction=0.5, seed=0, line_trace=True, memory=True) -> dict:
    """stack: clip_l, clip_g, t5, transformer, controlnet, vae."""
    from .cost import count_flops

    figs = Figures()
    device = _stack_device(stack)
    image, mask = masks.synthetic_image_and_mask(width, height, mask_fraction)
    prepared = masks.prepare_image_and_mask(image, mask)
    figs.tensor("source_image", prepared.image)
    models = {k: c.model for k, c in stack.items()}

    def observed_condition(p):
        cl, cg = text.encode_clip(stack["clip_l"], p), text.encode_clip(stack["clip_g"], p)
        t5 = text.encode_t5(stack["t5"], p, 256)
        for name, t in (("clip_l.penultimate", cl.penultimate), ("clip_l.text_embeds", cl.text_embeds),
                        ("clip_g.penultimate", cg.penultimate), ("clip_g.text_embeds", cg.text_embeds),
                        ("t5.hidden", t5.hidden), ("clip_l.input_ids", cl.input_ids), ("t5.input_ids", t5.input_ids)):
            figs.tensor(name, t)
        c = text.sd3_text_condition(cl, cg, t5, observe=figs.tensor)
        figs.tensor("joint_context", c.context)
        figs.tensor("pooled", c.pooled)
        return c

    mtracer, ltracer = _tracers(models, line_trace)
    t0 = time.perf_counter()
    with mtracer as mt, ltracer as lt:
        pos, neg = observed_condition(prompt), sd3_condition(stack, negative)
        cond = sd3_inpaint.build_inpaint_condition(stack["vae"], prepared, observe=figs.tensor)
        out = sd3_inpaint.sample_sd3_controlnet_inpaint(stack["transformer"], stack["controlnet"], pos, neg, cond,
                                                        steps=1, seed=seed, observe=figs.tensor)
        decode_to_image(stack["vae"], out, observe=figs.tensor)
    wall = time.perf_counter() - t0

    stages_ = sd3_graph_stages(stack, prompt, negative, prepared, pos, neg, cond, out, seed)
    flops_total, per_module = count_flops(stages_[2][2])  # the denoiser step
    params = _params(stack, {}, "as unique: SD3 uses every instantiated parameter (both CLIP projections included)")

    def whole_run():
        p, n = sd3_condition(stack, prompt), sd3_condition(stack, negative)
        c = sd3_inpaint.build_inpaint_condition(stack["vae"], prepared)
        o = sd3_inpaint.sample_sd3_controlnet_inpaint(stack["transformer"], stack["controlnet"], p, n, c, steps=1, seed=seed)
        decode_to_image(stack["vae"], o)

    peak = _peak_memory(whole_run, device, stages_, stack) if memory else None
    tr, cn = stack["transformer"], stack["controlnet"]
    cfg = tr.config
    stages = [
        {"id": "joint", "label_en": "MMDiT joint blocks", "label_zh": "MMDiT 联合块", "count": cfg.get("num_layers"),
         "blocks": _block_rows(mt, "transformer", r"transformer_blocks\.\d+", tr.model)},
        {"id": "controlnet", "label_en": "ControlNet blocks (residual i -> block i)", "label_zh": "ControlNet 块（残差 i → 块 i）",
         "count": cn.config.get("num_layers"), "blocks": _block_rows(mt, "controlnet", r"transformer_blocks\.\d+", cn.model)},
    ]
    _finish_stages(stages, per_module, device)
    branch = lambda cid, en, comp, fig: {  # noqa: E731
        "id": cid, "label_en": en, "label_zh": en, "layers": comp.config.get("num_hidden_layers", comp.config.get("num_layers")),
        "hidden": comp.config.get("hidden_size", comp.config.get("d_model")),
        "heads": comp.config.get("num_attention_heads", comp.config.get("num_heads")), "output_figure": fig, "static": True}
    vae_cfg = stack["vae"].config
    report = {
        "schema": "fillscope.report/1",
        "model": "sd3-controlnet-inpaint",
        "title": MODELS["sd3-controlnet-inpaint"],
        "run": _run_boundary(tr, height, width, device, wall, prompt=prompt, negative_prompt=negative),
        "figures": figs.items,
        "pages": {
            "macro": {
                "nodes": [
                    {"id": "prompt", "label_en": "Prompt + negative", "label_zh": "提示词 + 反向提示词", "kind": "input", "detail_en": "token ids", "detail_zh": "词元 ID"},
                    {"id": "image", "label_en": "Image + mask", "label_zh": "图像 + 遮罩", "kind": "input", "detail_en": "repaint = 1", "detail_zh": "1 = 重绘"},
                    {"id": "clip_l", "label_en": "CLIP-L", "label_zh": "CLIP-L", "kind": "encoder", "detail_en": "penultimate + embeds", "detail_zh": "倒数第二层 + 投影"},
                    {"id": "clip_g", "label_en": "OpenCLIP bigG", "label_zh": "OpenCLIP bigG", "kind": "encoder", "detail_en": "penultimate + embeds", "detail_zh": "倒数第二层 + 投影"},
                    {"id": "t5", "label_en": "T5-XXL", "label_zh": "T5-XXL", "kind": "encoder", "detail_en": "256 tokens", "detail_zh": "256 词元"},
                    {"id": "vae_encode", "label_en": "VAE encode", "label_zh": "VAE 编码", "kind": "encoder", "detail_en": "masked image -> -1", "detail_zh": "遮罩像素 → -1"},
                    {"id": "text", "label_en": "Joint context", "label_zh": "联合上下文", "kind": "assembly", "detail_en": "77 + 256 tokens", "detail_zh": "77 + 256 词元"},
                    {"id": "control", "label_en": "Inpaint condition", "label_zh": "修复条件", "kind": "assembly", "detail_en": "16 + 1 channels", "detail_zh": "16 + 1 通道"},
                    {"id": "controlnet", "label_en": "ControlNet", "label_zh": "ControlNet", "kind": "denoiser", "detail_en": f"{cn.config.get('num_layers')} blocks -> residuals", "detail_zh": f"{cn.config.get('num_layers')} 块 → 残差"},
                    {"id": "transformer", "label_en": "SD3 MMDiT", "label_zh": "SD3 MMDiT", "kind": "denoiser", "detail_en": f"{cfg.get('num_layers')} joint blocks, CFG", "detail_zh": f"{cfg.get('num_layers')} 联合块，CFG"},
                    {"id": "vae_decode", "label_en": "VAE decode", "label_zh": "VAE 解码", "kind": "vae", "detail_en": "latent -> pixels", "detail_zh": "潜变量 → 像素"},
                    {"id": "output", "label_en": "Image", "label_zh": "输出图像", "kind": "output", "detail_en": "input size", "detail_zh": "输入尺寸"},
                ],
                "edges": [
                    {"from": "prompt", "to": "clip_l", "figure": "clip_l.input_ids"},
                    {"from": "prompt", "to": "clip_g", "figure": "clip_l.input_ids"},
                    {"from": "prompt", "to": "t5", "figure": "t5.input_ids"},
                    {"from": "clip_l", "to": "text", "figure": "clip_l.penultimate"},
                    {"from": "clip_g", "to": "text", "figure": "clip_g.penultimate"},
                    {"from": "t5", "to": "text", "figure": "t5.hidden"},
                    {"from": "image", "to": "vae_encode", "figure": "masked_image"},
                    {"from": "vae_encode", "to": "control", "figure": "masked_image_latents"},
                    {"from": "image", "to": "control", "figure": "keep_mask.latent"},
                    {"from": "text", "to": "transformer", "figure": "joint_context"},
                    {"from": "control", "to": "controlnet", "figure": "inpaint_condition"},
                    {"from": "controlnet", "to": "transformer", "figure": "controlnet.residual[0]"},
                    {"from": "transformer", "to": "vae_decode", "figure": "latent"},
                    {"from": "vae_decode", "to": "output", "figure": "decoded_image"},
                ],
            },
            "conditions": {
                "branches": [branch("clip_l", "CLIP-L", stack["clip_l"], "clip_l.penultimate"),
                             branch("clip_g", "OpenCLIP bigG", stack["clip_g"], "clip_g.penultimate"),
                             branch("t5", "T5-XXL", stack["t5"], "t5.hidden")],
                "merge": {"label_en": "CLIP-L + CLIP-G + T5 merge", "label_zh": "CLIP-L + CLIP-G + T5 合并",
                          "rule_en": "L ++ G on channels (768 + 1280), zero-padded to 4096, then T5 tokens after them; pooled = L ++ G text_embeds",
                          "rule_zh": "L ++ G 通道拼接（768 + 1280），零填充至 4096，再在序列维拼接 T5；池化 = L ++ G 投影",
                          "output_figure": "joint_context"},
            },
            "denoiser": {"stages": stages, "inputs": ["initial_noise", "joint_context", "pooled", "inpaint_condition"],
                         "outputs": ["transformer.output", "velocity.guided"]},
            "micro": {"block_name": "transformer_blocks.0",
                      "rows": _micro_rows(mt, "transformer", "transformer_blocks.0", tr.model, device),
                      "assembly": {"label_en": "ControlNet injection", "label_zh": "ControlNet 注入",
                                   "parts": ["masked_image_latents", "keep_mask.latent"], "result": "inpaint_condition",
                                   "rule_en": "cat 16 latent + 1 keep-mask channels = 17 -> ControlNet pos_embed_input; residual i (x control scale) is added after MMDiT block i",
                                   "rule_zh": "16 潜变量 + 1 保留遮罩 = 17 通道 → ControlNet pos_embed_input；残差 i（乘控制强度）加在 MMDiT 第 i 块之后"}},
            "vae": {"encode_figure": "masked_image_latents", "decode_figure": "decoded_image",
                    "channel_ladder": list(vae_cfg.get("block_out_channels", [])), "latent_channels": vae_cfg.get("latent_channels"),
                    "ladder_provenance": "static-config"},
        },
        "evidence": _evidence(mt, lt, params, flops_total, "torch.utils.flop_counter.FlopCounterMode over one denoiser step (ControlNet + transformer, CFG batch 2)", peak, device),
    }
    return report


def load_stack(model: str, weights: str, *, controlnet: str | None = None, dtype="bf16", device="auto",
               sd3_variant=None) -> dict[str, Component]:
    """A whole stack from one weight source (meta, placeholder or a diffusers repository folder), for the CLI."""
    from .. import vae as vae_ops

    clip_dir, t5_dir = text.comfy_tokenizer_folders()
    kw = dict(dtype=dtype, device=device)
    if model == "flux-fill":
        return {
            "clip_l": text.load_clip_l(weights, tokenizer_fallback=clip_dir, **kw),
            "t5": text.load_t5(weights, tokenizer_fallback=t5_dir, **kw),
            "transformer": flux_fill.load_flux_fill_transformer(weights, **kw),
            "vae": vae_ops.load_vae(weights, kind="flux", **kw),
        }
    return {
        "clip_l": text.load_clip_l(weights, tokenizer_fallback=clip_dir, **kw),
        "clip_g": text.load_clip_g(weights, tokenizer_fallback=clip_dir, **kw),
        "t5": text.load_t5(weights, tokenizer_fallback=t5_dir, **kw),
        "transformer": sd3_inpaint.load_sd3_transformer(weights, variant=sd3_variant, **kw),
        "controlnet": sd3_inpaint.load_sd3_controlnet(controlnet or weights, **kw),
        "vae": vae_ops.load_vae(weights, kind="sd3", **kw),
    }


TRACERS = {"flux-fill": trace_flux_fill, "sd3-controlnet-inpaint": trace_sd3_controlnet}
