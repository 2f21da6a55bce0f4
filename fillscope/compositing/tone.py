"""Seams and colour: measure and correct how the generated image's colours drift from the source's.

The measure lives on a *ring*: the kept pixels within `width` px outside the mask. There the model was told to
keep the source, so any difference between the generated image and the source there is drift (a colour cast, a
brightness change, a gradient across the image), and the same drift is under the mask where it shows as a seam.

- `ring_mask`, `ring_delta_e`: the ring, and the mean CIE76 delta E on it (sRGB 0..1 -> linear -> XYZ (D65) ->
  CIELAB; Euclidean distance in Lab: about 1 is a just noticeable difference, 2-3 is visible side by side).
- `match_tone`: corrects the generated image in CIELAB (perceptual and roughly decorrelated, so per-channel
  statistics make sense; Reinhard et al.'s colour transfer works alike): per channel, mean and standard deviation
  of the generated ring are mapped onto the source ring's (gain clamped to 0.5..2), then, optionally, a smooth
  offset field: the residual (source - corrected) on the ring spread into the mask by push-pull at a reduced
  resolution and smoothed, so a cast that varies across the image (a left-to-right gradient) is fixed too.
- `poisson_blend`: gradient-domain blend. Inside the mask the result keeps the generated image's gradients and
  meets the source on the mask's border: result = generated + d, d harmonic inside the mask with
  d = source - generated outside it (a membrane). Solved per image on the mask's bounding box (1 px margin) by
  multigrid (full multigrid, then V-cycles; red-black Gauss-Seidel smoothing, pyramid down to about 8-16 px), the
  image border a free (Neumann) edge. Each V-cycle cuts the error about 4x; the default 3 leave < 1e-3 (0..1
  scale) on a 256 px hole with noisy borders, about 6e-3 at worst (1e-4 on average) on a 760 px one. CPU, one
  thread: about 1 s for a 768x768 hole in a 1024x1024 image, 1.7 s when the hole is nearly all of it.

Every function works at the size it is given (the caller's box) and returns values clamped to 0..1; pixels where the
mask is 0 are the caller's to keep (it composites with torch.where(mask == 0, source, ...)); poisson_blend already
returns the source there, bit-identical.
"""

from __future__ import annotations

from ..errors import FillScopeInputError
from ..pixels import dilate

GAIN_RANGE = (0.5, 2.0)  # the std ratio's clamp: a ring of flat colour must not stretch the fill's contrast
STD_FLOOR = 1.0  # Lab units added to both stds: a near-flat ring gives a gain near 1, not a division by ~0
MIN_RING_PIXELS = 16  # fewer than this: too little to measure, the image is returned uncorrected
FIELD_SIDE = 128  # the low-frequency field is computed with the longer side at most this many px

_M = ((0.4124564, 0.3575761, 0.1804375), (0.2126729, 0.7151522, 0.0721750), (0.0193339, 0.1191920, 0.9503041))
_WHITE = (0.95047, 1.0, 1.08883)  # D65
_E = (6.0 / 29.0) ** 3


def srgb_to_lab(rgb):
    """[...,3] sRGB 0..1 -> CIELAB (D65), float32."""
    import torch

    c = rgb.float().clamp(0, 1)
    lin = torch.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = torch.tensor(_M, dtype=lin.dtype, device=lin.device)
    xyz = lin @ m.T / torch.tensor(_WHITE, dtype=lin.dtype, device=lin.device)
    f = torch.where(xyz > _E, xyz.clamp_min(_E) ** (1.0 / 3.0), xyz / (3 * (6.0 / 29.0) ** 2) + 4.0 / 29.0)
    fx, fy, fz = f.unbind(-1)
    return torch.stack([116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)], dim=-1)


