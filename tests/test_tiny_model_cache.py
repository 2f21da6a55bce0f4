"""The per-process cache of the tiny model folders (tiny_models.cached_folder_builder): a cached copy is the folder the
builder writes, byte for byte; each caller gets a copy of its own; the key holds every argument and the module configs
a test may swap; the cache is this process's own and goes with it.

Timings are printed (first call, second call, fresh build), never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tiny_flux
import tiny_klein
import tiny_models
import tiny_sd3
from tiny_models import folder_cache_root, fresh_folders, swapped, tokenizers_available

REPO = Path(__file__).resolve().parent.parent

# outside CI only: under CI=true conftest.py turns this skip into a failure (`make setup` installs .comfyui)
needs_tokenizers = pytest.mark.skipif(
    not tokenizers_available(),
    reason="ComfyUI tokenizer files not found (set COMFYUI_PATH or install .comfyui)",
)

# every folder builder once (klein's base: its distilled twin shares the entry and is written from it); that every
# option is in the key is test_every_argument_that_changes_the_folder_is_in_the_key's
CASES = {
    "flux-fill": (tiny_flux.build_tiny_flux_fill_folder, {}),
    "sd3": (tiny_sd3.build_tiny_sd3_folder, {}),
    "sd3-controlnet-old-config": (tiny_sd3.build_tiny_sd3_controlnet_folder, {"config_has_extra_channels": False}),
    "klein-base": (tiny_klein.build_tiny_klein_folder, {"distilled": False}),
}


@pytest.fixture(autouse=True)
def cache_on(monkeypatch):
    """The cache as the suite runs it, even where FILLSCOPE_TINY_MODEL_CACHE=0 switches it off."""
    monkeypatch.delenv(tiny_models.FOLDER_CACHE_ENV, raising=False)


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``: its relative path -> its bytes (symlinks refused: copies must be files)."""
    out = {}
    for path in sorted(Path(folder).rglob("*")):
        assert not path.is_symlink(), path
        if path.is_file():
            out[path.relative_to(folder).as_posix()] = path.read_bytes()
    return out


def timed(build, dst: Path, **options) -> tuple[Path, float]:
    t = time.perf_counter()
    out = build(dst, seed=0, **options)
    return out, time.perf_counter() - t


@needs_tokenizers
@pytest.mark.parametrize("case", list(CASES))
def test_a_cached_copy_is_the_fresh_build_byte_for_byte(case, tmp_path):
    build, options = CASES[case]
    first, t_first = timed(build, tmp_path / "first", **options)
    second, t_second = timed(build, tmp_path / "second", **options)
    with fresh_folders():
        fresh, t_fresh = timed(build, tmp_path / "fresh", **options)
    print(f"\n[{case}] first call {t_first:.2f} s, second call {t_second:.2f} s, fresh build {t_fresh:.2f} s")
    assert (first, second, fresh) == (tmp_path / "first", tmp_path / "second", tmp_path / "fresh")
    want = files(fresh)
    assert len(want) > 1 and any(name.endswith(".safetensors") for name in want)
    assert files(first) == want
    assert files(second) == want
    # copies, not links: each file of a copy is its own inode
    for name in want:
        assert (first / name).stat().st_ino != (second / name).stat().st_ino
        assert (first / name).stat().st_nlink == 1


def test_a_copy_changed_by_its_caller_leaves_the_next_copy_alone(tmp_path):
    from safetensors.torch import load_file, save_file

    build = tiny_sd3.build_tiny_sd3_controlnet_folder
    a = build(tmp_path / "a", seed=0)
    want = files(a)
    weights = a / "diffusion_pytorch_model.safetensors"
    state = load_file(str(weights))
    save_file({k: v * 0 + 1 for k, v in state.items()}, str(weights))  # safetensors rewrites the same path
    (a / "config.json").write_text("{}")
    (a / "extra.txt").write_text("x")
    b = build(tmp_path / "b", seed=0)
    assert files(b) == want
    weights.unlink()
    (a / "config.json").unlink()
    c = build(tmp_path / "c", seed=0)
    assert files(c) == want


def test_a_copy_into_an_existing_folder_overwrites_what_the_builder_writes_and_keeps_the_rest(tmp_path):
    build = tiny_sd3.build_tiny_sd3_controlnet_folder
    dst = tmp_path / "cn"
    dst.mkdir()
    (dst / "config.json").write_text("stale")
    (dst / "notes.txt").write_text("kept")
    with fresh_folders():
        want = files(build(tmp_path / "fresh", seed=0))
    got = files(build(dst, seed=0))
    assert got.pop("notes.txt") == b"kept"
    assert got == want


def test_every_argument_that_changes_the_folder_is_in_the_key(tmp_path):
    build = tiny_sd3.build_tiny_sd3_controlnet_folder
    variants = {"seed 0": ((), {"seed": 0}), "seed 1": ((), {"seed": 1}), "positional seed 1": ((1,), {}),
                "narrow": ((), {"seed": 0, "narrow": True}),
                "old config": ((), {"seed": 0, "config_has_extra_channels": False})}
    seen = {}
    for i, (name, (args, kwargs)) in enumerate(variants.items()):
        seen[name] = files(build(tmp_path / f"cached{i}", *args, **kwargs))
        with fresh_folders():
            assert seen[name] == files(build(tmp_path / f"fresh{i}", *args, **kwargs)), name
    assert seen["positional seed 1"] == seen["seed 1"]
    distinct = [seen[k] for k in ("seed 0", "seed 1", "narrow", "old config")]
    assert all(distinct[i] != distinct[j] for i in range(4) for j in range(i + 1, 4))


