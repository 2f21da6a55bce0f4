"""FillScope Batch: a batch manifest (fillscope/batch, as `python -m fillscope batch`) run from ComfyUI.

The manifest is a file in ComfyUI's input folder; the results go to a sub-folder of its output folder. A batch reads
only what ComfyUI lets a graph read: the manifest, images, masks, soft masks and references inside the input folder,
model sources inside ComfyUI's model folders ("placeholder" / "meta" need none), tokenizer folders inside those or
ComfyUI's own tokenizer folders; every path is checked before anything runs (`check_job_paths`). Jobs that name no
tokenizer folder get ComfyUI's own, as the loader nodes do. A path counts as inside a folder by the loaders' rule
(`is_inside`): named relative to the folder it does not climb out, its '..' resolved as opening the path does; links
in the folder are the owner's choice and are followed, named absolutely or from the manifest's folder alike.

On Ray the jobs travel to the workers as the engine's own classes, so the node runs the engine as the top-level
package `fillscope` (`ray_engine`: the one installed, when it is this pack's, else this pack's folder under that
name) and starts Ray with that folder as a runtime_env py_module, so the workers need only the dependencies.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from comfy_api.latest import io

from ..fillscope.batch.reach import CONNECT_TIMEOUT_S
from ..fillscope.errors import FillScopeInputError
from . import common as c
from .base import FillScopeNode
from .common import advanced, contained_path

RUN_ON = ["this process", "ray local", "ray cluster"]
NOT_MODEL_FOLDERS = ("custom_nodes",)  # folder_paths entries that hold no models
MAX_IMAGES = 64  # finished images the IMAGE output and the node's preview hold at most
ENGINE_DIR = Path(__file__).resolve().parent.parent / "fillscope"
NODE_INPUTS = {"--workers": "workers", "--device": "device", "--ray": "run_on", "--max-resident": "max_resident",
               "max_resident": "max_resident", "--connect-timeout": "connect_timeout"}  # the engine's (command line)
# input names -> this node's ("--ray" is ray_address when run_on is 'ray cluster': as_node_error)


# --- where a batch may read and write ----------------------------------------------------------------------------

def opened_path(path: str) -> str:
    """`path` made absolute, its '..' resolved as opening it resolves them (the part up to its last '..' by its real
    path: links before a '..' followed), the rest as written (links there are followed when the file is read)."""
    parts = Path(path if os.path.isabs(path) else os.path.join(os.getcwd(), path)).parts  # abspath folds '..'
    if ".." not in parts:
        return os.path.normpath(os.path.join(*parts))
    last = len(parts) - 1 - parts[::-1].index("..")
    return os.path.normpath(os.path.join(os.path.realpath(os.path.join(*parts[:last + 1])), *parts[last + 1:]))


def is_inside(path: str, roots) -> bool:
    """The loaders' rule (common.contained_path, as for a loader's source): `path` lies in one of `roots` when,
    relative to it (as written, or to its real path), it does not climb out; a link inside is the owner's choice and
    is followed, whether the path is absolute or climbs there with '..' from the manifest's folder (opened_path)."""
    where = opened_path(path)
    for root in roots:
        for base in dict.fromkeys((os.path.abspath(root), os.path.realpath(root))):
            try:
                relative = os.path.relpath(where, base)
            except ValueError:  # another drive
                continue
            if contained_path(relative) is not None:
                return True
    return False


def input_root() -> str:
    import folder_paths

    return os.path.abspath(folder_paths.get_input_directory())


def output_root() -> str:
    import folder_paths

    return os.path.abspath(folder_paths.get_output_directory())


def model_roots() -> list[str]:
    """ComfyUI's models folder and every folder of its model folder names (extra_model_paths included)."""
    import folder_paths

    roots = [folder_paths.models_dir]
    for name, entry in folder_paths.folder_names_and_paths.items():
        if name not in NOT_MODEL_FOLDERS:
            roots += list(entry[0])
    return list(dict.fromkeys(os.path.abspath(r) for r in roots))


def tokenizer_root() -> str:
    """The folder of ComfyUI's own tokenizer files (common.tokenizer_folder's parent)."""
    return str(c.tokenizer_folder("clip").parent)


