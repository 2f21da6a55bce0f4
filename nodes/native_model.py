"""ComfyUI's own MODEL (a ModelPatcher from UNETLoader / CheckpointLoaderSimple, with native LoRA loaders and model
patches applied) as the denoiser of FillScope's FLUX Fill sampler.

FillScope keeps its schedule, noise, guidance, differential diffusion and paste-back; only the denoiser call
changes: `flux_fill_denoiser` returns an engine ExternalDenoiser whose call converts FillScope's packed tokens to
ComfyUI's layout, runs the native model and converts its output back to FillScope's velocity tokens.

Which level is called, and why: `patcher.model.apply_model` (comfy.model_base.BaseModel.apply_model), the call
ComfyUI's own samplers make (comfy/samplers.py calc_cond_batch), with the `transformer_options` they build from the
patcher (its model_options' transformer_options, its wrappers and callbacks as sampler_helpers.prepare_model_patcher
adds them, then cond_or_uncond / sigmas per call) and `model_options["model_function_wrapper"]` when a patch set one.
At that level everything a user can hang on a MODEL applies: LoRA and other weight patches and object patches (put on
the weights by comfy.model_management.load_models_gpu, which also places the model under ComfyUI's memory
management), APPLY_MODEL and DIFFUSION_MODEL wrappers, attention / block patches read from transformer_options by
comfy.ldm.flux.model, the model's manual-cast dtype and its model_sampling (timestep conversion). Calling
`diffusion_model` directly would skip the APPLY_MODEL wrappers, the model function wrapper, the cast and a patched
model_sampling.

Conventions (ComfyUI 0.3.75 comfy/model_base.py Flux, comfy/ldm/flux/model.py, comfy/model_sampling.py):
- x [B,16,h,w] unpacked latents (the model patchifies 2x2 itself, channel c*4 + py*2 + px: FillScope's packing);
  c_concat [B,16+64,h,w] = masked-image latents (already scaled, as process_latent_in gives them) ++ the 8x8-packed
  mask (channel dy*8 + dx), which is exactly FillScope's [B,N,384] tokens unpacked as 96 channels;
- t = sigma in [0, 1] (ModelType.FLUX: model_sampling.timestep(sigma) = sigma; the diffusion model scales by 1000
  in its timestep embedding, as diffusers' transformer does with FillScope's t); guidance the plain number (30);
- the output is the denoised latent (CONST: x - v * sigma); the velocity is (x - denoised) / sigma, packed back.
"""

from __future__ import annotations

from ..fillscope.errors import FillScopeInputError
from ..fillscope.sampling import ExternalDenoiser
from ..fillscope.specs import pack_latents, unpack_latents

FIX = "load the FLUX.1 Fill model (flux1-fill-dev) with UNETLoader, or wire FillScope's FLUX Fill transformer instead."


def require_one_denoiser(transformer, model, family: str, native: str) -> None:
    """Exactly one of a sampler's `transformer` (FillScope's) and `model` (ComfyUI's MODEL) inputs is wired."""
    if (transformer is None) != (model is None):
        return
    raise FillScopeInputError("transformer", (
        "is wired and so is 'model'" if model is not None else "is empty and so is 'model'")
        + f": the sampler runs exactly one denoiser, FillScope's {family} transformer or ComfyUI's MODEL.",
        f"wire FillScope's {family} transformer to 'transformer' or ComfyUI's {native} MODEL to 'model', not both.")


def require_flow_model(patcher, model_class, refused: tuple, sampler: str, fix: str, name: str = "model"):
    """The MODEL's model (comfy.model_base) is a `model_class` (and none of `refused`) sampled by flow matching
    (CONST), as every FillScope sampler is; returns it."""
    import comfy.model_sampling

    model = getattr(patcher, "model", None)
    if not isinstance(model, model_class) or isinstance(model, refused):
        raise FillScopeInputError(name, f"is a {type(model).__name__} MODEL; the {sampler} sampler runs a "
                                        f"{model_class.__module__}.{model_class.__name__} model.", fix)
    if not isinstance(model.model_sampling, comfy.model_sampling.CONST):
        raise FillScopeInputError(name, f"samples as {type(model.model_sampling).__name__}, not flow matching (CONST).",
                                  fix)
    return model


