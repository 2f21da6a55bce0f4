"""The engine's layering, checked from the source: its import graph has no cycle (function-level imports
counted), it does not know ComfyUI (no node titles or ids, no ComfyUI model/tokenizer folders or modules), and no
source file of the pack is over 600 lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENGINE = REPO / "fillscope"
NODES = REPO / "nodes"
MAX_LINES = 600


def _sources(root: Path, pattern: str = "*.py") -> list[Path]:
    return sorted(p for p in root.rglob(pattern) if "__pycache__" not in p.parts and p.is_file())


# ------------------------------------------------------------------------------------------------------------
# Import graph
# ------------------------------------------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def engine_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in _sources(ENGINE)}


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imported(name: str, path: Path, modules: dict) -> set[str]:
    """The engine modules `name` imports anywhere in its file (module level, functions, classes): the modules it
    names, and the packages Python initialises on the way to them (except the importer's own, already running)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named, passed = set(), set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from pkg import x`: the submodule pkg.x, or a name of pkg's __init__
            targets = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target for alias in node.names]
        else:
            continue
        for target in targets:
            named.add(target)
            passed.update(_ancestors(target))
    own = set(_ancestors(name))
    return {m for m in named | (passed - own) if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = engine_modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_reader_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "fillscope.checkpoints" in graph["fillscope.weights"]  # package __init__, from a relative import
    assert "fillscope.models" in graph["fillscope.checkpoints.assemble"]  # `from ..models import`
    assert "fillscope.placement" in graph["fillscope.fp8"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_engine_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_model_building_imports_neither_weights_nor_checkpoints():
    graph = import_graph()
    assert not {m for m in graph["fillscope.models"] if m.startswith(("fillscope.weights", "fillscope.checkpoints"))}


# ------------------------------------------------------------------------------------------------------------
# The engine does not know ComfyUI
# ------------------------------------------------------------------------------------------------------------


def node_names() -> set[str]:
    """Every node id and display name the node layer defines (NODE_ID/DISPLAY class attributes, node_id=/
    display_name= strings), those naming a FillScope node."""
    names = set()
    for path in _sources(NODES):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            values = []
            if isinstance(node, ast.Assign):
                values = [node.value for t in node.targets if isinstance(t, ast.Name) and t.id in ("NODE_ID", "DISPLAY")]
            elif isinstance(node, ast.keyword) and node.arg in ("node_id", "display_name"):
                values = [node.value]
            names |= {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)
                      and v.value.startswith("FillScope")}
    return names


# ComfyUI's model and tokenizer folders, its modules and its nodes, as the engine could name them: folder names
# as path segments or strings (a checkpoint's "text_encoders." key prefix and the engine's own checkpoints
# package are not folders), module imports and attribute paths, node titles and class names.
COMFY_PATTERNS = [
    r"\bdiffusion_models\b",
    r"""\btext_encoders(?=/|["'])""",
    r"""(?<![\w/.])checkpoints/|["']checkpoints["']""",
    r"\bmodels/(diffusers|checkpoints|diffusion_models|unet|text_encoders|clip|vae|controlnet|loras)\b",
    r"(?<![\w.])sd1_tokenizer\b",
    r"(?<![\w.])t5_tokenizer\b",
    r"\bfolder_paths\b",
    r"\bcomfy\.[a-z_]",
    r"\bcomfy_api\b",
    r"\bcustom_nodes\b",
    r"\bLoad (Checkpoint|Diffusion Model|ControlNet Model|CLIP Vision|CLIP|VAE)\b",
    r"\b(LoraLoader|CheckpointLoaderSimple|UNETLoader|DualCLIPLoader|TripleCLIPLoader|CLIPLoader|VAELoader)\b",
]


def test_node_names_are_collected():
    names = node_names()
    assert {"FillScopeLoadCLIPL", "FillScope Load CLIP-L", "FillScope Load VAE"} <= names
    assert not any(n == "shapes" for n in names)


# The command line's helper that finds ComfyUI's tokenizer folders for weights that bring none (layer 6, an entry
# point's): it names ComfyUI's folders (the node layer reads them from it) and imports nothing of ComfyUI.
FINDS_COMFYUI = {ENGINE / "comfyui_tokenizers.py"}


def test_the_engine_names_no_node_and_no_comfyui_folder():
    names = sorted(node_names(), key=len, reverse=True)
    patterns = [re.compile(p) for p in COMFY_PATTERNS]
    found = []
    for path in _sources(ENGINE, "*"):
        if path.suffix in (".pyc",) or path in FINDS_COMFYUI:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            hits = [name for name in names if name in line] + [m.group(0) for p in patterns for m in p.finditer(line)]
            if hits:
                found.append(f"{path.relative_to(REPO)}:{n}: {sorted(set(hits))}: {line.strip()[:120]}")
    assert not found, "the engine names ComfyUI's or the node layer's things:\n" + "\n".join(found)


# ------------------------------------------------------------------------------------------------------------
# File size
# ------------------------------------------------------------------------------------------------------------


def test_no_source_file_is_over_600_lines():
    long = {str(p.relative_to(REPO)): n for p in _sources(ENGINE) + _sources(NODES)
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines: {long}"


# The engine's layers, lowest first (docs/architecture.md draws them): a module may import its own layer and the
# ones below, never one above. Matched by the longest module-name prefix.
LAYERS = {
    "fillscope.errors": 0, "fillscope.specs": 0, "fillscope.observe": 0, "fillscope.bounds": 0, "fillscope.requirements": 0,
    "fillscope.models": 1, "fillscope.placement": 1, "fillscope.fp8": 1, "fillscope.checkpoints": 1,
    "fillscope.weights": 1,
    "fillscope.pixels": 1,  # IMAGE/MASK conventions and pixel helpers shared by masks and compositing/, below both
    "fillscope.resample": 1,  # resampling filters (lanczos, bicubic, bilinear, area, nearest) as PIL has them
    "fillscope.text": 2, "fillscope.vae": 2, "fillscope.masks": 2, "fillscope.lora": 2,
    "fillscope.compositing": 2,
    "fillscope.vae_tiles": 2,  # tiled VAE encode/decode: memory bounded by one tile (issue 23)
    "fillscope.condition": 3, "fillscope.sampling": 3, "fillscope.decode": 3,
    "fillscope.parallel": 3, "fillscope.speed": 3,
    "fillscope.meta_cache": 3,  # runs on meta weights: repeated functional ops answered from a cache of their shapes
    "fillscope.pipelines": 4,
    "fillscope.trace": 5, "fillscope.batch": 5, "fillscope.compare": 5,
    "fillscope.tiled": 5,  # large images by overlapping tiles: a family's `run` per tile, blended (issue 23)
    "fillscope.cli": 6, "fillscope.__main__": 6, "fillscope.comfyui_tokenizers": 6,
}


def layer_of(module: str) -> int:
    if module == "fillscope":  # the package itself: a version string, imports nothing
        return 6
    prefixes = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    assert prefixes, f"{module} has no layer: add it to LAYERS here and to docs/architecture.md"
    return LAYERS[max(prefixes, key=len)]


def test_every_engine_module_imports_only_its_layer_and_below():
    upward = [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
              for m, targets in import_graph().items() for t in targets if layer_of(t) > layer_of(m)]
    assert not upward, "\n".join(upward)
