"""fillscope/compare/metrics.py's SSIM and PSNR against scikit-image's, on a few float64 image pairs.

scikit-image is no dependency of the pack; install it beside, e.g.
    .venv/bin/pip install --target /tmp/skimage_ref scikit-image
    PYTHONPATH=/tmp/skimage_ref .venv/bin/python bench/ssim_vs_skimage.py
Prints each pair's figures and the largest differences (measured in this run); exit 1 over 1e-12 (SSIM) or 1e-10 dB.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def pairs():
    rng = np.random.default_rng(0)
    a = rng.random((64, 80, 3))
    yield "random vs noisy", a, np.clip(a + 0.05 * rng.standard_normal(a.shape), 0, 1)
    ys, xs = np.mgrid[0:48, 0:64] / 64.0
    g = np.stack([xs, ys, (xs + ys) / 2], -1)
    yield "gradient vs shifted", g, np.clip(g + 0.03, 0, 1)
    c = ((np.indices((40, 40)).sum(0) // 4) % 2).astype(float)[..., None].repeat(3, -1)
    yield "checkerboard vs blurred", c, (c + np.roll(c, 1, 0) + np.roll(c, 1, 1)) / 3


def main() -> int:
    from skimage import metrics as sk

    from fillscope.compare.metrics import psnr, ssim

    worst_ssim = worst_psnr = 0.0
    for name, a, b in pairs():
        ta, tb = torch.from_numpy(a)[None], torch.from_numpy(b)[None]
        s_ours, p_ours = ssim(ta, tb), psnr(ta, tb)
        s_ref = sk.structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                                         data_range=1, channel_axis=-1)
        p_ref = sk.peak_signal_noise_ratio(a, b, data_range=1)
        worst_ssim, worst_psnr = max(worst_ssim, abs(s_ours - s_ref)), max(worst_psnr, abs(p_ours - p_ref))
        print(f"{name:<26} SSIM {s_ours:.12f} (skimage {s_ref:.12f})  PSNR {p_ours:.9f} dB (skimage {p_ref:.9f})")
    print(f"largest difference: SSIM {worst_ssim:.2e}, PSNR {worst_psnr:.2e} dB (measured in this run)")
    return 0 if worst_ssim <= 1e-12 and worst_psnr <= 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())
