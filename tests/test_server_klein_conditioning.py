"""ComfyUI's CONDITIONING into FillScope's FLUX.2 [klein] sampler (nodes/native.py, FillScope Klein Text from
CONDITIONING) in a real ComfyUI 0.3.75 server.

The server is the session's shared one (conftest.py test_nodes_server) with tests/comfy_nodes as one more custom_nodes
folder; this module writes into its models folder the tiny klein folder (tests/tiny_klein.py) and the same Qwen3 under
ComfyUI's keys as text_encoders/qwen_3_4b.safetensors (checkpoint_files.qwen3_comfy_state), as the session server's
serve_tiny_models writes it. The test nodes (fillscope_klein_conditioning_test_nodes.py) make the CONDITIONING two ways:

- KleinCondTestTextToConditioning: FillScope's own Qwen3 Encode output put into the CONDITIONING a Qwen3 CLIP's
  CLIPTextEncode makes ([[states, {"pooled_output": None, "attention_mask": mask}]]), the tensor unchanged: what a
  ComfyUI that supports klein gives when its states equal FillScope's;
- KleinCondTestTinyZImageCLIP: ComfyUI 0.3.75's own Z-Image encoder on that tiny Qwen3 file (what 0.3.75's CLIPLoader
  builds from any Qwen3 file), through ComfyUI's core CLIPTextEncode: one layer's states, hidden wide.

Checked: the Klein Sampler's latents from the adapter equal those from FillScope's own prompt node bit for bit
(distilled, and base with CFG against an adapted negative); ComfyUI's Z-Image conditioning is refused by the adapter,
naming `conditioning`, before the sampler runs, and the next prompt succeeds; the node is listed with a tooltip on
every input; in-process: the left padding to 512, FLUX / SD3 conditionings and broken entries refused.
"""

from __future__ import annotations

import json

import pytest
import torch
from comfy_server import ComfyExecutionError
from safetensors import safe_open
from tiny_klein import TINY_QWEN3_CONFIG, TINY_TRANSFORMER_CONFIG
from workflow_helpers import api_node, run_saved

pytestmark = pytest.mark.server

FOLDER, QWEN3_FILE = "FLUX.2-klein-4B", "qwen_3_4b.safetensors"
PROMPT, STEPS = "a brass lamp on the desk", 3
NODE = "FillScopeKleinTextFromConditioning"


@pytest.fixture(scope="module")
def server(test_nodes_server):
    import checkpoint_files as cf
    from safetensors.torch import save_file
    from tiny_klein import build_tiny_klein_folder
    from transformers import Qwen3ForCausalLM

    def prepare(server):
        folder = build_tiny_klein_folder(server.models_dir / "diffusers" / FOLDER, seed=0)
        qwen3 = Qwen3ForCausalLM.from_pretrained(str(folder / "text_encoder"), torch_dtype=torch.float32)
        (server.models_dir / "text_encoders").mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in cf.qwen3_comfy_state(qwen3).items()},
                  str(server.models_dir / "text_encoders" / QWEN3_FILE))

    with test_nodes_server.module(prepare) as server:
        yield server


@pytest.fixture(scope="module")
def info(server):
    return server.object_info()


def base_graph(info) -> dict:
    """FillScope's loaders, its own prompt and empty negative (Qwen3 Encode), the inpaint condition."""
    fs = {"source": FOLDER, "dtype": "fp32"}
    return {
        "q": api_node(info, "FillScopeLoadQwen3", variant="qwen3-4b", **fs),
        "t": api_node(info, "FillScopeLoadKleinTransformer", variant="klein-4b", **fs),
        "v": api_node(info, "FillScopeLoadVAE", kind="flux2", **fs),
        "p": api_node(info, "FillScopeQwen3Encode", qwen3=["q", 0], text=PROMPT),
        "n": api_node(info, "FillScopeQwen3Encode", qwen3=["q", 0], text=""),
        "img": api_node(info, "FillScopeSyntheticImageMask", width=128, height=96, mask_fraction=0.5),
        "c": api_node(info, "FillScopeKleinInpaintCondition", vae=["v", 0], image=["img", 0], mask=["img", 1]),
    }


