"""Synthetic `fillscope.report/1` reports for the report renderer's tests (and the README screenshots until a
real trace replaces them).

    example_report("flux-fill")                       # meta run, every block listed (19 double + 38 single)
    example_report("sd3-controlnet-inpaint", device="cuda")   # 24 joint + 23 ControlNet, CUDA badges

The values are plausible (the production topologies' shapes; parameter counts computed from the layer
widths), but they are TEST DATA: `run.weights` says "fixture" and the report shows a fixture banner. Nothing
here is a measurement.
"""

from __future__ import annotations

import copy

from fillscope.pipelines import PIPELINES
from fillscope.specs import shipped_config
from fillscope.trace.run import layout, layout_pages

FIXTURE_WEIGHTS = "fixture: synthetic test values (not a real trace)"


# stack name -> component kind, per family (the production configs the layouts' '{component.key}' read)
_KINDS = {"clip_l": "clip_l", "clip_g": "clip_g", "t5": "t5_xxl", "controlnet": "sd3_controlnet"}
_FAMILY_KINDS = {"flux-fill": {"transformer": "flux_fill_transformer", "vae": "flux_vae"},
                 "sd3-controlnet-inpaint": {"transformer": "sd3_transformer", "vae": "sd3_vae"}}


def production_configs(family: str) -> dict[str, dict]:
    """The shipped production config of each component of `family`'s stack."""
    kinds = {**_KINDS, **_FAMILY_KINDS[family]}
    return {name: shipped_config(kinds[name]) for name in PIPELINES[family].COMPONENTS}


def _pages(family: str, stage_blocks: dict, micro_rows: list) -> dict:
    """The production layout of `family` (trace/layouts/), filled with the production configs and these rows."""
    configs = production_configs(family)
    return layout_pages(layout(family, configs), configs, stage_blocks, micro_rows)


def _lin(i, o, bias=True):
    return i * o + (o if bias else 0)


def _fig(value, unit, prov, device, method, en, zh):
    return {"value": value, "unit": unit, "provenance": prov, "device": device if prov != "static-config" else "",
            "method": method, "label_en": en, "label_zh": zh}


def _run(device, steps=1):
    name = {"meta": "meta", "cpu": "Intel(R) Xeon(R) Platinum 8480+", "cuda": "NVIDIA H100 80GB HBM3"}[device]
    return {"height": 1024, "width": 1024, "batch": 1, "dtype": "bfloat16", "device": device, "device_name": name,
            "weights": FIXTURE_WEIGHTS, "steps_traced": steps, "python": "3.11.7", "torch": "2.14.1",
            "diffusers": "0.42.1", "transformers": "5.24.0", "created": "2026-11-29T18:30:00Z"}


def _measured(figs: dict, device: str, names_shapes: dict, method: str):
    for name, (shape, en, zh) in names_shapes.items():
        figs[name] = _fig(shape, "shape", "measured", device, method, en, zh)


# ------------------------------------------------------------------------------------------------- FLUX


def _flux_double_params():
    d, m = 3072, 12288
    ada = _lin(d, 6 * d)
    attn = 2 * 3 * _lin(d, d) + 2 * _lin(d, d) + 4 * 128
    ff = _lin(d, m) + _lin(m, d)
    return 2 * ada + attn + 2 * ff


def _flux_single_params():
    d, m = 3072, 12288
    return _lin(d, 3 * d) + _lin(d, m) + 3 * _lin(d, d) + 2 * 128 + _lin(d + m, d)


def _attn_flops(L, d):
    return 4 * L * L * d


