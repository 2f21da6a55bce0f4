"""ComfyUI's own FLUX.2 MODEL (comfy.model_base.Flux2: comfy.ldm.flux.model.Flux with image_model "flux2", from
UNETLoader, with native LoRA loaders and model patches applied) as the denoiser of FillScope's klein sampler.

FillScope keeps its schedule (FLUX.2's empirical mu), noise, CFG, per-step re-blend, soft mask and paste-back; only
the denoiser call changes: `klein_denoiser` returns an engine ExternalDenoiser whose call (the signature is in
fillscope/pipelines/klein.py sample_klein's docstring) converts FillScope's tokens to ComfyUI's layout, runs the
model's patched apply_model inside a NativeRun (nodes/native_model.py says why that level) and converts its output
back to FillScope's velocity tokens.

Conventions, ComfyUI 0.3.75 (comfy/model_base.py Flux2, comfy/ldm/flux/model.py, comfy/latent_formats.py Flux2) against
diffusers' Flux2Transformer2DModel as FillScope calls it:
- x [B,128,h,w]: FillScope's tokens [B,N,128] unpacked on the token grid (klein.unpack_tokens). ComfyUI's flux2 has
  patch_size 1, so process_img's "b c (h 1) (w 1) -> b (h w) c" is the same row-major order as pack_tokens. The
  latent needs no conversion: ComfyUI's Flux2 latent format is the identity (process_in / process_out), and its
  latent is the BatchNorm-normalised 2x2-patched [B,128,H/16,W/16] tensor FillScope samples (fillscope/decode.py:
  for klein ComfyUI's LATENT is the same tensor).
- sigma: apply_model's t = the sigma in [0, 1] (ModelType.FLUX: model_sampling.timestep(sigma) = sigma;
  calculate_input(sigma, x) = x); the diffusion model embeds timestep_embedding(1000 * sigma) as diffusers'
  transformer embeds 1000 * timestep with timestep = sigma: FillScope passes the same value to both.
- c_crossattn: the Qwen3 stacked states [B,512,D] as FillScope encoded them (QWEN3_MAX_LENGTH = 512 tokens, padding
  included). ComfyUI's Flux2.extra_conds left-pads a shorter CONDITIONING to 512; FillScope calls apply_model itself and
  passes its 512 as they are. Text ids: ComfyUI's _forward builds (0, 0, 0, index) for a 4-axis model, as
  KleinText.text_ids; no attention mask in either.
- references: each reference image's tokens as one entry of ComfyUI's `ref_latents` ([B,128,h',w'] each, in the
  condition's order) with ref_latents_method "index": reference k (1-based) at time index k * ref_index_scale and
  (row, col) from 0, the image being generated at (0, row, col). FillScope's ids are (10 k, row, col, 0) (diffusers'
  Flux2 pipelines: the source at 10, a reference at 20; the edit's images at 10, 20, 30), so they are equal when the
  model's ref_index_scale is 10 (model_detection sets 10.0 for every flux2 file); `reference_grids` checks FillScope's
  ids against that rule before anything is placed. The noisy tokens come first, the references after, the first N
  outputs kept: the same order as FillScope's concatenation.
- guidance: passed only when the model embeds it (klein does not: no guidance_in weights, guidance_embed False).
- output: the denoised latent (CONST: x - v * sigma); the velocity is (x - denoised) / sigma, packed back.

ComfyUI 0.3.75 cannot load a klein file itself: model_detection's flux2 branch fixes FLUX.2 [dev]'s 48 heads (klein 4B
is 24 x 128, 9B 32 x 128; the other values it sets, and the widths and depths it reads, are klein's), and
comfy.ldm.flux.model.Flux then refuses the config (4B: rope axes 128 for a head of 64; 9B: 4096 not divisible by 48).
A klein MODEL comes from a newer ComfyUI, or any code that builds ComfyUI's Flux2 with klein's config;
`check_klein_model` refuses a MODEL whose geometry cannot be klein's, naming that version issue.
"""

from __future__ import annotations

from ..fillscope.checkpoints.klein import FLUX2_DEV_WIDTH, KLEIN_WIDTHS
from ..fillscope.errors import FillScopeInputError
from ..fillscope.pipelines.klein import SOURCE_TIME_OFFSET, pack_tokens, unpack_tokens
from ..fillscope.sampling import ExternalDenoiser
from ..fillscope.specs import shipped_config
from .native_model import NativeRun, require_flow_model

FIX = ("load the FLUX.2 [klein] 4B or 9B model with UNETLoader (a ComfyUI that detects klein: 0.3.75 gives every "
       "FLUX.2 file FLUX.2 [dev]'s 48 heads), or wire FillScope's klein transformer instead.")