def manifest_file(manifest: str) -> Path:
    """The manifest's path in ComfyUI's input folder; FillScopeInputError('manifest') when the name climbs out of it
    or names no file."""
    fix = ("give the manifest's path relative to ComfyUI's input folder, e.g. 'batches/catalogue.jsonl' (no "
           "absolute path, no '..' climbing out), and put the file there.")
    if not manifest.strip():
        raise FillScopeInputError("manifest", "is empty.", fix)
    norm = contained_path(manifest.strip())
    if norm is None or norm == ".":
        raise FillScopeInputError("manifest", f"{ascii(manifest)[:200]} points outside ComfyUI's input folder, the one "
                                              "folder a batch manifest is read from.", fix)
    path = Path(input_root(), *norm.split("/"))
    if not is_inside(str(path), [input_root()]):
        raise FillScopeInputError("manifest", f"'{norm}' leads outside ComfyUI's input folder (a link).", fix)
    if not path.is_file():
        raise FillScopeInputError("manifest", f"'{norm}' is not a file in ComfyUI's input folder ({input_root()}).",
                                  fix)
    return path


def output_dir(output_folder: str) -> tuple[Path, str]:
    """(the folder in ComfyUI's output folder, its name with '/' separators); FillScopeInputError('output_folder')
    for a name that is empty, absolute or climbs out."""
    fix = "give a sub-folder of ComfyUI's output folder, e.g. 'fillscope_batch' or 'batches/catalogue'."
    norm = contained_path(output_folder.strip())
    if not output_folder.strip() or norm == ".":
        raise FillScopeInputError("output_folder", "names no sub-folder: the results would go into the output folder "
                                                   "itself, beside every other file.", fix)
    if norm is None:
        raise FillScopeInputError("output_folder", f"{ascii(output_folder)[:200]} points outside ComfyUI's output "
                                                   "folder (an absolute path, a drive or '..').", fix)
    path = Path(output_root(), *norm.split("/"))
    if path.exists() and not path.is_dir():
        raise FillScopeInputError("output_folder", f"'{norm}' is a file in ComfyUI's output folder.",
                                  "give the name of a folder (it is created when missing).")
    return path, norm


def check_job_paths(jobs, job_paths, manifest: str) -> None:
    """Every path the jobs read inside the folders ComfyUI lets a batch read (module docstring); else one
    FillScopeInputError('manifest') listing each path outside, by line, job and field."""
    roots = {"models": model_roots(), "tokenizers": [*model_roots(), tokenizer_root()], "input": [input_root()]}
    where = {"models": "ComfyUI's model folders", "tokenizers": "ComfyUI's model or tokenizer folders",
             "input": "ComfyUI's input folder"}
    bad, kinds = [], set()
    for job in jobs:
        for field, path in job_paths(job):
            kind = field.split(".")[0] if "." in field else "input"
            if not is_inside(path, roots[kind]):
                bad.append(f'  line {job.line_number}, job "{job.id}", field "{field}": \'{path}\' is outside '
                           f"{where[kind]}.")
                kinds.add(kind)
    if not bad:
        return
    fixes = []
    if "input" in kinds:
        fixes.append(f"put the images and masks in ComfyUI's input folder ({input_root()})")
    if kinds & {"models", "tokenizers"}:
        fixes.append("put the weights in one of ComfyUI's model folders (e.g. models/diffusers/<repository>, "
                     "models/diffusion_models/<file>.safetensors) or use 'placeholder' / 'meta'")
    shown = "\n".join(bad[:20]) + (f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else "")
    raise FillScopeInputError(
        "manifest", f"'{manifest}' names {len(bad)} path(s) a batch run from ComfyUI may not read; nothing has run:"
                    f"\n{shown}\n",
        "; ".join(fixes) + ", and give their paths relative to the manifest's folder or as absolute paths there.")


def default_tokenizers(jobs, tokenizer_kinds) -> None:
    """Jobs that name no tokenizer folder get ComfyUI's own (used only when the weights bring none)."""
    for job in jobs:
        for kind in tokenizer_kinds.get(job.family, ()):
            job.tokenizers.setdefault(kind, str(c.tokenizer_folder(kind)))


# --- Ray ---------------------------------------------------------------------------------------------------------

