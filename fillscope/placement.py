"""Where a component's weights live while it is used: the memory policies.

- auto (default): moved to the compute device when needed and left there after use, until another component needs
  the room. FillScope's resident weights never exceed a budget: what the current use needs, or the largest
  component loaded if that is more; the least recently used components go back first. A whole prompt then peaks
  where its largest stage does (FLUX Fill: the transformer and one step's activations, as with offload), while a
  component whose stage repeats without another one pushing it out (SD3's denoisers beside the VAE; a text encoder
  when only the text changes) is not moved again.
- keep: moved to the compute device when first needed, left there (never pushed out by auto's budget).
- offload: moved to the compute device for each use, back right after: only the components in use are resident.
- sequential: the weights stay in CPU memory; each module's own parameters are copied to the compute device just
  before its forward and dropped right after (slow, for cards smaller than the model).

Moves are by pointer: inference never changes weights, so the CPU copy is kept (pinned when CUDA is present and
the pinned total stays under half the machine's RAM) while the compute copy exists. Going back to the CPU drops
the compute copy instead of copying it back; going to the GPU copies from pinned memory without blocking the host.

The engine works on `Component.device` (where inputs go); this module keeps it true. ComfyUI's memory
management drives the same moves through nodes/memory.py.
"""

from __future__ import annotations

import itertools
import os
import weakref
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from .errors import FillScopeInputError
from .models import weight_bytes

POLICIES = ("auto", "keep", "offload", "sequential")


def resolve_policy(policy: str) -> str:
    """The policy name, checked."""
    if policy not in POLICIES:
        raise FillScopeInputError("memory", f"unknown policy {policy!r}.", f"use one of {', '.join(POLICIES)}.")
    return policy


# ---------------------------------------------------------------------------------------------------------------
# host copies: offload by pointer


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


_pinned_total = 0  # bytes pinned by this process's host copies


@dataclass
class HostCopy:
    """The CPU tensors of one component's weights: parameters by identity, buffers by the (module, name) slots
    that hold them (a tied tensor is copied once and stays tied)."""

    params: dict = field(default_factory=dict)  # id(param) -> (param, cpu tensor)
    buffers: list = field(default_factory=list)  # ([(module, name), ...], cpu tensor)
    buffer_slots: dict = field(default_factory=dict)  # (id(module), name) -> cpu tensor
    pinned_bytes: int = 0

    def point_to_host(self) -> None:
        for p, host in self.params.values():
            p.data = host
        for owners, host in self.buffers:
            for module, name in owners:
                module._buffers[name] = host

    def copy_to(self, device) -> None:
        for p, host in self.params.values():
            p.data = _copy_like(p, host, device)
        for owners, host in self.buffers:
            moved = host.to(device, non_blocking=True)
            for module, name in owners:
                module._buffers[name] = moved

    def host_of(self, param):
        return self.params[id(param)][1]


def _copy_like(param, host, device):
    """`host` copied to `device` as data `param` accepts: made inside inference_mode exactly when the parameter
    was (a node loads inside ComfyUI's inference_mode; engine callers may not)."""
    import torch

    with torch.inference_mode(param.is_inference()):
        return host.to(device, non_blocking=True)


def _pin_like(param, data):
    import torch

    with torch.inference_mode(param.is_inference()):
        return data.pin_memory()


def _host_copy(comp) -> HostCopy | None:
    return comp.extras.get("host_copy")


def _make_host_copy(comp, allow_pin: bool = True) -> HostCopy:
    """Adopt the component's CPU weights as its host copy, pinning them when CUDA is there and RAM allows."""
    global _pinned_total
    import torch

    pin = allow_pin and torch.cuda.is_available() and _pinned_total + weight_bytes(comp.model) <= _ram_bytes() // 2
    copy, by_tensor = HostCopy(), {}
    for module in comp.model.modules():
        for p in module._parameters.values():
            if p is not None and id(p) not in copy.params:
                copy.params[id(p)] = (p, _pin_like(p, p.data) if pin else p.data)
                p.data = copy.params[id(p)][1]  # one tensor at a time: RAM never holds the model twice
        for name, b in module._buffers.items():
            if b is None:
                continue
            if id(b) not in by_tensor:
                by_tensor[id(b)] = ([], b.pin_memory() if pin else b)
                copy.buffers.append(by_tensor[id(b)])
            by_tensor[id(b)][0].append((module, name))
            copy.buffer_slots[(id(module), name)] = by_tensor[id(b)][1]
    copy.point_to_host()
    if pin:
        copy.pinned_bytes = weight_bytes(comp.model)
        _pinned_total += copy.pinned_bytes
        weakref.finalize(copy, _unpin, copy.pinned_bytes)
    comp.extras["host_copy"] = copy
    return copy