def version_issue() -> str:
    """What ComfyUI 0.3.75 does to a klein file, with klein's head splits from FillScope's shipped configs."""
    shipped = {title: shipped_config("klein_transformer", variant) for variant, title in KLEIN_WIDTHS.values()}
    splits = ", ".join(f"{t} {c['num_attention_heads']} x {c['attention_head_dim']}" for t, c in shipped.items())
    return ("ComfyUI 0.3.75's model_detection fixes FLUX.2 [dev]'s 48 heads for every FLUX.2 file (klein's heads x "
            f"head width: {splits}), so this MODEL's attention heads and RoPE axes are not the weights'")

REF_METHOD = "index"  # FillScope's references sit at time offsets 10, 20, ...: ComfyUI's "index" method


def _geometry(params) -> tuple[int, int, int, list]:
    """(hidden, heads, head width, rope axes) of a comfy.ldm.flux.model.Flux's params."""
    hidden, heads = int(params.hidden_size), int(params.num_heads)
    return hidden, heads, hidden // heads if heads else 0, [int(a) for a in params.axes_dim]


def _check_geometry(name: str, params) -> None:
    """Attention heads x head width = hidden, klein's 4 RoPE axes summing to the head width, and at klein's published
    widths the published split; otherwise the config did not come from the weights (ComfyUI 0.3.75's detection)."""
    hidden, heads, head, axes = _geometry(params)
    split = f"{hidden / heads:g}" if heads else "?"
    told = f"hidden {hidden} = {heads} heads x {split} with RoPE axes {axes} (sum {sum(axes)})"
    if hidden == FLUX2_DEV_WIDTH:
        raise FillScopeInputError(name, f"is a FLUX.2 [dev] MODEL ({told}), not FLUX.2 [klein].", FIX)
    if not heads or hidden % heads or sum(axes) != head or len(axes) != 4:
        raise FillScopeInputError(name, f"has a config that cannot be klein's: {told}; klein runs heads x head width "
                                        f"= hidden and 4 RoPE axes summing to the head width. {version_issue()}.", FIX)
    if hidden in KLEIN_WIDTHS:
        variant, title = KLEIN_WIDTHS[hidden]
        shipped = shipped_config("klein_transformer", variant)
        want = (shipped["num_attention_heads"], shipped["attention_head_dim"], list(shipped["axes_dims_rope"]))
        if (heads, head, axes) != want:
            raise FillScopeInputError(name, (
                f"has {title}'s width but {heads} heads x {head} with RoPE axes {axes}; {title} runs {want[0]} heads x "
                f"{want[1]} with axes {want[2]}. {version_issue()}."), FIX)


def reference_grids(reference_ids, scale: float, name: str = "condition") -> list[tuple[int, int]]:
    """The (h', w') token grid of each reference, in order, from FillScope's reference ids [B,Nref,4], checked against
    the positions ComfyUI's "index" method gives its ref_latents (reference k at (k * scale, row, col, 0), rows and
    columns from 0, row-major): where they differ the native model would see other positions than FillScope's
    transformer, and this refuses (naming the first difference)."""
    import torch

    ids = reference_ids[0].detach().to("cpu", torch.float64)  # every batch row has the same positions
    grids, start, k = [], 0, 0
    while start < ids.shape[0]:
        k += 1
        t = ids[start, 0].item()
        end = start + int((ids[start:, 0] == t).long().cumprod(0).sum().item())
        block = ids[start:end]
        rh, rw = int(block[:, 1].max().item()) + 1, int(block[:, 2].max().item()) + 1
        rows = torch.arange(rh, dtype=torch.float64).repeat_interleave(rw)
        cols = torch.arange(rw, dtype=torch.float64).repeat(rh)
        comfy = torch.stack([torch.full_like(rows, k * scale), rows, cols, torch.zeros_like(rows)], dim=-1)
        if block.shape != comfy.shape or not torch.equal(block, comfy):
            raise FillScopeInputError(name, (
                f"reference {k} has positions ComfyUI's '{REF_METHOD}' method does not give (FillScope: time offset "
                f"{t:g}, {block.shape[0]} tokens; ComfyUI: time {k * scale:g}, a {rh}x{rw} grid from 0): the native "
                "MODEL would not see what FillScope's transformer sees."),
                "wire FillScope's klein transformer instead.")
        grids.append((rh, rw))
        start = end
    return grids