def lab_to_srgb(lab):
    """CIELAB (D65) [...,3] -> sRGB, clamped to 0..1."""
    import torch

    L, a, b = lab.float().unbind(-1)
    fy = (L + 16.0) / 116.0
    f = torch.stack([fy + a / 500.0, fy, fy - b / 200.0], dim=-1)
    d = 6.0 / 29.0
    xyz = torch.where(f > d, f ** 3, 3 * d * d * (f - 4.0 / 29.0))
    xyz = xyz * torch.tensor(_WHITE, dtype=xyz.dtype, device=xyz.device)
    m_inv = torch.linalg.inv(torch.tensor(_M, dtype=torch.float64)).to(dtype=xyz.dtype, device=xyz.device)
    lin = (xyz @ m_inv.T).clamp_min(0)
    srgb = torch.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin.clamp_min(0.0031308) ** (1.0 / 2.4) - 0.055)
    return srgb.clamp(0, 1)


def _check(name, t, channels):
    if t.dim() != 4 or t.shape[-1] != channels:
        raise FillScopeInputError(name, f"expected [B,H,W,{channels}], got shape {list(t.shape)}.",
                                  f"pass a [B,H,W,{channels}] tensor (ComfyUI IMAGE layout).")


def _check_same(generated, source, mask):
    _check("generated", generated, 3)
    _check("source", source, 3)
    _check("mask", mask, 1)
    if generated.shape != source.shape:
        raise FillScopeInputError("generated", f"is {list(generated.shape)} but the source is {list(source.shape)}.",
                                  "pass the generated image and the source at the same size (the same box).")
    if tuple(mask.shape[1:3]) != tuple(source.shape[1:3]) or mask.shape[0] not in (1, source.shape[0]):
        raise FillScopeInputError("mask", f"is {list(mask.shape)} for images {list(source.shape)}.",
                                  "pass a [B,H,W,1] mask of the images' size (one, or one per image).")


def ring_mask(mask, width: int):
    """[B,H,W,1] bool: the pixels within `width` px outside `mask` ([B,H,W,1], 1 = repaint): mask == 0 there and
    a pixel with mask > 0 at most `width` px away along each axis (a square dilation, Chebyshev distance).
    Empty when the mask is empty or covers everything, or width is 0."""
    if width < 0:
        raise FillScopeInputError("ring_width", f"is {width}; it must be 0 or more.", "use a ring of 1 px or more.")
    _check("mask", mask, 1)
    inside = (mask > 0).float().permute(0, 3, 1, 2)  # [B,1,H,W]
    near = dilate(inside, int(width)) > 0
    return (near & (inside == 0)).permute(0, 2, 3, 1)


def _delta_e(lab_a, lab_b, ring) -> float:
    r = ring.expand(*lab_a.shape[:-1], 1)[..., 0]
    if not bool(r.any()):
        return float("nan")
    return float((lab_a[r] - lab_b[r]).norm(dim=-1).mean())


def ring_delta_e(a, b, ring) -> float:
    """Mean CIE76 delta E between sRGB images `a` and `b` [B,H,W,3] over `ring` [B,H,W,1] (bool, or > 0 = in);
    nan when the ring is empty."""
    import torch

    ring = ring if ring.dtype == torch.bool else ring > 0
    return _delta_e(srgb_to_lab(a), srgb_to_lab(b), ring.to(a.device))