def ray_engine():
    """The engine as the top-level package `fillscope` (what Ray's workers import to unpickle jobs): the one Python
    finds when it is this pack's folder, else this pack's folder registered under that name."""
    import importlib
    import importlib.util
    import sys

    module = sys.modules.get("fillscope")
    if module is None:
        spec = importlib.util.find_spec("fillscope")
        if spec is None:
            spec = importlib.util.spec_from_file_location("fillscope", ENGINE_DIR / "__init__.py",
                                                          submodule_search_locations=[str(ENGINE_DIR)])
            module = importlib.util.module_from_spec(spec)
            sys.modules["fillscope"] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module("fillscope")
    found = Path(module.__file__).resolve().parent
    if found != ENGINE_DIR.resolve():
        raise FillScopeInputError(
            "run_on", f"ComfyUI's Python imports another fillscope package ({found}) than this pack's "
                      f"({ENGINE_DIR}); Ray's workers would run that one.",
            "uninstall it (pip uninstall fillscope) or install this pack's folder (pip install -e), or run on "
            "'this process'.")
    return importlib.import_module("fillscope.batch")


def import_ray():
    """Ray, in the versions the cluster extra declares (fillscope.requirements), or a refusal naming run_on."""
    from ..fillscope.requirements import OPTIONAL

    line = OPTIONAL["cluster"][0].line
    try:
        import ray
    except ImportError:
        raise FillScopeInputError("run_on", "needs the ray package, which ComfyUI's Python does not have.",
                                  f"pip install '{line}' into ComfyUI's Python environment, or run on "
                                  "'this process'.") from None
    try:
        from ..fillscope.requirements import check_installed

        check_installed(("ray",))
    except FillScopeInputError as e:
        raise FillScopeInputError("run_on", e.problem, f"pip install '{line}', or run on 'this process'.") from None
    return ray


def as_node_error(e: Exception, run_on: str = RUN_ON[0]) -> Exception:
    """An engine FillScopeInputError (either copy of the engine) with the node's input names, else `e`."""
    name = getattr(e, "input_name", None)
    if name is None or not hasattr(e, "problem") or not hasattr(e, "fix"):
        return e
    if name == "--ray" and run_on == "ray cluster":
        return FillScopeInputError("ray_address", e.problem, e.fix)
    return FillScopeInputError(NODE_INPUTS.get(name, name), e.problem, e.fix)


# --- the node ----------------------------------------------------------------------------------------------------

