"""ComfyUI's own MODEL (an SD3 / SD3.5 model from CheckpointLoaderSimple or UNETLoader, with native LoRA loaders and
model patches applied) as the denoiser of FillScope's SD3 ControlNet inpaint sampler.

FillScope keeps its schedule, noise, CFG, its own alimama ControlNet (scale, start / end), differential diffusion and
paste-back; only the MMDiT call changes: `sd3_denoiser` returns an engine ExternalDenoiser whose call runs the native
model through nodes/native_model.py's NativeRun.apply (the level ComfyUI's samplers call, and why: that module's
docstring) and gives FillScope's velocity back.

Conventions (ComfyUI 0.3.75 comfy/model_base.py SD3, comfy/ldm/modules/diffusionmodules/mmdit.py, comfy/model_sampling.
py ModelSamplingDiscreteFlow + CONST), against diffusers' SD3Transformer2DModel as FillScope runs it:
- x [B,16,h,w] the latents as they are (CONST.calculate_input returns them unscaled; the MMDiT patchifies 2x2 itself);
- sigma in [0, 1]: model_sampling.timestep(sigma) = sigma * multiplier (1000), whatever the model's shift (the shift
  only moves ComfyUI's own schedule), which is the timestep FillScope gives diffusers' transformer (1000 * sigma);
  both embed it with the same sinusoidal frequencies (cos first);
- c_crossattn = the joint context [B,L,4096], y = the pooled vector [B,2048] (the model's y_embedder);
- the ControlNet: MMDiT.forward_core_with_concat adds control["output"][i] to the image tokens after joint block i
  (`x += add`, for i < len(output), None skipped). FillScope's residuals (diffusers' token order, row-major over the
  2x2 patches, as ComfyUI's PatchEmbed flattens) go there block by block as the engine maps them
  (sd3_controlnet.block_residuals: one_to_one, or diffusers' interval rule with the context_pre_only last block
  skipped), so both mappings are the ones FillScope's own transformer applies;
- CFG: FillScope's [negative, positive] batch is one call with cond_or_uncond [1, 0] (ComfyUI's uncond = 1), so
  patches that read it see the chunks they would under ComfyUI's sampler;
- the output is the denoised latent (CONST: x - v * sigma); the velocity is (x - denoised) / sigma.
"""

from __future__ import annotations

from ..fillscope.errors import FillScopeInputError
from ..fillscope.pipelines.sd3_controlnet import check_side_limits, check_widths
from ..fillscope.sampling import ExternalDenoiser
from .native_model import NativeRun, require_flow_model, unet_config

FIX = ("load an SD3 / SD3.5 checkpoint with CheckpointLoaderSimple (or its diffusion model with UNETLoader), or wire "
       "FillScope's SD3 transformer to 'transformer' instead.")


def sd3_config(patcher) -> dict:
    """The native SD3 model's widths in diffusers' SD3Transformer2DModel names (what the engine's checks read): from
    its unet_config and the MMDiT built from it (comfy's MMDiT fixes the head width: hidden = 64 * depth, depth
    heads; num_blocks joint blocks, depth unless set)."""
    cfg = unet_config(patcher)
    dm = patcher.model.diffusion_model
    hidden, heads = int(dm.hidden_size), int(dm.num_heads)
    context = (cfg.get("context_embedder_config") or {}).get("params", {}).get("in_features")
    in_ch = cfg.get("in_channels")
    return {"in_channels": in_ch, "out_channels": int(getattr(dm, "out_channels", None) or cfg.get("out_channels") or in_ch),
            "joint_attention_dim": context, "pooled_projection_dim": cfg.get("adm_in_channels"),
            "num_layers": len(dm.joint_blocks), "num_attention_heads": heads, "attention_head_dim": hidden // heads,
            "caption_projection_dim": hidden, "patch_size": int(cfg.get("patch_size", 2)),
            "pos_embed_max_size": cfg.get("pos_embed_max_size")}


def check_sd3_model(patcher, positive, condition, name: str = "model", *, negative=None, cfg: float = 1.0,
                    controlnet=None) -> dict:
    """The native MODEL against FillScope's texts, condition and ControlNet, before anything is placed or sampled: an
    SD3 model (comfy.model_base.SD3 with flow-matching sampling, CONST); in_channels and out_channels = the
    condition's latent channels; its context width = the texts' width and adm_in_channels = the pooled width (the
    negative too under CFG); with `controlnet`, the engine's own checks on the config (the ControlNet's widths and
    token width against it, the latent grid against its patch size and position-embedding grid). Returns the config
    in diffusers' names (ExternalDenoiser.config)."""
    import comfy.model_base

    require_flow_model(patcher, comfy.model_base.SD3, (), "SD3 ControlNet inpaint", FIX, name)
    config = sd3_config(patcher)
    c = condition.latent_channels
    if config["in_channels"] != c or config["out_channels"] != c:
        raise FillScopeInputError(name, (
            f"takes in_channels {config['in_channels']} and returns out_channels {config['out_channels']}, but the "
            f"condition's VAE has {c} latent channels."), FIX + " Its VAE must be the one the condition used.")
    want = (config["joint_attention_dim"], config["pooled_projection_dim"])
    for input_name, text in (("positive", positive), ("negative", negative if cfg > 1.0 else None)):
        if text is None:
            continue
        context, pooled = text.context, text.pooled
        shapes = (list(getattr(context, "shape", [])), list(getattr(pooled, "shape", [])))
        if (getattr(context, "ndim", 0) != 3 or getattr(pooled, "ndim", 0) != 2
                or (context.shape[-1], pooled.shape[-1]) != want):
            raise FillScopeInputError(input_name, (
                f"is a joint context {shapes[0]} with a pooled vector {shapes[1]}, but the {name} input's MODEL reads "
                f"a context of width {want[0]} (its context_embedder) and a pooled vector of width {want[1]} "
                "(adm_in_channels)."), "encode the prompt with the text encoders this SD3 model was trained with "
                                       "(CLIP-L, CLIP-G and T5-XXL).")
    if controlnet is not None:  # the engine's config checks, here before the ControlNet and the MODEL are placed
        external = ExternalDenoiser(call=None, config=config, device=None, dtype=None, input_name=name)
        check_widths(external, controlnet, condition)
        check_side_limits(external, controlnet, condition)
    return config


def sd3_denoiser(run: NativeRun, config: dict, name: str = "model") -> ExternalDenoiser:
    """The engine's ExternalDenoiser over the run's apply_model (the module docstring has the conventions); its call
    is the one sample_sd3_controlnet_inpaint documents: (x, sigma, context, pooled, control, cond_or_uncond) ->
    velocity [n,C,h,w]."""
    import torch

    model = run.model
    compute = model.manual_cast_dtype or model.get_dtype()  # the dtype the MMDiT's image tokens are computed in

    def call(x, sigma, context, pooled, control, cond_or_uncond):
        x, sigma = x.float(), sigma.float()
        kwargs = {"c_crossattn": context, "y": pooled}
        if control is not None:  # per joint block: added to its image tokens (None: nothing)
            kwargs["control"] = {"output": [None if r is None else r.to(device=x.device, dtype=compute)
                                            for r in control]}
        denoised = run.apply(x, sigma, cond_or_uncond, **kwargs)
        return (x - denoised.float()) / sigma.view(-1, 1, 1, 1)  # CONST: denoised = x - v * sigma

    return ExternalDenoiser(call=call, config=config, device=run.model_patcher.load_device, dtype=torch.float32,
                            input_name=name, schedule=run.set_sigmas)
