"""SD3-medium + the alimama inpainting ControlNet on the meta device: every SD3 boundary of REFERENCE.md
section 1 at 1024x1024 and 1344x768, and the stack's parameter total under the convention section 3 names."""

from __future__ import annotations

import pytest
import torch

from fillscope import masks, sd3_inpaint, text, vae
from fillscope.latents import decode_to_image
from fillscope.weights import count_parameters
from tiny_flux import comfy_tokenizer_dirs


@pytest.fixture(scope="module")
def meta_stack():
    clip_dir, t5_dir = comfy_tokenizer_dirs()
    return {
        "clip_l": text.load_clip_l("meta", tokenizer_fallback=clip_dir),
        "clip_g": text.load_clip_g("meta", tokenizer_fallback=clip_dir),
        "t5": text.load_t5("meta", tokenizer_fallback=t5_dir),
        "transformer": sd3_inpaint.load_sd3_transformer("meta"),
        "controlnet": sd3_inpaint.load_sd3_controlnet("meta"),
        "vae": vae.load_vae("meta", kind="sd3"),
    }


def run_meta(stack, height, width):
    seen = {}

    def observe(name, t):
        seen[name] = list(t.shape)

    def condition(prompt):
        clip_l = text.encode_clip(stack["clip_l"], prompt)
        clip_g = text.encode_clip(stack["clip_g"], prompt)
        t5 = text.encode_t5(stack["t5"], prompt, 256)
        for name, t in (("clip_l.penultimate", clip_l.penultimate), ("clip_l.text_embeds", clip_l.text_embeds),
                        ("clip_g.penultimate", clip_g.penultimate), ("clip_g.text_embeds", clip_g.text_embeds),
                        ("t5.hidden", t5.hidden)):
            observe(name, t)
        cond = text.sd3_text_condition(clip_l, clip_g, t5, observe=observe)
        observe("joint_context", cond.context)
        observe("pooled", cond.pooled)
        return cond

    positive, negative = condition("a red brick fireplace"), condition("")
    image = torch.rand(1, height, width, 3)
    mask = torch.zeros(1, height, width)
    mask[:, height // 4 : height // 2, width // 4 : width // 2] = 1
    cond = sd3_inpaint.build_inpaint_condition(stack["vae"], masks.prepare_image_and_mask(image, mask), observe=observe)
    out = sd3_inpaint.sample_sd3_controlnet_inpaint(
        stack["transformer"], stack["controlnet"], positive, negative, cond, steps=1, observe=observe
    )
    return seen, decode_to_image(stack["vae"], out, observe=observe), out


def test_every_sd3_boundary_matches_the_contract_at_1024(meta_stack):
    seen, image, out = run_meta(meta_stack, 1024, 1024)
    expected = {
        "clip_l.penultimate": [1, 77, 768],
        "clip_l.text_embeds": [1, 768],
        "clip_g.penultimate": [1, 77, 1280],
        "clip_g.text_embeds": [1, 1280],
        "t5.hidden": [1, 256, 4096],
        "clip_lg.padded": [1, 77, 4096],
        "joint_context": [1, 333, 4096],
        "pooled": [1, 2048],
        "initial_noise": [1, 16, 128, 128],
        "inpaint_condition": [1, 17, 128, 128],
        "controlnet.residual[0]": [2, 4096, 1536],  # x2 batch under CFG
        "controlnet.residual[22]": [2, 4096, 1536],
        "transformer.output": [2, 16, 128, 128],
        "velocity.guided": [1, 16, 128, 128],
        "decoded_image": [1, 3, 1024, 1024],
    }
    for name, shape in expected.items():
        assert seen[name] == shape, name
    assert out.info["controlnet_residuals"] == 23
    assert list(image.shape) == [1, 1024, 1024, 3]


def test_1344x768_gives_4032_patches(meta_stack):
    seen, image, _ = run_meta(meta_stack, 1344, 768)
    assert seen["inpaint_condition"] == [1, 17, 168, 96]
    assert seen["controlnet.residual[0]"] == [2, 4032, 1536]
    assert seen["velocity.guided"] == [1, 16, 168, 96]
    assert list(image.shape) == [1, 1344, 768, 3]


def test_parameter_total_is_the_seeds_9716387043(meta_stack):
    counts = {k: count_parameters(c.model) for k, c in meta_stack.items()}
    assert counts["transformer"][0] == 2_028_328_000
    assert counts["controlnet"][0] == 2_023_618_560
    assert counts["clip_g"][0] == 694_659_840
    assert counts["clip_l"][0] == 123_650_304
    # convention: unique parameters (T5's tied embedding once), CLIP-L and CLIP-G with their projections
    assert sum(u for u, _ in counts.values()) == 9_716_387_043
    # the pos_embed grids are buffers, not parameters (56.6M each: 192*192*1536)
    buffers = sum(b.numel() for b in meta_stack["transformer"].model.buffers())
    assert buffers == 192 * 192 * 1536
