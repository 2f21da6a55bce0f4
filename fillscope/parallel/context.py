"""Ulysses context parallelism for the FLUX.1 Fill transformer (FluxTransformer2DModel) and FLUX.2 [klein]'s
(Flux2Transformer2DModel): one image's tokens split across the ranks of a process group.

diffusers does the work (its `_cp_plan` on both classes, hooks/context_parallel.py, the Ulysses attention of
models/attention_dispatch.py); this module checks the degree, builds the mesh, switches the hooks on for one
sampling run and off again, and says what each rank holds.

What happens in one forward at degree d (H heads of width D, N image tokens, L text tokens, batch B):
- the model's inputs are split along the sequence: hidden_states [B,N/d,C], encoder_hidden_states [B,L/d,C_txt],
  img_ids / txt_ids to match (each rank computes the RoPE of its own tokens); timestep, guidance and the pooled
  vector stay whole on every rank;
- every attention: q, k, v [B,(N+L)/d,H,D] -> all-to-all -> [B,N+L,H/d,D] (every token, H/d heads), attention,
  all-to-all back -> [B,(N+L)/d,H*D]; everything else (linear layers, modulation, norms) runs on the rank's tokens;
- proj_out's output [B,N/d,C_out] is all-gathered -> [B,N,C_out]: every rank ends the call with the whole output.
So the degree must divide the head count and both token counts; sizes 1, 2, 4, 8 (`ULYSSES_DEGREES`).

`enable_context_parallel` mirrors the context-parallel half of diffusers' `ModelMixin.enable_parallelism`, which
cannot run on CPU ranks (it picks its device as rank % accelerator count, zero there); `context_parallel` is the
reversible form the samplers use: the hooks are removed afterwards and the model computes as before, bit for bit.
"""

from __future__ import annotations

import contextlib

from ..errors import FillScopeInputError

ULYSSES_DEGREES = (1, 2, 4, 8)
MODEL_CLASSES = ("FluxTransformer2DModel", "Flux2Transformer2DModel")  # the classes whose _cp_plan FillScope runs

_MESHES: dict = {}  # (device type, degree, id of the default group) -> (default group, mesh): built once a group


def _config_value(config, key: str):
    getter = getattr(config, "get", None)
    return getter(key) if getter is not None else getattr(config, key, None)


def head_count(transformer_config) -> int:
    heads = _config_value(transformer_config, "num_attention_heads")
    if not isinstance(heads, int) or heads < 1:
        raise FillScopeInputError("transformer", f"its config names no head count (num_attention_heads={heads!r}).",
                                  "load a FLUX.1 Fill or FLUX.2 [klein] transformer.")
    return heads


def valid_degrees(transformer_config) -> list[int]:
    """The Ulysses degrees this transformer can run at: those of 1, 2, 4, 8 that divide its head count
    (FLUX.1 Fill 24 heads and klein 4B 24: 1, 2, 4, 8; klein 9B 32: the same; the tiny test models 2: 1, 2)."""
    heads = head_count(transformer_config)
    return [d for d in ULYSSES_DEGREES if heads % d == 0]


def check_degree(degree, transformer_config, name: str = "parallel") -> None:
    """Refuses a degree the transformer cannot be split by, listing the values it can."""
    valid = valid_degrees(transformer_config)
    if isinstance(degree, bool) or not isinstance(degree, int) or degree not in valid:
        heads = head_count(transformer_config)
        raise FillScopeInputError(
            name, f"is {degree!r}; Ulysses context parallelism splits this transformer's {heads} attention heads "
                  f"across the ranks, so the degree must be one of {', '.join(map(str, ULYSSES_DEGREES))} that "
                  f"divides {heads}.", f"use one of {', '.join(map(str, valid))}.")


def check_tokens(degree: int, image_tokens: int, text_tokens: int, name: str = "parallel") -> None:
    """Both sequences are split in equal parts: each token count must be a multiple of the degree."""
    for what, count in (("image", image_tokens), ("text", text_tokens)):
        if count % degree:
            raise FillScopeInputError(
                name, f"{degree} ranks cannot share {count} {what} tokens equally (each rank takes 1/{degree} of "
                      "the image tokens and of the text tokens).",
                "use an image size whose token grid is a multiple of the degree (1024x1024: 4096 tokens), a text "
                "length that is, or a degree that divides both.")


