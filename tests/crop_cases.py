"""The four masks the crop options are tested on (issue 24), on a photo of any size: a blob, a blob cut by the
border, two far-apart blobs and a 20-px stroke across the picture. Sizes scale with the photo (given for
4096x3072)."""

from __future__ import annotations

import math

import torch

CASES = ("blob", "border_blob", "two_far_blobs", "stroke")


def _disc(mask, cy, cx, r):
    h, w = mask.shape[-2:]
    ys = torch.arange(h, dtype=torch.float32)[:, None]
    xs = torch.arange(w, dtype=torch.float32)[None, :]
    mask[..., (ys - cy) ** 2 + (xs - cx) ** 2 <= r * r] = 1.0


def case_mask(name: str, height: int = 3072, width: int = 4096) -> torch.Tensor:
    """[1,H,W] mask for one of CASES."""
    k = width / 4096  # sizes given for 4096 px wide
    m = torch.zeros(1, height, width)
    if name == "blob":
        _disc(m, 0.5 * height, 0.45 * width, 300 * k)
        _disc(m, 0.5 * height + 180 * k, 0.45 * width + 220 * k, 160 * k)  # not round: a lobe
    elif name == "border_blob":
        _disc(m, 120 * k, width - 150 * k, 320 * k)  # cut by the top and right borders
    elif name == "two_far_blobs":
        _disc(m, 0.18 * height, 0.12 * width, 140 * k)
        _disc(m, 0.82 * height, 0.88 * width, 140 * k)
    elif name == "stroke":
        xs = torch.arange(width, dtype=torch.float32)
        centre = 0.5 * height + 0.06 * height * torch.sin(xs / (width / (2 * math.pi)) * 1.5)
        ys = torch.arange(height, dtype=torch.float32)[:, None]
        m[0] = ((ys - centre[None, :]).abs() <= 10 * k).float()  # 20 px wide (21 rows) across the picture
    else:
        raise ValueError(name)
    return m


def photo(height: int = 3072, width: int = 4096, seed: int = 0) -> torch.Tensor:
    """[1,H,W,3] a smooth random photo (low-frequency colour plus fine noise): resampling errors stay small."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(1, 3, 12, 16, generator=g)
    img = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bicubic", align_corners=False)
    img = img + 0.02 * torch.randn(1, 3, height, width, generator=g)
    return img.clamp(0, 1).permute(0, 2, 3, 1).contiguous()