def unet_config(patcher) -> dict:
    return dict(getattr(getattr(patcher.model, "model_config", None), "unet_config", None) or {})


def check_flux_fill_model(patcher, flux_text, condition, name: str = "model") -> dict:
    """The native MODEL against FillScope's condition and text, before anything is placed or sampled: a FLUX model
    (comfy.model_base.Flux with flow-matching sampling), in_channels = (noisy 4C + condition) / 4 per pixel (96 for
    the published Fill), out_channels C, context_in_dim = the T5 width, vec_in_dim = the pooled width. Returns the
    widths in diffusers' names (ExternalDenoiser.config)."""
    import comfy.model_base

    require_flow_model(patcher, comfy.model_base.Flux, (comfy.model_base.Flux2,), "FLUX Fill", FIX, name)
    cfg = unet_config(patcher)
    p = int(cfg.get("patch_size", 2))
    in_ch, out_ch = cfg.get("in_channels"), cfg.get("out_channels", cfg.get("in_channels"))
    noisy, width = condition.latent_channels * p * p, condition.condition.shape[-1]
    gives = noisy + width
    if in_ch is None or in_ch * p * p != gives:
        raise FillScopeInputError(name, (
            f"takes in_channels {in_ch} per pixel ({in_ch * p * p if in_ch else '?'} per {p}x{p} token), but the "
            f"condition gives noisy {noisy} + condition {width} = {gives} per token ({gives // (p * p)} per pixel: "
            "a FLUX.1 Fill model reads 96 = 16 noisy + 16 masked image + 64 mask)."), FIX)
    if out_ch * p * p != noisy:
        raise FillScopeInputError(name, f"returns out_channels {out_ch}, but the condition's VAE has "
                                        f"{condition.latent_channels} latent channels.", FIX)
    hidden, pooled = flux_text.t5_hidden, flux_text.pooled
    want = (cfg.get("context_in_dim"), cfg.get("vec_in_dim"))
    if getattr(hidden, "ndim", 0) != 3 or getattr(pooled, "ndim", 0) != 2 or (hidden.shape[-1], pooled.shape[-1]) != want:
        raise FillScopeInputError("flux_text", (
            f"is {list(getattr(hidden, 'shape', []))} with a pooled vector {list(getattr(pooled, 'shape', []))}, but "
            f"the {name} input's MODEL reads context_in_dim {want[0]} (T5 width) and vec_in_dim {want[1]} (pooled "
            "CLIP-L width)."), "encode the prompt with the text encoders this FLUX model was trained with.")
    return {"in_channels": in_ch * p * p, "out_channels": out_ch * p * p, "joint_attention_dim": want[0],
            "pooled_projection_dim": want[1], "guidance_embeds": bool(cfg.get("guidance_embed", False))}


