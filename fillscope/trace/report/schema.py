"""The report schema `fillscope.report/1` and its validator.

The report is the JSON-able dict the trace driver (fillscope/trace/run.py) produces and the renderer reads;
`validate_report` checks every key the renderer relies on, so a bad report fails up front with every problem
named by its path instead of with a KeyError halfway through rendering.
"""

from __future__ import annotations

import json
import math

SCHEMA = "fillscope.report/1"
MODELS = ("flux-fill", "sd3-controlnet-inpaint", "klein-4b", "klein-9b")
# "setting": a value the run was given (size, steps, ...), neither measured nor read from a config
PROVENANCES = ("measured", "estimated", "static-config", "setting")
DEVICES = ("cuda", "cpu", "meta")
UNITS = ("params", "bytes", "flop", "s", "shape", "count", "")
KINDS = ("input", "encoder", "assembly", "denoiser", "vae", "output")
PAGE_COUNT = 5  # pages.macro, .conditions, .denoiser, .micro and .vae: one HTML page each


class ReportSchemaError(ValueError):
    """The report dict does not follow `fillscope.report/1`; `.problems` lists every problem found, each
    starting with the path of the offending key (e.g. "report.pages.macro.edges[2]: missing key 'figure'")."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        shown = self.problems[:25]
        more = f"\n  ... and {len(self.problems) - 25} more" if len(self.problems) > 25 else ""
        super().__init__(f"invalid {SCHEMA} report ({len(self.problems)} problem(s)):\n  "
                         + "\n  ".join(shown) + more)


def is_finite_number(v) -> bool:
    """A strict-JSON number: int or float, not bool, not NaN/Infinity."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_json_int(v) -> bool:
    """An int that is not a bool (True is an int to Python, not to the schema)."""
    return isinstance(v, int) and not isinstance(v, bool)


class _Checker:
    """Typed look-ups that record a problem and carry on, so one validation run names every problem."""

    def __init__(self):
        self.problems: list[str] = []

    def bad(self, path: str, msg: str) -> None:
        self.problems.append(f"{path}: {msg}")

    def obj(self, parent, key, path, *, nullable=False):
        """parent[key] as a dict (or None when nullable and null); records a problem otherwise."""
        if not isinstance(parent, dict):
            return None
        if key not in parent:
            self.bad(path, f"missing key '{key}'")
            return None
        v = parent[key]
        if v is None and nullable:
            return None
        if not isinstance(v, dict):
            self.bad(f"{path}.{key}", f"expected an object, got {type(v).__name__}")
            return None
        return v

    def arr(self, parent, key, path, *, nonempty=False):
        if not isinstance(parent, dict):
            return []
        if key not in parent:
            self.bad(path, f"missing key '{key}'")
            return []
        v = parent[key]
        if not isinstance(v, list):
            self.bad(f"{path}.{key}", f"expected a list, got {type(v).__name__}")
            return []
        if nonempty and not v:
            self.bad(f"{path}.{key}", "must not be empty")
        return v

    def val(self, parent, key, path, kind, *, nullable=False, choices=None):
        """kind: 'str' | 'int' | 'num' | 'bool' | 'any'."""
        if not isinstance(parent, dict):
            return None
        if key not in parent:
            self.bad(path, f"missing key '{key}'")
            return None
        v = parent[key]
        if v is None and nullable:
            return None
        ok = {"str": lambda x: isinstance(x, str), "int": is_json_int, "num": is_finite_number,
              "bool": lambda x: isinstance(x, bool), "any": lambda x: True}[kind](v)
        if not ok:
            want = {"str": "a string", "int": "an integer", "num": "a finite number", "bool": "true/false",
                    "any": "a value"}[kind]
            self.bad(f"{path}.{key}", f"expected {want}{' or null' if nullable else ''}, got {v!r:.60}")
            return None
        if choices is not None and v not in choices:
            self.bad(f"{path}.{key}", f"{v!r} is not one of {', '.join(map(repr, choices))}")
            return None
        return v

    def prov(self, parent, path, *, device_key=True, default_device=None):
        p = self.val(parent, "provenance", path, "str", choices=PROVENANCES)
        if device_key and isinstance(parent, dict) and ("device" in parent or default_device is None):
            d = self.val(parent, "device", path, "str", choices=DEVICES + ("",))
        else:
            d = default_device
        if p == "measured" and d == "":
            self.bad(f"{path}.device", "a measured value must name the device it was measured on (cuda/cpu/meta)")