def _flux(device: str) -> dict:
    dev = device
    how = f"forward hook on the module, shape read off the tensor ({dev})"
    figs: dict = {}
    _measured(figs, dev, {
        "clip_l.input_ids": ([1, 77], "CLIP-L token ids", "CLIP-L token ids"),
        "t5.input_ids": ([1, 512], "T5 token ids", "T5 token ids"),
        "clip_l.pooled": ([1, 768], "CLIP-L pooled (pooler_output)", "CLIP-L pooled 向量"),
        "t5.hidden": ([1, 512, 4096], "T5-XXL last hidden state", "T5-XXL 最后隐藏层"),
        "context.embedded": ([1, 512, 3072], "text context after context_embedder", "context_embedder 后的文本上下文"),
        "masked_image": ([1, 3, 1024, 1024], "masked source image", "遮罩后的源图"),
        "mask": ([1, 1, 1024, 1024], "pixel mask (1 = repaint)", "像素 mask（1 = 重绘）"),
        "masked_image_latents": ([1, 16, 128, 128], "VAE encode of the masked image (scaled)", "遮罩图的 VAE 编码（已缩放）"),
        "masked_image_latents.packed": ([1, 4096, 64], "masked-image latents, packed 2×2", "遮罩图 latent（2×2 打包）"),
        "mask.packed": ([1, 4096, 256], "pixel mask, 8×8 blocks → 64 ch, packed 2×2", "mask：8×8 块 → 64 通道，2×2 打包"),
        "fill_condition": ([1, 4096, 320], "fill condition = cat(latents 64, mask 256)", "Fill 条件 = cat(latent 64, mask 256)"),
        "noisy_latents.packed": ([1, 4096, 64], "noisy latent, packed 2×2", "加噪 latent（2×2 打包）"),
        "transformer.input": ([1, 4096, 384], "transformer input = cat(noisy 64, condition 320)", "Transformer 输入 = cat(noisy 64, 条件 320)"),
        "hidden.embedded": ([1, 4096, 3072], "image tokens after x_embedder", "x_embedder 后的图像 token"),
        "timestep": ([1], "timestep", "时间步"),
        "guidance": ([1], "guidance (embedded, distilled CFG)", "guidance（蒸馏 CFG 嵌入）"),
        "img_ids": ([4096, 3], "img_ids (RoPE positions)", "img_ids（RoPE 位置）"),
        "txt_ids": ([512, 3], "txt_ids", "txt_ids"),
        "transformer.output": ([1, 4096, 64], "transformer output (velocity, packed)", "Transformer 输出（速度，打包）"),
        "latent.unpacked": ([1, 16, 128, 128], "final latent, unpacked for decode", "解包后的最终 latent"),
        "decoded_image": ([1, 3, 1024, 1024], "decoded image", "解码图像"),
    }, how)
    figs["x_embedder.in_channels"] = _fig(384, "count", "static-config", "", "transformer/config.json in_channels",
                                          "x_embedder input channels", "x_embedder 输入通道")
    figs["vae.scaling_factor"] = _fig(0.3611, "", "static-config", "", "vae/config.json scaling_factor",
                                      "VAE scaling factor", "VAE 缩放因子")
    figs["trace.wall"] = _fig(4.83 if dev == "meta" else 1.92, "s", "measured", dev, "time.perf_counter around the traced run",
                              "traced run wall time", "追踪运行耗时")

    dp, sp = _flux_double_params(), _flux_single_params()
    L_img, L_txt, d = 4096, 512, 3072
    per_tok = 4 * d * d + 2 * d * 12288
    df = 2 * per_tok * (L_img + L_txt) + _attn_flops(L_img + L_txt, d)
    sf = 2 * (3 * d * d + d * 12288 + (d + 12288) * d) * (L_img + L_txt) + _attn_flops(L_img + L_txt, d)
    rope = "rotary (cos, sin) [4608, 128] ×2"
    double = [{"name": f"transformer_blocks.{i}", "class": "FluxTransformerBlock",
               "inputs": f"[1, 4096, 3072] [1, 512, 3072] temb [1, 3072] {rope}",
               "outputs": "[1, 512, 3072] [1, 4096, 3072]", "params": dp, "flops": float(df), "hits": 1,
               "wall_s": round(0.0031 + 0.00007 * (i % 5), 6) if dev != "cuda" else round(0.0118 + 0.0002 * (i % 3), 6),
               "provenance": "measured", "device": dev} for i in range(19)]
    single = [{"name": f"single_transformer_blocks.{i}", "class": "FluxSingleTransformerBlock",
               "inputs": f"[1, 4096, 3072] [1, 512, 3072] temb [1, 3072] {rope}",
               "outputs": "[1, 512, 3072] [1, 4096, 3072]", "params": sp, "flops": float(sf), "hits": 1,
               "wall_s": round(0.0019 + 0.00005 * (i % 4), 6) if dev != "cuda" else round(0.0079 + 0.0001 * (i % 3), 6),
               "provenance": "measured", "device": dev} for i in range(38)]

    def row(module, cls, inp, out, params, group):
        return {"module": module, "class": cls, "inputs": inp, "outputs": out, "params": params, "group": group,
                "provenance": "measured", "device": dev}
    ada = _lin(d, 6 * d)
    img, txt, emb = "[1, 4096, 3072]", "[1, 512, 3072]", "[1, 3072]"
    micro_rows = [
        row("norm1", "AdaLayerNormZero", f"{img} emb {emb}", f"{img} + 5 × {emb}", ada, "modulation"),
        row("norm1.linear", "Linear", emb, "[1, 18432]", ada, "modulation"),
        row("norm1_context", "AdaLayerNormZero", f"{txt} emb {emb}", f"{txt} + 5 × {emb}", ada, "modulation"),
        row("norm1_context.linear", "Linear", emb, "[1, 18432]", ada, "modulation"),
        row("attn", "FluxAttention", f"{img} {txt}", f"{img} {txt}", 6 * _lin(d, d) + 2 * _lin(d, d) + 512, "attention"),
        row("attn.to_q", "Linear", img, img, _lin(d, d), "attention"),
        row("attn.to_k", "Linear", img, img, _lin(d, d), "attention"),
        row("attn.to_v", "Linear", img, img, _lin(d, d), "attention"),
        row("attn.norm_q", "RMSNorm", "[1, 24, 4096, 128]", "[1, 24, 4096, 128]", 128, "attention"),
        row("attn.norm_k", "RMSNorm", "[1, 24, 4096, 128]", "[1, 24, 4096, 128]", 128, "attention"),
        row("attn.add_q_proj", "Linear", txt, txt, _lin(d, d), "attention"),
        row("attn.add_k_proj", "Linear", txt, txt, _lin(d, d), "attention"),
        row("attn.add_v_proj", "Linear", txt, txt, _lin(d, d), "attention"),
        row("attn.norm_added_q", "RMSNorm", "[1, 24, 512, 128]", "[1, 24, 512, 128]", 128, "attention"),
        row("attn.norm_added_k", "RMSNorm", "[1, 24, 512, 128]", "[1, 24, 512, 128]", 128, "attention"),
        row("attn.to_out.0", "Linear", img, img, _lin(d, d), "attention"),
        row("attn.to_add_out", "Linear", txt, txt, _lin(d, d), "attention"),
        row("norm2", "LayerNorm", img, img, 0, "mlp"),
        row("ff", "FeedForward", img, img, _lin(d, 12288) + _lin(12288, d), "mlp"),
        row("ff.net.0.proj", "Linear", img, "[1, 4096, 12288]", _lin(d, 12288), "mlp"),
        row("ff.net.2", "Linear", "[1, 4096, 12288]", img, _lin(12288, d), "mlp"),
        row("norm2_context", "LayerNorm", txt, txt, 0, "mlp"),
        row("ff_context", "FeedForward", txt, txt, _lin(d, 12288) + _lin(12288, d), "mlp"),
    ]

    transformer = 19 * dp + 38 * sp + _lin(384, d) + _lin(4096, d) + 2 * (_lin(256, d) + _lin(d, d)) \
        + _lin(768, d) + _lin(d, d) + _lin(d, 2 * d) + _lin(d, 64)
    t5, clip, vae, tie = 4_762_310_656, 123_060_480, 83_819_683, 32128 * 4096
    unique = transformer + t5 + clip + vae
    peak = int(22.65 * 2 ** 30) + 123_457
    figs["params.transformer"] = _fig(transformer, "params", "measured", dev, "sum of p.numel() over transformer.parameters()",
                                      "FLUX transformer parameters", "FLUX Transformer 参数量")
    figs["flops.per_step"] = _fig(float(19 * df + 38 * sf), "flop", "measured", dev, "torch.utils.flop_counter.FlopCounterMode, one denoiser step",
                                  "FLOPs per denoiser step", "每步 FLOPs")
    figs["peak_memory"] = _fig(peak, "bytes", "measured" if dev == "cuda" else "estimated", dev if dev == "cuda" else "",
                               "torch.cuda.max_memory_allocated()" if dev == "cuda" else "parameter bytes + largest live activation set from meta shapes",
                               "peak memory", "峰值显存")
    return {
        "schema": "fillscope.report/1",
        "model": "flux-fill",
        "title": "FLUX.1 Fill [dev]",
        "run": _run(dev),
        "figures": figs,
        "pages": _pages("flux-fill", {"double": double, "single": single}, micro_rows),
        "evidence": {
            "module": {"rows": 2029, "hits": 2051,
                       "per_component": {"transformer": {"rows": 1412, "hits": 1412}, "text_encoder_2 (T5)": {"rows": 412, "hits": 412},
                                         "text_encoder (CLIP-L)": {"rows": 126, "hits": 126}, "vae": {"rows": 79, "hits": 101}},
                       "definition": "a row = one distinct (module path, input shapes, output shapes); hits = forward calls "
                                     "seen by forward hooks with kwargs",
                       "provenance": "measured", "device": dev},
            "line": {"rows": 3267, "hits": 87837, "python": "3.11.7", "tracer": "sys.settrace",
                     "definition": "a row = one distinct (file, line, tensor shapes of the locals it bound); hits = line "
                                   "events in diffusers/transformers/fillscope code",
                     "provenance": "measured", "device": dev},
            "params": {"unique": unique, "tie_counted": unique + tie,
                       "convention_unique": "each tensor once (T5's shared embedding and encoder.embed_tokens count once)",
                       "convention_tie_counted": "per module, as model.num_parameters() per component adds them (ties counted twice)",
                       "per_component": {"transformer": {"unique": transformer, "tie_counted": transformer},
                                         "text_encoder_2 (T5)": {"unique": t5, "tie_counted": t5 + tie},
                                         "text_encoder (CLIP-L)": {"unique": clip, "tie_counted": clip},
                                         "vae": {"unique": vae, "tie_counted": vae}},
                       "provenance": "measured", "device": dev},
            "flops": {"per_step": float(19 * df + 38 * sf), "provenance": "measured", "device": dev,
                      "method": "torch.utils.flop_counter.FlopCounterMode over one denoiser step"},
            "peak_memory": {"bytes": peak, "provenance": "measured" if dev == "cuda" else "estimated",
                            "device": dev if dev == "cuda" else "",
                            "method": "torch.cuda.max_memory_allocated() over the run" if dev == "cuda" else
                            "estimated from meta shapes: parameter bytes + largest live activation set (bf16)"},
        },
    }


