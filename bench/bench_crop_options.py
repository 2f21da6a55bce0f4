"""Benchmark: Crop For Inpaint's options on the four masks of issue 24, at 4096x3072, no model.

For each mask of tests/crop_cases.py (a blob, a blob cut by the border, two far-apart blobs, a 20-px stroke) and
each setting (the defaults, i.e. the automatic split at min_scale 0.5; the split off; mask preparation on; lanczos;
no resize; the extension past the edge), crop_for_inpaint and stitch are timed (median of REPEATS, CPU) and the
result is checked: how many crops, their smallest scale, the thinnest stroke in a crop (px), and whether every pixel
the options promise to keep is bit-identical after stitch (the given mask, or the prepared mask plus its blend band).
The "generated" crops are the crops inverted: stitch's work does not depend on what the model drew.

Run from the repo root: .venv/bin/python bench/bench_crop_options.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchlib as bl  # noqa: E402

sys.path.insert(0, str(bl.REPO))

import torch  # noqa: E402

H, W = 3072, 4096
REPEATS = 3
THREADS = bl.bench_threads()
SETTINGS = {
    "defaults (auto split)": {},
    "min_scale 0 (one box)": {"min_scale": 0},
    "grow 16 + blend_outside 16": {"grow": 16, "blend_outside": 16},
    "fill_holes + threshold 0.1": {"fill_holes": True, "threshold": 0.1},
    "lanczos both ways": {"downscale": "lanczos", "upscale": "lanczos"},
    "no resize, max_side 2048": {"size_mode": "no resize", "max_side": 2048},
    "past_edge edge pixels, context 2.5": {"past_edge": "edge pixels", "context_factor": 2.5},
}


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def allowed(mask, kwargs):
    """[1,H,W] bool: where stitch may change pixels with these options (the prepared mask and its blend band)."""
    from fillscope.compositing.crop_masks import prepare_mask
    from fillscope.pixels import dilate

    m = prepare_mask(mask, threshold=kwargs.get("threshold", 0.0), fill_holes=kwargs.get("fill_holes", False),
                     grow=kwargs.get("grow", 0))
    return dilate(m[:, None], kwargs.get("blend_outside", 0))[:, 0] > 0


def main() -> int:
    watch = bl.CpuWatch()
    bl.quiet_libraries()
    torch.set_num_threads(THREADS)
    from crop_cases import CASES, case_mask, photo

    from fillscope.compositing.crop import crop_for_inpaint, stitch

    image = photo(H, W)
    rows, all_exact = [], True
    for case in CASES:
        mask = case_mask(case, H, W)
        for label, kwargs in SETTINGS.items():
            crop_t, out = zip(*(timed(lambda: crop_for_inpaint(image, mask, **kwargs)) for _ in range(REPEATS)))
            out = out[0]
            generated = 1.0 - out.image
            stitch_t, res = zip(*(timed(lambda: stitch(generated, out.record)) for _ in range(REPEATS)))
            changed = (res[0].image.view(torch.int32) != image.view(torch.int32)).any(dim=-1)
            exact = not bool((changed & ~allowed(mask, kwargs)).any())
            all_exact &= exact
            crops = out.record.crops
            rows.append([case, label, str(len(crops)), f"{out.record.crop_width}x{out.record.crop_height}",
                         f"{min(c.scale for c in crops):.3g}", f"{min(c.stroke_px for c in crops):.0f}",
                         f"{bl.median(crop_t) * 1000:.0f}", f"{bl.median(stitch_t) * 1000:.0f}",
                         bl.verdict(exact), str(len(out.warnings))])
        print(f"[crop-options] {case} done", flush=True)
    bl.print_report(
        f"bench_crop_options: Crop For Inpaint's options on four masks, {W}x{H} photo, no model", [
            f"how: crop_for_inpaint then stitch(1 - crop), each timed as the median of {REPEATS} (CPU, "
            f"{THREADS} thread{'s' if THREADS > 1 else ''}); masks from tests/crop_cases.py",
            "columns: crops made; the crop size; the smallest scale (crop px per photo px); the thinnest stroke in a "
            "crop (px, crop_masks.mask_width); crop and stitch times (ms, measured); exact: every pixel outside "
            "the prepared mask and its blend band bit-identical after stitch (checked on every pixel)"],
        rows, ["mask", "setting", "crops", "crop size", "min scale", "stroke px", "crop ms", "stitch ms", "exact",
               "warnings"], watch=watch)
    return 0 if all_exact else 1


if __name__ == "__main__":
    bl.run_main(main, "crop-options")
