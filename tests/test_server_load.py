"""Load through a real ComfyUI 0.3.75 server: 50 tiny FLUX Fill prompts queued at once through POST /prompt all
complete, the server's resident memory after them stays within 10% of what it was after the first, and /free
releases what FillScope holds.

What /free releases for FillScope (ComfyUI 0.3.75, main.prompt_worker): FillScope's models are not
ComfyUI-managed (comfy.model_management never sees them); they live in ComfyUI's node output cache, as the
outputs of the loader nodes. `unload_models` alone (the "Unload models" button) calls
model_management.unload_all_models(), which leaves them cached and resident. `free_memory` (the "Free model and
node cache" button; ComfyServer.free() sends both) resets the executor's caches, then gc.collect(): the
components lose their last reference and their memory goes back to the OS (large tensors are separate mmaps)."""

from __future__ import annotations

import shutil
import time

import pytest

from server_checks import assert_still_serving, cached_nodes, free_when_idle, large_anonymous_mappings, memory_mib
from server_checks import small_image
from server_checks import rss_mib as rss
from workflow_helpers import image_saver, load_api, node_id, with_dtype

pytestmark = [pytest.mark.server, pytest.mark.slow]

N_PROMPTS = 50
LOADERS = ("FillScopeLoadCLIPL", "FillScopeLoadT5", "FillScopeLoadFluxFillTransformer", "FillScopeLoadVAE")
FAT = "FLUX.1-Fill-fat-t5"
FAT_MIB = 32128 * 1024 * 2 / 2**20  # its bf16 embedding: 62.75 MiB


@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def tiny_prompt(seed: int, steps: int = 1) -> dict:
    """flux_fill_inpaint on the tiny FLUX.1-Fill-dev files, as cheap as a real run gets: fp32 (the shipped bf16 is
    ~20x slower on a CPU without bf16 instructions; the dtype is not what these tests check: the fat T5 below keeps
    bf16), one step, a 32x32 Synthetic Image + Mask (server_checks.small_image)."""
    prompt = small_image(with_dtype(load_api("flux_fill_inpaint"), "fp32"))
    prompt[node_id(prompt, "FillScopeFluxFillSampler")]["inputs"].update(seed=seed, steps=steps)
    return prompt


def loader_ids(prompt: dict) -> set:
    return {k for k, v in prompt.items() if v["class_type"] in LOADERS}


def test_fifty_prompts_queued_at_once_all_complete_with_flat_memory(server):
    prompts = [tiny_prompt(seed=90_000 + i) for i in range(N_PROMPTS)]  # distinct seeds: nothing served from cache
    t0 = time.monotonic()
    ids = [server.queue(p) for p in prompts]
    queued = time.monotonic() - t0
    server.wait(ids[0], timeout=300, poll=0.02)
    rss_first = rss(server)
    entries = [server.wait(pid, timeout=600) for pid in ids]
    total = time.monotonic() - t0
    rss_all = rss(server)

    save = image_saver(prompts[0])
    assert all(e["status"]["status_str"] == "success" for e in entries)
    files = [e["outputs"][save]["images"][0]["filename"] for e in entries]
    assert len(set(files)) == N_PROMPTS  # every prompt saved its own image
    sampler = node_id(prompts[0], "FillScopeFluxFillSampler")
    assert all(sampler not in cached_nodes(e) for e in entries)  # every prompt sampled anew
    assert all(loader_ids(prompts[0]) <= cached_nodes(e) for e in entries[1:])  # models loaded once

    free_when_idle(server)  # both flags, as the UI's "Free model and node cache"
    rss_freed = rss(server)
    print(f"\n{N_PROMPTS} prompts: queued in {queued:.2f}s, all done in {total:.1f}s; RSS after the first "
          f"{rss_first:.0f} MiB, after all {rss_all:.0f} MiB ({(rss_all / rss_first - 1) * 100:+.1f}%), "
          f"after /free {rss_freed:.0f} MiB")
    assert abs(rss_all - rss_first) <= 0.10 * rss_first
    # the tiny models are a few MiB in small tensors that the allocator keeps for reuse: /free does not bring RSS
    # up, and any drop is in the noise here (test_free_releases_fillscope_models measures it on a fat model)
    assert rss_freed <= rss_all * 1.02


