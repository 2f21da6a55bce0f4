"""The safetensors header of a single file (8-byte length + JSON; never the tensor data, never pickle), and the
refusals that come before it: pickles by suffix or by their first bytes, GGUF/ONNX/TensorRT files, truncated or
malformed files."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import FillScopeInputError

SAFE_SUFFIXES = (".safetensors", ".sft")
PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".pkl", ".pickle")
OTHER_SUFFIXES = {".gguf": "a GGUF quantised file", ".onnx": "an ONNX graph", ".engine": "a TensorRT engine"}
WEIGHT_SUFFIXES = SAFE_SUFFIXES + PICKLE_SUFFIXES + tuple(OTHER_SUFFIXES)
MAX_HEADER = 256 * 1024 * 1024

DTYPE_NAMES = {"F64": "fp64", "F32": "fp32", "F16": "fp16", "BF16": "bf16", "F8_E4M3": "fp8_e4m3fn", "F8_E5M2": "fp8_e5m2",
               "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
FP8_CODES = ("F8_E4M3", "F8_E5M2")


@dataclass(frozen=True)
class TensorInfo:
    dtype: str  # safetensors code: F32, BF16, F8_E4M3, ...
    shape: tuple


def is_single_file(source) -> bool:
    """A file, or a path that names one by its suffix (so a missing or pickled file gets the file errors)."""
    s = str(source)
    return os.path.isfile(s) or (not os.path.isdir(s) and s.lower().endswith(WEIGHT_SUFFIXES))


def unreadable(input_name: str, path: Path, problem: str) -> FillScopeInputError:
    return FillScopeInputError(
        input_name,
        f"'{path.name}' could not be read: {problem}",
        "the download is probably incomplete or corrupt: re-download the file (its size should match the one "
        "published).",
    )


def refuse_unsafe_suffix(path: Path, input_name: str) -> None:
    """.ckpt/.pt/.bin/... are pickles (loading one can run code): refused by name, before anything is read."""
    suffix = path.suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        raise FillScopeInputError(
            input_name,
            f"'{path.name}' is a pickled PyTorch checkpoint ({suffix}); FillScope never unpickles (loading a pickle "
            "can run arbitrary code) and loads only .safetensors files.",
            "download the .safetensors version of this model (every model FillScope runs is published as "
            "safetensors), or convert it in a trusted environment.",
        )
    if suffix in OTHER_SUFFIXES:
        raise FillScopeInputError(
            input_name, f"'{path.name}' is {OTHER_SUFFIXES[suffix]}; FillScope loads only .safetensors files.",
            "use the model's .safetensors release.",
        )
    if suffix not in SAFE_SUFFIXES:
        raise FillScopeInputError(
            input_name, f"'{path.name}' is not a .safetensors file.", "choose a .safetensors file or a diffusers folder.",
        )


def require_file(path: Path, input_name: str) -> None:
    """Refused suffixes first, then existence."""
    refuse_unsafe_suffix(path, input_name)
    if not path.is_file():
        raise FillScopeInputError(input_name, f"file '{path}' does not exist.", "choose a file listed in the menu.")


def _refuse_disguised(head: bytes, path: Path, input_name: str) -> None:
    """A pickle, zip or GGUF file renamed to .safetensors, from its first bytes."""
    if head[:2] == b"PK":
        raise FillScopeInputError(
            input_name, f"'{path.name}' is a zip archive (a pickled PyTorch checkpoint renamed to .safetensors), "
            "not a safetensors file; FillScope never unpickles.", "download the real .safetensors file.")
    if head[:1] == b"\x80":
        raise FillScopeInputError(
            input_name, f"'{path.name}' is a Python pickle renamed to .safetensors, not a safetensors file; "
            "FillScope never unpickles.", "download the real .safetensors file.")
    if head[:4] == b"GGUF":
        raise FillScopeInputError(input_name, f"'{path.name}' is a GGUF file renamed to .safetensors.",
                                  "use the model's .safetensors release.")


def read_header(path: Path, input_name: str = "source") -> tuple[dict, dict]:
    """(tensors: name -> TensorInfo, metadata) from a safetensors header; checks the file holds the data the
    header describes (a truncated download fails here, before anything is loaded)."""
    path = Path(path)
    require_file(path, input_name)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise unreadable(input_name, path, f"it is only {size} bytes long (empty or truncated).")
        if f.read(1) != b"{":  # a safetensors header is JSON: its length can start with pickle's or zip's bytes
            _refuse_disguised(head, path, input_name)
        f.seek(8)
        n = int.from_bytes(head, "little")
        if n > size - 8:
            raise unreadable(input_name, path, f"its header says {n:,} bytes of JSON but the file holds only {size:,} "
                                               "bytes (truncated, or not a safetensors file).")
        if n > MAX_HEADER or n < 2:
            raise unreadable(input_name, path, f"its header length {n:,} is not a safetensors header.")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("header is not an object")
    except (UnicodeDecodeError, ValueError) as e:
        raise unreadable(input_name, path, f"its header is not valid safetensors JSON ({e}).") from None
    metadata = header.pop("__metadata__", None) or {}
    tensors = {}
    end = 0
    try:
        for name, entry in header.items():
            tensors[name] = TensorInfo(str(entry["dtype"]), tuple(int(s) for s in entry["shape"]))
            begin, stop = (int(x) for x in entry["data_offsets"])
            if stop < begin:
                raise ValueError(f"bad offsets for {name}")
            end = max(end, stop)
    except (KeyError, TypeError, ValueError) as e:
        raise unreadable(input_name, path, f"its header is malformed ({e}).") from None
    if 8 + n + end > size:
        raise unreadable(
            input_name, path,
            f"the file is truncated: its header describes {8 + n + end:,} bytes but the file has {size:,} "
            f"({(8 + n + end - size) / 2**20:,.1f} MiB missing).",
        )
    if not tensors:
        raise unreadable(input_name, path, "it holds no tensors.")
    return tensors, dict(metadata)
