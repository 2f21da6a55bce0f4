"""FillScope Batch in a real ComfyUI server: a manifest of tiny fp32 FLUX Fill and klein jobs in the server's input
folder, its models in the server's model folders, run through POST /prompt; the results in a sub-folder of the
output folder; a rerun skips them; paths outside ComfyUI's folders refused before anything runs, the server going
on; and (on a server of its own whose HOME and TMPDIR are a temporary folder, for Ray's files) one run on a local
Ray cluster."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from comfy_server import ComfyExecutionError, ComfyServer

pytestmark = pytest.mark.server

BATCH = "FillScopeBatch"
H, W = 48, 64
IDS = ["flux-0", "flux-1", "klein-0", "klein-1"]


@pytest.fixture(scope="module")
def server(served_models):
    return served_models


def write_inputs(server, folder: str = "batches") -> Path:
    """The image and mask in <input>/<folder>."""
    where = server.input_dir / folder
    where.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, size=(H, W, 3), dtype=np.uint8), "RGB").save(where / "room.png")
    mask = np.zeros((H, W), dtype=np.uint8)
    mask[8:40, 16:48] = 255
    Image.fromarray(mask, "L").save(where / "room_mask.png")
    return where


def job_lines(server) -> list[dict]:
    """2 FLUX Fill jobs on the diffusers folder (named from the manifest's folder, climbing with '..'), 2 klein 4B
    jobs on the single files (absolute paths; no tokenizers named: ComfyUI's Qwen tokenizer)."""
    models = server.models_dir
    common = {"image": "room.png", "mask": "room_mask.png", "prompt": "a red brick fireplace", "steps": 2,
              "dtype": "fp32"}
    klein = {"qwen3": str(models / "text_encoders/qwen_3_4b.safetensors"),
             "transformer": str(models / "diffusion_models/flux-2-klein-4b.safetensors"),
             "vae": str(models / "vae/flux2-vae.safetensors")}
    flux = os.path.relpath(models / "diffusers/FLUX.1-Fill-dev", server.input_dir / "batches")
    return [{"id": "flux-0", "family": "flux-fill", "models": flux, "seed": 0, **common},
            {"id": "flux-1", "family": "flux-fill", "models": flux, "seed": 1, "guidance": 20.0, **common},
            {"id": "klein-0", "family": "klein-4b", "models": klein, "seed": 2, **common},
            {"id": "klein-1", "family": "klein-4b", "models": klein, "seed": 3, "grow": 2, **common}]


def write_manifest(server, name: str, lines: list[dict]) -> str:
    path = server.input_dir / "batches" / name
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f"batches/{name}"


def batch_prompt(manifest: str, output_folder: str, **advanced) -> dict:
    """The batch node alone, and a PreviewImage on its images output."""
    inputs = {"manifest": manifest, "output_folder": output_folder, "run_on": "this process", **advanced}
    return {"1": {"class_type": BATCH, "inputs": inputs},
            "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 1]}}}


def summary_of(entry: dict) -> str:
    return entry["outputs"]["1"]["text"][0]


def logged(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "batch.jsonl").read_text().splitlines()]


def error_of(server, prompt: dict) -> str:
    """The execution error's message of a prompt that must fail."""
    with pytest.raises(ComfyExecutionError) as err:
        server.run(prompt, timeout=300)
    message = [data for kind, data in err.value.entry["status"]["messages"] if kind == "execution_error"][0]
    assert message["node_type"] == BATCH, message
    return message["exception_message"]


@pytest.fixture(scope="module")
def manifest(server) -> str:
    write_inputs(server)
    return write_manifest(server, "catalogue.jsonl", job_lines(server))


@pytest.fixture(scope="module")
def first_run(server, manifest):
    entry = server.run(batch_prompt(manifest, "fillscope_batch"), timeout=600)
    return entry, server.output_dir / "fillscope_batch"


def test_object_info_lists_the_batch_node_as_an_output_node_with_its_advanced_inputs(server):
    info = server.object_info()[BATCH]
    assert info["input_order"]["required"] == ["manifest", "output_folder", "run_on"]
    assert info["input_order"]["optional"] == ["ray_address", "connect_timeout", "workers", "keep_going",
                                               "max_resident", "device"]
    for name in info["input_order"]["optional"]:
        assert info["input"]["optional"][name][1]["advanced"] is True, name
    assert info["input"]["required"]["run_on"][1]["options"] == ["this process", "ray local", "ray cluster"]
    assert info["output"] == ["STRING", "IMAGE"]
    assert info["output_node"] is True and info["category"] == "FillScope/batch"


def test_a_manifest_runs_every_job_into_the_output_folder_and_gives_its_images(server, first_run):
    entry, out = first_run
    summary = summary_of(entry)
    assert summary.startswith("4 job(s): 4 ok, 0 failed, 0 skipped"), summary
    assert str(out) in summary
    lines = logged(out)
    assert [x["id"] for x in lines] == IDS and all(x["status"] == "ok" for x in lines), lines
    for job_id in IDS:
        assert np.array(Image.open(out / f"{job_id}.png")).shape == (H, W, 3)
        doc = json.loads((out / f"{job_id}.shapes.json").read_text())
        assert doc["job"]["id"] == job_id and doc["schema"] == "fillscope.shapes/1"
    preview = entry["outputs"]["2"]["images"]  # the IMAGE output: one image a job, in manifest order
    assert len(preview) == len(IDS)
    shown = entry["outputs"]["1"]["images"]  # the node's own preview: the files in the output folder
    assert [(x["filename"], x["subfolder"], x["type"]) for x in shown] == [(f"{i}.png", "fillscope_batch", "output")
                                                                           for i in IDS]
    source = np.array(Image.open(server.input_dir / "batches/room.png"))
    keep = np.ones((H, W), dtype=bool)
    keep[8 - 4:40 + 4, 16 - 4:48 + 4] = False  # the mask, grown by more than klein-1's grow
    for job_id in IDS:  # pasted back: the pixels outside the mask are the source's
        assert np.array_equal(np.array(Image.open(out / f"{job_id}.png"))[keep], source[keep]), job_id


def test_queueing_the_same_batch_again_skips_every_finished_job(server, manifest, first_run):
    _, out = first_run
    before = {i: (out / f"{i}.png").stat().st_mtime_ns for i in IDS}
    entry = server.run(batch_prompt(manifest, "fillscope_batch"), timeout=300)
    assert summary_of(entry).startswith("4 job(s): 0 ok, 0 failed, 4 skipped"), summary_of(entry)
    assert len(logged(out)) == len(IDS)  # nothing appended
    assert {i: (out / f"{i}.png").stat().st_mtime_ns for i in IDS} == before  # nothing rewritten
    assert len(entry["outputs"]["2"]["images"]) == len(IDS)  # the finished images still come out


def test_a_manifest_outside_the_input_folder_is_refused_and_the_server_runs_the_next_prompt(server, manifest,
                                                                                            first_run):
    (server.input_dir.parent / "x.jsonl").write_text(json.dumps(job_lines(server)[0]) + "\n")
    message = error_of(server, batch_prompt("../x.jsonl", "fillscope_refused"))
    assert "input 'manifest'" in message and "outside ComfyUI's input folder" in message, message
    assert "Fix: give the manifest's path relative to ComfyUI's input folder" in message, message
    assert not (server.output_dir / "fillscope_refused").exists()
    entry = server.run(batch_prompt(manifest, "fillscope_batch"), timeout=300)
    assert "4 skipped" in summary_of(entry)


def test_a_job_reading_a_model_or_image_outside_comfyuis_folders_stops_the_batch_before_anything_runs(
        server, manifest, first_run, tmp_path):
    lines = job_lines(server)
    outside = tmp_path / "FLUX.1-Fill-dev"
    shutil.copytree(server.models_dir / "diffusers/FLUX.1-Fill-dev", outside)
    lines[1]["models"] = str(outside)  # a real model folder, but not one of ComfyUI's
    lines[2]["image"] = "../../room.png"  # climbs out of the input folder
    name = write_manifest(server, "outside.jsonl", lines)
    message = error_of(server, batch_prompt(name, "fillscope_outside"))
    assert "input 'manifest'" in message and "nothing has run" in message, message
    assert f'line 2, job "flux-1", field "models.transformer": \'{outside}\' is outside ComfyUI\'s model folders' \
        in message, message
    assert 'line 3, job "klein-0", field "image"' in message and "outside ComfyUI's input folder" in message, message
    assert "Fix: put the images and masks in ComfyUI's input folder" in message, message
    assert not (server.output_dir / "fillscope_outside").exists()  # not even the folder: nothing ran
    entry = server.run(batch_prompt(manifest, "fillscope_batch"), timeout=300)
    assert "4 skipped" in summary_of(entry)


def test_a_linked_model_folder_is_accepted_named_from_the_manifest_or_absolutely_as_the_loaders_accept_it(
        server, manifest, tmp_path):
    """A link inside models/diffusers to a model folder elsewhere: named climbing from the manifest's folder with
    '..' or by its absolute path, both run (the loaders' rule: links in the folder followed); a path that escapes the
    folders is refused both ways, and so is one that climbs out through the link ('<link>/../x')."""
    elsewhere = tmp_path / "weights"
    shutil.copytree(server.models_dir / "diffusers/FLUX.1-Fill-dev", elsewhere / "FLUX.1-Fill-dev")
    shutil.copytree(server.models_dir / "diffusers/FLUX.1-Fill-dev", elsewhere / "beside")
    link = server.models_dir / "diffusers/fs-linked-flux"
    link.symlink_to(elsewhere / "FLUX.1-Fill-dev", target_is_directory=True)
    try:
        first = job_lines(server)[0]
        relative = os.path.relpath(link, server.input_dir / "batches")
        assert relative.startswith("..") and os.path.realpath(link) != str(link)
        lines = [{**first, "id": "linked-relative", "models": relative},
                 {**first, "id": "linked-absolute", "models": str(link)}]
        name = write_manifest(server, "linked.jsonl", lines)
        entry = server.run(batch_prompt(name, "fillscope_linked"), timeout=600)
        assert summary_of(entry).startswith("2 job(s): 2 ok, 0 failed"), summary_of(entry)
        out = server.output_dir / "fillscope_linked"
        assert np.array_equal(np.array(Image.open(out / "linked-relative.png")),
                              np.array(Image.open(out / "linked-absolute.png")))  # the same weights, the same seed

        escapes = [{**first, "id": "out-relative", "models": os.path.relpath(elsewhere / "beside",
                                                                            server.input_dir / "batches")},
                   {**first, "id": "out-absolute", "models": str(elsewhere / "beside")},
                   {**first, "id": "out-through-link", "models": str(link) + "/../beside"}]
        name = write_manifest(server, "escapes.jsonl", escapes)
        message = error_of(server, batch_prompt(name, "fillscope_escapes"))
        assert "input 'manifest'" in message and "names 12 path(s)" in message, message  # 4 components a job
        for n, job in enumerate(escapes, 1):
            assert f'line {n}, job "{job["id"]}", field "models.transformer"' in message, message
        assert not (server.output_dir / "fillscope_escapes").exists()
    finally:
        link.unlink()


def test_an_output_folder_outside_the_output_folder_is_refused(server, manifest, first_run):
    for folder in ("../escaped", "/tmp/escaped", ""):
        message = error_of(server, batch_prompt(manifest, folder))
        assert "input 'output_folder'" in message and "Fix: give a sub-folder of ComfyUI's output folder" in message
    assert not (server.output_dir.parent / "escaped").exists()


def test_keep_going_lets_a_job_with_a_bad_line_fail_alone_and_no_finished_job_gives_a_black_image(server, manifest,
                                                                                                    first_run):
    lines = job_lines(server)[:2]
    lines[1]["no_such_option"] = 1
    name = write_manifest(server, "one_bad.jsonl", lines)
    message = error_of(server, batch_prompt(name, "fillscope_keep_going"))
    assert "input 'manifest'" in message and 'field "no_such_option"' in message, message
    entry = server.run(batch_prompt(name, "fillscope_keep_going", keep_going=True), timeout=300)
    summary = summary_of(entry)
    assert summary.startswith("2 job(s): 1 ok, 1 failed, 0 skipped") and "FAILED flux-1" in summary, summary
    assert len(entry["outputs"]["2"]["images"]) == 1
    name = write_manifest(server, "all_bad.jsonl", lines[1:])
    entry = server.run(batch_prompt(name, "fillscope_all_bad", keep_going=True), timeout=300)
    summary = summary_of(entry)
    assert summary.startswith("1 job(s): 0 ok, 1 failed") and summary.endswith(
        "warning: no job finished: the images output is one black 64x64 image"), summary
    assert len(entry["outputs"]["2"]["images"]) == 1 and entry["outputs"]["1"]["images"] == []


def test_images_of_another_size_than_the_first_job_are_left_out_of_the_images_output_with_a_warning(server, manifest,
                                                                                                     first_run):
    rng = np.random.default_rng(4)
    Image.fromarray(rng.integers(0, 256, size=(32, 48, 3), dtype=np.uint8), "RGB").save(
        server.input_dir / "batches/small.png")
    Image.fromarray(np.full((32, 48), 255, dtype=np.uint8), "L").save(server.input_dir / "batches/small_mask.png")
    small = {**job_lines(server)[0], "id": "small", "image": "small.png", "mask": "small_mask.png"}
    name = write_manifest(server, "sizes.jsonl", [job_lines(server)[0], small])
    entry = server.run(batch_prompt(name, "fillscope_sizes"), timeout=300)
    summary = summary_of(entry)
    assert summary.startswith("2 job(s): 2 ok") and summary.endswith(
        "warning: the images output holds the 64x48 images only (the first finished job's size); 1 of another size "
        "left out: small"), summary
    assert len(entry["outputs"]["2"]["images"]) == 1
    assert [x["filename"] for x in entry["outputs"]["1"]["images"]] == ["flux-0.png", "small.png"]  # the preview


def test_cancel_stops_the_batch_between_jobs_and_the_rerun_runs_only_the_rest(server, manifest, first_run):
    out = server.output_dir / "fillscope_cancelled"
    prompt_id = server.queue(batch_prompt(manifest, "fillscope_cancelled"))
    deadline = time.monotonic() + 300
    while not ((out / "batch.jsonl").is_file() and (out / "batch.jsonl").read_text().strip()):
        assert time.monotonic() < deadline, "no job finished"
        time.sleep(0.05)
    server.interrupt()
    entry = server.wait(prompt_id, timeout=300, raise_on_error=False)
    kinds = [kind for kind, _ in entry["status"]["messages"]]
    assert "execution_interrupted" in kinds, kinds
    finished = [x["id"] for x in logged(out)]
    assert 1 <= len(finished) < len(IDS), finished
    assert sorted(p.stem for p in out.glob("*.png")) == sorted(finished)  # no image without its line
    entry = server.run(batch_prompt(manifest, "fillscope_cancelled"), timeout=300)
    rest = len(IDS) - len(finished)
    assert summary_of(entry).startswith(f"4 job(s): {rest} ok, 0 failed, {len(finished)} skipped"), summary_of(entry)


@pytest.fixture(scope="module")
def ray_server(served_models):
    """A server of its own with HOME, TMPDIR and RAY_TMPDIR in a short temporary folder (Ray's files, sockets and
    logs), reading the session server's model and input folders (extra_model_paths, --input-directory)."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'fillscope[cluster]')")
    folder = Path(tempfile.mkdtemp(prefix="fsray-", dir="/tmp"))
    for name in ("home", "ray", "tmp"):
        (folder / name).mkdir()
    env = dict(os.environ, HOME=str(folder / "home"), RAY_TMPDIR=str(folder / "ray"), TMPDIR=str(folder / "tmp"))
    server = ComfyServer(env=env)
    server.models_dir = served_models.models_dir
    server.input_dir = served_models.input_dir
    try:
        server.start()
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def test_run_on_ray_local_gives_the_in_process_images(ray_server, manifest, first_run):
    _, in_process = first_run
    prompt = batch_prompt(manifest, "fillscope_ray", workers=1)
    prompt["1"]["inputs"]["run_on"] = "ray local"
    entry = ray_server.run(prompt, timeout=300)
    out = ray_server.output_dir / "fillscope_ray"
    assert summary_of(entry).startswith("4 job(s): 4 ok, 0 failed, 0 skipped"), summary_of(entry)
    lines = logged(out)
    assert sorted(x["id"] for x in lines) == sorted(IDS) and all(x["worker"].startswith("node ") for x in lines)
    for job_id in IDS:  # the same pixels as the batch in ComfyUI's process
        assert np.array_equal(np.array(Image.open(out / f"{job_id}.png")),
                              np.array(Image.open(in_process / f"{job_id}.png"))), job_id