def adapted(info, key: str, klein_text: list, tokens: int = 0) -> dict:
    """FillScope's klein text -> CONDITIONING -> the adapter, as `key`."""
    return {f"{key}_cond": api_node(info, "KleinCondTestTextToConditioning", klein_text=klein_text, tokens=tokens),
            key: api_node(info, NODE, conditioning=[f"{key}_cond", 0])}


def sample(info, name: str, positive: list, negative: list | None = None, seed: int = 0) -> dict:
    """The Klein Sampler on FillScope's transformer (base with CFG 4 when a negative is given), its latents saved."""
    sampler = api_node(info, "FillScopeKleinSampler", transformer=["t", 0], positive=positive, condition=["c", 0],
                       seed=seed, steps=STEPS, guidance=4.0, strength=1.0,
                       model_type="base" if negative else "distilled")
    if negative:
        sampler["inputs"]["negative"] = negative
    return {name: sampler, f"{name}_save": api_node(info, "NativeFillTestSaveFSLatent", latent=[name, 0], name=name)}


def record(entry, key) -> dict:
    return entry["outputs"][key]["fillscope_shapes"][0]["node"]


# ---- tests --------------------------------------------------------------------------------------------------------


def test_the_node_is_listed_with_a_tooltip_on_every_input(info):
    spec = info[NODE]
    assert spec["display_name"] == "Klein Text from CONDITIONING" and spec["category"] == "FillScope/text"
    assert spec["output"] == ["FS_KLEIN_TEXT", "STRING"]
    # the output wires into the Klein Sampler's positive and negative
    sampler = info["FillScopeKleinSampler"]["input"]
    assert sampler["required"]["positive"][0] == sampler["optional"]["negative"][0] == "FS_KLEIN_TEXT"
    inputs = {**spec["input"]["required"], **spec["input"].get("optional", {})}
    assert list(inputs) == ["conditioning"] and inputs["conditioning"][0] == "CONDITIONING"
    for name, (_, options) in inputs.items():
        assert options.get("tooltip"), name
    print("tooltip:", inputs["conditioning"][1]["tooltip"])


def test_adapted_conditioning_samples_bit_for_bit_as_fillscopes_own_prompt(server, info):
    """FillScope's own Qwen3 states through CONDITIONING -> adapter: the sampler's latents equal the direct wiring's,
    distilled (positive only) and base with CFG (an adapted negative too)."""
    graph = {**base_graph(info), **adapted(info, "pa", ["p", 0]), **adapted(info, "na", ["n", 0]),
             **sample(info, "own", ["p", 0]), **sample(info, "via", ["pa", 0]),
             **sample(info, "own_cfg", ["p", 0], ["n", 0]), **sample(info, "via_cfg", ["pa", 0], ["na", 0])}
    entry = server.run(graph, timeout=900)
    from workflow_helpers import saved_latent

    for own, via in (("own", "via"), ("own_cfg", "via_cfg")):
        a, b = saved_latent(server, own), saved_latent(server, via)
        print(f"{via}: latents {list(b.shape)}, max |own - adapted| = {float((a - b).abs().max()):.3g}")
        assert a.shape == (1, 128, 6, 8) and torch.equal(a, b)
    assert not torch.equal(saved_latent(server, "own"), saved_latent(server, "own_cfg"))  # CFG changed something

    doc = record(entry, "pa")
    width = TINY_TRANSFORMER_CONFIG["joint_attention_dim"]
    rows = {t["name"]: t for t in doc["tensors"]}
    assert rows["prompt_embeds"]["shape"] == [1, 512, width]
    assert rows["prompt_embeds"]["provenance"] == "from ComfyUI CONDITIONING (cross_attn)"
    assert rows["txt_ids"]["shape"] == [1, 512, 4]
    assert doc["facts"]["text tokens (CONDITIONING)"] == 512 and doc["facts"]["batch"] == 1
    assert doc["facts"]["CONDITIONING keys"] == "pooled_output, attention_mask"
    assert any("attention_mask not applied" in n for n in doc["notes"])
    # the tiny width is not a shipped one: said, and left to the sampler's check against its transformer
    assert len(doc["warnings"]) == 1 and f"width {width} = 3 x {width // 3} is not a shipped" in doc["warnings"][0]
    assert "7680" in doc["warnings"][0] and "12288" in doc["warnings"][0]