def cpu_weights(comp) -> HostCopy | None:
    """The CPU tensors of a component's weights, for code that builds another model on them (a LoRA's copy-on-write
    clone, fillscope/lora.py): its host copy, taken now (pinned as its first move would) when its weights are in CPU
    memory and it has none yet; None for a meta component or one whose weights are only on a GPU."""
    import torch

    if comp.device == "meta":
        return None
    copy = _host_copy(comp)
    if copy is None and torch.device(comp.device).type == "cpu":
        copy = _make_host_copy(comp)
    return copy


def adopt_cpu_weights(comp) -> None:
    """Take a component's current CPU tensors as its host copy as they are, pinning nothing: for a model whose tensors
    are another component's host copy (a LoRA's clone), so they are neither copied nor counted as pinned twice."""
    _make_host_copy(comp, allow_pin=False)


def forget_host_copy(comp) -> None:
    """For code that replaces a component's weights (fp8 storage): the next move takes a new host copy."""
    if comp.device != "cpu" and comp.device != "meta":
        raise RuntimeError("replace a component's weights while it is in CPU memory")
    comp.extras.pop("host_copy", None)
    RESIDENCY.forget(comp)  # its bytes change: counted again on the next use


def _unpin(nbytes: int) -> None:
    global _pinned_total
    _pinned_total -= nbytes


def _device_name(device) -> str:
    return device.type if device.index is None or device.type == "cpu" else f"{device.type}:{device.index}"


def move(comp, device) -> None:
    """Move a component's weights whole and keep `comp.device` true. Meta components never move."""
    if comp.device == "meta":
        return
    import torch

    target = torch.device(device)
    current = torch.device(comp.device)
    if target == current or (target.type == current.type == "cpu"):
        comp.device = _device_name(target)
        return
    copy = _host_copy(comp)
    if target.type == "cpu":
        if copy is None:  # loaded straight onto the GPU: the first trip back copies, later ones do not
            comp.model.to(target)
            copy = _make_host_copy(comp)
        copy.point_to_host()
    else:
        if copy is None and current.type == "cpu":
            copy = _make_host_copy(comp)
        if copy is not None:
            try:
                copy.copy_to(target)
            except BaseException:  # out of memory or interrupted half-way: never leave it half on the GPU
                copy.point_to_host()
                comp.device = "cpu"
                raise
        else:
            comp.model.to(target)
    comp.device = _device_name(target)


# ---------------------------------------------------------------------------------------------------------------
# auto's budget


@dataclass
class _Record:
    ref: object  # weakref to the component
    nbytes: int
    policy: str = "auto"
    resident: bool = False
    in_use: int = 0
    last_used: int = 0


def plan_evictions(needed_bytes: int, others: list, budget: int) -> list:
    """Which resident components to send back so that `needed_bytes` plus the rest fit in `budget`.
    `others`: (key, nbytes, last_used, evictable) for the resident components not in use. Least recently used
    first; the larger of two used at the same time first."""
    total = needed_bytes + sum(o[1] for o in others)
    evict = []
    for key, nbytes, _, evictable in sorted(others, key=lambda o: (o[2], -o[1])):
        if total <= budget:
            break
        if evictable:
            evict.append(key)
            total -= nbytes
    return evict


class Residency:
    """Which components sit on the compute device between uses, and which `auto` sends back to make room.

    The callers do the moves: `admit` returns the components to send back (each then reported with `left`), and
    says nothing about devices, so the meta estimator (bench/bench_memory_policies.py) replays the same decisions
    the nodes take."""

    def __init__(self):
        self._records: dict[int, _Record] = {}
        self._clock = itertools.count(1)

    def _record(self, comp, policy: str | None = None) -> _Record:
        rec = self._records.get(id(comp))
        if rec is None or rec.ref() is not comp:
            key = id(comp)
            rec = _Record(weakref.ref(comp, lambda _, key=key: self._records.pop(key, None)), weight_bytes(comp.model))
            self._records[key] = rec
        if policy is not None:
            rec.policy = policy
        return rec

    def register(self, comp, policy: str = "auto") -> None:
        """Count a loaded component in the budget (the largest loaded one sets its floor)."""
        self._record(comp, policy)

    def budget(self, needed_bytes: int) -> int:
        return max([needed_bytes] + [r.nbytes for r in self._records.values()])

    def admit(self, comps, policies: dict | None = None) -> list:
        """Mark `comps` in use and resident; return the resident components to send back first."""
        now = next(self._clock)
        for comp in comps:
            rec = self._record(comp, (policies or {}).get(id(comp)))
            rec.in_use += 1
            rec.last_used = now
        in_use = [r for r in self._records.values() if r.in_use]
        needed = sum(r.nbytes for r in in_use)
        others = [(r.ref(), r.nbytes, r.last_used, r.policy == "auto")
                  for r in self._records.values() if r.resident and not r.in_use and r.ref() is not None]
        evict = plan_evictions(needed, others, self.budget(needed))
        for comp in comps:
            self._records[id(comp)].resident = True
        return evict

    def release(self, comps) -> None:
        for comp in comps:
            rec = self._records.get(id(comp))
            if rec is not None and rec.in_use:
                rec.in_use -= 1

    def forget(self, comp) -> None:
        self._records.pop(id(comp), None)

    def left(self, comp) -> None:
        rec = self._records.get(id(comp))
        if rec is not None:
            rec.resident = False

    def nbytes(self, comp) -> int:
        """The component's weight bytes, as counted when it was registered (no walk over its tensors)."""
        return self._record(comp).nbytes

    def resident_bytes(self) -> int:
        return sum(r.nbytes for r in self._records.values() if r.resident)

    def is_resident(self, comp) -> bool:
        rec = self._records.get(id(comp))
        return bool(rec and rec.resident)


