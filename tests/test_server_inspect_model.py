"""FillScope Inspect Model (nodes/inspect_model.py) on ComfyUI's own MODEL, sampled by ComfyUI's own KSampler, in a real
ComfyUI 0.3.75 server.

The server is the session's shared one (conftest.py test_nodes_server) with tests/comfy_nodes as one more custom_nodes
folder. Its test-only nodes (fillscope_native_model_test_nodes.py) build ComfyUI's own model classes at tiny sizes
(comfy.supported_models.Flux / FluxInpaint / SD3 -> comfy.model_base.Flux / SD3 in a ModelPatcher, seeded weights) and
ComfyUI's VAE over its TAESD class; everything else is ComfyUI's core nodes: EmptySD3LatentImage, KSampler,
InpaintModelConditioning, DifferentialDiffusion, VAEDecode, EmptyImage, SolidMask, MaskComposite. The CONDITIONINGs are
zeros of the tiny widths (NativeTestConditioningOfShape).

Checked: KSampler's latent is bit for bit the same with and without Inspect Model in between (Flux cfg 1, SD3 cfg 4
in one CFG batch and in separate calls, Flux Fill through InpaintModelConditioning and DifferentialDiffusion); the
live record (GET /fillscope/live and the websocket event fillscope.live) has one entry per step, the boundary shapes
the tiny configs imply, calls per step and the provenance; with modules the per-block rows appear and afterwards no
hook is left on the model; a failing run leaves no hook, records the error, and the next prompt runs.
"""

from __future__ import annotations

import itertools
import json
import threading

import pytest
from comfy_server import (
    ComfyExecutionError,
    ServerWithTestNodes,
    comfyui_installed,
    comfyui_path,
)
from safetensors.torch import load_file

pytestmark = pytest.mark.server

