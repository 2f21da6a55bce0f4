"""The read-me Note of each shipped workflow (a MarkdownNote on the canvas): what the workflow does and which files
to download into which ComfyUI folder (real-weight workflows), or what a meta workflow shows. graphs.py puts one in
every UI workflow; the API files leave it out (a note is not a node the server runs)."""

from __future__ import annotations

MODELS_INTRO = ("Each loader's **source** menu lists the files it found; press **r** (Refresh) after adding files. "
                "Missing files are offered for download when the workflow opens (the Missing Models dialog).")


def _tree(files) -> str:
    """The ComfyUI/models tree of (folder, name, url) files, as ComfyUI's own templates draw it."""
    folders: dict[str, list[str]] = {}
    for folder, name, _ in files:
        if name not in folders.setdefault(folder, []):
            folders[folder].append(name)
    lines = ["ComfyUI/", "└── models/"]
    for i, (folder, names) in enumerate(folders.items()):
        last = i == len(folders) - 1
        lines.append(f"    {'└' if last else '├'}── {folder}/")
        for j, name in enumerate(names):
            lines.append(f"    {' ' if last else '│'}   {'└' if j == len(names) - 1 else '├'}── {name}")
    return "```\n" + "\n".join(lines) + "\n```"


def _links(files) -> str:
    seen, out = set(), []
    for folder, name, url in files:
        if url not in seen:
            seen.add(url)
            out.append(f"- **{folder}/** [{name}]({url})")
    return "\n".join(out)


def real_weights(what: str, files, *, extra: str = "", image: bool = True, intro: str = MODELS_INTRO,
                 gated=()) -> str:
    """A real-weight workflow's note: what it does, the files and where they go (a file named in `gated`, one only a
    gated Hugging Face repository publishes, said so by name), the input image."""
    files = list(files)
    parts = [f"## {what}", "### Models to download", _links(files), _tree(files), intro]
    locked = list(dict.fromkeys(name for _, name, _ in files if name in gated))
    if locked:
        parts.append(gated_line(locked))
    if extra:
        parts.append(extra)
    if image:
        parts.append("### Image and mask\nLoad an RGBA image whose transparent area is the hole (ComfyUI's Load Image "
                     "gives mask = 1 - alpha; `fillscope_example.png` ships in the pack's `api_workflows/`), or "
                     "right-click the Load Image node > **Open in MaskEditor** and paint the area to repaint.")
    parts.append("Every FillScope node shows the shapes that passed through it after a run.")
    return "\n\n".join(parts)


META_BLANK = ("The decoded image is **blank** on meta weights (there are no pixel values): the VAE Decode node says so. "
              "For a real image, choose model files on the loaders' source menus (see the inpaint templates for the "
              "downloads).")


def meta(what: str, shows: str, blank: str = META_BLANK) -> str:
    """A meta workflow's note: no download; what it shows; what becomes of the image (`blank`)."""
    return "\n\n".join([
        f"## {what}",
        "**No download needed.** Every loader's source is `meta`: the full production topology with no weights "
        "(shapes only, no memory), so this runs on any CPU in seconds.",
        shows,
        blank,
    ])


def gated_line(names) -> str:
    """The files whose only source is a gated Hugging Face repository, named: the Missing Models dialog's download
    fails for them until the user has accepted the licence on the model page and is logged in."""
    listed = ", ".join(f"`{n}`" for n in names)
    return (f"**{listed}: gated: accept the licence on Hugging Face and log in before downloading** (no ungated "
            "copy is published).")


SHAPES = ("After a run each FillScope node shows a table of the tensors at its boundary (shape, dtype, device, "
          "measured or static-config), and the Shapes Report node the whole boundary table; it also writes them to "
          "`output/fillscope/` (a page in the **FillScope** sidebar tab; with an image, under the image's number). Change `width` / `height` on Synthetic Image + Mask to see any other size.")
REPORT = ("The trace node runs one denoiser step under the module and line tracers and writes the five-page "
          "architecture report (HTML + JSON) to `output/fillscope/`; open it from the **FillScope** tab in the sidebar. "
          "Switch `line_trace` off for a faster run.")


NATIVE_MODELS_INTRO = ("ComfyUI's loaders (Load Diffusion Model, DualCLIPLoader, Load VAE ...) list the files of these "
                       "folders; press **r** (Refresh) after adding files. Missing files are offered for download when "
                       "the workflow opens (the Missing Models dialog).")
NATIVE_INSPECT = ("The graph is ComfyUI's own; FillScope's Inspect nodes sit on its links and change nothing downstream "
                  "(the same latent, bit for bit). After a run each shows its table: **Inspect Model** the diffusion "
                  "model's boundary at every step (latent in with the inpaint channels, sigma, text context, pooled "
                  "vector, guidance, output; calls per step, time per call), **Inspect CLIP** the tokens and the "
                  "encodings of each CLIPTextEncode, **Inspect VAE** each encode / decode, **Inspect** the "
                  "conditioning and latent on its link. API clients read the same records at "
                  "`GET /fillscope/live?prompt_id=ID`.")