@pytest.fixture(scope="module")
def fat_folder(server):
    """A FLUX Fill repository whose T5 has a 32128 x 1024 embedding: 126 MiB fp32 on disk, 63 MiB once loaded as
    bf16 (the conversion makes anonymous memory, unlike an fp32 load whose tensors stay mmapped to the file)."""
    import torch
    from transformers import T5Config, T5EncoderModel

    from tiny_flux import TINY_T5_CONFIG

    d = server.models_dir / "diffusers"
    dst = d / FAT
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir()
    for name in ("model_index.json",):
        shutil.copy(d / "FLUX.1-Fill-dev" / name, dst / name)
    shutil.copytree(d / "FLUX.1-Fill-dev" / "tokenizer_2", dst / "tokenizer_2")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        T5EncoderModel(T5Config(**{**TINY_T5_CONFIG, "d_model": 1024})).save_pretrained(
            dst / "text_encoder_2", safe_serialization=True)
    yield dst
    shutil.rmtree(dst, ignore_errors=True)


def with_fat_t5(prompt: dict) -> dict:
    prompt["80"] = {"class_type": "FillScopeLoadT5",
                    "inputs": {"source": FAT, "dtype": "bf16", "device": "cpu", "placeholder_seed": 0}}
    prompt["81"] = {"class_type": "FillScopeShapesReport", "inputs": {"shapes": ["80", 1], "filename_prefix": "fat"}}
    return prompt


def test_free_releases_fillscope_models(server, fat_folder):
    # a /free an earlier module posted while the server was idle is applied after the next prompt finishes: let one
    # finish first, so that it is not applied between the two runs below (it dropped the cache they share)
    assert_still_serving(server)
    base = server.run(tiny_prompt(seed=1))
    assert base["status"]["status_str"] == "success"
    before = memory_mib(server)
    maps_before = large_anonymous_mappings(server, FAT_MIB)
    entry = server.run(with_fat_t5(tiny_prompt(seed=1)))  # only the fat T5 loader runs; the rest is cached
    assert cached_nodes(entry) >= loader_ids(tiny_prompt(1))
    loaded = memory_mib(server)
    grew = loaded["VmRSS"] - before["VmRSS"]
    assert grew > 0.75 * FAT_MIB, f"the fat T5 ({FAT_MIB:.0f} MiB bf16) did not show in RSS: {before} -> {loaded}"
    # the embedding's 62.75 MiB is one allocation, so a mapping of its own (measured 68.75 MiB with what the kernel
    # merged beside it, 2026-12-07); the kernel may merge it with an anonymous mapping next to it (a new start
    # address, a larger size), and an allocator arena or a transient buffer of that size may come and stay (CI saw
    # both): the new mappings are held to what they free, not to their addresses alone
    embedding = {a: mib for a, mib in large_anonymous_mappings(server, FAT_MIB).items() if a not in maps_before}
    assert sum(embedding.values()) >= FAT_MIB, \
        f"no new anonymous mapping of {FAT_MIB:.2f} MiB or more holds the fat T5's embedding"

    # "Unload models" alone: ComfyUI's model manager does not know FillScope's models; they stay cached
    free_when_idle(server, unload_models=True, free_memory=False)
    unloaded = memory_mib(server)
    entry = server.run(with_fat_t5(tiny_prompt(seed=2)))
    assert cached_nodes(entry) >= loader_ids(tiny_prompt(2)) | {"80"}
    assert unloaded["VmRSS"] > loaded["VmRSS"] - 0.25 * FAT_MIB

    # "Free model and node cache": the executor's caches are dropped, FillScope's models with them
    assert embedding.keys() <= large_anonymous_mappings(server, FAT_MIB).keys()  # still mapped while cached
    free_when_idle(server)
    def released() -> float:  # MiB of the new mappings gone since the model loaded
        now = large_anonymous_mappings(server, 1)
        return sum(mib - now.get(a, 0.0) for a, mib in embedding.items())

    deadline = time.monotonic() + 10
    while released() < 0.75 * FAT_MIB and time.monotonic() < deadline:
        time.sleep(0.25)
    freed = memory_mib(server)
    print(f"\n/free: {before} -> fat T5 loaded {loaded} -> unload_models only {unloaded} -> free_memory {freed}; "
          f"the embedding's mapping {embedding}")
    # the model's tensors go back to the OS; RSS as a whole is no measure of that here: the loader's transient
    # allocations stay with the allocator's heap, and in the session's shared server the drop of the 63 MiB ranged
    # from 35.8 to 55 MiB (2026-12-07) with the embedding's mapping gone every time
    assert released() >= 0.75 * FAT_MIB, \
        f"FillScope's fat T5 stayed resident after /free: of the new mappings {embedding} {released():.1f} MiB went"
    entry = server.run(tiny_prompt(seed=3))
    assert entry["status"]["status_str"] == "success"
    assert not (cached_nodes(entry) & loader_ids(tiny_prompt(3)))  # every loader ran again: nothing was kept
