"""How far apart two runs' values are: two tensors (`tensor_difference`), two images (`psnr`, `ssim`,
`image_difference`, inside and outside an inpainting mask) and a picture of where they differ
(`difference_heatmap`).

Everything is computed in float64 on the CPU, whatever the inputs' dtype and device, so the figures measure the
runs and not the measuring. torch is imported inside the functions (importing the pack stays cheap); nothing here
needs scipy or scikit-image: the Gaussian filter of SSIM is written out below (scipy.ndimage.gaussian_filter's
kernel and its 'reflect' border), and tests/test_compare_metrics.py checks it against scipy and against
scikit-image's `structural_similarity`.

Conventions: IMAGE [B,H,W,C] (or [H,W,C]) float with data range 1 (0..1); a region or mask [B,H,W] or [H,W]
(a batch of one applies to every image; [B,H,W,1] is taken as [B,H,W]); a float mask counts where it is > 0.5.
Non-finite pixels are not refused by the image metrics: a NaN reaches the figure (NaN), which is what a comparison
should report. An image pair of different shapes is the caller's fault (FillScopeInputError); a tensor pair of
different shapes is a finding (`comparable: False`).
"""

from __future__ import annotations

import math

from ..errors import FillScopeInputError

# SSIM's constants as Wang et al. 2004 give them and scikit-image's structural_similarity(gaussian_weights=True)
# uses them: a Gaussian window of sigma 1.5 truncated at 3.5 sigma (radius int(3.5 * 1.5 + 0.5) = 5, 11 x 11),
# K1 0.01, K2 0.03, data range 1, population (not sample) covariance.
SSIM_SIGMA = 1.5
SSIM_TRUNCATE = 3.5
SSIM_K1 = 0.01
SSIM_K2 = 0.03
SSIM_RADIUS = int(SSIM_TRUNCATE * SSIM_SIGMA + 0.5)  # 5: skimage crops this border before averaging the map

# The heatmap's colour map: anchors (position 0..1, RGB), interpolated linearly between them. Black for "no
# difference", then purple, red, orange, yellow: brightness rises monotonically (as in matplotlib's inferno, whose
# shape this follows; the values here are ours). The mask outline is drawn in cyan, a colour the map never reaches.
HEATMAP_ANCHORS = (
    (0.00, (0.00, 0.00, 0.00)),
    (0.25, (0.26, 0.04, 0.41)),
    (0.50, (0.70, 0.20, 0.34)),
    (0.75, (0.97, 0.52, 0.06)),
    (1.00, (0.99, 0.99, 0.65)),
)
OUTLINE_COLOUR = (0.0, 1.0, 1.0)
HEATMAP_PERCENTILE = 99.5
HEATMAP_MIN_SCALE = 1e-6


# ------------------------------------------------------------------------------------------------------------
# Tensors
# ------------------------------------------------------------------------------------------------------------


def tensor_difference(a, b) -> dict:
    """The difference of two tensors of one shape, `b` the reference, in float64 on the CPU.

    Returns {comparable: True, shape, numel, compared, nonfinite_a, nonfinite_b, rel_err, rel_to, max_abs,
    mean_abs, cosine}: `rel_err` = ||a-b|| / ||b|| (`rel_to` "b"), or ||a-b|| when ||b|| is 0 (`rel_to` "abs");
    `cosine` = <a,b> / (||a|| ||b||), 1.0 when both are zero, 0.0 when only one is. Entries that are NaN/inf in
    either tensor are counted per side (`nonfinite_a`, `nonfinite_b`) and left out: the figures are over the
    `compared` entries finite in both (NaN when there are none).
    Different shapes: {comparable: False, shape_a, shape_b}; no exception."""
    import torch

    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if tuple(a.shape) != tuple(b.shape):
        return {"shape_a": list(a.shape), "shape_b": list(b.shape), "comparable": False}
    shape = list(a.shape)
    a = a.detach().to("cpu", torch.float64).reshape(-1)
    b = b.detach().to("cpu", torch.float64).reshape(-1)
    finite_a, finite_b = torch.isfinite(a), torch.isfinite(b)
    both = finite_a & finite_b
    result = {"comparable": True, "shape": shape, "numel": a.numel(),
              "compared": int(both.sum()), "nonfinite_a": int((~finite_a).sum()), "nonfinite_b": int((~finite_b).sum())}
    if not bool(both.all()):
        a, b = a[both], b[both]
    if a.numel() == 0:
        return result | {"rel_err": math.nan, "rel_to": "b", "max_abs": math.nan, "mean_abs": math.nan,
                         "cosine": math.nan}
    diff = a - b
    norm_diff = float(torch.linalg.vector_norm(diff))
    norm_a, norm_b = float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b))
    if norm_b > 0:
        rel_err, rel_to = norm_diff / norm_b, "b"
    else:
        rel_err, rel_to = norm_diff, "abs"
    if norm_a == 0 and norm_b == 0:
        cosine = 1.0
    elif norm_a == 0 or norm_b == 0:
        cosine = 0.0  # undefined; a zero tensor shares no direction with a non-zero one
    else:
        # scaled first, so that huge values cannot overflow the dot product; clamped against rounding past 1
        cosine = max(-1.0, min(1.0, float(torch.dot(a / norm_a, b / norm_b))))
    abs_diff = diff.abs()
    return result | {"rel_err": rel_err, "rel_to": rel_to, "max_abs": float(abs_diff.max()),
                     "mean_abs": float(abs_diff.mean()), "cosine": cosine}


