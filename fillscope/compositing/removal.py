"""Removal: hide what is under the mask from the model, so a "remove the object" edit does not draw it again.

A fill model that sees the object (FLUX.2 [klein] attends to the whole source as its reference; any model started
from the source at denoise < 1 starts from it) tends to paint it back. `neutralise_masked` replaces the masked
pixels of the model's view with colours taken from the kept pixels around them:

- ``none``: unchanged;
- ``mean``: one flat colour, the mean of the kept pixels (per image, per channel);
- ``edge``: filled from the hole's border inward (push-pull: the kept colours averaged on an image pyramid and
  pulled back down, so each masked pixel takes the colours of the nearest kept pixels, smoothly);
- ``blur``: the edge fill, then a wide Gaussian blur inside the hole: a soft wash of the surrounding colours.

Every fill is a weighted average of kept pixels (weight 1 - mask), so the value range of the input is kept: it
works on [-1,1] images (what `prepare_image_and_mask` gives the model) and on 0..1 images alike. Pixels whose mask
is 0 come back bit-identical; a soft mask blends the fill in by its value.

`push_pull` and `smooth` are the two primitives; tone.py uses them for its low-frequency colour field too.
"""

from __future__ import annotations

from ..errors import FillScopeInputError

MASKED_FILLS = ("none", "blur", "mean", "edge")

DESCRIPTIONS = {
    "mean": "one flat colour, the mean of the kept pixels",
    "edge": "filled from the hole's border inward with the surrounding colours",
    "blur": "a blurred wash of the surrounding colours",
}


def push_pull(values, weights):
    """Fill a [B,C,H,W] field where `weights` [B,1,H,W] (0..1) is low, from where it is high (Gortler et al.'s
    push-pull): push = halve the resolution with weighted averages (weights summed, capped at 1) until every cell
    holds some weight (or 1x1 remains); pull = from the coarsest level down, each level's value blended with the
    bilinearly upsampled coarser one by its own capped weight. Where weights are 1 the values come back unchanged;
    cells far from any weight take the average of the nearest weighted region, smoothly. Per image: an image with
    no weight at all comes back as zeros."""
    import torch
    import torch.nn.functional as F

    v = values.float()
    w = weights.float().clamp(0, 1)
    levels = []
    while True:
        levels.append((v, w))
        h, wd = v.shape[-2:]
        if max(h, wd) <= 1 or bool((w > 0).all()):
            break
        ph, pw = h % 2, wd % 2  # odd sides: a zero-weight row/column rounds the level up
        vp = F.pad(v * w, (0, pw, 0, ph))
        wp = F.pad(w, (0, pw, 0, ph))
        s = F.avg_pool2d(vp, 2) * 4.0
        sw = F.avg_pool2d(wp, 2) * 4.0
        v = torch.where(sw > 0, s / sw.clamp_min(1e-12), torch.zeros_like(s))
        w = sw.clamp(max=1.0)
    out = levels[-1][0] * (levels[-1][1] > 0)
    for v, w in reversed(levels[:-1]):
        h, wd = v.shape[-2:]
        up = F.interpolate(out, size=(out.shape[-2] * 2, out.shape[-1] * 2), mode="bilinear",
                           align_corners=False)[..., :h, :wd]
        out = w * v + (1.0 - w) * up
    return out


def _gaussian_1d(sigma: float, device):
    import torch

    radius = max(1, int(3.0 * sigma + 0.5))
    x = torch.arange(-radius, radius + 1, dtype=torch.float32, device=device)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    return k / k.sum(), radius


def gaussian_blur(x, sigma: float):
    """Separable Gaussian blur of [B,C,H,W] with reflected borders (replicated where a side is too short)."""
    import torch.nn.functional as F

    if sigma <= 0:
        return x
    k, r = _gaussian_1d(sigma, x.device)
    b, c, h, w = x.shape
    mode_w = "reflect" if w > r else "replicate"
    mode_h = "reflect" if h > r else "replicate"
    y = F.pad(x.reshape(b * c, 1, h, w), (r, r, 0, 0), mode=mode_w)
    y = F.conv2d(y, k.view(1, 1, 1, -1))
    y = F.pad(y, (0, 0, r, r), mode=mode_h)
    y = F.conv2d(y, k.view(1, 1, -1, 1))
    return y.reshape(b, c, h, w)


def smooth(x, sigma: float):
    """A wide Gaussian blur done cheaply: area-downsampled so the blur is about 4 px there, blurred, and
    bilinearly upsampled back to [B,C,H,W]. For low-frequency fields only (fine detail is lost by design)."""
    import torch.nn.functional as F

    if sigma <= 0:
        return x
    h, w = x.shape[-2:]
    f = max(1, min(int(sigma // 4), h, w))
    small = F.adaptive_avg_pool2d(x, (max(1, -(-h // f)), max(1, -(-w // f)))) if f > 1 else x
    small = gaussian_blur(small, sigma / f)
    if f == 1:
        return small
    return F.interpolate(small, size=(h, w), mode="bilinear", align_corners=False)


def neutralise_masked(image_chw, mask, mode: str = "edge"):
    """`image_chw` [B,3,H,W] (any value range: [-1,1] from prepare_image_and_mask, or 0..1) with its masked pixels
    replaced by `mode`'s fill (see the module docstring); `mask` [B,1,H,W] 0..1, 1 = repaint. Pixels where the mask
    is 0 are returned bit-identical; soft values blend the fill in (image * (1 - m) + fill * m). An image with no
    kept pixel (a full mask) comes back unchanged: there is nothing to fill from."""
    import torch

    if mode not in MASKED_FILLS:
        raise FillScopeInputError("masked_fill", f"unknown fill {mode!r}.", f"use one of {', '.join(MASKED_FILLS)}.")
    if mode == "none":
        return image_chw
    x = image_chw.float()
    m = mask.to(device=x.device, dtype=x.dtype).clamp(0, 1)
    if m.shape[0] != x.shape[0]:
        m = m.expand(x.shape[0], -1, -1, -1)
    kept = 1.0 - m
    total = kept.sum(dim=(2, 3), keepdim=True)  # [B,1,1,1]
    if mode == "mean":
        fill = (x * kept).sum(dim=(2, 3), keepdim=True) / total.clamp_min(1e-12)
        fill = fill.expand_as(x)
    else:
        fill = push_pull(x, kept)
        if mode == "blur":
            h, w = x.shape[-2:]
            filled = x * kept + fill * m
            fill = smooth(filled, max(4.0, min(h, w) / 16.0))
    blended = x * kept + fill * m
    has_kept = total > 0
    out = torch.where((m > 0) & has_kept, blended, x)
    return out.to(image_chw.dtype)


def describe(mode: str, pixels: int) -> str:
    """The note the preparation records for a fill."""
    return (f"masked_fill {mode}: the {pixels:,} masked px the model sees are {DESCRIPTIONS[mode]} (the object under "
            "the mask is not shown to the model); paste-back still uses the untouched source")
