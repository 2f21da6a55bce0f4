"""The Shapes Report's tables (fillscope/trace/summary.py) for graphs that are not a FillScope family's: records that
name no family (Inspect nodes on ComfyUI's own values) are tabled by their own tensors, never against a family's
boundary list with "not observed" rows; a wire record (nodes/wires.py) becomes one section per node, its outputs'
tensors and the calls made to the MODEL / CLIP / VAE on it."""

from __future__ import annotations

from fillscope.trace.summary import (
    FLUX_FILL_BOUNDARIES,
    boundary_rows,
    family_of,
    format_rows,
    format_sections,
    table_kind,
    wire_section,
)


def document(title: str, tensors: list[tuple[str, list[int]]], table: str | None = None) -> dict:
    record = {"id": title, "title": title, "facts": {}, "warnings": [],
              "tensors": [{"name": n, "shape": s, "dtype": "float32", "provenance": "measured", "device": "cpu"}
                          for n, s in tensors]}
    if table:
        record["table"] = table
    return {"schema": "fillscope.shapes/1", "node": record, "trail": []}


def test_records_that_name_no_family_are_tabled_by_their_own_tensors():
    docs = [document("Inspect", [("samples", [1, 16, 8, 8]), ("noise_mask", [1, 1, 64, 64])])]
    assert family_of(docs) is None and table_kind(docs) == "flux_fill"  # the CLI's default stays
    rows = boundary_rows(docs)
    assert [(r["boundary"], r["shape"]) for r in rows] == [("samples", [1, 16, 8, 8]), ("noise_mask", [1, 1, 64, 64])]
    assert all(r["provenance"] != "not observed" for r in rows)


def test_a_family_record_still_gets_its_boundary_list():
    docs = [document("FLUX Fill Sampler", [("latents.packed", [1, 4096, 64])], table="flux_fill")]
    rows = boundary_rows(docs)
    assert len(rows) == len(FLUX_FILL_BOUNDARIES) and any(r["provenance"] == "not observed" for r in rows)


def test_a_wire_record_becomes_a_section_of_its_outputs_and_the_calls_on_them():
    record = {"node": "39", "class_type": "DifferentialDiffusion", "cached": True, "outputs": [
        {"slot": 0, "type": "MODEL", "name": "MODEL", "is_list": False, "items": 1,
         "values": [{"kind": "MODEL", "tensors": [], "facts": {"class": "Flux", "model in channels": 96}}],
         "calls": [{"consumer": "3", "input": "model", "kind": "diffusion model", "part": "diffusion_model",
                    "calls": 2, "rows": [{"name": "x (diffusion model in)", "role": "input", "shape": [1, 96, 8, 8],
                                          "dtype": "float32", "device": "cpu"}]}]}]}
    section = wire_section(record)
    assert section["facts"] == {"cached": True, "MODEL class": "Flux", "MODEL model in channels": 96}
    (row,) = section["rows"]
    assert (row["boundary"], row["shape"], row["called_by"]) == (
        "MODEL -> diffusion_model: x (diffusion model in)", [1, 96, 8, 8], "3")
    text = format_sections([section])
    assert text.startswith("DifferentialDiffusion (node 39)") and "[1, 96, 8, 8]" in text


def test_a_loaders_record_without_tensors_tables_nothing_and_says_so():
    docs = [document("Load T5", [])]  # FillScope Load T5's shapes: facts, no tensor, no family
    assert boundary_rows(docs) == [] and format_rows([]) == "(no tensor recorded)"