def group_size() -> int | None:
    """The world size of the initialised default process group, None where there is none."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else None


def check_parallel(degree, transformer_config, image_tokens: int, text_tokens: int, name: str = "parallel") -> None:
    """Everything a sampler checks before a run at `degree` > 1: the degree against the heads, the token counts,
    and a process group of exactly `degree` ranks to run in (every rank calls the sampler with the same inputs)."""
    check_degree(degree, transformer_config, name)
    if degree == 1:
        return
    check_tokens(degree, image_tokens, text_tokens, name)
    check_group(degree, name)


def check_group(degree: int, name: str = "parallel") -> None:
    """A process group of exactly `degree` ranks must be initialised (every rank runs the same call)."""
    size = group_size()
    if size != degree:
        have = "no process group is initialised" if size is None else f"the process group has {size} ranks"
        raise FillScopeInputError(
            name, f"is {degree}, but {have}: a parallel run calls the sampler once on each of {degree} ranks.",
            f"start {degree} ranks (fillscope.parallel.launch.run_on_ranks) and call the sampler on each, or set "
            f"{name} to 1.")


def rank_shapes(transformer_config, degree: int, image_tokens: int, text_tokens: int, batch: int = 1) -> dict:
    """What each rank holds in one transformer call at `degree` (shapes as lists), for the shape records.
    `image_tokens`: every token of hidden_states (klein: the noisy tokens and the reference tokens)."""
    check_degree(degree, transformer_config)
    check_tokens(degree, image_tokens, text_tokens)
    heads, head_dim = head_count(transformer_config), _config_value(transformer_config, "attention_head_dim")
    c_in = _config_value(transformer_config, "in_channels")
    c_out = _config_value(transformer_config, "out_channels") or c_in
    c_txt = _config_value(transformer_config, "joint_attention_dim")
    n, l_txt, b = image_tokens // degree, text_tokens // degree, batch
    total = image_tokens + text_tokens
    return {
        "degree": degree,
        "heads": heads,
        "heads_per_rank": heads // degree,
        "head_dim": head_dim,
        "image_tokens": image_tokens,
        "text_tokens": text_tokens,
        "image_tokens_per_rank": n,
        "text_tokens_per_rank": l_txt,
        "tokens_per_rank": n + l_txt,
        "hidden_states": [b, n, c_in],
        "encoder_hidden_states": [b, l_txt, c_txt],
        "qkv_before_all_to_all": [b, n + l_txt, heads, head_dim],
        "qkv_after_all_to_all": [b, total, heads // degree, head_dim],
        "attention_output": [b, n + l_txt, heads * head_dim],
        "output_before_gather": [b, n, c_out],
        "output": [b, image_tokens, c_out],
        "all_to_alls_per_attention": 4,  # q, k, v in; the output back
    }


def _check_model(model) -> None:
    name = type(model).__name__
    if name not in MODEL_CLASSES or getattr(model, "_cp_plan", None) is None:
        raise FillScopeInputError("transformer", f"is a {name}; context parallelism runs the FLUX.1 Fill and FLUX.2 "
                                                 "[klein] transformers.",
                                  "set parallel to 1 for this model (SD3 + ControlNet parallelises CFG instead).")


def ulysses_mesh(degree: int, device_type: str = "cpu"):
    """The ("ring", "ulysses") device mesh of shape (1, degree) over the default process group, built once per
    group (building one creates sub-groups, a collective every rank must join)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.group.WORLD
    key = (device_type, degree, id(world))
    if key not in _MESHES or _MESHES[key][0] is not world:
        _MESHES[key] = (world, init_device_mesh(device_type, (1, degree), mesh_dim_names=("ring", "ulysses")))
    return _MESHES[key][1]


