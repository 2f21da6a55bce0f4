"""What a computation costs: FLOPs (counted) and peak memory (estimated on meta, or measured on CUDA).

count_flops(fn) -> (total, per_module)
    `torch.utils.flop_counter.FlopCounterMode` around `fn()`. A FLOP is torch's convention: a multiply-add
    counts 2 (a Linear [M,K] x [K,N] is 2*M*N*K), only matmul / convolution / attention ops are counted
    (elementwise ops, norms and softmax are not). Works on meta tensors (shapes only).
    Attention: on the meta device `F.scaled_dot_product_attention` runs the math path, whose two batched
    matmuls (QK^T and PV, 4*B*H*Lq*Lk*D) are counted as `aten.bmm`; on CUDA the flash / efficient / cudnn
    kernels have torch's own formula (the same 4*B*H*Lq*Lk*D). The CPU kernel
    (`aten._scaled_dot_product_flash_attention_for_cpu`) and the "overrideable" one have no formula in torch,
    so they would count 0: this module maps them to torch's `sdpa_flop_count`, so attention counts on every
    device. `per_module` is {name: total}, names as FlopCounterMode reports them ("Global" for everything,
    then "<RootClass>.<qualified.name>" for each module it saw, nested modules included in their parents).

estimate_peak_memory(fn) -> {"bytes", "provenance", "parts"}
    An ESTIMATE for a run of `fn()` (meant for meta runs; it works on any device), from a TorchDispatchMode:
    * resident = the bytes of every distinct storage that an op READ but that was not created inside `fn`
      (weights, buffers, inputs made before the call): parameters (nn.Parameter) and other tensors separately;
      these exist for the whole call, so they count in full (only the weights of the models that actually ran
      are counted, each shared storage once, e.g. T5's tied embedding);
    * activations = storages CREATED by ops inside `fn`: each op's output storages are added to a running total
      when the op returns (a view shares its base's storage and adds nothing), and subtracted by a
      `weakref.finalize` on the output tensors when the last Python tensor on that storage dies; the maximum of
      the running total after every op is the activation peak;
    * bytes = resident + activation peak.
    Not included: kernel workspaces (cuBLAS, flash attention), the CUDA caching allocator's rounding and
    fragmentation, the CUDA context, and anything freed or kept alive only from C++ (e.g. autograd graphs; the
    engine runs under inference_mode). Dtypes are the models' own (bf16 meta models count 2 bytes a value).

    Checked against CUDA (H200, torch 2.11, placeholder bf16 weights, 1024x1024; measured = max_memory_allocated
    during the call minus memory_allocated before it, estimated = activations_peak on meta):
      FLUX.1 Fill, one transformer step     measured 490,292,736 B   estimated 490,289,182 B
      SD3 + ControlNet, one CFG step        measured 1,747,319,808 B estimated 1,746,128,916 B
      T5-XXL encode, 256 tokens             measured 38,799,360 B    estimated 37,748,736 B
    With the weights: FLUX step 22.63 GiB estimated (22.17 GiB transformer bf16 + 0.46 GiB), which is the
    seed's measured 22.65 GiB; T5 alone (256 tokens) 8.91 GiB estimated, seed 9.01 GiB measured.
    FLOPs on CUDA equal the meta counts: FLUX.1 Fill one denoiser step 74,392,706,482,176 (74.4 TFLOP);
    SD3-medium + ControlNet, one step with CFG (batch 2) 35,792,088,551,424 (35.8 TFLOP: ControlNet 17.98,
    transformer 17.81).

measure_peak_cuda(fn) -> {"bytes", "provenance": "measured on CUDA", ...}
    `torch.cuda.reset_peak_memory_stats()`, `fn()`, synchronize, `torch.cuda.max_memory_allocated()`
    ("bytes": everything allocated at the peak, the weights included); "before_bytes" is memory_allocated()
    before the call, so bytes - before_bytes is what the call added.
"""

from __future__ import annotations

import weakref