# ------------------------------------------------------------------------------------------------------------
# Images: shapes
# ------------------------------------------------------------------------------------------------------------


def _image_pair(a, b):
    """Two IMAGEs -> float64 CPU [B,H,W,C] tensors of one shape, or FillScopeInputError."""
    import torch

    images = []
    for name, image in (("image_a", a), ("image_b", b)):
        image = torch.as_tensor(image)
        if image.dim() == 3:
            image = image.unsqueeze(0)
        if image.dim() != 4:
            raise FillScopeInputError(name, f"expected an IMAGE [B,H,W,C], got shape {list(image.shape)}.",
                                      "pass a ComfyUI IMAGE (float, 0..1, channels last).")
        images.append(image.detach().to("cpu", torch.float64))
    if images[0].shape != images[1].shape:
        raise FillScopeInputError("image_b", f"has shape {list(images[1].shape)}, image_a {list(images[0].shape)}; "
                                  "an image difference compares pixel by pixel.",
                                  "compare images of one size and channel count (resize or crop one first).")
    return images


def _region(region, image_shape, name: str = "region"):
    """A region/mask [B,H,W], [H,W] or [B,H,W,1] (bool, or float counted where > 0.5) -> bool [B,H,W] for images
    of `image_shape` [B,H,W,C]; None stays None."""
    import torch

    if region is None:
        return None
    region = torch.as_tensor(region).detach().to("cpu")
    if region.dim() == 4 and region.shape[-1] == 1:
        region = region[..., 0]
    if region.dim() == 2:
        region = region.unsqueeze(0)
    batch, height, width = image_shape[:3]
    if region.dim() != 3 or tuple(region.shape[1:]) != (height, width) or region.shape[0] not in (1, batch):
        raise FillScopeInputError(name, f"has shape {list(region.shape)}; the images are {list(image_shape)}.",
                                  f"pass a [B,H,W] or [H,W] {name} of the images' height and width.")
    region = region if region.dtype == torch.bool else region.to(torch.float64) > 0.5
    return region.expand(batch, height, width)


# ------------------------------------------------------------------------------------------------------------
# PSNR and SSIM
# ------------------------------------------------------------------------------------------------------------


def _psnr_of(squared, region) -> float:
    """PSNR (data range 1) from squared differences [B,H,W,C] over the pixels of `region` (bool [B,H,W] or None)."""
    if region is not None:
        squared = squared[region]  # [N, C]
    if squared.numel() == 0:
        return math.nan
    mse = float(squared.mean())
    if mse == 0:
        return math.inf
    return 10.0 * math.log10(1.0 / mse)


def psnr(a, b, region=None) -> float:
    """Peak signal-to-noise ratio of IMAGEs `a` and `b` [B,H,W,C] (data range 1): 10 log10(1 / MSE), the MSE over
    every channel of the pixels of `region` (bool [B,H,W] or [H,W]; None: all pixels), pooled over the batch.
    inf when they are identical there, NaN when the region is empty. As skimage's peak_signal_noise_ratio(a, b,
    data_range=1) for one image."""
    a, b = _image_pair(a, b)
    return _psnr_of((a - b).square(), _region(region, a.shape))


def _gaussian_kernel():
    """scipy.ndimage's Gaussian kernel: exp(-x^2 / (2 sigma^2)) for integer x in [-radius, radius], summing to 1."""
    import torch

    x = torch.arange(-SSIM_RADIUS, SSIM_RADIUS + 1, dtype=torch.float64)
    weights = torch.exp(-0.5 * x.square() / SSIM_SIGMA**2)
    return weights / weights.sum()