def _low_frequency_field(residual, ring):
    """The residual [B,H,W,3] known on `ring` [B,H,W,1] spread over the whole image: area-downsampled so the longer
    side is at most FIELD_SIDE, push-pull filled, smoothed (about 2 cells) and upsampled bilinearly."""
    import torch.nn.functional as F

    from .removal import gaussian_blur, push_pull

    r = residual.permute(0, 3, 1, 2)
    w = ring.float().permute(0, 3, 1, 2)
    h, wd = r.shape[-2:]
    f = max(1, -(-max(h, wd) // FIELD_SIDE))
    size = (max(1, -(-h // f)), max(1, -(-wd // f)))
    if f > 1:
        ws = F.adaptive_avg_pool2d(w, size)
        rs = F.adaptive_avg_pool2d(r * w, size) / ws.clamp_min(1e-12)
    else:
        ws, rs = w, r
    # a cell partly on the ring counts as known in proportion: weights scaled so a half-covered cell is trusted
    field = push_pull(rs, (ws * 2.0).clamp(max=1.0))
    field = gaussian_blur(field, 2.0)
    if f > 1:
        field = F.interpolate(field, size=(h, wd), mode="bilinear", align_corners=False)
    return field.permute(0, 2, 3, 1)


def match_tone(generated, source, mask, *, ring_width: int = 16, low_frequency: bool = True):
    """(corrected [B,H,W,3] 0..1, info): the generated image's colours matched to the source's on the ring outside
    `mask` (see the module docstring). info: ring_pixels, delta_e_before, delta_e_after (mean CIE76 on the ring),
    per image the Lab gain and offset, and `skipped` when the ring is too small to measure (the image is returned
    unchanged, clamped)."""
    import torch

    _check_same(generated, source, mask)
    ring = ring_mask(mask, ring_width).expand(source.shape[0], -1, -1, -1)
    gen = srgb_to_lab(generated)
    src = srgb_to_lab(source.to(generated.device))
    ring = ring.to(gen.device)
    before = _delta_e(gen, src, ring)
    info = {"ring_width": int(ring_width), "ring_pixels": int(ring.sum()), "delta_e_before": before,
            "gain": [], "offset": []}
    out = gen.clone()
    measured = torch.zeros(gen.shape[0], dtype=torch.bool)
    for i in range(gen.shape[0]):
        r = ring[i, ..., 0]
        if int(r.sum()) < MIN_RING_PIXELS:
            info["gain"].append(None)
            info["offset"].append(None)
            continue
        measured[i] = True
        g, s = gen[i][r], src[i][r]  # [n,3]
        mu_g, mu_s = g.mean(0), s.mean(0)
        gain = ((s.std(0, unbiased=False) + STD_FLOOR) / (g.std(0, unbiased=False) + STD_FLOOR)).clamp(*GAIN_RANGE)
        out[i] = (gen[i] - mu_g) * gain + mu_s
        info["gain"].append([round(float(x), 4) for x in gain])
        info["offset"].append([round(float(x), 3) for x in (mu_s - mu_g)])
    if not bool(measured.any()):
        info["skipped"] = f"ring holds fewer than {MIN_RING_PIXELS} px: nothing to measure, no correction"
        info["delta_e_after"] = before
        return generated.float().clamp(0, 1), info
    if low_frequency:
        field = _low_frequency_field((src - out) * ring, ring)
        out = out + field * measured.to(out.device).view(-1, 1, 1, 1)
    corrected = lab_to_srgb(out)
    keep = (~measured).to(corrected.device).view(-1, 1, 1, 1)
    corrected = torch.where(keep, generated.float().clamp(0, 1), corrected)
    info["delta_e_after"] = _delta_e(srgb_to_lab(corrected), src, ring)
    info["low_frequency"] = bool(low_frequency)
    return corrected, info


# ---- Poisson ---------------------------------------------------------------------------------------------------
#
# The membrane d solves L(d) = sum of the 4 neighbours - 4 d = rhs on the unknown cells (rhs = 0 at the full size),
# with the known cells fixed; the image border is a free (Neumann) edge (replicated neighbours). Multigrid: red-black
# Gauss-Seidel smoothing, residuals restricted by 2x2 sums (L at twice the spacing is 4x L), corrections
# prolonged bilinearly. A coarse cell is unknown when most (3 or 4) of its fine pixels are.


def _neighbour_mean(d):
    import torch.nn.functional as F

    p = F.pad(d, (1, 1, 1, 1), mode="replicate")
    return 0.25 * (p[..., :-2, 1:-1] + p[..., 2:, 1:-1] + p[..., 1:-1, :-2] + p[..., 1:-1, 2:])


def _relax(d, rhs, unknown, sweeps: int, omega: float):
    """Red-black SOR (omega 1: Gauss-Seidel) sweeps of L(d) = rhs on the unknown cells of d [1,C,h,w]."""
    import torch
    import torch.nn.functional as F

    h, w = d.shape[-2:]
    red = ((torch.arange(h, device=d.device).view(-1, 1) + torch.arange(w, device=d.device).view(1, -1)) % 2 == 0)
    colours = [(unknown & red).to(d.dtype) * omega, (unknown & ~red).to(d.dtype) * omega]
    quarter = None if rhs is None else 0.25 * rhs
    d = d.clone()
    for _ in range(sweeps):
        for step in colours:
            p = F.pad(d, (1, 1, 1, 1), mode="replicate")  # the image border: a free (Neumann) edge
            t = p[..., :-2, 1:-1] + p[..., 2:, 1:-1]
            t += p[..., 1:-1, :-2]
            t += p[..., 1:-1, 2:]
            t.mul_(0.25)
            if quarter is not None:
                t -= quarter
            t -= d
            t *= step  # omega on this colour's unknown cells, 0 elsewhere
            d += t
    return d


def _pad_even(x, mode):
    import torch.nn.functional as F

    ph, pw = x.shape[-2] % 2, x.shape[-1] % 2
    if not (ph or pw):
        return x
    return F.pad(x, (0, pw, 0, ph), mode=mode) if mode == "replicate" else F.pad(x, (0, pw, 0, ph))


def _prolong(x, like):
    import torch.nn.functional as F

    up = F.interpolate(x, size=(x.shape[-2] * 2, x.shape[-1] * 2), mode="bilinear", align_corners=False)
    return up[..., : like.shape[-2], : like.shape[-1]]


def _pyramid(values, unknown):
    """[(known values, unknown mask)] from the full size down to about 8 px, while a level keeps both kinds."""
    import torch
    import torch.nn.functional as F

    levels = [(values, unknown)]
    while min(levels[-1][1].shape[-2:]) > 8:
        v, u = levels[-1]
        k = _pad_even((~u).float(), "replicate")
        kc = F.avg_pool2d(k, 2)
        uc = kc < 0.5
        if bool(uc.all()) or not bool(uc.any()):
            break
        vc = F.avg_pool2d(_pad_even(v, "replicate") * k, 2) / kc.clamp_min(1e-12)
        levels.append((torch.where(uc, torch.zeros_like(vc), vc), uc))
    return levels


def _v_cycle(levels, k: int, d, rhs, base_sweeps: int):
    import math

    import torch
    import torch.nn.functional as F

    u = levels[k][1]
    if k == len(levels) - 1:
        n = max(u.shape[-2:])  # SOR's optimal omega for an n-cell grid
        return _relax(d, rhs, u, base_sweeps, 2.0 / (1.0 + math.sin(math.pi / max(n, 2))))
    d = _relax(d, rhs, u, 2, 1.0)
    lap = 4.0 * (_neighbour_mean(d) - d)
    residual = torch.where(u, (0.0 if rhs is None else rhs) - lap, torch.zeros_like(d))
    coarse_u = levels[k + 1][1]
    rc = F.avg_pool2d(_pad_even(residual, "zeros"), 2) * 4.0
    rc = torch.where(coarse_u, rc, torch.zeros_like(rc))
    ec = _v_cycle(levels, k + 1, torch.zeros_like(rc), rc, base_sweeps)
    d = torch.where(u, d + _prolong(ec, d), d)
    return _relax(d, rhs, u, 2, 1.0)


def _solve_membrane(known_values, unknown, base_sweeps: int, cycles: int):
    """d [1,C,h,w]: `known_values` where `unknown` [1,1,h,w] is False, harmonic where True. Full multigrid: solved
    on the coarsest level (mean of the known values as the start, `base_sweeps` SOR sweeps), then level by level
    prolonged and improved by one V-cycle, then `cycles` more V-cycles at the full size."""
    import torch

    levels = _pyramid(known_values, unknown)
    v, u = levels[-1]
    k = (~u).float()
    start = (v * k).sum(dim=(2, 3), keepdim=True) / k.sum(dim=(2, 3), keepdim=True).clamp_min(1.0)
    d = torch.where(u, start.expand_as(v), v)
    d = _v_cycle(levels, len(levels) - 1, d, None, base_sweeps)
    for level in range(len(levels) - 2, -1, -1):
        v, u = levels[level]
        d = torch.where(u, _prolong(d, v), v)
        d = _v_cycle(levels, level, d, None, base_sweeps)
    for _ in range(max(0, cycles - 1)):
        d = _v_cycle(levels, 0, d, None, base_sweeps)
    return d


def solve_poisson(rhs, unknown, *, cycles: int, base_sweeps: int):
    """d [1,C,h,w] with Laplacian(d) = `rhs` [1,C,h,w] where `unknown` [1,1,h,w] is True and d = 0 elsewhere:
    `cycles` V-cycles from zero on the mask's pyramid (the multigrid _solve_membrane uses, with a right-hand side).
    compositing/tile_seams solves its seam corrections with it."""
    import torch

    levels = _pyramid(torch.zeros_like(rhs), unknown)
    d = torch.zeros_like(rhs)
    for _ in range(int(cycles)):
        d = _v_cycle(levels, 0, d, rhs, int(base_sweeps))
    return d


def poisson_blend(generated, source, mask, *, iterations: int = 50, cycles: int = 3):
    """[B,H,W,3] 0..1: inside `mask` (> 0) the generated image's gradients, meeting the source on the mask's border
    (see the module docstring); outside the mask the source, bit-identical. Multigrid on the mask's bounding box:
    `iterations` SOR sweeps on the coarsest grid (about 8-16 px), then full multigrid up to the full size and
    `cycles` V-cycles there in all (2 + 2 Gauss-Seidel sweeps a level each). A mask covering the whole image has no
    border to meet: the generated image comes back as it is."""
    import torch

    _check_same(generated, source, mask)
    if iterations < 1 or cycles < 1:
        raise FillScopeInputError("iterations", f"iterations {iterations}, cycles {cycles}: both must be 1 or more.",
                                  "use the defaults (50 sweeps on the coarsest grid, 3 V-cycles).")
    src = source.float()
    gen = generated.float().to(src.device)
    inside = (mask > 0).to(src.device).expand(src.shape[0], -1, -1, -1)  # [B,H,W,1]
    out = src.clone()
    h, w = src.shape[1:3]
    with torch.inference_mode():
        for i in range(src.shape[0]):
            u = inside[i, ..., 0]
            if not bool(u.any()):
                continue
            if bool(u.all()):
                out[i] = gen[i].clamp(0, 1)
                continue
            ys, xs = torch.nonzero(u.any(1)).flatten(), torch.nonzero(u.any(0)).flatten()
            y0, y1 = max(0, int(ys[0]) - 1), min(h, int(ys[-1]) + 2)
            x0, x1 = max(0, int(xs[0]) - 1), min(w, int(xs[-1]) + 2)
            g, s = gen[i, y0:y1, x0:x1], src[i, y0:y1, x0:x1]
            ub = u[y0:y1, x0:x1]
            known = (s - g).permute(2, 0, 1).unsqueeze(0)  # [1,3,h,w]
            unknown = ub.view(1, 1, *ub.shape)
            d = _solve_membrane(torch.where(unknown, torch.zeros_like(known), known), unknown, int(iterations),
                                int(cycles))
            blended = (g + d[0].permute(1, 2, 0)).clamp(0, 1)
            out[i, y0:y1, x0:x1] = torch.where(ub.unsqueeze(-1), blended, s)
    return out