def test_a_swapped_module_config_gets_a_build_of_its_own(tmp_path):
    """native_templates / test_native_conditioning swap tiny_sd3's configs around a build: never the cached copy of
    the unswapped folder, and the swapped build never served once the config is back."""
    build = tiny_sd3.build_tiny_sd3_controlnet_folder
    plain = files(build(tmp_path / "plain", seed=0))
    wide = {**tiny_sd3.TINY_SD3_CONTROLNET_CONFIG, "num_layers": 2}
    with swapped(tiny_sd3, "TINY_SD3_CONTROLNET_CONFIG", wide):
        swapped_copy = files(build(tmp_path / "swapped", seed=0))
        with fresh_folders():
            assert swapped_copy == files(build(tmp_path / "swapped_fresh", seed=0))
    assert json.loads(swapped_copy["config.json"])["num_layers"] == 2
    assert files(build(tmp_path / "plain_again", seed=0)) == plain
    assert json.loads(plain["config.json"])["num_layers"] == 23
    # a config edited in place counts too
    tiny_sd3.TINY_SD3_CONTROLNET_CONFIG["num_layers"] = 2
    try:
        assert files(build(tmp_path / "edited", seed=0)) == swapped_copy
    finally:
        tiny_sd3.TINY_SD3_CONTROLNET_CONFIG["num_layers"] = 23


def test_an_unhashable_argument_builds_afresh(tmp_path):
    calls = []

    @tiny_models.cached_folder_builder
    def build(dst, seed=0, *, extra=None):
        calls.append(seed)
        Path(dst).mkdir(parents=True, exist_ok=True)
        (Path(dst) / "out.txt").write_text(f"{seed} {extra}")
        return Path(dst)

    build(tmp_path / "a", seed=3, extra=[1])
    build(tmp_path / "b", seed=3, extra=[1])
    assert calls == [3, 3] and (tmp_path / "b" / "out.txt").read_text() == "3 [1]"
    build(tmp_path / "c", seed=4)
    build(tmp_path / "d", seed=4)
    assert calls == [3, 3, 4] and (tmp_path / "d" / "out.txt").read_text() == "4 None"


def test_a_failing_build_is_not_cached_and_fails_on_dst_as_before(tmp_path):
    calls = []

    @tiny_models.cached_folder_builder
    def build(dst, seed=0):
        calls.append(Path(dst))
        Path(dst).mkdir(parents=True, exist_ok=True)
        (Path(dst) / "partial.txt").write_text("written before the error")
        if len(calls) < 3:
            raise RuntimeError("no tokenizer")
        return Path(dst)

    with pytest.raises(RuntimeError, match="no tokenizer"):
        build(tmp_path / "a", seed=0)
    assert calls[1] == tmp_path / "a" and (tmp_path / "a" / "partial.txt").is_file()  # the caller's dst as before
    assert not calls[0].exists()  # the failed cache entry is removed
    build(tmp_path / "b", seed=0)  # builds now: cached
    build(tmp_path / "c", seed=0)
    assert len(calls) == 3 and (tmp_path / "c" / "partial.txt").is_file()


def test_an_entry_removed_behind_the_cache_is_built_again(tmp_path):
    import shutil

    build = tiny_sd3.build_tiny_sd3_controlnet_folder
    want = files(build(tmp_path / "a", seed=0))
    for entry in folder_cache_root().iterdir():
        if entry.name.endswith("build_tiny_sd3_controlnet_folder"):
            (entry / "config.json").write_text("{}")  # a changed size: not the entry written
    assert files(build(tmp_path / "b", seed=0)) == want
    shutil.rmtree(folder_cache_root())  # e.g. a Ray module's TMPDIR, removed with it
    assert files(build(tmp_path / "c", seed=0)) == want
    assert folder_cache_root().is_dir()


def test_the_cache_is_this_process_own_outside_the_repository_and_removed_at_exit(tmp_path):
    root = folder_cache_root()
    assert str(os.getpid()) in root.name
    assert REPO not in root.resolve().parents
    # a second interpreter (an xdist worker, a subprocess): a cache of its own, gone when it exits
    code = (f"import sys; sys.path.insert(0, {str(REPO / 'tests')!r})\n"
            "from pathlib import Path\n"
            "import tiny_models\n"
            "@tiny_models.cached_folder_builder\n"
            "def build(dst, seed=0):\n"
            "    Path(dst).mkdir(parents=True, exist_ok=True); (Path(dst) / 'f.txt').write_text(str(seed))\n"
            "    return Path(dst)\n"
            f"build({str(tmp_path / 'child')!r}, seed=5)\n"
            "print(tiny_models.folder_cache_root())\n")
    res = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    child_root = Path(res.stdout.strip().splitlines()[-1])
    assert child_root != root and child_root.name.startswith("fillscope-tiny-models-")
    assert not child_root.exists()  # removed when the child's interpreter exited
    assert (tmp_path / "child" / "f.txt").read_text() == "5"
    assert root.is_dir()