def _reflect_indices(n: int, radius: int):
    """Indices of a length-n axis padded by `radius` on each side in scipy.ndimage's 'reflect' mode (d c b a | a b
    c d | d c b a: the edge sample repeated), valid for any radius, even one longer than the axis."""
    import torch

    i = torch.arange(-radius, n + radius) % (2 * n)
    return torch.where(i >= n, 2 * n - 1 - i, i)


def _gaussian_filter_hw(x, kernel):
    """x [B,H,W,C] filtered along H and W by the separable `kernel` (odd length), border mode 'reflect': as
    scipy.ndimage.gaussian_filter(x, sigma=(0, s, s, 0), truncate=t, mode='reflect'), which skimage's SSIM uses."""
    radius = (len(kernel) - 1) // 2
    for axis in (1, 2):
        n = x.shape[axis]
        padded = x.index_select(axis, _reflect_indices(n, radius))
        out = padded.narrow(axis, 0, n) * kernel[0]
        for k in range(1, len(kernel)):
            out += padded.narrow(axis, k, n) * kernel[k]
        x = out
    return x


def _ssim_map(a, b):
    """The SSIM map of float64 IMAGEs [B,H,W,C] per channel, averaged over channels -> [B,H,W]. Local means,
    variances and covariance are Gaussian-weighted (population covariance), as skimage with gaussian_weights=True
    and use_sample_covariance=False."""
    kernel = _gaussian_kernel()
    mean_a, mean_b = _gaussian_filter_hw(a, kernel), _gaussian_filter_hw(b, kernel)
    var_a = _gaussian_filter_hw(a * a, kernel) - mean_a * mean_a
    var_b = _gaussian_filter_hw(b * b, kernel) - mean_b * mean_b
    cov = _gaussian_filter_hw(a * b, kernel) - mean_a * mean_b
    c1, c2 = SSIM_K1**2, SSIM_K2**2  # (K * data range)^2, data range 1
    numerator = (2 * mean_a * mean_b + c1) * (2 * cov + c2)
    denominator = (mean_a.square() + mean_b.square() + c1) * (var_a + var_b + c2)
    return (numerator / denominator).mean(dim=-1)


def _inner(shape):
    """bool [B,H,W]: the pixels at least SSIM_RADIUS from every image border (skimage crops the rest)."""
    import torch

    inner = torch.zeros(shape, dtype=torch.bool)
    r = SSIM_RADIUS
    inner[:, r:shape[1] - r, r:shape[2] - r] = True
    return inner


def _ssim_of(ssim_map, region) -> float:
    """The mean of an SSIM map [B,H,W] over `region`'s pixels (None: all) away from the border; NaN if none."""
    chosen = _inner(ssim_map.shape)
    if region is not None:
        chosen &= region
    values = ssim_map[chosen]
    return float(values.mean()) if values.numel() else math.nan


def ssim(a, b, region=None) -> float:
    """Structural similarity (Wang et al. 2004) of IMAGEs `a` and `b` [B,H,W,C], data range 1: the SSIM map per
    channel (11 x 11 Gaussian window, sigma 1.5, K1 0.01, K2 0.03), averaged over channels, then over pixels.

    Whole image (`region` None): the map's mean with a border of 5 pixels cropped, exactly as skimage's
    structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1,
    channel_axis=-1) computes it (a batch: the mean over its images). `region` (bool [B,H,W] or [H,W]): the map's
    mean over the region's pixels, those within 5 pixels of the image's border left out as well (there the window
    reaches the reflected border). Each map value still sees its whole window, including pixels outside the
    region: a change just outside a region lowers SSIM at the region's edge. 1.0 for identical images; NaN when
    no pixel remains (an empty region, or an image 10 pixels or less high or wide)."""
    a, b = _image_pair(a, b)
    return _ssim_of(_ssim_map(a, b), _region(region, a.shape))


def image_difference(a, b, mask) -> dict:
    """PSNR, SSIM and the largest absolute difference of IMAGEs `a` and `b` [B,H,W,C] inside an inpainting mask
    (`mask` [B,H,W] or [H,W], > 0.5), outside it, and over the whole image.

    Keys: psnr_all, ssim_all, max_abs_all; with a mask also psnr_inside, psnr_outside, ssim_inside, ssim_outside,
    max_abs_inside, max_abs_outside, pixels_inside, pixels_outside (pixel positions counted over the batch; SSIM
    leaves the 5-pixel image border out of both, see `ssim`). A figure over no pixels is NaN."""
    a, b = _image_pair(a, b)
    inside = _region(mask, a.shape, "mask")
    abs_diff = (a - b).abs()
    squared = abs_diff.square()
    ssim_map = _ssim_map(a, b)
    result = {"psnr_all": _psnr_of(squared, None), "ssim_all": _ssim_of(ssim_map, None),
              "max_abs_all": _max_of(abs_diff, None)}
    if inside is None:
        return result
    outside = ~inside
    return result | {
        "psnr_inside": _psnr_of(squared, inside), "psnr_outside": _psnr_of(squared, outside),
        "ssim_inside": _ssim_of(ssim_map, inside), "ssim_outside": _ssim_of(ssim_map, outside),
        "max_abs_inside": _max_of(abs_diff, inside), "max_abs_outside": _max_of(abs_diff, outside),
        "pixels_inside": int(inside.sum()), "pixels_outside": int(outside.sum()),
    }


