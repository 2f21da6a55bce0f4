"""Two captures lined up boundary by boundary: the figures at each, and where the runs first part.

compare_captures(a, b) walks run A's boundaries in the order A observed them, then the ones only B has. For a
boundary both have with values: metrics.tensor_difference (relative error, max abs, cosine); it passes when its
relative error is at most `tolerance`. On the meta device (no values) only shapes are compared, and the result says
so. The first divergence is the first boundary in A's order over the tolerance (or of another shape); the first step
and the first block are the first `step[i].*` and `transformer.call[k].<block>` boundaries over it. The images (the
runs' final IMAGEs, given separately: the capture holds the model-space decode) get PSNR and SSIM inside and outside
the mask, and a difference heat map. Runs whose shared boundaries agree can still differ: a boundary only one run
passed (one skipped its sampling) leaves no row to compare, so the final images are lined up too (their relative
error against the same tolerance, `image_differs`); `differs` is either, and the headline names which.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

STEP = re.compile(r"^step\[(\d+)\]\.")
BLOCK = re.compile(r"^transformer\.call\[(\d+)\]\.(.+)$")


@dataclass
class BoundaryRow:
    name: str
    shape_a: tuple | None
    shape_b: tuple | None
    status: str  # "same" (within tolerance), "differs", "shapes differ", "same shape" (meta), "only A", "only B"
    figures: dict = field(default_factory=dict)  # metrics.tensor_difference, when both have values

    def as_dict(self) -> dict:
        return {"name": self.name, "shape_a": list(self.shape_a) if self.shape_a else None,
                "shape_b": list(self.shape_b) if self.shape_b else None, "status": self.status,
                **{k: _json_number(v) for k, v in self.figures.items() if k not in ("shape_a", "shape_b")}}


@dataclass
class Comparison:
    rows: list
    tolerance: float
    shapes_only: bool  # a side ran on meta: no values anywhere, shapes compared
    first_divergence: str | None = None
    first_step: int | None = None
    first_block: str | None = None
    image: dict = field(default_factory=dict)  # metrics.image_difference of the final IMAGEs, and their rel_err
    notes: list = field(default_factory=list)

    @property
    def image_differs(self) -> bool:
        """The final images' relative error is over the tolerance (or not finite)."""
        rel = self.image.get("rel_err")
        return rel is not None and not rel <= self.tolerance

    @property
    def differs(self) -> bool:
        """The runs differ beyond the tolerance: at a shared boundary, or in their final images."""
        return self.first_divergence is not None or self.image_differs

    @property
    def compared(self) -> list:
        return [r for r in self.rows if r.status in ("same", "differs", "shapes differ", "same shape")]

    def headline(self) -> str:
        """One line for the node's face: the first divergence and the PSNR inside the mask."""
        if self.shapes_only:
            changed = sum(r.status == "shapes differ" for r in self.rows)
            return f"shapes only (meta): {changed} of {len(self.compared)} shared boundaries change shape"
        if self.first_divergence:
            where = f"first divergence: {self.first_divergence}"
        elif self.image_differs:
            one_side = sum(r.status in ("only A", "only B") for r in self.rows)
            where = (f"the images differ (rel err {self.image['rel_err']:.3g} > {self.tolerance:g}) though no shared "
                     f"boundary is over {self.tolerance:g}" + (f"; {one_side} boundaries were passed by one run only"
                                                               if one_side else ""))
        else:
            where = f"no boundary over {self.tolerance:g}"
        psnr = self.image.get("psnr_inside", self.image.get("psnr_all"))
        if psnr is None:
            return where
        outside = self.image.get("psnr_outside")
        return (where + f"; image PSNR {'inside the mask ' if 'psnr_inside' in self.image else ''}{_db(psnr)}"
                + ("" if outside is None else f", outside {_db(outside)}"))

    def as_dict(self) -> dict:
        return {"tolerance": self.tolerance, "shapes_only": self.shapes_only, "differs": self.differs,
                "first_divergence": self.first_divergence, "first_step": self.first_step,
                "first_block": self.first_block, "headline": self.headline(),
                "image": {k: _json_number(v) for k, v in self.image.items()}, "notes": list(self.notes),
                "boundaries": [r.as_dict() for r in self.rows]}


def _db(v: float) -> str:
    return "inf dB (identical)" if v == math.inf else f"{v:.2f} dB"


def _json_number(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else "-inf" if v < 0 else "nan"
    return v


def compare_captures(a, b, *, tolerance: float = 1e-4, image_a=None, image_b=None, mask=None) -> Comparison:
    """a, b: capture.BoundaryCapture of runs A and B. image_a / image_b: their final IMAGEs [B,H,W,3] 0..1; mask:
    [B,H,W] the repainted area (> 0.5 inside) for the inside / outside figures."""
    from .metrics import image_difference, tensor_difference

    shapes_only = any(o.value is None for o in list(a.seen.values()) + list(b.seen.values()))
    rows = []
    for name, oa in a.seen.items():
        ob = b.seen.get(name)
        if ob is None:
            rows.append(BoundaryRow(name, oa.shape, None, "only A"))
        elif oa.shape != ob.shape:
            rows.append(BoundaryRow(name, oa.shape, ob.shape, "shapes differ"))
        elif oa.value is None or ob.value is None:
            rows.append(BoundaryRow(name, oa.shape, ob.shape, "same shape"))
        else:
            figures = tensor_difference(oa.value, ob.value)
            rel = figures.get("rel_err", math.inf)
            rows.append(BoundaryRow(name, oa.shape, ob.shape, "same" if rel <= tolerance else "differs", figures))
    rows += [BoundaryRow(name, None, ob.shape, "only B") for name, ob in b.seen.items() if name not in a.seen]
    out = Comparison(rows, tolerance, shapes_only)
    over = [r for r in rows if r.status in ("differs", "shapes differ")]
    if over:
        out.first_divergence = over[0].name
        steps = [int(STEP.match(r.name).group(1)) for r in over if STEP.match(r.name)]
        out.first_step = min(steps) if steps else None
        blocks = [r.name for r in over if BLOCK.match(r.name)]
        out.first_block = blocks[0] if blocks else None
    if shapes_only:
        out.notes.append("a run on the meta device has shapes but no values: only shapes are compared")
    elif image_a is not None and image_b is not None:
        if tuple(image_a.shape) == tuple(image_b.shape):
            out.image = image_difference(image_a, image_b, mask)
            out.image["rel_err"] = tensor_difference(image_a, image_b)["rel_err"]
        else:
            out.notes.append(f"the images differ in size ({list(image_a.shape)} vs {list(image_b.shape)}): no PSNR")
    return out


def format_table(c: Comparison, limit: int | None = None) -> str:
    """The boundary table as text (torchinfo-like: one row a boundary)."""
    head = ["boundary", "shape A", "shape B", "status", "rel err", "max abs", "cosine"]
    body = []
    for r in c.rows[:limit]:
        f = r.figures
        body.append([r.name, _shape(r.shape_a), _shape(r.shape_b), r.status,
                     _num(f.get("rel_err")), _num(f.get("max_abs")), _num(f.get("cosine"), ".7f")])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip() for row in [head] + body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _shape(s) -> str:
    return "-" if s is None else "[" + ",".join(str(d) for d in s) + "]"


def _num(v, fmt: str = ".3e") -> str:
    if v is None:
        return ""
    return format(v, fmt) if math.isfinite(v) else str(v)