def _attention_processors(model):
    from diffusers.models.attention import AttentionModuleMixin
    from diffusers.models.attention_processor import Attention

    for module in model.modules():
        processor = getattr(module, "processor", None) if isinstance(module, (Attention, AttentionModuleMixin)) else None
        if processor is not None and hasattr(processor, "_parallel_config"):
            yield processor


def enable_context_parallel(model, degree: int, mesh=None):
    """Ulysses at `degree` on `model` (a FluxTransformer2DModel or Flux2Transformer2DModel) inside an initialised
    process group: `mesh`, a DeviceMesh with dimensions ("ring", "ulysses") of sizes (1, degree), or the default
    group's (which must then have `degree` ranks). Returns diffusers' ParallelConfig; the model stays parallel until
    `disable_context_parallel`."""
    import torch.distributed as dist
    from diffusers import AttentionBackendName, ContextParallelConfig, ParallelConfig
    from diffusers.hooks import apply_context_parallel
    # the one private name left: diffusers has no public "does this backend have a context-parallel form" (its own
    # enable_parallelism asks the registry the same way), and the answer is needed before any hook goes on
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    _check_model(model)
    check_degree(degree, model.config)
    if degree == 1:
        raise FillScopeInputError("parallel", "is 1: there is nothing to split.", "call the model as it is.")
    if getattr(model, "_parallel_config", None) is not None:
        raise FillScopeInputError("transformer", "is already parallel (its context-parallel hooks are on).",
                                  "disable_context_parallel first, or run it as it is.")
    device = next(model.parameters()).device
    if mesh is None:
        check_group(degree)
        mesh = ulysses_mesh(degree, device.type)
    elif not (dist.is_available() and dist.is_initialized()):
        check_group(degree)
    for processor in _attention_processors(model):
        backend = processor._attention_backend
        backend = _AttentionBackendRegistry.get_active_backend()[0] if backend is None else AttentionBackendName(backend)
        if not _AttentionBackendRegistry._is_context_parallel_available(backend):
            raise FillScopeInputError("transformer", f"runs the attention backend '{backend.value}', which has no "
                                                     "context-parallel form.", "use the native attention backend.")
        break
    config = ParallelConfig(context_parallel_config=ContextParallelConfig(ulysses_degree=degree))
    config.setup(dist.get_rank(), dist.get_world_size(), device, mesh=mesh)
    for processor in _attention_processors(model):
        processor._parallel_config = config
    model._parallel_config = config
    apply_context_parallel(model, config.context_parallel_config, model._cp_plan)
    # the gathered output is an AsyncCollectiveTensor: waited for where it is made, so the model returns a plain
    # tensor and no collective is left unwaited when the rank ends
    model._fillscope_gather_wait = model.proj_out.register_forward_hook(_wait_gathered)
    return config


def _wait_gathered(module, args, output):
    wait = getattr(output, "wait", None)
    return wait() if callable(wait) else output


def disable_context_parallel(model) -> None:
    """Removes what `enable_context_parallel` added: the split/gather hooks and the processors' config."""
    from diffusers.hooks.context_parallel import remove_context_parallel

    if getattr(model, "_parallel_config", None) is None:
        return
    remove_context_parallel(model, model._cp_plan)
    handle = model.__dict__.pop("_fillscope_gather_wait", None)
    if handle is not None:
        handle.remove()
    for processor in _attention_processors(model):
        processor.__dict__.pop("_parallel_config", None)  # back to the class default, None
    model._parallel_config = None


@contextlib.contextmanager
def context_parallel(model, degree: int, mesh=None):
    """The model parallel at `degree` inside the block (every rank of the group enters it with the same inputs),
    as it was after; degree 1 changes nothing."""
    if degree == 1:
        yield model
        return
    enable_context_parallel(model, degree, mesh)
    try:
        yield model
    finally:
        disable_context_parallel(model)


def forward_context_parallel(model, degree: int, inputs: dict):
    """One forward of `model` with Ulysses at `degree`, on each rank of the group: the gathered output (the
    first of `model(**inputs, return_dict=False)`), the same on every rank. A rank function for run_on_ranks."""
    import torch

    with context_parallel(model, degree), torch.inference_mode():
        return model(**inputs, return_dict=False)[0]