def saved_conditioning(server, name) -> tuple[dict, dict]:
    with safe_open(str(server.output_dir / "fillscope_native" / f"{name}.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, {k: json.loads(v) for k, v in (f.metadata() or {}).items()}


def zimage(info) -> dict:
    return {"z": api_node(info, "KleinCondTestTinyZImageCLIP", file=QWEN3_FILE, config=json.dumps(TINY_QWEN3_CONFIG)),
            "zc": api_node(info, "CLIPTextEncode", clip=["z", 0], text=PROMPT)}


def test_comfyuis_single_layer_zimage_conditioning_is_refused_before_sampling(server, info):
    """ComfyUI 0.3.75's Z-Image encoder (what its CLIPLoader makes of a Qwen3 file) gives one layer's states, hidden
    wide; the adapter refuses them naming `conditioning`, the sampler never runs, and the next prompt succeeds."""
    server.run({**zimage(info), "zs": api_node(info, "NativeTestSaveConditioning", conditioning=["zc", 0],
                                               name="zimage")}, timeout=600)
    tensors, metadata = saved_conditioning(server, "zimage")
    states, mask = tensors["0.cross_attn"], tensors["0.attention_mask"]
    hidden = TINY_QWEN3_CONFIG["hidden_size"]
    print(f"ComfyUI 0.3.75 Z-Image conditioning: cross_attn {list(states.shape)}, attention_mask {list(mask.shape)}, "
          f"pooled_output {metadata['0.pooled_output']}")
    assert states.shape[-1] == hidden and metadata["0.pooled_output"] is None
    assert states.shape[1] == mask.shape[1] == int(mask.sum()) < 512  # the chat-templated prompt, unpadded
    # which layer: transformers' Qwen3 on the same weights and ComfyUI's Z-Image template (no think block)
    from tiny_klein import qwen_bpe_dir
    from transformers import Qwen3ForCausalLM

    from fillscope.text import load_qwen3_tokenizer

    qwen3 = Qwen3ForCausalLM.from_pretrained(str(server.models_dir / "diffusers" / FOLDER / "text_encoder"),
                                             torch_dtype=torch.float32)
    ids = load_qwen3_tokenizer(qwen_bpe_dir())(f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n",
                                               return_tensors="pt").input_ids
    with torch.no_grad():
        hs = qwen3.model(input_ids=ids, output_hidden_states=True).hidden_states  # embeddings + one per layer
    layers = TINY_QWEN3_CONFIG["num_hidden_layers"]
    same = [k for k, h in enumerate(hs) if h.shape == states.shape and torch.allclose(h, states, atol=1e-4)]
    print(f"Z-Image's states = transformers' hidden_states{same} of {len(hs)} ({layers} layers): the last-but-one "
          f"layer's output; klein reads hidden_states[9, 18, 27] concatenated, 3 x {hidden}")
    assert same == [layers - 1]

    graph = {**base_graph(info), **zimage(info), "za": api_node(info, NODE, conditioning=["zc", 0]),
             **sample(info, "refused", ["za", 0])}
    with pytest.raises(ComfyExecutionError) as e:
        server.run(graph, timeout=600)
    message = str(e.value)
    print("refused:", message.splitlines()[1] if "\n" in message else message)
    assert f"({NODE})" in message and "[FillScope] input 'conditioning':" in message and "Fix:" in message
    for part in (f"is [B, L, {hidden}]", "cannot be 3 concatenated layers", "one layer's states", "Z-Image",
                 "9, 18, 27", "FillScope Qwen3 Encode", "a ComfyUI that supports FLUX.2 [klein]"):
        assert part in message, (part, message)
    assert "sample_klein" not in message  # refused in the adapter: the sampler was never reached

    ok = {**base_graph(info), **adapted(info, "pa", ["p", 0]), **sample(info, "after", ["pa", 0], seed=7)}
    assert run_saved(server, ok, "after").shape == (1, 128, 6, 8)


# ---- in-process: the adapter's checks on values no encoder in this server makes ---------------------------------


@pytest.fixture(scope="module")
def native():
    """nodes/native.py in this process (checkpoint_files.pack_module)."""
    import checkpoint_files

    return checkpoint_files.pack_module("nodes.native")


def execute(native, conditioning):
    out = native.KleinTextFromConditioning.execute(conditioning=conditioning)
    return out.args[0].value, json.loads(out.args[1])["node"]


def test_shorter_sequences_are_left_padded_with_zeros_to_512_as_comfyuis_flux2_pads_them(native):
    """comfy/model_base.py Flux2.extra_conds pads a cross_attn shorter than 512 on the left with zeros; the adapter
    does the same, so the sampler's text ids (0..511) meet the same tokens as in ComfyUI's Flux2."""
    from fillscope.specs import shipped_config

    width = shipped_config("klein_transformer", "klein-4b")["joint_attention_dim"]
    states = torch.randn(2, 40, width)
    text, rec = execute(native, [[states, {"pooled_output": None}]])
    assert text.embeds.shape == (2, 512, width) and text.encoded is None
    assert not text.embeds[:, :472].any() and torch.equal(text.embeds[:, 472:], states)
    assert text.text_ids[0, :, 3].tolist() == list(range(512))
    assert rec["facts"]["text tokens (CONDITIONING)"] == 40 and rec["facts"]["batch"] == 2
    assert any("left-padded with 472 zero tokens to 512" in n for n in rec["notes"])
    assert rec["facts"]["text"] == "FLUX.2 [klein] 4B's: Qwen3-4B hidden states 9, 18, 27, 3 x 2560 = 7680"
    assert not rec["warnings"]
    # 512 and longer pass unchanged (ComfyUI's klein encoder never truncates; FillScope's own does at 512)
    long = torch.randn(1, 600, width)
    text, rec = execute(native, [[long, {"pooled_output": None}]])
    assert text.embeds is long and any("passed whole" in n for n in rec["notes"])


REFUSED = [  # (conditioning, what the message says)
    (lambda: [[torch.zeros(1, 300, 2560), {"pooled_output": None}]],
     ["is [B, L, 2560], the width of one Qwen3-4B hidden state", "Z-Image", "3 x 2560 = 7680"]),
    (lambda: [[torch.zeros(1, 300, 4096), {"pooled_output": None}]], ["one Qwen3-8B hidden state", "3 x 4096 = 12288"]),
    (lambda: [[torch.zeros(1, 256, 4096), {"pooled_output": torch.zeros(1, 768)}]],
     ["a FLUX.1 conditioning", "wire it to FillScope FLUX Text from CONDITIONING", "no pooled vector"]),
    (lambda: [[torch.zeros(1, 333, 4096), {"pooled_output": torch.zeros(1, 2048)}]],
     ["an SD3 / SD3.5 conditioning", "wire it to FillScope SD3 Text from CONDITIONING"]),
    (lambda: [[torch.zeros(1, 512, 7680), {"pooled_output": None}]] * 2,
     ["holds 2 entries", "never pick one silently", "ConditioningConcat"]),
    (lambda: [[torch.full((1, 512, 7680), float("nan")), {"pooled_output": None}]], ["NaN or inf"]),
    (lambda: [], ["is empty"]),
]


@pytest.mark.parametrize("make, says", REFUSED)
def test_other_families_one_layer_and_broken_conditionings_are_refused(native, make, says):
    with pytest.raises(ValueError, match="input 'conditioning'") as e:
        execute(native, make())
    for part in says:
        assert part in str(e.value), (part, str(e.value))


def test_keys_klein_does_not_apply_are_said(native):
    conditioning = [[torch.zeros(1, 512, 7680), {"pooled_output": None, "attention_mask": torch.ones(1, 512),
                                                 "reference_latents": [torch.zeros(1, 128, 4, 4)], "guidance": 3.5,
                                                 "area": (8, 8, 0, 0)}]]
    _, rec = execute(native, conditioning)
    assert any("attention_mask not applied" in n for n in rec["notes"])
    assert any("reference_latents not applied" in w and "Klein Edit Condition" in w for w in rec["warnings"])
    assert any("guidance not applied" in w and "klein embeds no guidance" in w for w in rec["warnings"])
    assert any("area" in w and "regional conditioning" in w for w in rec["warnings"])
    assert any("all zeros (ConditioningZeroOut)" in n for n in rec["notes"])
