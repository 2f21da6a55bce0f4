"""CFG parallelism for SD3 + the inpainting ControlNet: the two passes of classifier-free guidance on two ranks.

The single-rank sampler (pipelines/sd3_controlnet.py, sample_sd3_controlnet_inpaint) runs, each step, the
ControlNet and the MMDiT on the batch [negative, positive] ([2B, ...], one pass; two passes of [B] when the two
contexts differ in length), then guides: uncond + cfg * (cond - uncond). At parallel=2 rank 0 runs the conditional
(positive) pass and rank 1 the unconditional (negative) one, each [B] with its own ControlNet call; the two
velocities are all-gathered into [2B] negative first, the single-rank batch's order, and every rank guides and
steps the same latents. Each step costs one pass per rank and one all-gather of a velocity [B,16,h,w] per rank.
"""

from __future__ import annotations

from ..errors import FillScopeInputError
from .context import check_group

CFG_DEGREES = (1, 2)
POSITIVE_RANK, NEGATIVE_RANK = 0, 1


def check_cfg_parallel(parallel, name: str = "parallel") -> None:
    """1 (off) or 2 (one pass a rank) in a process group of 2 ranks."""
    if isinstance(parallel, bool) or parallel not in CFG_DEGREES:
        raise FillScopeInputError(
            name, f"is {parallel!r}; SD3 + ControlNet parallelises classifier-free guidance: the conditional pass on "
                  "one rank, the unconditional on another.", "use 1 (off) or 2.")
    if parallel == 2:
        check_group(2, name)


def rank_pass(parallel: int, use_cfg: bool) -> str | None:
    """The text pass this rank runs alone: "positive" on rank 0, "negative" on rank 1; None when nothing is split
    (parallel 1, or CFG off: every rank then runs the one pass itself)."""
    if parallel == 1 or not use_cfg:
        return None
    import torch.distributed as dist

    return "positive" if dist.get_rank() == POSITIVE_RANK else "negative"


def gather_guidance_pair(velocity):
    """This rank's velocity [B,...] and the other rank's, all-gathered: [2B,...], negative first (as the
    single-rank CFG batch), the same tensor on both ranks."""
    import torch
    import torch.distributed as dist

    parts = [torch.empty_like(velocity) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, velocity.contiguous())
    return torch.cat([parts[NEGATIVE_RANK], parts[POSITIVE_RANK]])