def _max_of(abs_diff, region) -> float:
    values = abs_diff if region is None else abs_diff[region]
    return float(values.max()) if values.numel() else math.nan


# ------------------------------------------------------------------------------------------------------------
# Heatmap
# ------------------------------------------------------------------------------------------------------------


def colour_map(values):
    """values [...] in 0..1 -> float32 RGB [..., 3] through HEATMAP_ANCHORS (linear between anchors)."""
    import torch

    positions = torch.tensor([p for p, _ in HEATMAP_ANCHORS], dtype=torch.float64)
    colours = torch.tensor([c for _, c in HEATMAP_ANCHORS], dtype=torch.float64)
    values = values.to(torch.float64).clamp(0, 1)
    upper = torch.searchsorted(positions, values.contiguous(), right=True).clamp(1, len(positions) - 1)
    lower = upper - 1
    t = ((values - positions[lower]) / (positions[upper] - positions[lower])).unsqueeze(-1)
    return (colours[lower] + t * (colours[upper] - colours[lower])).to(torch.float32)


def mask_outline(mask):
    """bool [B,H,W]: the mask's pixels (> 0.5) with a 4-neighbour outside it, a line one pixel wide just inside
    the mask's edge (the image border is not an edge)."""
    import torch

    inside = mask if mask.dtype == torch.bool else mask > 0.5
    edge = torch.zeros_like(inside)
    edge[:, 1:, :] |= inside[:, 1:, :] & ~inside[:, :-1, :]
    edge[:, :-1, :] |= inside[:, :-1, :] & ~inside[:, 1:, :]
    edge[:, :, 1:] |= inside[:, :, 1:] & ~inside[:, :, :-1]
    edge[:, :, :-1] |= inside[:, :, :-1] & ~inside[:, :, 1:]
    return edge


def difference_heatmap(a, b, mask=None, scale=None):
    """Where IMAGEs `a` and `b` [B,H,W,C] differ, as an IMAGE: (heatmap float32 [B,H,W,3] in 0..1, scale_used).

    Per pixel the largest |a - b| over the channels, divided by `scale` (None: the 99.5th percentile of the
    non-zero finite differences, at least 1e-6, so that a few outliers do not turn the rest black), clipped to 1,
    coloured through `colour_map` (black: equal). A NaN/inf difference is drawn at full scale. With a `mask`
    ([B,H,W] or [H,W], > 0.5), its outline (`mask_outline`) is drawn in cyan. Identical images: black (but for
    the outline) and scale_used 0."""
    import numpy as np
    import torch

    a, b = _image_pair(a, b)
    inside = _region(mask, a.shape, "mask")
    diff = (a - b).abs().amax(dim=-1)  # [B,H,W]; a NaN in any channel gives NaN
    finite = torch.isfinite(diff)
    diff = torch.where(finite, diff, torch.full_like(diff, math.inf))
    if scale is not None:
        if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
            raise FillScopeInputError("scale", f"is {scale!r}; the heatmap divides the differences by it.",
                                      "pass a positive number (the difference drawn at full brightness), or None.")
        scale_used = float(scale)
    else:
        nonzero = diff[finite & (diff > 0)]
        if nonzero.numel() == 0:
            scale_used = 0.0
        else:
            # numpy's percentile: torch.quantile refuses inputs over 2^24 values
            scale_used = max(float(np.percentile(nonzero.numpy(), HEATMAP_PERCENTILE)), HEATMAP_MIN_SCALE)
    if scale_used > 0:
        heat = colour_map((diff / scale_used).clamp(0, 1))
    else:  # identical wherever finite; a non-finite pixel is still shown
        heat = colour_map(torch.where(finite, 0.0, 1.0).to(torch.float64))
    if inside is not None:
        heat[mask_outline(inside)] = torch.tensor(OUTLINE_COLOUR, dtype=torch.float32)
    return heat, scale_used
