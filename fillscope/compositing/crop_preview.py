"""What the crop did, drawn on the photo: the debug view a crop node owes its user.

crop_preview(record) returns the photo (scaled so its long side is at most `max_side`) with the prepared mask tinted
red, the pixels mask preparation added (grow, fill_holes) yellow and the ones it gave back (threshold) blue, and
each crop's box outlined in its own colour (the part of a box past the border is clipped: it was extended, not
pasted). It reads the stitch record only; nothing it draws reaches Stitch.
"""

from __future__ import annotations

BOX_COLOURS = ((0.0, 0.9, 1.0), (1.0, 0.2, 0.9), (0.3, 1.0, 0.2), (1.0, 0.6, 0.0), (0.6, 0.4, 1.0), (1.0, 1.0, 1.0))
RED, YELLOW, BLUE = (1.0, 0.1, 0.1), (1.0, 0.9, 0.0), (0.2, 0.4, 1.0)


def _tint(img, where, colour, alpha=0.45):
    import torch

    c = torch.tensor(colour, dtype=img.dtype, device=img.device).view(1, 3, 1, 1)
    a = alpha * where
    return img * (1 - a) + c * a


def crop_preview(record, max_side: int = 1024):
    """[B,h,w,3] float 0..1: the photo of `record` (crop.StitchRecord) with its masks and boxes drawn on it."""
    import torch
    import torch.nn.functional as F

    H, W = record.height, record.width
    s = min(1.0, max_side / max(H, W))
    h, w = max(1, round(H * s)), max(1, round(W * s))
    img = record.source.permute(0, 3, 1, 2).clamp(0, 1)
    if (h, w) != (H, W):
        img = F.interpolate(img, size=(h, w), mode="bilinear", align_corners=False, antialias=True)

    def small(mask):  # [B,H,W] -> [B,1,h,w], any pixel of the mask in a preview pixel counts
        m = (mask > 0).float()[:, None]
        return F.adaptive_max_pool2d(m, (h, w)) if (h, w) != (H, W) else m

    prepared = small(record.mask)
    img = _tint(img, prepared, RED)
    if record.given_mask is not None:
        given = small(record.given_mask)
        img = _tint(img, (prepared > given).float(), YELLOW, 0.7)
        img = _tint(img, (given > prepared).float(), BLUE, 0.7)
    line = max(2, round(max(h, w) / 400))
    for k, c in enumerate(record.crops):
        colour = torch.tensor(BOX_COLOURS[k % len(BOX_COLOURS)], dtype=img.dtype).view(3, 1, 1)
        y0, x0 = round(c.top * s), round(c.left * s)
        y1, x1 = round((c.top + c.height) * s), round((c.left + c.width) * s)
        for ya, yb, xa, xb in ((y0, y0 + line, x0, x1), (y1 - line, y1, x0, x1),
                               (y0, y1, x0, x0 + line), (y0, y1, x1 - line, x1)):
            ya, yb, xa, xb = max(0, ya), min(h, yb), max(0, xa), min(w, xb)
            if ya < yb and xa < xb:
                img[c.image_index, :, ya:yb, xa:xb] = colour
    return img.permute(0, 2, 3, 1).contiguous()
