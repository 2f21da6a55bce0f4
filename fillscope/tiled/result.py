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


def window_records(tiles: list, mask) -> dict:
    """Mode shared's records, one per window by index, before the first step: place, repaint pixels in the window
    (`mask` [B,1,H,W] on the model grid; None on the meta device, which holds no values), then filled per call."""
    on_meta = mask.device.type == "meta"
    return {t.index: {"index": t.index, "box": t.box, "row": t.row, "col": t.col,
                      "repaint_pixels": None if on_meta else
                      int((mask[:, 0, t.box[1]:t.box[3], t.box[0]:t.box[2]] > 0).sum()),
                      "sampled": True, "tokens": 0, "transformer_input": None, "calls": 0, "seconds": 0.0}
            for t in tiles}


def drop_single_process_options(family_kwargs: dict) -> None:
    """Mode shared runs its windows in one process without a step cache: step_cache other than off and parallel
    other than 1 are refused by name; their neutral values are dropped from `family_kwargs` (in place)."""
    from ..errors import FillScopeInputError

    for name in ("step_cache", "parallel"):
        if family_kwargs.get(name) not in (None, "off", 1):
            raise FillScopeInputError(name, f"is {family_kwargs[name]!r}: tiled mode 'shared' runs its windows in "
                                            "one process without a step cache.",
                                      f"leave {name} unset, or use mode 'independent'.")
        family_kwargs.pop(name, None)


def schedule_counter(transformer, state: dict):
    """A denoiser's `schedule` hook that keeps the run's step count in state["steps"] (progress counts windows x
    steps; denoise < 1 runs fewer) and passes the sigmas on to the wrapped denoiser's own hook, if it has one."""
    def schedule(sigmas):
        state["steps"] = len(sigmas) - 1
        inner = getattr(transformer, "schedule", None)
        if inner is not None:
            inner(sigmas)

    return schedule


__all__ = ["TiledResult", "drop_single_process_options", "schedule_counter", "transformer_tokens", "window_records"]