NATIVE_REPORT = ("The **Shapes Report** saves VAE Decode's image and tables those records together beside it in "
                 "`output/fillscope/`, under the image's number (open the table in the **FillScope** sidebar tab).")


def native(what: str, shows: str, files, *, extra: str = "", gated=()) -> str:
    """A graph of ComfyUI's own nodes with FillScope's: what it shows, then the files (ComfyUI's loaders read them
    from the same folders) and the input image."""
    return real_weights(what, files, extra=(shows + ("\n\n" + extra if extra else "")), intro=NATIVE_MODELS_INTRO,
                        gated=gated)


# ---- the tiled templates (issue 23) ------------------------------------------------------------------------------
TILED_HOW = ("The tiled node cuts the photo into 1024 px tiles overlapping by 15 % (`tile`, `overlap`) and samples only "
             "the tiles that meet the mask grown by the overlap, each at the model's native size whatever the photo's "
             "size; the image comes back at the photo's size, every pixel outside the mask the source's, bit for bit. "
             "The Shapes Report's page (the **FillScope** sidebar tab) draws the tile map: each tile's box, sampled or "
             "not, its tokens and seconds.")
TILED_FLUX_FILL = (
    TILED_HOW + " The shipped `fillscope_example.png` is 1024x1024: one tile, run untiled. **Load your own large "
    "photo** (4096x3072, 6144x4096 ...) and paint its mask to see the tiles.\n\n"
    "**Mode independent, poisson on.** Each tile is FLUX Fill's whole pipeline on its own, so the memory is one tile's "
    "(mode shared encodes and decodes the whole image at once); tiles that do not see each other draw different texture in their overlap, and a ramp blend of the two "
    "fades both to reduced contrast there (a visible band). Poisson re-solves the overlaps inside the mask in the "
    "gradient domain, one tile's drawing per pixel edge, so no band shows; it costs a CPU solve of the overlaps "
    "(1.7 s for 3x3 tiles of 512 px on one CPU thread, as fillscope/compositing/tile_seams.py measured it), little "
    "next to 28 steps a tile. Mode `shared` (neighbours agree while they are sampled) refuses poisson: switch it off there.")
TILED_KLEIN_EDIT = (
    "No mask: every pixel is repainted, a style by prompt over the whole picture. The tiled node cuts the photo into "
    "1024 px tiles overlapping by 15 %; each tile is sampled next to its own source as klein's reference tokens "
    "(4096 + 4096 tokens), and in **mode shared** one sampler averages the overlapping tiles' predictions every "
    "step, so neighbours agree while they are painted (no seam to blend). A 4096x3072 photo is 5 x 4 = 20 tiles. "
    "The shipped `fillscope_example.png` is 1024x1024: one tile, run untiled. **Load your own large photo** on the "
    "Load Image node. `strength` below 1 (0.5-0.8) keeps more of the photo's layout and colours. The Shapes Report "
    "saves the image and draws the tile map on its page (the **FillScope** sidebar tab).\n\n"
    "klein 4B is distilled: 4 steps, no guidance (`guidance` and `negative_prompt` are read by base models only).")


def tiled_meta(family: str, tokens: str) -> str:
    """A tiled meta template's note: what the tiles show, at the synthetic size the user sets."""
    return (f"Synthetic Image + Mask makes a 6144x4096 image with a centred mask 10 % of each side (614x410 px): "
            "35 tiles of 1024 px (overlap 0.15); the 9 that meet the mask grown by the overlap are planned and the "
            f"one that holds it is sampled, at {tokens}: one tile's tokens however big the image. The image comes "
            "back at 6144x4096. About 25-40 s on 2 CPU cores, loaders included (measured through ComfyUI's server; "
            "5-9 s of it the sampled tile). Change `width` / `height` (up to 8192) or "
            "`mask_fraction` to see other plans: at 2048x1536 all 6 tiles are sampled; each sampled tile adds a few "
            "seconds on meta. The tiled node shows each tile's box, tokens and transformer input; the Shapes "
            "Report's page (the **FillScope** sidebar tab) draws the tile map.")


TILED_META_BLANK = ("On meta weights there are no pixel values: inside the mask the image comes back **blank**, outside "
                    "it the source's pixels. For a real image, choose model files on the loaders' source menus (see "
                    "the tiled inpaint templates for the downloads).")


COMPARE_FP8 = (
    "### What it shows\nRun A keeps the transformer's and T5's weights in bf16, run B a copy stored in float8 "
    "(e4m3fn) and upcast one layer at a time, as the loaders' `storage` option does. **Compare Runs** runs both on "
    "the same image, prompt, seed and steps and compares every boundary both pass: the text, the condition, each "
    "step's denoiser output and latent, the decoded image. Its face shows the first boundary over the tolerance and "
    "the PSNR inside the mask; its outputs are both images and the heat map of |A - B|; the record (JSON, a table, "
    "the page) goes to `output/fillscope/`. Change run B to `implementation: diffusers` to hold FillScope against "
    "diffusers' own pipeline on the same weights, or `dtype: fp32` to see what bf16 costs. The pack's "
    "`docs/comparisons.md` has the details.")
