"""From ComfyUI's IMAGE/MASK to what a fill model needs: a [-1,1] image and a repaint mask on a grid of
16-pixel multiples, plus the soft mask used to paste the result back.

Conventions: IMAGE is [B,H,W,C] float 0..1 (C may be 4: alpha is dropped), MASK is [B,H,W] with 1 = repaint
(ComfyUI's LoadImage gives 1 - alpha). Every choice made here (binarise, grow, feather, pad or crop) is recorded
in `PreparedInput.notes` so the node can report it.

`masked_fill` (compositing/removal.py) hides what is under the mask from the model's view only (`image`, the grid
image every condition encodes); `source`, which paste-back composites into, stays the untouched input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .compositing.removal import MASKED_FILLS, describe, neutralise_masked
from .errors import FillScopeInputError
from .pixels import as_mask, as_rgb, composite, dilate, feather_inward, require_finite
from .specs import MIN_SIDE

SIZE_MODES = ("pad", "crop")


@dataclass
class Geometry:
    """Where the model's grid sits in the user's image, so outputs go back to the input size."""

    height: int  # input size
    width: int
    grid_height: int  # model grid (multiples of `multiple`)
    grid_width: int
    mode: str  # "exact", "pad" or "crop"
    top: int = 0  # crop offset into the input, or 0 for pad (padding is added bottom/right)
    left: int = 0

    def describe(self) -> str:
        if self.mode == "exact":
            return f"{self.width}x{self.height} is a multiple of 16: used as is"
        if self.mode == "pad":
            return (
                f"{self.width}x{self.height} padded (edge pixels, bottom/right, kept by the mask) to "
                f"{self.grid_width}x{self.grid_height}; the output is cropped back to {self.width}x{self.height}"
            )
        return (
            f"{self.width}x{self.height} center-cropped to {self.grid_width}x{self.grid_height} at "
            f"(top {self.top}, left {self.left}); the output is pasted back into the {self.width}x{self.height} source"
        )


@dataclass
class PreparedInput:
    image: object  # [B,3,Hg,Wg] in [-1,1], the source on the model grid (None: model_image=False, for tiles)
    mask: object  # [B,1,Hg,Wg] in [0,1], what the model repaints (binarised unless threshold == 0)
    source: object  # [B,H,W,3] float 0..1, the untouched input (RGB) for paste-back; the input itself when it is
    # float32 RGB in 0..1 already (never written to: paste-back and blending make new images)
    paste_mask: object  # [B,H,W,1] in [0,1]: grown mask, feathered inward only, at the input size
    geometry: Geometry
    coverage: float  # fraction of the input's pixels repainted (soft values weighted); 0 exactly when the grid has none
    notes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    repaint_pixels: int = 0  # input pixels (over the batch) paste-back takes from the model: paste_mask > 0
    kept_pixels: int = 0  # input pixels (over the batch) returned as the exact source values: paste_mask == 0


def check_reference_batches(references, batch: int, of: str) -> None:
    """Reference IMAGE batches [(input name, IMAGE)] against the run's `batch` images (`of`: where that batch comes
    from), before anything is encoded: each holds 1 image (every image of the batch sees it) or `batch` (one per
    image, in order). diffusers' Flux2KleinInpaintPipeline reads any other count as that many references shown to
    every image; a FillScope reference input is one reference, so another count is refused (torch.cat would fail). As
    for a mask against its images (pixels.as_mask)."""
    for name, image in references:
        n = image.shape[0]
        if n not in (1, batch):
            raise FillScopeInputError(
                name, f"holds a batch of {n} images for a batch of {batch} ({of}): a reference batch holds 1 image "
                      f"(used for every image) or {batch} (one per image, in order).",
                f"give 1 reference image or {batch}: ComfyUI's ImageFromBatch takes one image out of a batch, "
                f"RepeatImageBatch repeats one.")


def prepare_reference(image, name: str = "reference", *, unit: int):
    """A reference IMAGE [B,H,W,3] (or RGBA / greyscale) -> [B,3,H',W'] in [-1,1], centre-cropped to multiples of
    `unit` px (one token of the model: klein's 16 published; no resampling: diffusers resizes with a centre crop,
    identical when the sides are multiples)."""
    rgb = as_rgb(image, [])
    _, h, w, _ = rgb.shape
    gh, gw = (h // unit) * unit, (w // unit) * unit
    if gh == 0 or gw == 0:
        raise FillScopeInputError(name, f"is {w}x{h}; the smallest reference is {unit}x{unit} px.",
                                  "use a larger image.")
    top, left = (h - gh) // 2, (w - gw) // 2
    chw = rgb[:, top:top + gh, left:left + gw].permute(0, 3, 1, 2)
    return (chw * 2.0 - 1.0).contiguous()


def prepare_image_and_mask(
    image,
    mask,
    *,
    invert: bool = False,
    threshold: float = 0.5,
    grow: int = 0,
    feather: int = 0,
    size_mode: str = "pad",
    multiple: int = MIN_SIDE,
    masked_fill: str = "none",
    model_image: bool = True,
) -> PreparedInput:
    import math

    import torch
    import torch.nn.functional as F

    if size_mode not in SIZE_MODES:
        raise FillScopeInputError("size_mode", f"unknown mode {size_mode!r}.", f"use one of {', '.join(SIZE_MODES)}.")
    if masked_fill not in MASKED_FILLS:
        raise FillScopeInputError("masked_fill", f"unknown fill {masked_fill!r}.", f"use one of {', '.join(MASKED_FILLS)}.")
    # NaN anywhere here would not fail: a NaN threshold or mask binarises to an empty mask (the source comes back
    # unchanged), a NaN soft mask or image reaches the VAE and is blamed on its weights
    if not (math.isfinite(threshold) and 0.0 <= threshold <= 1.0):
        raise FillScopeInputError("threshold", f"is {threshold!r}; it must be a number from 0 to 1.",
                                  "set threshold from 0 to 1 (0.5 binarises as diffusers does; 0 keeps a soft mask).")
    require_finite("image", image)
    require_finite("mask", mask)
    notes: list[str] = []
    warnings: list[str] = []
    rgb = as_rgb(image, notes)
    b, h, w, _ = rgb.shape
    if h < multiple or w < multiple:
        raise FillScopeInputError(
            "image", f"is {w}x{h}; the smallest size is {multiple}x{multiple} (the VAE's 8x downscale, then 2x2 "
            f"patches: one token is {multiple}x{multiple} px).", "use a larger image, or scale it up.")
    m = as_mask(mask, rgb.shape).to(rgb.device)
    if invert:
        m = 1.0 - m
        notes.append("mask inverted")
    m = m.unsqueeze(1)  # [B,1,H,W]
    if threshold > 0:
        # Same rule as diffusers' VaeImageProcessor.binarize at 0.5: < t -> keep, >= t -> repaint.
        m = (m >= threshold).to(m.dtype)
        notes.append(f"mask binarised at {threshold:g}")
    else:
        notes.append("soft mask kept (threshold 0)")
    if grow > 0:
        m = dilate(m, grow)
        notes.append(f"mask grown by {grow} px")
    paste = feather_inward(m, feather)
    if feather > 0:
        notes.append(f"paste-back edge feathered {feather} px inward")

    gh, gw = (h // multiple) * multiple, (w // multiple) * multiple
    chw = rgb.permute(0, 3, 1, 2)
    if (gh, gw) == (h, w):
        geometry = Geometry(h, w, h, w, "exact")
        grid_img, grid_mask = chw, m
    elif size_mode == "crop":
        top, left = (h - gh) // 2, (w - gw) // 2
        geometry = Geometry(h, w, gh, gw, "crop", top, left)
        grid_img = chw[:, :, top : top + gh, left : left + gw]
        grid_mask = m[:, :, top : top + gh, left : left + gw]
        # the cropped-off border never reaches the model: its pixels stay source pixels, so the paste mask (and
        # every count below) is zero there, whatever the mask says
        inside = torch.zeros_like(m)
        inside[:, :, top : top + gh, left : left + gw] = 1.0
        outside = int(((m > 0) & (inside == 0)).sum())
        if outside:
            sides = ", ".join(f"{n} px {side}" for n, side in ((top, "top"), (h - gh - top, "bottom"),
                                                               (left, "left"), (w - gw - left, "right")) if n)
            warnings.append(
                f"mask reaches the border size_mode crop cuts off ({sides}): {outside:,} repaint pixels fall outside "
                f"the {gw}x{gh} crop and stay source pixels; set size_mode to pad to repaint them")
        m, paste = m * inside, paste * inside
    else:
        gh, gw = -(-h // multiple) * multiple, -(-w // multiple) * multiple
        geometry = Geometry(h, w, gh, gw, "pad")
        grid_img = F.pad(chw, (0, gw - w, 0, gh - h), mode="replicate")
        grid_mask = F.pad(m, (0, gw - w, 0, gh - h), value=0.0)
    notes.append(geometry.describe())
    if not model_image:  # a caller that crops `source` itself (tiles): no whole-image copy for the model
        grid_img = None
    elif masked_fill != "none" and bool((grid_mask > 0).any()):
        # the model's view only: `source` (paste-back) keeps the input's pixels
        grid_img = neutralise_masked(grid_img, grid_mask, masked_fill)
        notes.append(describe(masked_fill, int((grid_mask > 0).sum())))

    coverage = float(m.mean())  # at the input size: the pad's border is not the user's, the crop's is kept
    repaint = int((paste > 0).sum())
    kept = paste.numel() - repaint
    batch = f" (over the batch of {b})" if b > 1 else ""
    notes.append(f"repaints {repaint:,} px and keeps {kept:,} px as exact source values{batch}")
    if repaint == 0:
        if geometry.mode == "crop" and outside:
            warnings.append(f"nothing to repaint inside the {gw}x{gh} crop (the mask lies in the cropped-off border): "
                            "the source image is returned unchanged")
        else:
            warnings.append("mask is empty: nothing to repaint; the source image is returned unchanged")
    elif kept == 0:
        warnings.append("mask covers the whole image: nothing is kept from the source (plain text-to-image)")
    elif geometry.mode == "crop" and float(grid_mask.min()) == 1.0:
        warnings.append(f"mask covers the whole {gw}x{gh} crop: nothing inside it is kept from the source; only the "
                        f"{kept:,} pixels of the cropped-off border stay source pixels")
    return PreparedInput(
        image=(grid_img * 2.0 - 1.0).contiguous() if grid_img is not None else None,
        mask=grid_mask.contiguous(),
        source=rgb,
        paste_mask=paste.permute(0, 2, 3, 1),
        geometry=geometry,
        coverage=coverage,
        notes=notes,
        warnings=warnings,
        repaint_pixels=repaint,
        kept_pixels=kept,
    )


def require_grid(prepared: PreparedInput, unit: int, model: str) -> None:
    """The prepared grid against the loaded models' own pixel size of one token (`unit` = the VAE's downscale x the
    patch side; 16 for every published model, which prepare_image_and_mask's grid is made for): a grid that is not a
    multiple of it would be floored by the VAE and no longer match the mask. `model` says what sets `unit`."""
    g = prepared.geometry
    if g.grid_height % unit or g.grid_width % unit:
        raise FillScopeInputError(
            "image", f"runs on a {g.grid_width}x{g.grid_height} px grid, which is not a multiple of {unit} px, one "
                     f"token of {model}.",
            f"pad or crop the image to multiples of {unit} px before the condition node.")


def restore_geometry(grid_image, geometry: Geometry, source=None):
    """Model-grid image [B,Hg,Wg,3] back to the input size: crop the padding off, or paste the crop back
    into the source."""
    if geometry.mode == "exact":
        return grid_image
    if geometry.mode == "pad":
        return grid_image[:, : geometry.height, : geometry.width, :]
    out = source.clone().to(grid_image.dtype)
    out[:, geometry.top : geometry.top + geometry.grid_height, geometry.left : geometry.left + geometry.grid_width, :] = grid_image
    return out


def as_paste_mask(mask, source):
    """A ComfyUI MASK ([B,H,W] or [H,W]; 1 = take the generated pixel, soft values blend) as a paste mask
    [B,H,W,1] for `source` [B,H,W,3], as ImageCompositeMasked reads its mask."""
    import torch

    b, h, w = source.shape[0], source.shape[1], source.shape[2]
    if mask.dim() == 2:
        mask = mask.unsqueeze(0)
    if mask.dim() != 3:
        raise FillScopeInputError("mask", f"expected a MASK [B,H,W], got shape {list(mask.shape)}.",
                                  "connect a ComfyUI MASK, or leave 'mask' unconnected to use the sampler's mask.")
    if tuple(mask.shape[-2:]) != (h, w):
        raise FillScopeInputError(
            "mask", f"the paste-back mask is {mask.shape[-1]}x{mask.shape[-2]} but the image is {w}x{h}.",
            "give a mask of the image's size (the one the condition node got, or one made from it), or leave "
            "'mask' unconnected to use the sampler's mask.")
    if mask.shape[0] not in (1, b):
        raise FillScopeInputError("mask", f"batch of {mask.shape[0]} masks for {b} images.",
                                  "give one mask, or one mask per image.")
    mask = mask.float()
    if bool(torch.isnan(mask).any()):
        raise FillScopeInputError("mask", "the paste-back mask contains NaN values, so the composite is undefined.",
                                  "check the nodes that compute the mask, or leave 'mask' unconnected to use the "
                                  "sampler's mask.")
    return mask.clamp(0, 1).to(source.device).expand(b, h, w).unsqueeze(-1)


def paste_back(generated, source, paste_mask):
    """Composite the generated image into the source with the (feathered) mask [B,H,W,1] (the sampler's, or
    `as_paste_mask` of the user's); where the mask is 0 the source pixels are returned bit-identical."""
    if generated.shape != source.shape:
        raise FillScopeInputError(
            "image",
            f"generated image {list(generated.shape)} and source {list(source.shape)} differ in shape.",
            "connect the VAE decode output that belongs to this condition.",
        )
    return composite(source, generated, paste_mask.to(generated.dtype))


def synthetic_image_and_mask(width: int, height: int, mask_fraction: float = 0.5):
    """A deterministic gradient test image [1,H,W,3] and a centred rectangular repaint mask [1,H,W] whose side
    is `mask_fraction` of the image's (0 = empty mask): inputs for traces at any size."""
    import torch

    ys = torch.linspace(0, 1, height)[:, None].expand(height, width)
    xs = torch.linspace(0, 1, width)[None, :].expand(height, width)
    image = torch.stack([xs, ys, 0.5 * (1 - xs)], dim=-1).unsqueeze(0).contiguous()
    mask = torch.zeros(1, height, width)
    mh, mw = int(round(height * mask_fraction)), int(round(width * mask_fraction))
    top, left = (height - mh) // 2, (width - mw) // 2
    mask[:, top : top + mh, left : left + mw] = 1.0
    return image, mask
