"""16-channel FLUX/SD3 VAEs and the 32-channel FLUX.2 VAE (LDM/BFL or diffusers keys), standalone or inside a
checkpoint; VAEs of other latent widths are named, not loaded. The FLUX.2 VAE is told by its BatchNorm statistics
(bn.running_mean / bn.running_var over the 2x2-patchified latent: 4 x 32 = 128 channels); BFL's flux2-vae.safetensors
keeps its quant convs inside the encoder and decoder (encoder.quant_conv.*, decoder.post_quant_conv.*)."""

from __future__ import annotations

from ..specs import shipped_config
from .info import Part
from .shapes import Keys, apply_hints, hints_for


def _vae_info(k: Keys, hints: dict, layout: str, kind: str = "flux_vae"):
    hints = hints_for(hints, kind)
    if layout == "ldm":
        n = k.count("encoder.down.")
        blocks = [k.shape(f"encoder.down.{i}.block.0.conv1.weight")[0] for i in range(n)]
        layers = k.count("encoder.down.0.block.")
        attn = k.has("encoder.mid.attn_1.q.weight")
    else:
        n = k.count("encoder.down_blocks.")
        blocks = [k.shape(f"encoder.down_blocks.{i}.resnets.0.conv1.weight")[0] for i in range(n)]
        layers = k.count("encoder.down_blocks.0.resnets.")
        attn = k.any_startswith("encoder.mid_block.attentions.0.")
    latent = k.shape("decoder.conv_in.weight")[1]
    config = {**shipped_config(kind), "block_out_channels": blocks, "layers_per_block": layers,
              "down_block_types": ["DownEncoderBlock2D"] * n, "up_block_types": ["UpDecoderBlock2D"] * n,
              "in_channels": k.shape("encoder.conv_in.weight")[1], "out_channels": k.shape("decoder.conv_out.weight")[0],
              "latent_channels": latent,
              "use_quant_conv": k.has("quant_conv.weight") or k.has("encoder.quant_conv.weight"),
              "use_post_quant_conv": k.has("post_quant_conv.weight") or k.has("decoder.post_quant_conv.weight"),
              "mid_block_add_attention": attn}
    return apply_hints(config, hints), latent


def vae_parts(tensors: dict, hints: dict, prefix: str, parts: list, names: list, only: str | None = None,
              metadata: dict | None = None) -> None:
    k = Keys(tensors, prefix)
    if k.has("encoder.conv_in.weight") and k.has("decoder.conv_out.weight") and k.has("decoder.conv_in.weight"):
        layout = "ldm" if k.has("encoder.down.0.block.0.conv1.weight") else (
            "diffusers" if k.has("encoder.down_blocks.0.resnets.0.conv1.weight") else None)
        if layout is None:
            return
        config, latent = _vae_info(k, hints, layout)
        fmt = "LDM keys" if layout == "ldm" else "diffusers keys"
        if latent == 32:
            _flux2_vae(k, hints, prefix, layout, fmt, parts, names, only)
            return
        if latent != 16:
            names.append({4: "an SD1.x/SDXL VAE (4 latent channels)"}.get(latent, f"a VAE with {latent} latent channels"))
            return
        arch = str((metadata or {}).get("modelspec.architecture", "")).lower()
        if only is None and "flux" in arch:
            only = "flux_vae"
        elif only is None and ("stable-diffusion-3" in arch or "sd3" in arch):
            only = "sd3_vae"
        for comp in ("flux_vae", "sd3_vae"):
            if only is not None and comp != only:
                continue
            which = "FLUX" if comp == "flux_vae" else "SD3"
            cfg = {**config, "scaling_factor": shipped_config(comp)["scaling_factor"], "shift_factor": shipped_config(comp)["shift_factor"]}
            notes = []
            if only is None:
                notes.append("the FLUX and SD3 VAEs have the same shapes and the file does not say which it is: the "
                             f"latent scale/shift ({cfg['scaling_factor']} / {cfg['shift_factor']}) follow the loader's kind ({comp[:-4]})")
            what = f"the {'bundled ' if prefix else ''}{which} VAE ({fmt})" if only else f"a 16-channel FLUX/SD3 VAE ({fmt})"
            parts.append(Part(comp, prefix, layout, what, cfg, notes=notes))
        names.append("VAE")


def _flux2_vae(k: Keys, hints: dict, prefix: str, layout: str, fmt: str, parts: list, names: list, only: str | None) -> None:
    """A 32-channel VAE: the FLUX.2 VAE when it has BatchNorm statistics over its 2x2-patchified latent."""
    stats = k.shape("bn.running_mean")
    if stats is None or not k.has("bn.running_var") or stats[0] % 32:
        names.append("a VAE with 32 latent channels but without the FLUX.2 VAE's BatchNorm statistics "
                     "(bn.running_mean / bn.running_var)")
        return
    config, _ = _vae_info(k, hints, layout, "flux2_vae")
    side = round((stats[0] // 32) ** 0.5)
    config["patch_size"] = [side, side]
    names.append("FLUX.2 VAE")
    if only in (None, "flux2_vae"):
        what = f"the {'bundled ' if prefix else ''}FLUX.2 VAE ({fmt}, 32 latent channels, BatchNorm-normalised)"
        parts.append(Part("flux2_vae", prefix, layout, what, config))