__all__ = ["attention_flop_mapping", "count_flops", "estimate_peak_memory", "measure_peak_cuda"]


def attention_flop_mapping() -> dict:
    """FlopCounterMode `custom_mapping` entries for the attention kernels torch has no formula for."""
    import torch
    from torch.utils.flop_counter import sdpa_flop_count

    def sdpa(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query_shape, key_shape, value_shape)

    mapping = {}
    for name in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_fused_attention_overrideable"):
        op = getattr(torch.ops.aten, name, None)
        if op is not None:
            mapping[op] = sdpa
    return mapping


def count_flops(fn) -> tuple[int, dict[str, int]]:
    """(total FLOPs, {module name: FLOPs}) of `fn()`; see the module docstring for what is counted."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=attention_flop_mapping()) as mode:
        fn()
    per_module = {name: sum(ops.values()) for name, ops in mode.get_flop_counts().items()}
    return mode.get_total_flops(), per_module


class _LiveBytes:
    """TorchDispatchMode bookkeeping: storages read (resident) vs created (activations), with lifetimes."""

    def __init__(self):
        self.created: dict[int, list] = {}  # storage key -> [nbytes, live tracked tensors]
        self.resident: dict[int, tuple[int, bool]] = {}  # storage key -> (nbytes, is_parameter)
        self.live = 0
        self.peak = 0
        self.ops = 0

    @staticmethod
    def _key(t) -> tuple[int, int]:
        from torch.multiprocessing.reductions import StorageWeakRef

        storage = t.untyped_storage()
        return StorageWeakRef(storage).cdata, storage.nbytes()

    def _release(self, key: int):
        entry = self.created.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self.created[key]
            self.live -= entry[0]

    def read(self, t):
        import torch

        if t.layout != torch.strided:
            return
        key, nbytes = self._key(t)
        if key not in self.created and key not in self.resident:
            self.resident[key] = (nbytes, isinstance(t, torch.nn.Parameter))

    def wrote(self, t):
        import torch

        if t.layout != torch.strided:
            return
        key, nbytes = self._key(t)
        if key in self.resident:  # in-place op on a pre-existing tensor: still resident
            return
        entry = self.created.get(key)
        if entry is None:
            entry = self.created[key] = [nbytes, 0]
            self.live += nbytes
        entry[1] += 1
        weakref.finalize(t, self._release, key)


def _tensors(tree):
    import torch
    from torch.utils._pytree import tree_leaves

    return [x for x in tree_leaves(tree) if isinstance(x, torch.Tensor)]


def estimate_peak_memory(fn) -> dict:
    """Estimated peak bytes of `fn()`: resident storages it read + the peak of the storages it created."""
    from torch.utils._python_dispatch import TorchDispatchMode

    book = _LiveBytes()

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            inputs = _tensors((args, kwargs))
            for t in inputs:
                book.read(t)
            out = func(*args, **kwargs)
            seen = set()
            for t in _tensors(out):
                if id(t) not in seen and not any(t is i for i in inputs):  # in-place ops return their input
                    seen.add(id(t))
                    book.wrote(t)
            book.ops += 1
            book.peak = max(book.peak, book.live)
            return out

    with _Mode():
        fn()
    params = sum(n for n, is_param in book.resident.values() if is_param)
    other = sum(n for n, is_param in book.resident.values() if not is_param)
    return {
        "bytes": params + other + book.peak,
        "provenance": "estimated on meta (TorchDispatchMode: resident storages read + peak of live created "
                      "storages, lifetimes by weakref.finalize)",
        "parts": {
            "parameters": params,
            "other_resident": other,
            "activations_peak": book.peak,
            "activations_left": book.live,
            "ops": book.ops,
        },
    }


def measure_peak_cuda(fn) -> dict:
    """Peak CUDA bytes allocated while `fn()` ran (torch's caching allocator statistics)."""
    import torch

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return {"bytes": int(torch.cuda.max_memory_allocated()), "before_bytes": int(before),
            "provenance": "measured on CUDA"}