def validate_report(report) -> None:
    """Raise ReportSchemaError (a ValueError) listing every problem, or return None.

    Beyond the keys of the schema it checks: every figure referenced by a page exists; edges join existing
    nodes; a stage's `count` equals its number of listed blocks; shape figures hold lists of integers;
    measured figures name their device; the whole dict is strict JSON (no NaN/Infinity)."""
    c = _Checker()
    if not isinstance(report, dict):
        raise ReportSchemaError([f"report: expected a dict, got {type(report).__name__}"])
    c.val(report, "schema", "report", "str", choices=(SCHEMA,))
    c.val(report, "model", "report", "str", choices=MODELS)
    c.val(report, "title", "report", "str")

    run = c.obj(report, "run", "report")
    if run is not None:
        for k in ("height", "width", "batch", "steps_traced"):
            c.val(run, k, "report.run", "int")
        for k in ("dtype", "device_name", "weights", "python", "torch", "diffusers", "transformers", "created"):
            c.val(run, k, "report.run", "str")
        c.val(run, "device", "report.run", "str", choices=DEVICES)
    run_device = run.get("device") if isinstance(run, dict) else None

    figures = c.obj(report, "figures", "report") or {}
    for name, f in figures.items():
        fp = f"report.figures[{name!r}]"
        if not isinstance(f, dict):
            c.bad(fp, "expected an object")
            continue
        unit = c.val(f, "unit", fp, "str", choices=UNITS)
        if "value" not in f:
            c.bad(fp, "missing key 'value'")
        else:
            v = f["value"]
            if unit == "shape":
                if not (isinstance(v, list) and all(is_json_int(d) for d in v)):
                    c.bad(f"{fp}.value", f"a shape figure holds a list of integers, got {v!r:.60}")
            elif unit in ("params", "bytes", "flop", "s", "count"):
                if not is_finite_number(v):
                    c.bad(f"{fp}.value", f"a {unit} figure holds a finite number, got {v!r:.60}")
            elif unit == "" and not (isinstance(v, str) or is_finite_number(v)
                                     or (isinstance(v, list) and all(is_json_int(d) for d in v))):
                c.bad(f"{fp}.value", f"expected a number, string or list of integers, got {v!r:.60}")
        c.prov(f, fp)
        for k in ("method", "label_en", "label_zh"):
            c.val(f, k, fp, "str")

    def fig_ref(parent, key, path):
        name = c.val(parent, key, path, "str")
        if name is not None and name not in figures:
            c.bad(f"{path}.{key}", f"unknown figure {name!r} (not in report.figures)")

    def fig_list(parent, key, path):
        for i, name in enumerate(c.arr(parent, key, path)):
            if not isinstance(name, str):
                c.bad(f"{path}.{key}[{i}]", "expected a figure name")
            elif name not in figures:
                c.bad(f"{path}.{key}[{i}]", f"unknown figure {name!r} (not in report.figures)")

    def bilingual(parent, path, *stems):
        for s in stems:
            c.val(parent, f"{s}_en", path, "str")
            c.val(parent, f"{s}_zh", path, "str")

    pages = c.obj(report, "pages", "report")
    # 1 macro
    macro = c.obj(pages, "macro", "report.pages")
    node_ids: set = set()
    for i, n in enumerate(c.arr(macro, "nodes", "report.pages.macro", nonempty=True)):
        p = f"report.pages.macro.nodes[{i}]"
        if not isinstance(n, dict):
            c.bad(p, "expected an object")
            continue
        nid = c.val(n, "id", p, "str")
        if nid in node_ids:
            c.bad(f"{p}.id", f"duplicate node id {nid!r}")
        node_ids.add(nid)
        c.val(n, "kind", p, "str", choices=KINDS)
        bilingual(n, p, "label", "detail")
    for i, e in enumerate(c.arr(macro, "edges", "report.pages.macro")):
        p = f"report.pages.macro.edges[{i}]"
        if not isinstance(e, dict):
            c.bad(p, "expected an object")
            continue
        for k in ("from", "to"):
            v = c.val(e, k, p, "str")
            if v is not None and v not in node_ids:
                c.bad(f"{p}.{k}", f"unknown node id {v!r}")
        if e.get("from") is not None and e.get("from") == e.get("to"):
            c.bad(p, "an edge must join two different nodes")
        fig_ref(e, "figure", p)
    # 2 conditions
    cond = c.obj(pages, "conditions", "report.pages")
    for i, b in enumerate(c.arr(cond, "branches", "report.pages.conditions", nonempty=True)):
        p = f"report.pages.conditions.branches[{i}]"
        if not isinstance(b, dict):
            c.bad(p, "expected an object")
            continue
        c.val(b, "id", p, "str")
        bilingual(b, p, "label")
        for k in ("layers", "hidden", "heads"):
            c.val(b, k, p, "int", nullable=True)
        fig_ref(b, "output_figure", p)
        c.val(b, "static", p, "bool")
    merge = c.obj(cond, "merge", "report.pages.conditions")
    if merge is not None:
        bilingual(merge, "report.pages.conditions.merge", "label", "rule")
        fig_ref(merge, "output_figure", "report.pages.conditions.merge")
    # 3 denoiser
    den = c.obj(pages, "denoiser", "report.pages")
    stage_ids: set = set()
    stages = c.arr(den, "stages", "report.pages.denoiser", nonempty=True)
    for i, s in enumerate(stages):
        p = f"report.pages.denoiser.stages[{i}]"
        if not isinstance(s, dict):
            c.bad(p, "expected an object")
            continue
        sid = c.val(s, "id", p, "str")
        if sid in stage_ids:
            c.bad(f"{p}.id", f"duplicate stage id {sid!r}")
        stage_ids.add(sid)
        bilingual(s, p, "label")
        count = c.val(s, "count", p, "int")
        blocks = c.arr(s, "blocks", p, nonempty=True)
        if count is not None and count != len(blocks):
            c.bad(f"{p}.blocks", f"count is {count} but {len(blocks)} block(s) are listed (every block must be)")
        for j, b in enumerate(blocks):
            bp = f"{p}.blocks[{j}]"
            if not isinstance(b, dict):
                c.bad(bp, "expected an object")
                continue
            for k in ("name", "class", "inputs", "outputs"):
                c.val(b, k, bp, "str")
            c.val(b, "params", bp, "int")
            c.val(b, "hits", bp, "int")
            c.val(b, "flops", bp, "num", nullable=True)
            c.val(b, "wall_s", bp, "num", nullable=True)
            c.prov(b, bp)
    for i, s in enumerate(stages):  # optional: "feeds": id of the stage this side branch injects into
        if isinstance(s, dict) and s.get("feeds") is not None and s.get("feeds") not in stage_ids:
            c.bad(f"report.pages.denoiser.stages[{i}].feeds", f"unknown stage id {s.get('feeds')!r}")
    fig_list(den, "inputs", "report.pages.denoiser")
    fig_list(den, "outputs", "report.pages.denoiser")
    # 4 micro
    micro = c.obj(pages, "micro", "report.pages")
    c.val(micro, "block_name", "report.pages.micro", "str")
    for i, r in enumerate(c.arr(micro, "rows", "report.pages.micro", nonempty=True)):
        p = f"report.pages.micro.rows[{i}]"
        if not isinstance(r, dict):
            c.bad(p, "expected an object")
            continue
        for k in ("module", "class", "inputs", "outputs"):
            c.val(r, k, p, "str")
        c.val(r, "params", p, "int")
        c.prov(r, p)
    asm = c.obj(micro, "assembly", "report.pages.micro")
    if asm is not None:
        bilingual(asm, "report.pages.micro.assembly", "label", "rule")
        fig_list(asm, "parts", "report.pages.micro.assembly")
        fig_ref(asm, "result", "report.pages.micro.assembly")
    # 5 vae
    vae = c.obj(pages, "vae", "report.pages")
    fig_ref(vae, "encode_figure", "report.pages.vae")
    fig_ref(vae, "decode_figure", "report.pages.vae")
    for k in ("encode_input_figure", "decode_input_figure"):  # optional
        if isinstance(vae, dict) and vae.get(k) is not None:
            fig_ref(vae, k, "report.pages.vae")
    if isinstance(vae, dict) and "latent_rule_en" in vae:  # optional: how the latent is normalised
        bilingual(vae, "report.pages.vae", "latent_rule")
    ladder = c.arr(vae, "channel_ladder", "report.pages.vae", nonempty=True)
    if not all(is_json_int(x) for x in ladder):
        c.bad("report.pages.vae.channel_ladder", "expected a list of integers")
    c.val(vae, "latent_channels", "report.pages.vae", "int")
    c.val(vae, "ladder_provenance", "report.pages.vae", "str", choices=PROVENANCES)

    # evidence
    ev = c.obj(report, "evidence", "report")
    mod = c.obj(ev, "module", "report.evidence")
    if mod is not None:
        p = "report.evidence.module"
        c.val(mod, "rows", p, "int")
        c.val(mod, "hits", p, "int")
        c.val(mod, "definition", p, "str")
        c.prov(mod, p)
        pc = c.obj(mod, "per_component", p)
        for name, v in (pc or {}).items():
            if not (isinstance(v, dict) and is_json_int(v.get("rows")) and is_json_int(v.get("hits"))):
                c.bad(f"{p}.per_component[{name!r}]", "expected {\"rows\": int, \"hits\": int}")
    if isinstance(ev, dict) and "line" not in ev:
        c.bad("report.evidence", "missing key 'line' (null when the line tracer did not run)")
    line = c.obj(ev, "line", "report.evidence", nullable=True) if isinstance(ev, dict) and "line" in ev else None
    if line is not None:
        p = "report.evidence.line"
        c.val(line, "rows", p, "int")
        c.val(line, "hits", p, "int")
        for k in ("python", "tracer", "definition"):
            c.val(line, k, p, "str")
        c.prov(line, p)
    par = c.obj(ev, "params", "report.evidence")
    if par is not None:
        p = "report.evidence.params"
        c.val(par, "unique", p, "int")
        c.val(par, "tie_counted", p, "int")
        c.val(par, "convention_unique", p, "str")
        c.val(par, "convention_tie_counted", p, "str")
        c.prov(par, p)
        pc = c.obj(par, "per_component", p)
        for name, v in (pc or {}).items():
            ok = is_json_int(v) or (isinstance(v, dict) and v and all(is_json_int(x) for x in v.values()))
            if not ok:
                c.bad(f"{p}.per_component[{name!r}]", "expected an integer or {\"unique\": int, \"tie_counted\": int}")
    fl = c.obj(ev, "flops", "report.evidence")
    if fl is not None:
        c.val(fl, "per_step", "report.evidence.flops", "num", nullable=True)
        c.val(fl, "method", "report.evidence.flops", "str")
        c.prov(fl, "report.evidence.flops")
    if isinstance(ev, dict) and "peak_memory" not in ev:
        c.bad("report.evidence", "missing key 'peak_memory' (null when memory was not measured)")
    pm = (c.obj(ev, "peak_memory", "report.evidence", nullable=True)
          if isinstance(ev, dict) and "peak_memory" in ev else None)
    if pm is not None:
        c.val(pm, "bytes", "report.evidence.peak_memory", "int")
        c.val(pm, "method", "report.evidence.peak_memory", "str")
        c.prov(pm, "report.evidence.peak_memory", default_device=run_device or "")

    if not c.problems:
        try:
            json.dumps(report, allow_nan=False)
        except (TypeError, ValueError) as exc:
            c.bad("report", f"not strict JSON: {exc}")
    if c.problems:
        raise ReportSchemaError(c.problems)

