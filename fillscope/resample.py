"""Resampling filters for resizing image boxes: lanczos, bicubic, bilinear, area (box) and nearest, as PIL has them.

`resize(chw, height, width, filter)` takes [N,C,h,w] and gives [N,C,height,width] in the input's dtype and device.

lanczos / bicubic / bilinear / area are separable: per axis a [out, in] matrix of kernel weights (`weight_matrix`),
applied with one matmul per axis. The conventions are PIL's (Pillow's Resample.c), so results match
`Image.resize` on float images:
- sample positions at pixel centres: output pixel j reads around source position (j + 0.5) * in / out - 0.5;
- a downscale antialiases: the kernel is stretched by in / out (its support too), so every source pixel counts;
  an upscale uses the kernel unstretched;
- at the image's edges the weights that fall outside are dropped and the row renormalised: every row sums to 1, so a
  constant image stays constant.
Kernels: lanczos a=3 (sinc(x) sinc(x/3), |x| < 3), bicubic Keys a=-0.5 (PIL's, |x| < 2), bilinear the triangle
(|x| < 1). "area" is the exact box: each output pixel is the average of the source over the area it covers, source
pixels it covers only in part weighted by the part (integer factors: F.interpolate(mode="area"); PIL's BOX counts
whole pixels by their centres instead, so it differs from this for non-integer factors). "nearest" is
the source pixel floor((j + 0.5) * in / out) (F.interpolate(mode="nearest-exact")'s convention, PIL's NEAREST's),
computed in exact integers; where that position is exactly a pixel boundary PIL's rounding takes the pixel below.

Not clamped: lanczos and bicubic have negative lobes, so near an edge they overshoot (ring) past the input's range
(a 0/1 step gives values below 0 and above 1); the caller clamps an image, and a mask needs its own choice (area
keeps 0 and 1 exact). NaN/inf values spread across a whole band of the output; callers check finiteness first.

Speed: the weight matrices are banded, so each matmul is done in blocks of output rows against only the source
rows the block reaches ([1,3,3072,4096] -> 768x1024 lanczos: 77 GFLOP as dense matrices, 2.0 in blocks).
Nothing is cached between calls.
"""

from __future__ import annotations

import math

from .errors import FillScopeInputError

FILTERS = ("lanczos", "bicubic", "bilinear", "area", "nearest")

_SUPPORT = {"lanczos": 3.0, "bicubic": 2.0, "bilinear": 1.0}  # kernel half-width in source pixels at scale 1


def _block_rows(scale: float) -> int:
    """Output rows per banded matmul: about 64 new source rows a block, 16 to 64 rows. Fewer rows multiply fewer of
    the band's zeros, more make bigger (faster) matmuls; measured on 2 CPU cores, [1,3,3072,4096] -> 768x1024
    lanczos: 16 rows 44 ms, 32 52 ms, 64 73 ms, 128 117 ms; [1,3,384,512] -> 768x1024: 16 rows 6.0 ms, 32 4.2-4.8,
    64 4.4, 128 5.4."""
    return max(16, min(64, 8 * round(8 / scale)))


