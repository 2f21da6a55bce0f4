"""What a run observed, kept for a comparison: every boundary tensor the pipeline hands its `observe` callback, in
order, as a CPU float32 copy (or its shape only, on the meta device), every step's denoiser output and latent
(`per_step`), and on request each transformer block's output at every call.

A name observed twice (klein's reference tokens of an edit, a block called at each step) is numbered:
`reference_tokens`, `reference_tokens#2`. Block outputs are named `transformer.call[k].<module path>` with k the
transformer's call (one a step for FLUX Fill and klein without CFG; CFG passes are separate calls)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Observed:
    name: str
    shape: tuple
    dtype: str
    value: object = field(default=None, repr=False)  # CPU float32 tensor, or None (meta, or not a tensor)


class BoundaryCapture:
    """An `observe(name, tensor)` callback that keeps what it sees (see the module's docstring)."""

    per_step = True  # the samplers observe step[i].denoiser / step[i].latent for us (observe.observe_step)

    def __init__(self, keep_values: bool = True):
        self.keep_values = keep_values
        self.seen: dict[str, Observed] = {}
        self._hooks: list = []

    def __call__(self, name: str, tensor) -> None:
        import torch

        if not isinstance(tensor, torch.Tensor):
            return
        key, n = name, 1
        while key in self.seen:
            n += 1
            key = f"{name}#{n}"
        value = None
        if self.keep_values and tensor.device.type != "meta":
            value = tensor.detach().to("cpu", torch.float32, copy=True)
        self.seen[key] = Observed(key, tuple(tensor.shape), str(tensor.dtype).replace("torch.", ""), value)

    @property
    def names(self) -> list[str]:
        return list(self.seen)

    def hook_blocks(self, transformer, block_lists=("transformer_blocks", "single_transformer_blocks")) -> None:
        """Forward hooks on each block of `transformer`'s block lists: their output's first tensor (the image
        stream) at every call, named by the call's number. remove_hooks() takes them off."""
        import torch

        calls = [0]

        def count(module, args):
            calls[0] += 1

        self._hooks.append(transformer.register_forward_pre_hook(count))
        for list_name in block_lists:
            blocks = getattr(transformer, list_name, None)
            if blocks is None:
                continue
            for j, block in enumerate(blocks):
                def keep(module, args, output, where=f"{list_name}.{j}"):
                    out = output[-1] if isinstance(output, tuple) else output
                    if isinstance(out, torch.Tensor):
                        self(f"transformer.call[{calls[0]}].{where}", out)
                self._hooks.append(block.register_forward_hook(keep))

    def remove_hooks(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