class FillScopeBatch(FillScopeNode):
    title = "Batch"

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="FillScopeBatch",
            display_name="Batch Manifest",
            category=c.CATEGORY + "/batch",
            description=(
                "Runs a batch manifest (one JSON job a line, as `python -m fillscope batch`; docs/batches.md) from "
                "ComfyUI's input folder and writes <id>.png, <id>.shapes.json and batch.jsonl into a sub-folder of "
                "the output folder; a rerun skips the jobs that finished. Paths in the manifest are relative to its "
                "folder: images and masks must be in the input folder, weights in ComfyUI's model folders (or "
                "'placeholder' / 'meta'); jobs naming no tokenizers use ComfyUI's. The progress bar moves a job at "
                "a time and Cancel stops the batch between jobs (finished jobs stay). Outputs: the summary, and "
                f"the images of the manifest's finished jobs (run now or before), in manifest order, at most "
                f"{MAX_IMAGES}, those of the first one's size (others left out with a warning; one black 64x64 image "
                "when none finished); the node previews them."
            ),
            inputs=[
                io.String.Input("manifest", default="batches/manifest.jsonl",
                                tooltip="The manifest's path relative to ComfyUI's input folder."),
                io.String.Input("output_folder", default="fillscope_batch",
                                tooltip="A sub-folder of ComfyUI's output folder (created when missing): <id>.png, "
                                        "<id>.shapes.json, batch.jsonl."),
                io.Combo.Input("run_on", options=RUN_ON, default=RUN_ON[0],
                               tooltip="this process: the jobs one after the other in ComfyUI's process; ray local: "
                                       "a Ray cluster on this machine for this batch (workers); ray cluster: the Ray "
                                       "cluster at ray_address (the paths must name the same files on its nodes)."),
                advanced(io.String.Input("ray_address", default="", optional=True,
                                         tooltip="ray cluster: the head's address (e.g. 10.0.0.5:6379, or 'auto').")),
                advanced(io.Int.Input("connect_timeout", default=CONNECT_TIMEOUT_S,
                                      min=c.bounds.BATCH["connect_timeout"].min,
                                      max=c.bounds.BATCH["connect_timeout"].max, optional=True,
                                      tooltip="ray cluster: seconds to wait for the cluster to answer before the "
                                              "batch fails (Cancel works while it waits).")),
                advanced(io.Int.Input("workers", default=1, min=c.bounds.BATCH["workers"].min,
                                      max=c.bounds.BATCH["workers"].max, optional=True,
                                      tooltip="Ray: CPU workers per node without GPUs (one worker per GPU "
                                              "otherwise).")),
                advanced(io.Boolean.Input("keep_going", default=False, optional=True,
                                          tooltip="Jobs whose manifest line has problems fail alone instead of "
                                                  "stopping the batch (paths outside ComfyUI's folders always "
                                                  "stop it).")),
                advanced(io.Int.Input("max_resident", default=1, min=c.bounds.BATCH["max_resident"].min,
                                      max=c.bounds.BATCH["max_resident"].max, optional=True,
                                      tooltip="Model stacks kept loaded between jobs (per worker on Ray).")),
                advanced(io.Combo.Input("device", options=c.DEVICES, default="auto", optional=True,
                                        tooltip="auto = CUDA when available.")),
            ],
            outputs=[io.String.Output("summary", display_name="summary"), io.Image.Output("images")],
            is_output_node=True,
        )

    @classmethod
    def fingerprint_inputs(cls, **inputs):
        return float("nan")  # always runs: the files may have changed, and finished jobs are skipped anyway

    @classmethod
    def run(cls, rec, manifest, output_folder, run_on, ray_address="", workers=1, keep_going=False, max_resident=1,
            device="auto", connect_timeout=CONNECT_TIMEOUT_S):
        import comfy.model_management
        import comfy.utils

        path = manifest_file(manifest)
        out, subfolder = output_dir(output_folder)
        address = (ray_address or "").strip()
        if run_on == "ray cluster" and not address:
            raise FillScopeInputError("ray_address", "is empty, and run_on 'ray cluster' joins the cluster at it.",
                                      "give the head's address (`ray start --head` prints it), or run on 'ray "
                                      "local' or 'this process'.")
        if run_on == "this process":
            from ..fillscope import batch as engine
            from ..fillscope.batch import manifest as _manifest, runner as _runner  # noqa: F401  (engine.<module>)
        else:
            import_ray()  # a clear error before the engine is imported for Ray
            engine = ray_engine()
            import importlib

            for name in ("manifest", "runner", "cluster"):
                importlib.import_module(f"{engine.__name__}.{name}")
        try:
            jobs = engine.manifest.read_manifest(path, strict=not keep_going, base=path.parent)
        except Exception as e:  # noqa: BLE001  (ManifestError of either copy of the engine)
            if getattr(e, "input_name", None) is None:
                raise
            shown = str(path.relative_to(input_root())).replace(os.sep, "/")
            raise FillScopeInputError("manifest", f"'{shown}': {e.problem}", e.fix) from None
        check_job_paths(jobs, engine.manifest.job_paths, manifest)
        parallel = [job.id for job in jobs if job.parallel > 1]
        if parallel and run_on == "this process":
            raise FillScopeInputError(
                "run_on", f"is 'this process', and {len(parallel)} job(s) of the manifest ask for parallel ranks "
                f"({', '.join(parallel[:5])}): ranks started from inside ComfyUI cannot import the pack.",
                "run on 'ray local' (a parallel job takes that many workers), or set those jobs' parallel to 1.")
        default_tokenizers(jobs, engine.manifest.TOKENIZERS)
        comfy.model_management.throw_exception_if_processing_interrupted()

        bar = comfy.utils.ProgressBar(len(jobs))
        bar.update_absolute(0, len(jobs))

        def on_result(result, done, total):
            bar.update_absolute(len(jobs) - total + done, len(jobs))  # the skipped jobs count as done
            if result.status != "ok":
                logging.warning(f"[FillScope] batch job {result.id} failed: {result.error}")
            comfy.model_management.throw_exception_if_processing_interrupted()

        try:
            if run_on == "this process":
                summary = run_here(engine, jobs, out, device, max_resident, on_result)
            else:
                summary = run_on_ray(engine, run_on, address, jobs, out, workers, device, max_resident, on_result,
                                     connect_timeout)
        except Exception as e:  # noqa: BLE001  (an engine FillScopeInputError: the node's input names)
            error = as_node_error(e, run_on)
            if error is e:
                raise
            raise error from None
        text = engine.runner.format_summary(summary)
        images, finished, warnings = finished_images(jobs, summary, out)
        text += "".join(f"\nwarning: {w}" for w in warnings)
        for w in warnings:
            rec.warn(w)
        ui = {"text": [text],
              "images": [{"filename": f"{i}.png", "subfolder": subfolder, "type": "output"} for i in finished]}
        return io.NodeOutput(text, images, ui=ui)