# ------------------------------------------------------------------------------------------------- SD3


def _sd3_joint_params(last=False):
    d, m = 1536, 6144
    ada = _lin(d, 6 * d)
    qkv = 3 * _lin(d, d)
    ff = _lin(d, m) + _lin(m, d)
    if last:  # context_pre_only: AdaLayerNormContinuous on the context, no context out/ff
        return ada + _lin(d, 2 * d) + 2 * qkv + _lin(d, d) + ff
    return 2 * ada + 2 * qkv + 2 * _lin(d, d) + 2 * ff


def _sd3(device: str) -> dict:
    dev = device
    how = f"forward hook on the module, shape read off the tensor ({dev})"
    figs: dict = {}
    _measured(figs, dev, {
        "clip_l.input_ids": ([1, 77], "CLIP-L token ids", "CLIP-L token ids"),
        "clip_g.input_ids": ([1, 77], "CLIP-G token ids", "CLIP-G token ids"),
        "t5.input_ids": ([1, 256], "T5 token ids (max_sequence_length 256)", "T5 token ids（最长 256）"),
        "clip_l.penultimate": ([1, 77, 768], "CLIP-L penultimate hidden", "CLIP-L 倒数第二层"),
        "clip_l.text_embeds": ([1, 768], "CLIP-L text_embeds", "CLIP-L text_embeds"),
        "clip_g.penultimate": ([1, 77, 1280], "OpenCLIP bigG penultimate hidden", "OpenCLIP bigG 倒数第二层"),
        "clip_g.text_embeds": ([1, 1280], "OpenCLIP bigG text_embeds", "OpenCLIP bigG text_embeds"),
        "t5.hidden": ([1, 256, 4096], "T5-XXL (max_sequence_length 256)", "T5-XXL（最长 256）"),
        "joint_context": ([1, 333, 4096], "joint context = cat(clip 77, t5 256)", "联合上下文 = cat(clip 77, t5 256)"),
        "pooled": ([1, 2048], "pooled = cat(L 768, G 1280)", "pooled = cat(L 768, G 1280)"),
        "masked_image": ([1, 3, 1024, 1024], "masked source image", "遮罩后的源图"),
        "mask": ([1, 1, 1024, 1024], "pixel mask (1 = repaint)", "像素 mask（1 = 重绘）"),
        "masked_image_latents": ([1, 16, 128, 128], "VAE encode of the masked image (scaled)", "遮罩图的 VAE 编码（已缩放）"),
        "keep_mask.latent": ([1, 1, 128, 128], "mask resized to the latent grid", "缩放到 latent 网格的 mask"),
        "inpaint_condition": ([1, 17, 128, 128], "inpaint condition = cat(masked latents 16, mask 1)", "Inpaint 条件 = cat(latent 16, mask 1)"),
        "initial_noise": ([1, 16, 128, 128], "noisy latent", "加噪 latent"),
        "hidden.patched": ([1, 4096, 1536], "image tokens after pos_embed (2×2 patches)", "pos_embed 后的图像 token（2×2 patch）"),
        "context.embedded": ([1, 333, 1536], "context after context_embedder", "context_embedder 后的上下文"),
        "timestep": ([1], "timestep", "时间步"),
        "controlnet.residual[0]": ([1, 4096, 1536], "ControlNet residual 0 (each of 23)", "ControlNet 残差 0（23 个之一）"),
        "transformer.output": ([1, 16, 128, 128], "transformer output (velocity)", "Transformer 输出（速度）"),
        "velocity.guided": ([1, 16, 128, 128], "guided velocity (after CFG)", "CFG 后的速度"),
        "latent": ([1, 16, 128, 128], "denoised latent", "去噪 latent"),
        "decoded_image": ([1, 3, 1024, 1024], "decoded image", "解码图像"),
    }, how)
    figs["controlnet.num_layers"] = _fig(23, "count", "static-config", "", "controlnet/config.json num_layers",
                                         "ControlNet layers", "ControlNet 层数")
    figs["controlnet.extra_conditioning_channels"] = _fig(1, "count", "static-config", "", "controlnet/config.json extra_conditioning_channels",
                                                          "extra conditioning channels (mask)", "额外条件通道（mask）")
    figs["trace.wall"] = _fig(6.12 if dev == "meta" else 2.41, "s", "measured", dev, "time.perf_counter around the traced run",
                              "traced run wall time", "追踪运行耗时")

    d, L = 1536, 4096 + 333
    jp, jl = _sd3_joint_params(), _sd3_joint_params(last=True)
    per_tok = 4 * d * d + 2 * d * 6144
    jf = 2 * per_tok * L + _attn_flops(L, d)
    jlf = 2 * per_tok * 4096 + 2 * 3 * d * d * 333 + _attn_flops(L, d)
    img, ctx, emb = "[1, 4096, 1536]", "[1, 333, 1536]", "[1, 1536]"
    joint = [{"name": f"transformer_blocks.{i}", "class": "JointTransformerBlock",
              "inputs": f"{img} {ctx} temb {emb}" + (" + controlnet residual " + img if i < 23 else ""),
              "outputs": f"{ctx} {img}" if i < 23 else f"None {img}",
              "params": jp if i < 23 else jl, "flops": float(jf if i < 23 else jlf), "hits": 1,
              "wall_s": round(0.0024 + 0.00006 * (i % 4), 6) if dev != "cuda" else round(0.0064 + 0.0001 * (i % 3), 6),
              "provenance": "measured", "device": dev} for i in range(24)]
    control = [{"name": f"transformer_blocks.{i}", "class": "JointTransformerBlock",
                "inputs": f"{img} {ctx} temb {emb}", "outputs": f"{ctx} {img}",
                "params": jp, "flops": float(jf), "hits": 1,
                "wall_s": round(0.0023 + 0.00005 * (i % 4), 6) if dev != "cuda" else round(0.0062 + 0.0001 * (i % 3), 6),
                "provenance": "measured", "device": dev} for i in range(23)]

    def row(module, cls, inp, out, params, group):
        return {"module": module, "class": cls, "inputs": inp, "outputs": out, "params": params, "group": group,
                "provenance": "measured", "device": dev}
    ada = _lin(d, 6 * d)
    micro_rows = [
        row("norm1", "AdaLayerNormZero", f"{img} emb {emb}", f"{img} + 5 × {emb}", ada, "modulation"),
        row("norm1.linear", "Linear", emb, "[1, 9216]", ada, "modulation"),
        row("norm1_context", "AdaLayerNormZero", f"{ctx} emb {emb}", f"{ctx} + 5 × {emb}", ada, "modulation"),
        row("attn", "Attention", f"{img} {ctx}", f"{img} {ctx}", 6 * _lin(d, d) + 2 * _lin(d, d), "attention"),
        row("attn.to_q", "Linear", img, img, _lin(d, d), "attention"),
        row("attn.to_k", "Linear", img, img, _lin(d, d), "attention"),
        row("attn.to_v", "Linear", img, img, _lin(d, d), "attention"),
        row("attn.add_q_proj", "Linear", ctx, ctx, _lin(d, d), "attention"),
        row("attn.add_k_proj", "Linear", ctx, ctx, _lin(d, d), "attention"),
        row("attn.add_v_proj", "Linear", ctx, ctx, _lin(d, d), "attention"),
        row("attn.to_out.0", "Linear", img, img, _lin(d, d), "attention"),
        row("attn.to_add_out", "Linear", ctx, ctx, _lin(d, d), "attention"),
        row("norm2", "LayerNorm", img, img, 0, "mlp"),
        row("ff", "FeedForward", img, img, _lin(d, 6144) + _lin(6144, d), "mlp"),
        row("ff.net.0.proj", "Linear", img, "[1, 4096, 6144]", _lin(d, 6144), "mlp"),
        row("ff.net.2", "Linear", "[1, 4096, 6144]", img, _lin(6144, d), "mlp"),
        row("norm2_context", "LayerNorm", ctx, ctx, 0, "mlp"),
        row("ff_context", "FeedForward", ctx, ctx, _lin(d, 6144) + _lin(6144, d), "mlp"),
    ]
    extras = _lin(64, d) + _lin(4096, d) + _lin(256, d) + _lin(d, d) + _lin(2048, d) + _lin(d, d)
    transformer = 23 * jp + jl + extras + _lin(d, 2 * d) + _lin(d, 64)
    controlnet = 23 * jp + extras + _lin(68, d) + 23 * _lin(d, d)
    clip_l, clip_g, t5, vae, tie = 123_650_304, 694_659_840, 4_762_310_656, 83_653_863, 32128 * 4096
    unique = transformer + controlnet + clip_l + clip_g + t5 + vae
    flops = float(23 * jf + jlf + 23 * jf)
    peak = int(9.01 * 2 ** 30) + 77_777
    figs["params.transformer"] = _fig(transformer, "params", "measured", dev, "sum of p.numel() over transformer.parameters()",
                                      "SD3 transformer parameters", "SD3 Transformer 参数量")
    figs["params.controlnet"] = _fig(controlnet, "params", "measured", dev, "sum of p.numel() over controlnet.parameters()",
                                     "ControlNet parameters", "ControlNet 参数量")
    figs["flops.per_step"] = _fig(flops, "flop", "measured", dev, "torch.utils.flop_counter.FlopCounterMode, one denoiser step",
                                  "FLOPs per denoiser step", "每步 FLOPs")
    figs["peak_memory"] = _fig(peak, "bytes", "measured" if dev == "cuda" else "estimated", dev if dev == "cuda" else "",
                               "torch.cuda.max_memory_allocated()" if dev == "cuda" else "parameter bytes + largest live activation set from meta shapes",
                               "peak memory", "峰值显存")
    return {
        "schema": "fillscope.report/1",
        "model": "sd3-controlnet-inpaint",
        "title": "SD3 ControlNet Inpainting",
        "run": _run(dev),
        "figures": figs,
        "pages": _pages("sd3-controlnet-inpaint", {"joint": joint, "controlnet": control}, micro_rows),
        "evidence": {
            "module": {"rows": 2707, "hits": 2728,
                       "per_component": {"transformer": {"rows": 1019, "hits": 1019}, "controlnet": {"rows": 991, "hits": 991},
                                         "text_encoder_3 (T5)": {"rows": 412, "hits": 412},
                                         "text_encoder_2 (CLIP-G)": {"rows": 166, "hits": 166},
                                         "text_encoder (CLIP-L)": {"rows": 52, "hits": 52}, "vae": {"rows": 67, "hits": 88}},
                       "definition": "a row = one distinct (module path, input shapes, output shapes); hits = forward calls "
                                     "seen by forward hooks with kwargs",
                       "provenance": "measured", "device": dev},
            "line": {"rows": 3999, "hits": 95984, "python": "3.11.7", "tracer": "sys.settrace",
                     "definition": "a row = one distinct (file, line, tensor shapes of the locals it bound); hits = line "
                                   "events in diffusers/transformers/fillscope code",
                     "provenance": "measured", "device": dev},
            "params": {"unique": unique, "tie_counted": unique + tie,
                       "convention_unique": "each tensor once (T5's shared embedding counted once)",
                       "convention_tie_counted": "per module, ties counted twice",
                       "per_component": {"transformer": transformer, "controlnet": controlnet, "text_encoder_3 (T5)": t5,
                                         "text_encoder_2 (CLIP-G)": clip_g, "text_encoder (CLIP-L)": clip_l, "vae": vae},
                       "provenance": "measured", "device": dev},
            "flops": {"per_step": flops, "provenance": "measured", "device": dev,
                      "method": "torch.utils.flop_counter.FlopCounterMode over one denoiser step (ControlNet + transformer)"},
            "peak_memory": {"bytes": peak, "provenance": "measured" if dev == "cuda" else "estimated",
                            "device": dev if dev == "cuda" else "",
                            "method": "torch.cuda.max_memory_allocated() over the run" if dev == "cuda" else
                            "estimated from meta shapes: parameter bytes + largest live activation set (bf16)"},
        },
    }


def example_report(model: str, device: str = "meta") -> dict:
    """A complete, schema-valid `fillscope.report/1` dict of synthetic-but-plausible values (a fresh copy)."""
    if device not in ("meta", "cpu", "cuda"):
        raise ValueError(f"device must be meta, cpu or cuda, not {device!r}")
    if model == "flux-fill":
        return copy.deepcopy(_flux(device))
    if model == "sd3-controlnet-inpaint":
        return copy.deepcopy(_sd3(device))
    raise ValueError(f"unknown model {model!r}")