RESIDENCY = Residency()


def replay(uses, policy: str) -> list[dict]:
    """The placement decisions for a sequence of uses under one policy, without moving anything (meta components
    are fine): `uses` = [(label, [components...]), ...] in the order the nodes run. Per use: the bytes resident on
    the compute device during it, the bytes that had to come in for it, and what was sent back first.
    `sequential` is not replayed (nothing stays resident; the bench counts its largest module instead)."""
    policy = resolve_policy(policy)
    residency, out = Residency(), []
    comps = {id(c): c for _, group in uses for c in group}
    for comp in comps.values():
        residency.register(comp, policy)
    if policy == "keep":  # the loaders put `keep` weights straight onto the GPU and admit them there
        residency.admit(list(comps.values()))
        residency.release(list(comps.values()))
    for label, group in uses:
        arriving = [c for c in group if not residency.is_resident(c)]
        evicted = residency.admit(group)
        for comp in evicted:
            residency.left(comp)
        out.append({"use": label, "resident_bytes": residency.resident_bytes(),
                    "loaded_bytes": sum(residency.nbytes(c) for c in arriving),
                    "sent_back": [c.kind for c in evicted]})
        residency.release(group)
        if policy == "offload":
            for comp in group:
                residency.left(comp)
    return out


# ---------------------------------------------------------------------------------------------------------------
# sequential streaming


def _stream_hooks(comp, compute_device):
    """Hooks that give each module a compute-device copy of its own weights for its forward only."""
    import torch

    copy = _host_copy(comp) or _make_host_copy(comp)
    compute_device = torch.device(compute_device)
    if compute_device.type == "cuda" and compute_device.index is None:
        compute_device = torch.device("cuda", torch.cuda.current_device())
    handles = []

    def pre(module, args):
        for p in module.parameters(recurse=False):
            # the current data: the host copy, or an upcast a parent's fp8 group hook already made
            if p.data.device != compute_device:
                p.data = _copy_like(p, p.data, compute_device)
        for name in module._buffers:
            if module._buffers[name] is not None:
                module._buffers[name] = copy.buffer_slots[(id(module), name)].to(compute_device, non_blocking=True)

    def post(module, args, output):  # the compute copies are dropped, not copied back
        for p in module.parameters(recurse=False):
            p.data = copy.host_of(p)
        for name in module._buffers:
            if module._buffers[name] is not None:
                module._buffers[name] = copy.buffer_slots[(id(module), name)]

    for module in comp.model.modules():
        if any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False)):
            # first of the pre hooks: fp8 upcast hooks (fp8.py) then see the weights on the compute device
            handles.append(module.register_forward_pre_hook(pre, prepend=True))
            handles.append(module.register_forward_hook(post))
    return handles


def send_back(comp, offload_device="cpu") -> None:
    """Move a component to the offload device and record that it left the compute device."""
    move(comp, offload_device)
    RESIDENCY.left(comp)


@contextmanager
def in_use(comp, compute_device, policy: str = "auto", offload_device="cpu"):
    """Place a component for one use under a policy, and put it back afterwards as the policy says."""
    if comp.device == "meta":
        yield comp
        return
    policy = resolve_policy(policy)
    if policy == "sequential":
        send_back(comp, offload_device)
        handles = _stream_hooks(comp, compute_device)
        saved = comp.device
        comp.device = str(compute_device)  # inputs go where the computation happens
        try:
            yield comp
        finally:
            for h in handles:
                h.remove()
            comp.device = saved
        return
    for other in RESIDENCY.admit([comp], {id(comp): policy}):
        send_back(other, offload_device)
    move(comp, compute_device)
    try:
        yield comp
    finally:
        RESIDENCY.release([comp])
        if policy == "offload":
            send_back(comp, offload_device)


def placer(compute_device, policy: str = "auto", offload_device="cpu"):
    """A `place` hook for a pipeline's run (fillscope/observe.py stage): each stage's components placed under
    `policy` for that stage only, as the nodes place them one node at a time."""

    @contextmanager
    def place(components):
        with ExitStack() as stack:
            for comp in components:
                stack.enter_context(in_use(comp, compute_device, policy, offload_device))
            yield

    return place