def run_here(engine, jobs, out, device, max_resident, on_result) -> dict:
    """In ComfyUI's process: ComfyUI's models unloaded first when the batch may use the GPU."""
    import comfy.model_management

    cache = engine.runner.ModelCache(max_resident, device)
    if device != "cpu" and comfy.model_management.get_torch_device().type != "cpu":
        comfy.model_management.unload_all_models()
        comfy.model_management.soft_empty_cache()
    try:
        return engine.runner.run_batch(jobs, out, progress=False, cache=cache, on_result=on_result)
    finally:
        cache.clear()


def run_on_ray(engine, run_on, address, jobs, out, workers, device, max_resident, on_result,
               connect_timeout=CONNECT_TIMEOUT_S) -> dict:
    """On Ray (a local one started for this batch and stopped afterwards, or the cluster at `address` joined
    within `connect_timeout` seconds, Cancel looked at while it waits), the engine's folder shipped to the workers
    as a py_module (they import `fillscope` from it); nothing starts when every job finished before."""
    from comfy import model_management

    runtime_env = {"py_modules": [str(ENGINE_DIR)], "excludes": ["__pycache__", "*.pyc"]}
    return engine.cluster.run_batch_on_ray(jobs, out, address="local" if run_on == "ray local" else address,
                                           workers=workers, device=device, max_resident=max_resident,
                                           progress=False, on_result=on_result, runtime_env=runtime_env,
                                           connect_timeout=connect_timeout,
                                           check_cancel=model_management.throw_exception_if_processing_interrupted)


def finished_images(jobs, summary: dict, out: Path):
    """(IMAGE [N,H,W,3]: the manifest's finished jobs of the first one's size; the ids of the finished jobs, at most
    MAX_IMAGES, whatever their size (the node's preview); warnings). One black 64x64 image when none finished."""
    import torch

    from ..fillscope.batch.images import load_image

    ok = {r["id"] for r in summary["results"] if r["status"] == "ok"} | set(summary["skipped_ids"])
    ids = [j.id for j in jobs if j.id in ok and (out / f"{j.id}.png").is_file()]
    warnings = []
    if len(ids) > MAX_IMAGES:
        warnings.append(f"{len(ids)} jobs finished: the images output holds the first {MAX_IMAGES} (all are in "
                        f"{out})")
        ids = ids[:MAX_IMAGES]
    images, other = [], []
    for job_id in ids:
        image = load_image(str(out / f"{job_id}.png"))[0]
        if images and image.shape != images[0].shape:
            other.append(job_id)
            continue
        images.append(image)
    if other:
        h, w = images[0].shape[1:3]
        warnings.append(f"the images output holds the {w}x{h} images only (the first finished job's size); "
                        f"{len(other)} of another size left out: {', '.join(other[:10])}"
                        + (", ..." if len(other) > 10 else ""))
    if not images:  # ComfyUI's image nodes take no empty batch (SaveImage / PreviewImage index image 0)
        warnings.append("no job finished: the images output is one black 64x64 image")
        return torch.zeros((1, 64, 64, 3)), [], warnings
    return torch.cat(images), ids, warnings


NODES = [FillScopeBatch]
