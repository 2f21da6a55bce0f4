"""What a tiled run returns (TiledResult) and the token count its records give per tile."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TiledResult:
    """The tiled run's image [B,H,W,3] at the input's size, the kept tiles and one record per tile (in the order
    run): index, box (x0, y0, x1, y1), row, col, repaint pixels in the tile, whether the transformer ran, the token
    count of its input (per image: FLUX Fill / klein: the sequence, klein's reference tokens included; SD3: latent
    positions / patch^2), its shape, and the tile's seconds. Mode shared: the boxes are on the model grid (the
    image padded to a multiple of 16 px), `tokens` / `transformer_input` are the window's first call's, `calls` how
    many times the transformer ran it (once a step) and `seconds` their sum."""

    image: object
    tiles: list
    records: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)


def transformer_tokens(shape, stack) -> int:
    """Tokens per image of the transformer's input: [B,N,C] -> N; SD3's latents [B,C,h,w] -> h*w / patch^2."""
    if len(shape) == 3:
        return int(shape[1])
    patch = int(stack["transformer"].config.get("patch_size", 2))
    return int(shape[2]) * int(shape[3]) // (patch * patch)


__all__ = ["TiledResult", "transformer_tokens"]
