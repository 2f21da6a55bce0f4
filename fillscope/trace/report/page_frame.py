"""What every page shares: its title and subtitle, the section frame with the run settings in its footer, the
heading helper and the provenance legend."""

from __future__ import annotations

from .format import badge, dtype_short
from .markup import Markup, el, en_zh


def page_meta(model: str) -> list[dict]:
    """Per page: its tab label ("short"), title and subtitle, each as (en, zh)."""
    flux = model == "flux-fill"
    return [
        {"short": ("Macro", "宏观"), "title": ("Macro architecture", "宏观架构"),
         "sub": (("From condition encoding through the full denoiser to VAE decode. Every edge carries the shape "
                  "that flowed along it and where that shape came from."),
                 "从条件编码、完整 denoiser 到 VAE 解码；每条边标注流经的 shape 及其来源。")},
        {"short": ("Conditions", "条件"), "title": ("Condition encoding and branch merge", "条件编码与分支组装"),
         "sub": (("Every text and image condition branch that ran; output shapes and the merge rule are labelled "
                  "separately."), "保留所有实际执行的文本与图像条件分支；输出 shape 与 merge 方式分别标注。")},
        {"short": ("Denoiser", "去噪器"),
         "title": (("Full FLUX transformer topology", "完整 FLUX Transformer 拓扑") if flux else
                   ("Full MMDiT topology and ControlNet branch", "完整 MMDiT 拓扑与 ControlNet 分支")),
         "sub": ("Every block at production depth, none folded: shapes, parameters, FLOPs and hits per block.",
                 "保留完整生产层数，逐块列出 shape、参数量、FLOPs 与执行次数，未折叠。")},
        {"short": ("Block", "Block"),
         "title": (("Block micro-structure and fill condition", "Block 微观结构与 Fill 条件") if flux else
                   ("Joint block micro-structure and ControlNet injection", "Joint Block 微观结构与 ControlNet 条件注入")),
         "sub": (("One block's modules by role: modulation, joint attention, MLP, residual; and how the task "
                  "condition enters the denoiser."),
                 "单个 block 的模块按职责分组：调制、联合注意力、MLP、残差；以及任务条件如何进入 denoiser。")},
        {"short": ("VAE & evidence", "VAE 与证据"), "title": ("VAE boundary and trace evidence", "VAE 边界与运行证据"),
         "sub": (("Encode/decode shapes as measured in the run; the channel ladder comes from static config. "
                  "Evidence: parameters, memory, FLOPs, module- and line-level traces, run boundary."),
                 ("Encode/Decode shape 为本次运行实测；中间通道阶梯来自固定配置。证据：参数、显存、FLOPs、"
                  "模块级与行级 trace、运行边界。"))},
    ]


def run_settings_line(report: dict) -> Markup:
    """The footer of every page: the settings the run was given (dtype, device, size, batch, steps traced) and
    the weights. They are inputs, not measurements, so their badge says "run setting"."""
    run = report["run"]
    dt = dtype_short(run["dtype"])
    steps = run["steps_traced"]
    en = (f"{dt} · {run['device_name']} · {run['width']}×{run['height']} · batch {run['batch']} · "
          f"{steps} denoiser step{'s' if steps != 1 else ''} traced")
    zh = f"{dt} · {run['device_name']} · {run['width']}×{run['height']} · batch {run['batch']} · 追踪 {steps} 个去噪步"
    return el("div", {"class_": "runline"}, badge("setting", "", "what this run was asked to do, not a measurement"),
              el("span", {"class_": "runtext"}, en_zh(en, zh)),
              el("span", {"class_": "weights"}, en_zh("weights: ", "权重："), run["weights"]))


def page_section(report, n: int, meta: dict, body) -> Markup:
    """Page n: its heading, the body, and the run settings as its footer."""
    return el("section", {"class_": "page", "id": f"page-{n}", "data-page": str(n),
                          "aria-labelledby": f"page-{n}-title"},
              el("header", {"class_": "phead"},
                 el("h2", {"id": f"page-{n}-title"}, f"{n}. ", en_zh(meta["title"][0], meta["title"][1])),
                 el("p", {"class_": "sub"}, en_zh(meta["sub"][0], meta["sub"][1]))),
              body,
              el("footer", {"class_": "pfoot"}, run_settings_line(report)))


def heading(en, zh) -> Markup:
    return el("h3", None, en_zh(en, zh))


def legend() -> Markup:
    """The figure badges, one of each kind, with a hint that values carry their exact form and method."""
    return el("div", {"class_": "legend"}, el("span", {"class_": "lg-title"}, en_zh("Provenance:", "来源：")),
              badge("measured", "cuda"), badge("measured", "meta"), badge("measured", "cpu"),
              badge("estimated"), badge("static-config"), badge("setting"),
              el("span", {"class_": "lg-note"},
                 en_zh("hover a value for its exact figure and how it was obtained",
                       "悬停查看精确数值与获取方式")))

