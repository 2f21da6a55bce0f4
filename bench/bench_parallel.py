"""Bytes each rank sends per denoiser step under FillScope's parallel modes, computed from the shapes (no GPU, no
weights, no ranks started: a few seconds on the CPU).

- Ulysses context parallelism (fillscope/parallel/context.py) for FLUX.1 Fill, FLUX.2 [klein] 4B and 9B at
  1024x1024 and every degree of 2, 4, 8 that `valid_degrees` allows: per attention layer the all-to-alls of q, k, v
  and of the output back, times the attention layers of the production config (double + single blocks), plus the
  final all-gather of proj_out's output. Shapes from `rank_shapes(config, degree, image_tokens, text_tokens)`.
- CFG parallelism for SD3-medium + ControlNet (fillscope/parallel/cfg.py) at 1024x1024: the velocity all-gather.

Every figure is computed from tensor shapes and the collectives diffusers issues; none is measured. The measured
counterpart (time per step with several GPUs) is bench/gpu_parallel.py.

Hand check (FLUX.1 Fill, degree 2): N + L = 4096 + 512 = 4608 tokens, 2304 a rank; q/k/v/out block
[1, 2304, 24, 128] = 7,077,888 elements = 14,155,776 B in bf16; an all-to-all sends (2-1)/2 of it = 7,077,888 B;
4 of them a layer = 28,311,552 B; 19 + 38 = 57 layers = 1,613,758,464 B; the output gather sends the rank's
[1, 2048, 64] block (262,144 B) to the 1 other rank: total 1,614,020,608 B = 1614.02 MB. The script prints
1614.02 MB for that row.
"""

from __future__ import annotations

import sys
from math import prod
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _benchlib as bl  # noqa: E402