class NativeRun:
    """One sampling run of a native MODEL, as ComfyUI's CFGGuider holds one (comfy/samplers.py): the patcher, the
    model_options of the run (the patcher's wrappers and callbacks merged into its transformer_options, as
    sampler_helpers.prepare_model_patcher does) and `apply`, the denoiser call. It is the `class_obj` the MODEL's
    OUTER_SAMPLE wrappers see (executor.class_obj.model_patcher / .model_options), so a wrapper written for ComfyUI's
    samplers (FillScope Inspect Model's run record, another pack's) wraps FillScope's sampling run as well."""

    def __init__(self, patcher):
        import uuid

        import comfy.model_patcher
        import comfy.patcher_extension as pe

        self.model_patcher = patcher
        self.model = patcher.model
        self.model_options = comfy.model_patcher.create_model_options_clone(patcher.model_options)
        self.transformer_options = self.model_options.setdefault("transformer_options", {})
        pe.merge_nested_dicts(self.transformer_options.setdefault("wrappers", {}), patcher.wrappers, copy_dict1=False)
        pe.merge_nested_dicts(self.transformer_options.setdefault("callbacks", {}), patcher.callbacks,
                              copy_dict1=False)
        self.call_id = uuid.uuid4()

    def set_sigmas(self, sigmas) -> None:
        """The run's schedule, as ComfyUI's samplers put it in transformer_options for the model's wrappers."""
        self.transformer_options["sample_sigmas"] = sigmas

    def apply(self, x, sigma, cond_or_uncond=(0,), **kwargs):
        """The model's apply_model(x, sigma, **kwargs) -> denoised, as calc_cond_batch calls it: prepare_state(sigma),
        transformer_options with cond_or_uncond (0 cond, 1 uncond per batch chunk), uuids and sigmas, and the
        model_function_wrapper when a patch set one. x and sigma float32 (ComfyUI's samplers keep their latents in
        float32; apply_model casts)."""
        patcher, model = self.model_patcher, self.model
        patcher.prepare_state(sigma)
        parts = list(cond_or_uncond)
        options = dict(self.transformer_options)
        options.update(cond_or_uncond=parts, uuids=[self.call_id] * len(parts), sigmas=sigma)
        kwargs["transformer_options"] = options
        wrapper = self.model_options.get("model_function_wrapper")
        if wrapper is not None:
            return wrapper(model.apply_model, {"input": x, "timestep": sigma, "c": kwargs, "cond_or_uncond": parts})
        return model.apply_model(x, sigma, **kwargs)


def run_native(patcher, latent_shape, sample):
    """`sample(run: NativeRun)` for one sampling run of the native MODEL `patcher`, as ComfyUI's samplers run a MODEL
    (comfy/samplers.py CFGGuider.sample / outer_sample): placed under ComfyUI's model management (load_models_gpu:
    weight patches such as LoRAs applied; the memory the model says a step on `latent_shape` [B,C,h,w] needs, as
    comfy.sampler_helpers.estimate_memory asks), inside the MODEL's OUTER_SAMPLE wrappers, pre_run before the first
    step, cleanup after the run (also on error or interrupt). Returns what `sample` returns."""
    import comfy.model_management as mm
    import comfy.patcher_extension as pe

    run = NativeRun(patcher)

    def outer_sample(*_args, **_kwargs):  # loads inside the wrappers, as CFGGuider.outer_sample does
        need = patcher.model.memory_required(list(latent_shape))
        mm.load_models_gpu([patcher], memory_required=need, minimum_memory_required=need)
        patcher.pre_run()
        try:
            return sample(run)
        finally:
            patcher.cleanup()

    wrappers = pe.get_all_wrappers(pe.WrappersMP.OUTER_SAMPLE, run.model_options, is_model_options=True)
    return pe.WrapperExecutor.new_class_executor(outer_sample, run, wrappers).execute()


def flux_fill_denoiser(run: NativeRun, config: dict, name: str = "model") -> ExternalDenoiser:
    """The engine's ExternalDenoiser over the run's apply_model (the module docstring says why that level)."""
    import torch

    def call(tokens, t, guidance, text, grid):
        """tokens [B,N,384] -> x [B,16,h,w] + c_concat [B,80,h,w]; velocity [B,N,64]."""
        lh, lw = grid
        hidden, pooled = text
        full = unpack_latents(tokens, lh, lw)  # [B,96,h,w] = noisy 16 ++ masked latents 16 ++ mask 64
        c = config["out_channels"] // 4
        x, concat = full[:, :c].float(), full[:, c:]
        sigma = t.float()  # [B]
        kwargs = {"c_concat": concat, "c_crossattn": hidden, "y": pooled}
        if guidance is not None:
            kwargs["guidance"] = guidance
        denoised = run.apply(x, sigma, (0,), **kwargs)
        velocity = (x - denoised.float()) / sigma.view(-1, 1, 1, 1)  # CONST: denoised = x - v * sigma
        return pack_latents(velocity).to(tokens.dtype)

    return ExternalDenoiser(call=call, config=config, device=run.model_patcher.load_device, dtype=torch.float32,
                            input_name=name, schedule=run.set_sigmas)