NODE = "FillScopeInspectModel"
SIZE, STEPS = 128, 3  # pixels -> a 16x16 latent (Flux: 8x8 = 64 tokens of patch 2)
LATENT = [1, 16, SIZE // 8, SIZE // 8]
# the tiny configs (tests/comfy_nodes/fillscope_native_model_test_nodes.py): text width, pooled width
FLUX_TEXT, FLUX_POOLED, SD3_TEXT, SD3_POOLED, TOKENS = 32, 16, 48, 24, 8
SEEDS = itertools.count(1000)


@pytest.fixture(scope="module")
def server(test_nodes_server):
    with test_nodes_server.module() as server:
        yield server


# ---- graphs ------------------------------------------------------------------------------------------------------


def n(class_type, **inputs) -> dict:
    return {"class_type": class_type, "inputs": inputs}


def conditioning(tokens, width, pooled) -> dict:
    return n("NativeTestConditioningOfShape", tokens=tokens, width=width, pooled_width=pooled, entries=1,
             fill="zeros", extra_keys="{}")


def base_graph(family, text, pooled, neg_tokens=TOKENS) -> dict:
    return {"m": n("NativeTestTinyModel", family=family, seed=0),
            "pos": conditioning(TOKENS, text, pooled), "neg": conditioning(neg_tokens, text, pooled),
            "lat": n("EmptySD3LatentImage", width=SIZE, height=SIZE, batch_size=1)}


def sample(key, model, seed, cfg, latent=("lat", 0), positive=("pos", 0), negative=("neg", 0)) -> dict:
    return {key: n("KSampler", model=list(model), seed=seed, steps=STEPS, cfg=cfg, sampler_name="euler",
                   scheduler="simple", positive=list(positive), negative=list(negative), latent_image=list(latent),
                   denoise=1.0),
            f"{key}_save": n("NativeTestSaveNativeLatent", samples=[key, 0], name=f"{key}_{seed}")}


def inspect(model=("m", 0), modules=False) -> dict:
    return n(NODE, model=list(model), modules=modules)


def hooks(key, model, after, name) -> dict:
    return {key: n("NativeTestModelHooks", model=list(model), after=list(after), name=name)}


# ---- reading results ---------------------------------------------------------------------------------------------


def latent(server, key, seed):
    return load_file(str(server.output_dir / "fillscope_native" / f"{key}_{seed}.safetensors"))["samples"]


def hook_report(server, name) -> dict:
    return json.loads((server.output_dir / "fillscope_native" / f"{name}.json").read_text())


def live_record(server, prompt_id, node="ins") -> dict:
    outputs = server.get_json(f"/fillscope/live?prompt_id={prompt_id}")
    assert node in outputs, f"no live record of node {node}: {sorted(outputs)}"
    doc = outputs[node]["fillscope_shapes"][0]
    assert doc["schema"] == "fillscope.shapes/1"
    assert outputs[node]["text"][0].startswith("Inspect Model")
    return doc["node"]


def shapes(record) -> dict:
    return {t["name"]: t["shape"] for t in record["tensors"]}


def steps_of(record) -> list:
    return [v for k, v in record["facts"].items() if k.startswith("step ") and k[5:].isdigit()]


def assert_no_hooks(report):
    assert report["hooked_modules"] == {}, report
    assert report["modules"] > 10


# ---- tests -------------------------------------------------------------------------------------------------------


def test_flux_latent_unchanged_and_the_live_record_arrives_by_route_and_websocket(server):
    import websocket

    seed = next(SEEDS)
    graph = {**base_graph("flux", FLUX_TEXT, FLUX_POOLED), "ins": inspect(),
             **sample("plain", ("m", 0), seed, 1.0), **sample("inspected", ("ins", 0), seed, 1.0)}
    client = server.new_client_id()
    ws = websocket.create_connection(f"ws://{server.host}:{server.port}/ws?clientId={client}", timeout=120)
    events = []

    def listen():
        while True:
            try:
                msg = ws.recv()
            except (OSError, websocket.WebSocketException):  # closed
                return
            if isinstance(msg, str):
                data = json.loads(msg)
                events.append(data)
                if data.get("type") == "executing" and data["data"].get("node") is None \
                        and data["data"].get("prompt_id") == pid:
                    return

    pid = server.queue(graph, client_id=client)
    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    entry = server.wait(pid, timeout=300)
    thread.join(30)
    ws.close()

    # (a) the same latent, bit for bit
    a, b = latent(server, "plain", seed), latent(server, "inspected", seed)
    assert list(a.shape) == LATENT and a.abs().sum() > 0
    assert a.dtype == b.dtype and bool((a == b).all())

    # the node's own execution: what is known without running the model
    own = entry["outputs"]["ins"]["fillscope_shapes"][0]["node"]
    assert own["facts"]["class"] == "Flux" and own["facts"]["latent channels"] == 16
    assert own["facts"]["parameters (unique)"] > 0 and own["facts"]["dtype"] == "float32"
    assert own["facts"]["weight patches"] == 0  # no LoRA before it (tests/test_server_inspect_encoders_patches.py)
    assert own["tensors"] == []

    # (b) the live record: one entry per step, the tiny config's boundary, provenance
    rec = live_record(server, pid)
    assert rec["facts"]["provenance"] == "measured on cpu, native ComfyUI Flux"
    assert rec["facts"]["weight patches"] == 0  # the node's patch facts, repeated in the run's record
    assert rec["facts"]["steps seen"] == STEPS and len(steps_of(rec)) == STEPS
    assert rec["facts"]["calls per step"] == 1 and rec["facts"]["total calls"] == STEPS  # cfg 1: cond only
    assert rec["facts"]["sigma first"] == 1.0 and 0 < rec["facts"]["sigma last"] < 1
    assert rec["facts"]["cfg batches"] == "one call (cond)"
    got = shapes(rec)
    assert got["x (sampler latent)"] == LATENT and got["x (diffusion model in)"] == LATENT
    assert got["context"] == [1, TOKENS, FLUX_TEXT] and got["y (pooled)"] == [1, FLUX_POOLED]
    assert got["guidance"] == [1] and got["sigma"] == [1] and got["timestep"] == [1]
    assert got["diffusion model out"] == LATENT and got["denoised (apply_model out)"] == LATENT
    assert "c_concat (concatenated to x)" not in got and not any(k.startswith("block ") for k in rec["facts"])
    assert all(t["provenance"] == "measured" and t["device"] == "cpu" for t in rec["tensors"])
    assert rec["warnings"] == [] and rec["wall_s"] > 0

    # the same record as the websocket event, sent to the prompt's client
    live = [e["data"] for e in events if e.get("type") == "fillscope.live"]
    assert len(live) == 1 and live[0]["node"] == "ins" and live[0]["prompt_id"] == pid
    assert live[0]["output"]["fillscope_shapes"][0]["node"] == rec


def test_two_inspect_nodes_on_one_model_each_record_their_own_sampler(server):
    # two Inspect nodes with the same input: each hands on its own clone, so each record holds its own sampler's calls
    seed = next(SEEDS)
    graph = {**base_graph("flux", FLUX_TEXT, FLUX_POOLED), "ins": inspect(), "ins2": inspect(),
             **sample("first", ("ins", 0), seed, 1.0), **sample("second", ("ins2", 0), seed + 1, 1.0)}
    pid = server.queue(graph)
    server.wait(pid, timeout=300)
    for node in ("ins", "ins2"):
        rec = live_record(server, pid, node)
        assert rec["facts"]["total calls"] == STEPS, (node, rec["facts"])  # its own sampler's calls only
    assert not bool((latent(server, "first", seed) == latent(server, "second", seed + 1)).all())


@pytest.mark.parametrize("neg_tokens, calls", [(TOKENS, 1), (TOKENS - 2, 2)], ids=["one-batch", "separate-calls"])
def test_sd3_cfg_batches_are_recorded_and_the_latent_is_unchanged(server, neg_tokens, calls):
    seed = next(SEEDS)
    graph = {**base_graph("sd3", SD3_TEXT, SD3_POOLED, neg_tokens), "ins": inspect(),
             **sample("plain", ("m", 0), seed, 4.0), **sample("inspected", ("ins", 0), seed, 4.0)}
    pid = server.queue(graph)
    server.wait(pid, timeout=300)
    a, b = latent(server, "plain", seed), latent(server, "inspected", seed)
    assert bool((a == b).all())

    rec = live_record(server, pid)
    facts, got = rec["facts"], shapes(rec)
    assert facts["provenance"] == "measured on cpu, native ComfyUI SD3"
    assert facts["steps seen"] == STEPS and len(steps_of(rec)) == STEPS
    assert facts["calls per step"] == calls and facts["total calls"] == STEPS * calls
    if calls == 1:  # cond and uncond of the same shapes: one batch of 2
        assert facts["cfg batches"] == "cond and uncond in one batch (cond+uncond)"
        assert got["x (sampler latent)"] == [2, *LATENT[1:]] and got["context"] == [2, TOKENS, SD3_TEXT]
        assert all("(cond+uncond) · batch 2 ·" in s for s in steps_of(rec))
    else:  # different token counts cannot share a batch: two calls per step, the second's shapes as own rows
        assert facts["cfg batches"].startswith("separate calls")
        assert got["x (sampler latent)"] == LATENT and "x (sampler latent) (call 2)" not in got
        assert sorted([got["context"], got["context (call 2)"]]) == [[1, neg_tokens, SD3_TEXT], [1, TOKENS, SD3_TEXT]]
        assert all("2 calls" in s and "batch 1+1" in s for s in steps_of(rec))
    assert got["y (pooled)"][1:] == [SD3_POOLED] and "guidance" not in got
    assert got["diffusion model out"][1:] == LATENT[1:]


def test_flux_fill_through_inpaint_model_conditioning_and_differential_diffusion(server):
    seed = next(SEEDS)
    graph = {**base_graph("flux_fill", FLUX_TEXT, FLUX_POOLED),
             "vae": n("NativeTestTinyTAESD", seed=0, latent_channels=16),
             "img": n("EmptyImage", width=SIZE, height=SIZE, batch_size=1, color=0x808080),
             "hole": n("SolidMask", value=1.0, width=SIZE // 2, height=SIZE // 2),
             "none": n("SolidMask", value=0.0, width=SIZE, height=SIZE),
             "mask": n("MaskComposite", destination=["none", 0], source=["hole", 0], x=SIZE // 4, y=SIZE // 4,
                       operation="add"),
             "imc": n("InpaintModelConditioning", positive=["pos", 0], negative=["neg", 0], vae=["vae", 0],
                      pixels=["img", 0], mask=["mask", 0], noise_mask=True),
             "dd": n("DifferentialDiffusion", model=["m", 0], strength=1.0),
             "ins": inspect(("dd", 0)),
             **sample("plain", ("dd", 0), seed, 1.0, ("imc", 2), ("imc", 0), ("imc", 1)),
             **sample("inspected", ("ins", 0), seed, 1.0, ("imc", 2), ("imc", 0), ("imc", 1)),
             "dec": n("VAEDecode", samples=["inspected", 0], vae=["vae", 0]),
             "preview": n("PreviewImage", images=["dec", 0])}
    pid = server.queue(graph)
    server.wait(pid, timeout=300)
    a, b = latent(server, "plain", seed), latent(server, "inspected", seed)
    assert list(a.shape) == LATENT and bool((a == b).all())

    rec = live_record(server, pid)
    got = shapes(rec)
    assert rec["facts"]["provenance"] == "measured on cpu, native ComfyUI Flux"
    # the sampler's 16 channels, ComfyUI's concat (16 masked-image latent + 64 = the 8x8-packed mask), 96 in the model
    assert got["x (sampler latent)"] == LATENT
    assert got["c_concat (concatenated to x)"] == [1, 80, *LATENT[2:]]
    assert got["x (diffusion model in)"] == [1, 96, *LATENT[2:]]
    assert got["diffusion model out"] == LATENT and rec["facts"]["steps seen"] == STEPS


def test_modules_give_block_rows_and_leave_no_hook(server):
    seed = next(SEEDS)
    graph = {**base_graph("flux", FLUX_TEXT, FLUX_POOLED), "ins": inspect(modules=True),
             **sample("inspected", ("ins", 0), seed, 1.0),
             **hooks("h_model", ("m", 0), ("inspected", 0), f"after_modules_{seed}"),
             **hooks("h_clone", ("ins", 0), ("inspected", 0), f"clone_after_modules_{seed}")}
    pid = server.queue(graph)
    server.wait(pid, timeout=300)
    rec = live_record(server, pid)
    facts = rec["facts"]
    assert facts["blocks"] == 4 and facts["module rows"] > 4 and facts["module hits"] >= facts["module rows"]
    blocks = {k[6:]: v for k, v in facts.items() if k.startswith("block ")}
    assert list(blocks) == ["double_blocks.0", "double_blocks.1", "single_blocks.0", "single_blocks.1"]
    # 64 image tokens and 8 text tokens of width 64 (the tiny hidden size); single blocks on the 72 joined tokens
    assert blocks["double_blocks.0"].startswith(f"{STEPS} calls · (img=[1,64,64],txt=[1,8,64],vec=[1,64]")
    assert "-> ([1,64,64],[1,8,64])" in blocks["double_blocks.0"] and "transformer_options" not in blocks["double_blocks.0"]
    assert blocks["single_blocks.1"].startswith(f"{STEPS} calls · ([1,72,64],vec=[1,64]") and "-> [1,72,64]" in blocks["single_blocks.1"]

    # no hook left, on the model (shared by both MODELs) nor through the clone; the wrappers only on the clone
    model, clone = hook_report(server, f"after_modules_{seed}"), hook_report(server, f"clone_after_modules_{seed}")
    assert_no_hooks(model)
    assert_no_hooks(clone)
    assert model["patcher_wrappers"] == {} and model["option_wrappers"] == {}
    assert clone["patcher_wrappers"] == {"apply_model": ["fillscope_inspect_model.ins"],
                                         "outer_sample": ["fillscope_inspect_model.ins"]}

    # the same MODEL without Inspect afterwards: the very latent of the traced run
    pid = server.queue({**base_graph("flux", FLUX_TEXT, FLUX_POOLED), **sample("plain", ("m", 0), seed, 1.0)})
    server.wait(pid, timeout=300)
    assert bool((latent(server, "plain", seed) == latent(server, "inspected", seed)).all())
    assert server.get_json(f"/fillscope/live?prompt_id={pid}") == {}  # no Inspect node ran: nothing recorded


def test_a_failing_run_leaves_no_hook_and_the_next_prompt_runs(server):
    seed = next(SEEDS)
    # a text 24 wide into a model whose txt_in takes 32: the first model call fails inside the diffusion model
    graph = {**base_graph("flux", FLUX_TEXT, FLUX_POOLED), "bad": conditioning(TOKENS, 24, FLUX_POOLED),
             "ins": inspect(modules=True), **sample("failing", ("ins", 0), seed, 1.0, positive=("bad", 0))}
    pid = server.queue(graph)
    with pytest.raises(ComfyExecutionError, match="KSampler"):
        server.wait(pid, timeout=300)
    rec = live_record(server, pid)
    assert rec["warnings"] and rec["warnings"][0].startswith("the sampling run ended with RuntimeError after 0")
    assert rec["facts"]["total calls"] == 0

    # the next prompt runs, and nothing is left on the model
    graph = {**base_graph("flux", FLUX_TEXT, FLUX_POOLED), **sample("after", ("m", 0), seed, 1.0),
             **hooks("h", ("m", 0), ("after", 0), f"after_failure_{seed}")}
    server.wait(server.queue(graph), timeout=300)
    assert_no_hooks(hook_report(server, f"after_failure_{seed}"))
    assert server.alive()


def test_an_interrupted_run_leaves_no_hook_and_records_the_calls_made(server):
    seed = next(SEEDS)
    graph = {**base_graph("flux", FLUX_TEXT, FLUX_POOLED), "stop": n("NativeTestInterruptAtCall", model=["m", 0], call=2),
             "ins": inspect(("stop", 0), modules=True), **sample("interrupted", ("ins", 0), seed, 1.0)}
    pid = server.queue(graph)
    entry = server.wait(pid, timeout=300, raise_on_error=False)
    assert any(kind == "execution_interrupted" for kind, _ in entry["status"]["messages"]), entry["status"]
    rec = live_record(server, pid)
    assert rec["facts"]["total calls"] == 2 and rec["facts"]["steps seen"] == 2
    assert rec["warnings"][0].startswith("the sampling run ended with InterruptProcessingException after 2")
    assert rec["facts"]["blocks"] == 4  # what the module hooks saw before the interrupt

    graph = {**base_graph("flux", FLUX_TEXT, FLUX_POOLED), **sample("after", ("m", 0), seed, 1.0),
             **hooks("h", ("m", 0), ("after", 0), f"after_interrupt_{seed}")}
    server.wait(server.queue(graph), timeout=300)
    assert_no_hooks(hook_report(server, f"after_interrupt_{seed}"))


class GPUServer(ServerWithTestNodes):
    """The same server on ComfyUI's default device (no --cpu). A server of its own, not the session's shared one
    (conftest.py test_nodes_server): ComfyUI picks its device once, from the start-up flags, and the shared one runs
    with --cpu."""

    def command(self) -> list[str]:
        return [a for a in super().command() if a != "--cpu"]


@pytest.mark.cuda
def test_on_cuda_the_record_names_the_device_and_its_peak():
    if not comfyui_installed():
        pytest.skip(f"ComfyUI not installed at {comfyui_path()}")
    with GPUServer() as gpu:
        seed = next(SEEDS)
        graph = {**base_graph("flux", FLUX_TEXT, FLUX_POOLED), "ins": inspect(modules=True),
                 **sample("plain", ("m", 0), seed, 1.0), **sample("inspected", ("ins", 0), seed, 1.0)}
        pid = gpu.queue(graph)
        gpu.wait(pid, timeout=300)
        assert bool((latent(gpu, "plain", seed) == latent(gpu, "inspected", seed)).all())
        rec = live_record(gpu, pid)
        assert rec["facts"]["provenance"].startswith("measured on cuda")
        assert rec["facts"]["provenance"].endswith(", native ComfyUI Flux")
        assert rec["peak_cuda_bytes"] and rec["peak_cuda_bytes"] > 0
        assert all(t["device"] == "cuda" for t in rec["tensors"])
        assert rec["facts"]["steps seen"] == STEPS and rec["facts"]["blocks"] == 4