BYTES = 2  # bf16
SIZE = 1024
IMAGE_TOKENS = (SIZE // 16) ** 2  # VAE /8, 2x2 patches packed: 64 x 64 = 4096 tokens (FLUX.1 and FLUX.2 alike)
TEXT_TOKENS = 512  # FLUX.1: T5-XXL padded to 512; klein: Qwen3 padded to 512
DEGREES = (2, 4, 8)
MB = 1e6
PROVENANCE = "computed from the shapes"

# model label, config file, image tokens the transformer sees (hidden_states), note
MODELS = (
    ("FLUX.1 Fill", "flux_fill_transformer.json", IMAGE_TOKENS, "4096 image tokens (the Fill condition rides in "
     "the channels: 384 = 64 + 320)"),
    ("klein 4B inpaint", "klein_4b_transformer.json", 2 * IMAGE_TOKENS, "4096 noisy + 4096 reference tokens "
     "(the source image at t=10; pipelines/klein.py sample_klein concatenates them)"),
    ("klein 9B inpaint", "klein_9b_transformer.json", 2 * IMAGE_TOKENS, "as klein 4B"),
)


def ulysses_bytes(config: dict, degree: int, image_tokens: int, text_tokens: int) -> dict:
    """Bytes one rank sends in one transformer call at `degree`, from context.rank_shapes."""
    from fillscope.parallel.context import rank_shapes

    s = rank_shapes(config, degree, image_tokens, text_tokens)
    block = prod(s["qkv_before_all_to_all"]) * BYTES  # [B,(N+L)/d,H,D]
    # the output all-to-all moves the same element count back: [B,N+L,H/d,D] -> [B,(N+L)/d,H*D]
    assert prod(s["qkv_after_all_to_all"]) == prod(s["qkv_before_all_to_all"]) == prod(s["attention_output"])
    per_all_to_all = block * (degree - 1) // degree  # the 1/d addressed to itself stays on the rank
    layers = config["num_layers"] + config["num_single_layers"]
    attention = s["all_to_alls_per_attention"] * per_all_to_all * layers
    gather = prod(s["output_before_gather"]) * BYTES * (degree - 1)  # its block to each of the d-1 others
    return {"shapes": s, "layers": layers, "block": block, "per_all_to_all": per_all_to_all,
            "attention": attention, "gather": gather, "total": attention + gather}


def main() -> int:
    from fillscope.parallel.context import valid_degrees
    from fillscope.specs import shipped_config

    kinds = {"flux_fill_transformer.json": ("flux_fill_transformer", None),
             "klein_4b_transformer.json": ("klein_transformer", "klein-4b"),
             "klein_9b_transformer.json": ("klein_transformer", "klein-9b")}
    rows, details = [], []
    for label, file, image_tokens, note in MODELS:
        kind, variant = kinds[file]
        config = shipped_config(kind, variant)
        degrees = [d for d in DEGREES if d in valid_degrees(config)]
        skipped = [d for d in DEGREES if d not in degrees]
        details.append(f"{label}: configs/{file}: {config['num_attention_heads']} heads x {config['attention_head_dim']}, "
                       f"{config['num_layers']} double + {config['num_single_layers']} single blocks; {note}; "
                       f"valid degrees {valid_degrees(config)}" + (f" (skipped {skipped})" if skipped else ""))
        for d in degrees:
            r = ulysses_bytes(config, d, image_tokens, TEXT_TOKENS)
            s = r["shapes"]
            rows.append([label, "Ulysses", str(d), f"{s['image_tokens_per_rank']} + {s['text_tokens_per_rank']}",
                         f"{s['heads_per_rank']} of {s['heads']}", f"{r['attention'] / MB:.2f}", f"{r['gather'] / MB:.3f}",
                         f"{r['total'] / MB:.2f}", PROVENANCE])
            if (label, d) == ("FLUX.1 Fill", 2):
                assert r["total"] == 1_614_020_608, r  # the module docstring's hand check

    # SD3-medium CFG parallel: rank 0 the positive pass, rank 1 the negative; one all-gather of the velocity a step
    sd3 = shipped_config("sd3_transformer", "sd3-medium")
    velocity = [1, sd3["out_channels"], SIZE // 8, SIZE // 8]  # [1,16,128,128]
    cfg_bytes = prod(velocity) * BYTES * (2 - 1)  # its velocity to the one other rank
    rows.append(["SD3-medium + ControlNet", "CFG", "2", f"{(SIZE // 16) ** 2} + 333 (whole)",
                 f"{sd3['num_attention_heads']} of {sd3['num_attention_heads']}", "-", f"{cfg_bytes / MB:.3f}",
                 f"{cfg_bytes / MB:.3f}", PROVENANCE])

    how = [
        f"how: {PROVENANCE}, not measured: no GPU, no weights, no ranks started. bf16 ({BYTES} B an element), batch 1, "
        f"{SIZE}x{SIZE}: {IMAGE_TOKENS} image tokens, {TEXT_TOKENS} text tokens (T5 for FLUX.1, Qwen3 for klein). "
        f"MB = 10^6 bytes.",
        "how: shapes from fillscope.parallel.context.rank_shapes(config, degree, image_tokens, text_tokens) on the "
        "shipped production configs (fillscope/configs), degrees 2, 4, 8 where valid_degrees allows.",
        "how: Ulysses, per attention layer: 4 all-to-alls (q, k, v in; the output back, diffusers' "
        "TemplatedUlyssesAttention forward), each of the rank's [B,(N+L)/d,H,D] block, of which the rank sends "
        "(d-1)/d (1/d is its own); attention layers = double + single blocks, each one joint attention over image + "
        "text tokens. No attention mask (one prompt) and no LSE exchange (inference), so nothing else moves there.",
        "how: final gather: proj_out's [B,N/d,C_out] all-gathered (funcol.all_gather_tensor): the rank sends its "
        "block to the d-1 others (a ring all-gather sends the same (d-1) blocks). The input split is local slicing "
        "(every rank holds the whole input): 0 bytes.",
        "how: 'sent per step' = one transformer call: FLUX.1 Fill dev is guidance-distilled (1 call a step), klein "
        "distilled likewise; klein base with CFG makes 2 calls a step (double its rows). Bytes sent, not link "
        "time: whether they hide behind compute needs gpu_parallel.py on several GPUs.",
        "how: SD3-medium CFG parallel: each rank runs one CFG pass whole (no token split), then dist.all_gather of "
        "the velocity [1,16,128,128] bf16 (fillscope/parallel/cfg.py): the rank sends its 524,288 B to the other "
        "rank. Text tokens shown as 333 = 77 CLIP + 256 T5 (the sampler's default; they do not move).",
    ] + [f"how: {d}" for d in details]
    header = ["model", "mode", "degree", "tokens per rank (img + txt)", "heads per rank", "all-to-alls MB",
              "gather MB", "MB sent per rank per step", "provenance"]
    bl.print_report("bench_parallel: bytes each rank sends per denoiser step (computed from the shapes)", how, rows,
                    header, notes=["hand check in the module docstring: FLUX.1 Fill degree 2 = 1,614,020,608 B "
                                   "(asserted here)"])
    return 0


if __name__ == "__main__":
    bl.run_main(main, "bench_parallel")
