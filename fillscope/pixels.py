"""The IMAGE/MASK conventions and the pixel operations that image/mask preparation (masks.py) and the compositing
around the model (compositing/) share, below both: the import runs one way, from them to here.

Conventions: IMAGE is [B,H,W,C] float 0..1 (C may be 4: alpha is dropped, or 1: repeated), MASK is [B,H,W] with
1 = repaint. `as_rgb` and `as_mask` check and normalise them; `require_finite` refuses NaN/inf values before they
reach a model; `dilate` grows a mask, `feather_inward` softens its edge inside the hole only.
"""

from __future__ import annotations

from .errors import FillScopeInputError


def require_finite(name: str, t, values: str = "from 0 to 1") -> None:
    """A ComfyUI IMAGE/MASK with a NaN or inf value is the input's fault, said before it can reach a model (a NaN
    mask binarises to an empty one; a NaN image reaches the VAE and would be blamed on its weights). Meta tensors and
    non-tensors pass; one sum decides the common, finite case."""
    import torch

    if not (isinstance(t, torch.Tensor) and t.device.type != "meta" and t.is_floating_point()):
        return
    if bool(torch.isfinite(t.sum())):  # NaN and inf reach the sum (an overflow falls through to the full count)
        return
    finite = torch.isfinite(t)
    if not bool(finite.all()):
        raise FillScopeInputError(
            name, f"holds {int(finite.numel() - finite.sum()):,} NaN/inf values of {t.numel():,}; every value "
                  f"must be a finite number {values}.",
            f"check what computes the {name} (a NaN or infinite value upstream, a division by zero).")


def composite(source, generated, m):
    """`generated` over `source` by the mask `m` (1 = generated, soft values blend), broadcast over channels; where `m`
    is 0 the source's values bit for bit. The paste-back's arithmetic (masks.paste_back, compositing.tiles)."""
    import torch

    return torch.where(m == 0, source, source * (1.0 - m) + generated * m)


def as_rgb(image, notes):
    """A ComfyUI IMAGE [B,H,W,C] (or [H,W,C]) -> [B,H,W,3] float, clamped to 0..1: RGBA drops its alpha, greyscale is
    repeated to RGB, each choice appended to `notes`; any other shape or channel count is refused. A float32 image in
    0..1 comes back as itself (or a view): callers make new tensors from it, never write into it."""
    if image.dim() == 3:
        image = image.unsqueeze(0)
    if image.dim() != 4:
        raise FillScopeInputError("image", f"expected an IMAGE [B,H,W,C], got shape {list(image.shape)}.", "connect a ComfyUI IMAGE.")
    channels = image.shape[-1]
    if channels == 4:
        notes.append("image is RGBA: alpha dropped (use the MASK output of LoadImage for the alpha)")
        image = image[..., :3]
    elif channels == 1:
        notes.append("image is greyscale: repeated to RGB")
        image = image.expand(*image.shape[:-1], 3)
    elif channels != 3:
        raise FillScopeInputError("image", f"has {channels} channels; expected 3 (RGB) or 4 (RGBA).", "convert the image to RGB.")
    import torch

    if image.dtype == torch.float32 and image.numel() and image.device.type != "meta":
        low, high = torch.aminmax(image)  # a ComfyUI IMAGE is in range already: itself, not a whole-image copy
        if float(low) >= 0.0 and float(high) <= 1.0:
            return image
    return image.float().clamp(0, 1)


def as_mask(mask, image_shape):
    """A ComfyUI MASK [B,H,W] (or [H,W], or [B,H,W,1]) -> [B,H,W] float, clamped to 0..1, for images of
    `image_shape` [B,H,W,...]: the same height and width, and 1 mask (expanded to the batch) or B."""
    if mask.dim() == 2:
        mask = mask.unsqueeze(0)
    if mask.dim() == 4 and mask.shape[-1] == 1:
        mask = mask[..., 0]
    if mask.dim() != 3:
        raise FillScopeInputError("mask", f"expected a MASK [B,H,W], got shape {list(mask.shape)}.", "connect a ComfyUI MASK.")
    b, h, w = image_shape[0], image_shape[1], image_shape[2]
    if tuple(mask.shape[-2:]) != (h, w):
        hint = ""
        if tuple(mask.shape[-2:]) == (64, 64):
            hint = " LoadImage returns a 64x64 empty mask when the image has no alpha channel."
        raise FillScopeInputError(
            "mask",
            f"mask is {mask.shape[-1]}x{mask.shape[-2]} but the image is {w}x{h}.{hint}",
            "paint the mask on this image in ComfyUI's mask editor, or load a mask of the same size.",
        )
    if mask.shape[0] not in (1, b):
        raise FillScopeInputError(
            "mask", f"batch of {mask.shape[0]} masks for {b} images.", "give one mask, or one mask per image."
        )
    return mask.float().clamp(0, 1).expand(b, h, w)


def dilate(mask, pixels: int):
    """A [B,C,H,W] mask grown by `pixels` px: a square max filter (Chebyshev distance), the same shape back;
    pixels <= 0 returns `mask` itself."""
    import torch.nn.functional as F

    if pixels <= 0:
        return mask
    # a square dilation is separable: a row pass then a column pass (O(k) per pixel instead of O(k^2))
    k = 2 * pixels + 1
    rows = F.max_pool2d(mask, kernel_size=(1, k), stride=1, padding=(0, pixels))
    return F.max_pool2d(rows, kernel_size=(k, 1), stride=1, padding=(pixels, 0))


def feather_inward(mask, pixels: int):
    """Soft edge that ramps from 0 at the hole's border to 1 `pixels` inside it; pixels outside the hole
    stay exactly 0, so paste-back keeps them bit-identical."""
    import torch.nn.functional as F

    if pixels <= 0:
        return mask
    acc = mask.clone()
    eroded = mask
    for _ in range(pixels - 1):
        eroded = 1.0 - F.max_pool2d(1.0 - eroded, kernel_size=3, stride=1, padding=1)
        acc = acc + eroded
    return (acc / pixels) * mask