def _check(filter, height, width, name: str) -> None:
    if not isinstance(filter, str) or filter not in FILTERS:
        raise FillScopeInputError(
            name, f"unknown resampling filter {filter!r}; the filters are {', '.join(FILTERS)}.",
            f"choose one of {', '.join(FILTERS)}.")
    for size_name, size in (("height", height), ("width", width)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise FillScopeInputError(
                size_name, f"the {size_name} to resize to must be a whole number of pixels >= 1, got {size!r}.",
                f"give a {size_name} of at least 1 pixel.")


def _kernel(filter: str, x):
    """PIL's kernels at distances x (float64 tensor, in kernel units): lanczos a=3, Keys cubic a=-0.5, triangle."""
    import torch

    ax = x.abs()
    if filter == "bilinear":
        return (1.0 - ax).clamp(min=0.0)
    if filter == "bicubic":
        a = -0.5
        near = ((a + 2.0) * ax - (a + 3.0)) * ax * ax + 1.0
        far = (((ax - 5.0) * ax + 8.0) * ax - 4.0) * a
        return torch.where(ax < 1.0, near, torch.where(ax < 2.0, far, torch.zeros_like(ax)))
    # lanczos: sinc(x) sinc(x/3) inside -3 <= x < 3 (torch.sinc is the normalised sin(pi x) / (pi x), 1 at 0)
    return torch.where((x >= -3.0) & (x < 3.0), torch.sinc(x) * torch.sinc(x / 3.0), torch.zeros_like(x))


def band_weights(in_size: int, out_size: int, filter: str, device=None):
    """The banded form of one axis's weights: (first [out] int64, weights [out, taps] float64). Output pixel j is
    sum_k weights[j, k] * source[first[j] + k]; the window is kept inside the source (shifted at its ends, taps outside
    the kernel's support weigh 0). Each row sums to 1. `filter` is one of lanczos, bicubic, bilinear, area."""
    import torch

    f64 = torch.float64
    scale = in_size / out_size  # source pixels per output pixel
    centre = (torch.arange(out_size, dtype=f64, device=device) + 0.5) * scale  # PIL's coordinates: pixel i is [i, i+1]
    if filter == "area":
        half = scale / 2.0  # the output pixel's footprint in the source: [centre - half, centre + half]
    else:
        stretch = max(scale, 1.0)  # a downscale stretches the kernel by 1/scale (antialias); an upscale does not
        half = _SUPPORT[filter] * stretch
    first = torch.floor(centre - half).clamp(min=0).to(torch.int64)
    taps = min(in_size, int(math.ceil(2.0 * half)) + 2)
    first = first.clamp(max=in_size - taps)  # the window stays inside the source; taps outside the support weigh 0
    position = (first[:, None] + torch.arange(taps, device=device)[None, :]).to(f64)  # [out, taps] source pixels
    if filter == "area":
        # exact coverage: the length of source pixel [i, i+1] inside the footprint
        left, right = (centre - half)[:, None], (centre + half)[:, None]
        weights = (torch.minimum(position + 1.0, right) - torch.maximum(position, left)).clamp(min=0.0)
    else:
        weights = _kernel(filter, (position + 0.5 - centre[:, None]) / stretch)
    # all taps are inside the source, so "weights outside the image dropped" is the renormalisation alone
    return first, weights / weights.sum(dim=1, keepdim=True)


def weight_matrix(in_size: int, out_size: int, filter: str, device=None):
    """[out_size, in_size] float64: one axis's resampling as a matrix (dense form of `band_weights`; rows sum to 1)."""
    import torch

    first, weights = band_weights(in_size, out_size, filter, device)
    matrix = torch.zeros(out_size, in_size, dtype=torch.float64, device=device)
    index = first[:, None] + torch.arange(weights.shape[1], device=device)[None, :]
    return matrix.scatter_add_(1, index, weights)


def nearest_index(in_size: int, out_size: int, device=None):
    """[out_size] int64: the source pixel each output pixel takes, floor((j + 0.5) * in / out) computed exactly in
    integers (F.interpolate(mode="nearest-exact")'s convention; it computes the scale in float32 and is one pixel off
    at some columns of some sizes, e.g. 2705 -> 3868)."""
    import torch

    j = torch.arange(out_size, dtype=torch.int64, device=device)
    return torch.div((2 * j + 1) * in_size, 2 * out_size, rounding_mode="floor")


def _blocks(in_size: int, out_size: int, filter: str, device, dtype):
    """One axis's band as [(start, stop, lo, hi, block [stop - start, hi - lo])]: output rows start:stop read only
    source rows lo:hi. Built on the CPU (no device sync per block) and moved once per block."""
    import torch

    first, weights = band_weights(in_size, out_size, filter)
    taps = weights.shape[1]
    starts = first.tolist()
    blocks, rows = [], _block_rows(in_size / out_size)
    for start in range(0, out_size, rows):
        stop = min(start + rows, out_size)
        lo, hi = starts[start], min(in_size, starts[stop - 1] + taps)  # first is non-decreasing
        block = torch.zeros(stop - start, hi - lo, dtype=torch.float64)
        block.scatter_add_(1, first[start:stop, None] - lo + torch.arange(taps)[None, :], weights[start:stop])
        blocks.append((start, stop, lo, hi, block.to(device=device, dtype=dtype)))
    return blocks


def _apply_rows(x, blocks, out_size: int):
    """x [B, in, W] -> [B, out, W]: the first spatial axis, block by block."""
    import torch

    result = torch.empty(x.shape[0], out_size, x.shape[2], dtype=x.dtype, device=x.device)
    for start, stop, lo, hi, block in blocks:
        result[:, start:stop, :] = torch.matmul(block, x[:, lo:hi, :])
    return result


def _apply_cols(x, blocks, out_size: int):
    """x [B, H, in] -> [B, H, out]: the last axis, block by block."""
    import torch

    result = torch.empty(x.shape[0], x.shape[1], out_size, dtype=x.dtype, device=x.device)
    for start, stop, lo, hi, block in blocks:
        result[:, :, start:stop] = torch.matmul(x[:, :, lo:hi], block.t())
    return result


def resize(chw, height: int, width: int, filter: str = "bilinear", *, name: str = "filter"):
    """[N,C,h,w] float -> [N,C,height,width], same dtype and device, with one of FILTERS (see the module's text).

    The same size returns `chw` itself. Not clamped: lanczos and bicubic overshoot the input's range near edges.
    Computed in float32 (float64 for a float64 input; weights built in float64). `name` is the input an unknown
    filter is reported against (FillScopeInputError); a height or width under 1 is reported as "height"/"width".
    """
    import torch

    _check(filter, height, width, name)
    if chw.dim() != 4 or not chw.is_floating_point():
        raise ValueError(f"resize takes a [N,C,h,w] float tensor, got {chw.dtype} of shape {list(chw.shape)}")
    n, c, in_h, in_w = chw.shape
    if (in_h, in_w) == (height, width):
        return chw
    if filter == "nearest":
        rows, cols = nearest_index(in_h, height, chw.device), nearest_index(in_w, width, chw.device)
        return chw[:, :, rows[:, None], cols[None, :]]  # one gather (two index_selects measured ~2x slower)

    dtype = torch.float64 if chw.dtype == torch.float64 else torch.float32
    x = chw.reshape(n * c, in_h, in_w).to(dtype)
    rows = _blocks(in_h, height, filter, chw.device, dtype) if in_h != height else None
    cols = _blocks(in_w, width, filter, chw.device, dtype) if in_w != width else None
    # The cheaper order first (multiply-adds of the banded passes, block widths counted): reducing the axis that
    # shrinks most early saves work on the second pass.
    span_h = sum(b[4].numel() for b in rows) / height if rows else 0
    span_w = sum(b[4].numel() for b in cols) / width if cols else 0
    rows_first = height * in_w * span_h + height * width * span_w
    cols_first = in_h * width * span_w + height * width * span_h
    if rows_first <= cols_first:
        x = _apply_rows(x, rows, height) if rows else x
        x = _apply_cols(x, cols, width) if cols else x
    else:
        x = _apply_cols(x, cols, width) if cols else x
        x = _apply_rows(x, rows, height) if rows else x
    return x.reshape(n, c, height, width).to(chw.dtype)