def check_klein_model(patcher, text, condition, name: str = "model", negative=None) -> dict:
    """The native MODEL against FillScope's condition and texts, before anything is placed or sampled: a FLUX.2 model
    (comfy.model_base.Flux2 with flow-matching sampling) whose geometry can be klein's (_check_geometry), patch 1 and
    in_channels = out_channels = the condition's token width (128 published), context_in_dim = the prompts' width
    (Qwen3 stacked states), ref_index_scale = FillScope's time offset 10 and the condition's reference positions as
    ComfyUI computes them. Returns the config in diffusers' names (ExternalDenoiser.config) with the references' grids
    (`reference_grids`, read by klein_denoiser)."""
    import comfy.ldm.flux.model
    import comfy.model_base

    model = getattr(patcher, "model", None)
    if not isinstance(model, comfy.model_base.Flux2):
        what = ("a FLUX.1 MODEL (comfy.model_base.Flux)" if isinstance(model, comfy.model_base.Flux)
                else f"a {type(model).__name__} MODEL")
        raise FillScopeInputError(name, f"is {what}; the klein sampler runs a FLUX.2 [klein] model "
                                        "(comfy.model_base.Flux2).", FIX)
    require_flow_model(patcher, comfy.model_base.Flux2, (), "klein", FIX, name)  # its sampling
    net = getattr(model, "diffusion_model", None)
    if not isinstance(net, comfy.ldm.flux.model.Flux) or not getattr(net.params, "global_modulation", False):
        raise FillScopeInputError(name, f"holds a {type(net).__name__} without FLUX.2's global modulation, not "
                                        "ComfyUI's FLUX.2 transformer.", FIX)
    params = net.params
    _check_geometry(name, params)
    p = int(params.patch_size)
    in_ch, out_ch = int(params.in_channels) * p * p, int(params.out_channels) * p * p
    width = condition.references.shape[-1]  # the VAE's latent_channels x 2x2 (128 published)
    if p != 1 or in_ch != width or out_ch != width:
        raise FillScopeInputError(name, (
            f"reads in_channels {params.in_channels} / returns out_channels {params.out_channels} per pixel at patch "
            f"{p}, but klein's tokens are the condition's {width}-channel latents at patch 1 (FLUX.2: 32 VAE channels "
            "x 2x2 = 128)."), "load the klein model that belongs with the condition's FLUX.2 VAE, or " + FIX)
    reads = int(params.context_in_dim)
    for input_name, t in (("positive", text), ("negative", negative)):
        states = getattr(t, "embeds", None)
        if t is not None and (getattr(states, "ndim", 0) != 3 or states.shape[-1] != reads):
            raise FillScopeInputError(input_name, (
                f"is {list(getattr(states, 'shape', []))}, but the {name} input's MODEL reads context_in_dim {reads} "
                "(klein 4B: 7680 = 3 x Qwen3-4B's 2560; 9B: 12288 = 3 x Qwen3-8B's 4096)."),
                "wire the Qwen3 Encode of the encoder that belongs with this klein model.")
    scale = float(params.ref_index_scale)
    if scale != SOURCE_TIME_OFFSET:
        raise FillScopeInputError(name, (
            f"places reference images at time index k x {scale:g} (ref_index_scale); klein's references sit at "
            f"k x {SOURCE_TIME_OFFSET} (ComfyUI's model_detection sets 10 for FLUX.2)."), FIX)
    if condition.references.device.type == "meta":
        raise FillScopeInputError("condition", "holds meta tensors (shapes only, no values): ComfyUI's MODEL samples "
                                  "real values.", "load the FLUX.2 VAE with real weights for the condition, or wire "
                                  "FillScope's klein transformer for a meta run.")
    grids = reference_grids(condition.reference_ids, scale)
    _, heads, head, axes = _geometry(params)
    return {"in_channels": in_ch, "out_channels": out_ch, "joint_attention_dim": reads,
            "guidance_embeds": bool(params.guidance_embed), "num_attention_heads": heads, "attention_head_dim": head,
            "axes_dims_rope": axes, "num_layers": int(params.depth),
            "num_single_layers": int(params.depth_single_blocks), "reference_grids": grids}


def klein_denoiser(run: NativeRun, config: dict, name: str = "model") -> ExternalDenoiser:
    """The engine's ExternalDenoiser over the run's apply_model (the module docstring has the conventions)."""
    import torch

    grids = list(config["reference_grids"])

    def call(tokens, t, guidance, text, grid, references, reference_ids, part):
        """tokens [B,N,128] -> x [B,128,h,w], references [B,Nref,128] -> ref_latents [[B,128,h',w'], ...];
        velocity [B,N,128]."""
        h, w = grid
        x = unpack_tokens(tokens, h, w).float()
        refs, start = [], 0
        for rh, rw in grids:
            refs.append(unpack_tokens(references[:, start:start + rh * rw], rh, rw))
            start += rh * rw
        if start != references.shape[1]:  # the engine's references are the condition's that check_klein_model read
            raise FillScopeInputError("condition", f"holds {references.shape[1]} reference tokens but the {name} "
                                      f"input was checked with {start}.", "run the sampler again.")
        sigma = t.float()  # [B]
        kwargs = {"c_crossattn": text}
        if refs:
            kwargs.update(ref_latents=refs, ref_latents_method=REF_METHOD)
        if guidance is not None:
            kwargs["guidance"] = guidance
        denoised = run.apply(x, sigma, (1,) if part == "uncond" else (0,), **kwargs)
        velocity = (x - denoised.float()) / sigma.view(-1, 1, 1, 1)  # CONST: denoised = x - v * sigma
        return pack_tokens(velocity).to(tokens.dtype)

    return ExternalDenoiser(call=call, config=config, device=run.model_patcher.load_device, dtype=torch.float32,
                            input_name=name, schedule=run.set_sigmas)
