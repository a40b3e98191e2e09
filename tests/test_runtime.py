"""The runtime as a serving host gets it: the real wheel, pip-installed in a fresh venv, driven by that venv's
python in a subprocess (never the source tree). Read-only: these tests share the session venv.

Every gfx950 tactic is at most "verified" (no gfx950 hardware has run them), so the default policy
"accepted" serves nothing on gfx950: that is tested as intended behaviour, not worked around.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import struct
import sys
from pathlib import Path
from typing import Any

import certevidence
import pytest
from venvtools import json_of as _json

from netra import targets
from netra.cli import schemas
from netra.core.ops import FAMILIES
from netra.runtime import tables

# Driving the installed venv: tests/venvtools.py


@pytest.fixture(scope="module")
def table(pkg: Path) -> dict[str, Any]:
    return json.loads((pkg / "_data" / "tables" / "gfx950.json").read_text())


def _experiment_entry(table: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    for e in table["entries"]:
        for c in e["candidates"]:
            if c["maturity"] == "experiment":
                return e["key"], c
    raise AssertionError("the gfx950 table has no experiment-maturity tactic: this test needs one")


def _first_verified(table: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    for e in table["entries"]:
        first_ok = next(c for c in e["candidates"] if c["maturity"] != "rejected")
        if first_ok["maturity"] == "verified":
            return e["key"], first_ok
    raise AssertionError("the gfx950 table has no verified tactic")


# ---------------------------------------------------------------------------------------------------
# import netra is cheap


def test_import_netra_reads_no_data_probes_no_gpu_imports_nothing(py: str) -> None:
    """An audit hook sees every open, subprocess and dlopen: `import netra` must do none of them."""
    seen = _json(
        py,
        """
        import json, sys
        events = []
        def hook(ev, args):
            if ev == "open" and isinstance(args[0], (str, bytes)):
                p = args[0] if isinstance(args[0], str) else args[0].decode()
                if "_data" in p or p.endswith((".json", ".lock", ".hsaco")) or "/sys/" in p:
                    events.append(("open", p))
            elif ev in ("subprocess.Popen", "ctypes.dlopen", "os.scandir", "os.listdir"):
                events.append((ev, str(args[0])))
        before = set(sys.modules)
        sys.addaudithook(hook)
        import netra
        new = sorted(set(sys.modules) - before)
        print(json.dumps({"events": events, "new_modules": new, "version": netra.__version__}))
        """,
    )
    assert seen["events"] == [], seen["events"]
    assert seen["new_modules"] == ["netra"], f"import netra pulled in {seen['new_modules']}"


@pytest.mark.parametrize("gpu_class", ["gfx950", "sm_90"])
def test_the_first_lookup_reads_what_it_serves_and_imports_no_build_code(py: str, gpu_class: str) -> None:
    """Serving a kernel reads the lock, build.json, one table and one code object (each once), never
    the other tables nor any evidence file, and imports nothing of the build, the static checks, the ELF
    readers, the toolchains, detection or certification, nor any other class's package: the first
    lookup pays for what it serves (docs/performance.md)."""
    seen = _json(
        py,
        """
        import json, sys
        import netra.runtime
        opened = []
        def hook(ev, args):  # files below the install are opened by name relative to their folder
            if ev == "open" and isinstance(args[0], str) and ".dist-info/" not in args[0]:
                opened.append(args[0].rsplit("/", 1)[-1])
        before = set(sys.modules)
        sys.addaudithook(hook)
        from netra.runtime import open_catalog
        k = open_catalog(sys.argv[1]).select("fp8_group_quant(hidden=2048,group=128)", policy="verified")
        new = sorted(m for m in set(sys.modules) - before if m.startswith("netra"))
        print(json.dumps({"artifact": k.artifact, "opened": opened, "new": new}))
        """,
        gpu_class,
    )
    assert seen["artifact"].startswith("netra_fp8_group_quant_h2048_g128_"), seen
    data = [n for n in seen["opened"] if n.endswith((".json", ".lock", ".hsaco", ".cubin"))]
    code = f"{seen['artifact']}.{'hsaco' if gpu_class == 'gfx950' else 'cubin'}"
    assert sorted(data) == sorted(["manifest.lock", "build.json", f"{gpu_class}.json", code]), seen["opened"]
    build_time = ("netra.release", "netra.certify", "netra.core.elf", "netra.targets.target",
                  "netra.targets.devtools", "netra.targets.host", "netra.targets.nvidia_tools",
                  "netra.runtime.gpus", "netra.loaders")  # fmt: skip
    pulled = [m for m in seen["new"] if m.startswith(build_time) or m.endswith((".cubin", ".codeobject",
                                                                                 ".checks", ".compile", ".toolchain"))]  # fmt: skip
    assert pulled == [], f"the first lookup imported {pulled}"
    # The lock names every class; reading it imports none of them (toolchain labels and file suffixes
    # are looked up on use), and serving one class imports only that class's package.
    classes = sorted(m for m in seen["new"] if m.startswith(("netra.targets.gfx950", "netra.targets.sm_")))
    assert classes and all(m.startswith(f"netra.targets.{gpu_class}") for m in classes), classes


# ---------------------------------------------------------------------------------------------------
# Selection: exact contracts, maturity policies, explicit fallbacks


def test_default_policy_accepted_serves_nothing_on_gfx950(py: str, table: dict[str, Any]) -> None:
    out = _json(
        py,
        """
        import json
        from netra.runtime import open_catalog
        cat = open_catalog("gfx950")
        res = {}
        for key in cat.contracts():
            r = cat.select(key)
            res[key] = [type(r).__name__, bool(r), getattr(r, "code", None), str(r)]
        print(json.dumps({"results": res, "counts": cat.maturity_counts()}))
        """,
    )
    assert out["counts"]["accepted"] == 0
    assert set(out["results"]) == {e["key"] for e in table["entries"]}
    for key, (kind, truth, code, reason) in out["results"].items():
        assert (kind, truth, code) == ("Fallback", False, "below_policy"), (key, reason)
        assert "'accepted'" in reason and "policy=" in reason and key in reason


def test_sm_100_is_statically_verified_and_served_only_on_opt_in(py: str, pkg: Path) -> None:
    """The Blackwell class in the installed wheel: a static table, nothing served by default, every
    contract's first candidate served to a caller who opts into `verified`, its cubin the locked one."""
    raw = json.loads((pkg / "_data" / "tables" / "sm_100.json").read_text())
    assert raw["certification"]["kind"] == "static" and raw["certification"]["runs"] == []
    out = _json(
        py,
        """
        import json
        from netra.runtime import open_catalog
        cat = open_catalog("sm_100")
        res = {}
        for key in cat.contracts():
            d, k = cat.select(key), cat.select(key, policy="verified")
            res[key] = [getattr(d, "code", None), type(k).__name__, k.tactic, k.maturity, k.loader, len(k.code_object)]
        print(json.dumps({"results": res, "counts": cat.maturity_counts()}))
        """,
    )
    first = {e["key"]: e["candidates"][0]["tactic"] for e in raw["entries"]}
    assert out["counts"]["accepted"] == 0 and out["counts"]["verified"] > 0
    assert set(out["results"]) == set(first)
    for key, (code, kind, tactic, maturity, loader, size) in out["results"].items():
        assert (code, kind, tactic, maturity, loader) == (
            "below_policy",
            "Kernel",
            first[key],
            "verified",
            "cuda",
        )
        assert size > 0


def test_verified_opt_in_serves_the_first_ranked_kernel_verbatim(
    py: str, pkg: Path, table: dict[str, Any]
) -> None:
    key, cand = _first_verified(table)
    rows = 1000
    out = _json(
        py,
        """
        import hashlib, json, sys
        from netra.runtime import open_catalog, Contract
        cat = open_catalog("gfx950")
        k = cat.select(sys.argv[1], policy="verified")
        # The same contract, written differently, is the same exact contract.
        c = Contract.parse(sys.argv[1])
        k2 = cat.select(Contract.of(c.op, **dict(reversed(list(c.params.items())))), policy="verified")
        print(json.dumps({
            "type": type(k).__name__, "same": k is k2, "tactic": k.tactic, "maturity": k.maturity,
            "symbol": k.symbol, "artifact": k.artifact, "sha256": hashlib.sha256(k.code_object).hexdigest(),
            "grid": k.grid(int(sys.argv[2])), "block": k.block, "lds": k.lds_bytes, "loader": k.loader,
            "kernarg_size": k.kernarg.size,
        }))
        """,
        key,
        str(rows),
    )
    build = json.loads((pkg / "_data" / "build.json").read_text())
    assert out["type"] == "Kernel" and out["same"]
    assert (out["tactic"], out["maturity"], out["symbol"]) == (cand["tactic"], "verified", cand["symbol"])
    assert out["sha256"] == build["code_objects"][cand["file"]]["sha256"]
    assert out["sha256"] == hashlib.sha256((pkg / "_data" / cand["file"]).read_bytes()).hexdigest()
    axes = [
        a if isinstance(a, int) else math.ceil(rows / a["rows_per_block"]) for a in cand["launch"]["grid"]
    ]
    assert out["grid"] == axes and out["block"] == cand["launch"]["block"]
    assert (out["lds"], out["loader"], out["kernarg_size"]) == (
        cand["lds_bytes"],
        "hip",
        cand["kernarg"]["size"],
    )


def test_experiment_tactic_is_served_only_when_the_caller_opts_in(py: str, table: dict[str, Any]) -> None:
    key, cand = _experiment_entry(table)
    out = _json(
        py,
        """
        import json, sys
        from netra.runtime import open_catalog
        cat = open_catalog("gfx950")
        key, tactic = sys.argv[1], sys.argv[2]
        res = {}
        for policy in ("accepted", "verified", "experiment"):
            r = cat.select(key, policy=policy, tactic=tactic)
            res[policy] = [type(r).__name__, getattr(r, "code", None), str(r) if not r else r.tactic,
                           getattr(r, "maturity", None)]
        print(json.dumps(res))
        """,
        key,
        cand["tactic"],
    )
    assert out["accepted"][:2] == ["Fallback", "below_policy"]
    assert out["verified"][:2] == ["Fallback", "below_policy"]
    assert "'experiment'" in out["verified"][2] and "policy='experiment'" in out["verified"][2]
    assert out["experiment"] == ["Kernel", None, cand["tactic"], "experiment"]


def test_unsupported_contracts_get_an_explicit_fallback_never_a_nearby_shape(
    py: str, table: dict[str, Any]
) -> None:
    served = {e["key"] for e in table["entries"]}
    # a model-wide fallback of an op that is no family (one of a family, a shape it cannot build, is
    # not what an unknown op's request is answered with)
    documented = next(
        (f for f in table["fallbacks"] if "gpu_class" not in f and f["op"] not in FAMILIES), None
    )
    out = _json(
        py,
        """
        import json, sys
        from netra.runtime import open_catalog, ContractError
        cat = open_catalog("gfx950")
        served = json.loads(sys.argv[1])
        op_params = [(c.split("(")[0], c) for c in served]
        op, key = sorted(op_params)[0]
        from netra.runtime import Contract
        c = Contract.parse(key)
        first = next(iter(c.params))
        near = Contract.of(c.op, **{**c.params, first: c.params[first] + 1})
        res = {}
        unknown = {"op": sys.argv[2], "inter": 14336, "group": 128}
        for name, q in (("near", near), ("unknown_op", unknown)):
            r = cat.select(q, policy="experiment")
            res[name] = [type(r).__name__, bool(r), r.code, r.reason, r.contract, r.documented]
        try:
            cat.select({"op": c.op, "bogus": 1})
            res["bad_params"] = "no error"
        except ContractError as e:
            res["bad_params"] = str(e)
        res["near_key"] = near.key
        print(json.dumps(res))
        """,
        json.dumps(sorted(served)),
        documented["op"] if documented else "not_an_op",
    )
    assert out["near_key"] not in served
    kind, truth, code, reason, contract, _ = out["near"]
    assert (kind, truth, code, contract) == ("Fallback", False, "no_entry", out["near_key"])
    assert out["near_key"] in reason and "exact" in reason
    kind, truth, code, reason, _, doc = out["unknown_op"]
    assert (kind, truth, code) == ("Fallback", False, "unknown_op")
    if documented:
        assert doc == documented["reason"] and documented["reason"] in reason
    assert "takes exactly the parameters" in out["bad_params"]


def test_a_contract_not_built_for_the_class_is_a_documented_fallback(
    py: str, pkg: Path, table: dict[str, Any]
) -> None:
    """The fused contracts, the routed MoE's and DeepSeek-V3's router have no gfx950 template: selecting
    one on gfx950, at any policy, is the `not_built` fallback quoting the model manifest's reason, never a
    silent absence or an error."""
    gaps = [f for f in table["fallbacks"] if f.get("gpu_class") == "gfx950"]
    assert {f["op"] for f in gaps} == {
        "fused_add_rmsnorm", "rmsnorm_fp8_group_quant", "fused_add_rmsnorm_fp8_group_quant",
        "fp8_moe_gate_up", "fp8_moe_down", "moe_grouped_topk_sigmoid",
    }  # fmt: skip
    assert not {f["contract"] for f in gaps} & {e["key"] for e in table["entries"]}
    out = _json(
        py,
        """
        import json, sys
        from netra.runtime import open_catalog
        cat = open_catalog("gfx950")
        res = {}
        for key in json.loads(sys.argv[1]):
            for policy in ("accepted", "experiment"):
                r = cat.select(key, policy=policy)
                res[key + "@" + policy] = [bool(r), r.code, r.reason, r.documented]
        print(json.dumps(res))
        """,
        json.dumps(sorted({f["contract"] for f in gaps})),
    )
    # every contract the NVIDIA classes build and gfx950 does not (derived from the installed sm_90 table)
    sm90 = json.loads((pkg / "_data" / "tables" / "sm_90.json").read_text())
    assert {f["contract"] for f in gaps} == {e["key"] for e in sm90["entries"]} - {
        e["key"] for e in table["entries"]
    }
    assert len(out) == 2 * len({f["contract"] for f in gaps})
    for k, (truth, code, reason, doc) in out.items():
        key = k.split("@")[0]
        f = next(f for f in gaps if f["contract"] == key)
        assert (truth, code) == (False, "not_built"), k
        assert key in reason and "not built for gfx950" in reason and f["reason"] in reason
        assert doc == f["reason"]


def test_rejected_is_never_served_at_any_policy(py: str, pkg: Path, table: dict[str, Any]) -> None:
    """A table whose candidates are all rejected (built in memory from the real one): no policy serves it."""
    out = _json(
        py,
        """
        import json, sys
        from netra.runtime import tables
        from netra.runtime import Catalog, choose, open_catalog, POLICIES
        real = open_catalog("gfx950")
        data = json.loads(open(sys.argv[1]).read())
        for e in data["entries"]:
            for c in e["candidates"]:
                c["maturity"] = "rejected"
        t = tables.parse(data, "in-memory", "gfx950")
        cat = Catalog(real.install, real.lock, t, real.certified_classes, real._built)
        res = {}
        for e in t.entries.values():
            for p in POLICIES:
                r = cat.select(e.key, policy=p)
                res[e.key + "/" + p] = [type(r).__name__, r.code, choose(e.candidates, p) is None]
                for c in e.candidates:
                    r = cat.select(e.key, policy=p, tactic=c.tactic)
                    res[e.key + "/" + p + "/" + c.tactic] = [type(r).__name__, r.code, True]
        try:
            real.select(next(iter(t.entries)), policy="rejected")
            res["policy_rejected"] = "accepted as a policy"
        except ValueError as e:
            res["policy_rejected"] = str(e)
        print(json.dumps(res))
        """,
        str(pkg / "_data" / "tables" / "gfx950.json"),
    )
    bad = out.pop("policy_rejected")
    assert "is not one of" in bad
    assert out and all(v == ["Fallback", "rejected", True] for v in out.values()), out


def test_uncertified_gpu_class_is_refused_listing_the_certified_ones(py: str, tmp_path: Path) -> None:
    nodes = _sysfs(tmp_path / "gfx942", {0: 0, 1: 90402})
    out = _json(
        py,
        """
        import json, sys
        from netra.errors import UncertifiedGPUClassError
        from netra.runtime import open_catalog
        res = {}
        for cls in ("gfx942", "sm_120", None):
            try:
                open_catalog(cls, sysfs_nodes=sys.argv[1] if cls is None else None)
                res[str(cls)] = "opened"
            except UncertifiedGPUClassError as e:
                res[str(cls)] = [type(e).__name__, e.message, e.hint]
        print(json.dumps(res))
        """,
        str(nodes),
    )
    certified = "certified: " + ", ".join(targets.names())
    for cls in ("gfx942", "sm_120"):
        name, message, hint = out[cls]
        assert name == "UncertifiedGPUClassError" and f"'{cls}'" in message and certified in message
        assert hint
    name, message, _ = out["None"]  # detected from sysfs: a gfx942 node
    assert "gfx942" in message and certified in message


def test_detected_gfx950_opens_its_catalog(py: str, tmp_path: Path) -> None:
    nodes = _sysfs(tmp_path / "gfx950", {0: 0, 1: 90500})
    out = _json(
        py,
        """
        import json, sys
        from netra.runtime import open_catalog
        print(json.dumps(open_catalog(sysfs_nodes=sys.argv[1]).gpu_class))
        """,
        str(nodes),
    )
    assert out == "gfx950"


def test_repeated_selection_touches_no_file(py: str, table: dict[str, Any]) -> None:
    key, _ = _first_verified(table)
    out = _json(
        py,
        """
        import json, sys
        from netra.runtime import open_catalog
        cat = open_catalog("gfx950")
        first = cat.select(sys.argv[1], policy="verified")
        events = []
        watched = ("open", "os.stat", "os.scandir", "os.listdir")
        sys.addaudithook(lambda ev, args: events.append(ev) if ev in watched else None)
        same = all(cat.select(sys.argv[1], policy="verified") is first for _ in range(1000))
        again = open_catalog("gfx950") is cat
        print(json.dumps({"events": events, "same": same, "again": again}))
        """,
        key,
    )
    assert out == {"events": [], "same": True, "again": True}


# ---------------------------------------------------------------------------------------------------
# Kernel arguments and the HIP loader (up to the library: no HIP runtime exists here)


_STRUCT = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "i8": "b", "i16": "h", "i32": "i", "i64": "q",
           "f16": "e", "f32": "f", "f64": "d"}  # fmt: skip


def _values(args: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, a in enumerate(args):
        if a["kind"] == "global_buffer":
            out[a["name"]] = 0x7F00_0000_0000 + 0x1000 * (i + 1) + 0x11
        elif a["type"].startswith("f"):
            out[a["name"]] = 0.5 + i
        else:
            out[a["name"]] = 3 + 7 * i
    return out


def _expected_kernargs(layout: dict[str, Any], values: dict[str, Any]) -> bytes:
    buf = bytearray(layout["size"])
    for a in layout["args"]:
        code = "Q" if a["kind"] == "global_buffer" else _STRUCT[a["type"]]
        struct.pack_into("<" + code, buf, a["offset"], values[a["name"]])
    return bytes(buf)


def test_kernarg_packing_is_byte_exact_and_strict(py: str, table: dict[str, Any]) -> None:
    cases = []
    for e in table["entries"]:
        c = next(c for c in e["candidates"] if c["maturity"] != "rejected")
        cases.append(
            (
                e["key"],
                c["tactic"],
                _values(c["kernarg"]["args"]),
                _expected_kernargs(c["kernarg"], _values(c["kernarg"]["args"])).hex(),
            )
        )
    out = _json(
        py,
        """
        import json, sys
        from netra.runtime import open_catalog
        from netra.runtime.kernarg import KernargError
        cat = open_catalog("gfx950")
        res = []
        for key, tactic, values, _ in json.loads(sys.argv[1]):
            k = cat.select(key, policy="experiment", tactic=tactic)
            errs = []
            name = k.kernarg.names[0]
            bads = ({}, {**values, "zzz": 1}, {**values, name: -1}, {**values, name: 2**64})
            bads += ({**values, name: "x"},)
            for bad in bads:
                try:
                    k.pack(**bad)
                    errs.append(None)
                except KernargError as e:
                    errs.append(str(e))
            res.append([k.pack(**values).hex(), errs])
        print(json.dumps(res))
        """,
        json.dumps(cases),
    )
    for (key, _, _, want), (got, errs) in zip(cases, out, strict=True):
        assert got == want, key
        assert all(errs), (key, errs)
        assert "missing" in errs[0] and "unknown zzz" in errs[1]


def test_hip_loader_without_a_hip_runtime_says_what_to_install(py: str, tmp_path: Path) -> None:
    out = _json(
        py,
        """
        import json, sys
        from netra.errors import RuntimeUnavailableError
        from netra.loaders import hip
        from netra.targets.amd import AMD
        res = {"found": str(AMD.find_library())}
        for lib in (sys.argv[1], None):
            try:
                hip.Hip(library=lib)
                res[str(lib)] = "loaded"
            except RuntimeUnavailableError as e:
                res[str(lib)] = [e.message, e.hint]
        print(json.dumps(res))
        """,
        str(tmp_path / "libamdhip64.so"),
    )
    message, hint = out[str(tmp_path / "libamdhip64.so")]
    assert "libamdhip64.so" in message and str(tmp_path) in message
    assert "ROCm" in hint and "LD_LIBRARY_PATH" in hint
    if out["found"] == "None":  # no HIP on this machine (CI): the default search fails the same clear way
        assert "libamdhip64.so" in out["None"][0]


def test_hip_launch_arguments_follow_the_table(py: str, table: dict[str, Any]) -> None:
    """What hipModuleLaunchKernel would receive: grid in blocks, block, LDS, and the `extra` array."""
    key, cand = _first_verified(table)
    values = _values(cand["kernarg"]["args"])
    out = _json(
        py,
        """
        import ctypes, json, sys
        from netra.runtime import open_catalog
        from netra.loaders import hip
        k = open_catalog("gfx950").select(sys.argv[1], policy="verified")
        values = json.loads(sys.argv[2])
        la = hip.launch_args(k, 12345, values)
        ex = hip.Extra(la.kernargs)
        arr = [ex.array[i] or 0 for i in range(5)]
        print(json.dumps({
            "grid": la.grid, "block": la.block, "shared": la.shared_bytes, "kernargs": la.kernargs.hex(),
            "markers": [arr[0], arr[2], arr[4]],
            "buffer": ctypes.string_at(arr[1], len(la.kernargs)).hex(),
            "size": ctypes.c_size_t.from_address(arr[3]).value,
            "zero_rows": hip.launch_args(k, 0, values).grid,
            "prepacked": hip.launch_args(k, 1, k.pack(**values)).kernargs == la.kernargs,
        }))
        """,
        key,
        json.dumps(values),
    )
    want = _expected_kernargs(cand["kernarg"], values).hex()
    rpb = next(a["rows_per_block"] for a in cand["launch"]["grid"] if isinstance(a, dict))
    assert out["grid"] == [math.ceil(12345 / rpb), 1, 1] and out["block"] == cand["launch"]["block"]
    assert out["shared"] == cand["launch"]["dynamic_lds_bytes"]
    assert out["kernargs"] == out["buffer"] == want and out["size"] == cand["kernarg"]["size"]
    assert out["markers"] == [1, 2, 3]  # HIP_LAUNCH_PARAM_BUFFER_POINTER, _BUFFER_SIZE, _END
    assert out["zero_rows"][0] == 0 and out["prepacked"]


# ---------------------------------------------------------------------------------------------------
# GPU detection from sysfs-format files


def _sysfs(root: Path, nodes: dict[int, int]) -> Path:
    """A KFD topology folder in the kernel's format: nodes/<id>/properties with 'key value' lines."""
    for nid, version in nodes.items():
        d = root / str(nid)
        d.mkdir(parents=True)
        simd = 0 if version == 0 else 256
        (d / "properties").write_text(
            f"cpu_cores_count {0 if version else 64}\nsimd_count {simd}\nmem_banks_count 1\n"
            f"gfx_target_version {version}\nvendor_id {4098 if version else 0}\ndevice_id 29861\n"
            "location_id 768\ndrm_render_minor 128\n"
        )
        (d / "name").write_text("" if version == 0 else "ip discovery\n")
    return root


def test_gpu_detection_reads_kfd_properties(py: str, tmp_path: Path) -> None:
    nodes = _sysfs(tmp_path / "nodes", {0: 0, 1: 90500, 2: 90402, 3: 90010, 4: 110001})
    out = _json(
        py,
        """
        import json, sys
        from netra.runtime import gpus
        from netra.targets.amd import AMD
        from netra.targets.nvidia import NVIDIA
        d = gpus.detect(sys.argv[1], tools=False)
        none = gpus.detect(sys.argv[2], tools=False)
        print(json.dumps({
            "gpus": [[g.vendor, g.gpu_class, g.index, g.source] for g in d.gpus], "classes": d.classes,
            "none": [list(none.gpus), list(none.notes)],
            "names": [AMD.conventional_name(v) for v in (90500, 90402, 90010, 100300, 0)],
            "sm": NVIDIA.gpu_class((9, 0)),
        }))
        """,
        str(nodes),
        str(tmp_path / "absent"),
    )
    assert out["gpus"] == [
        ["amd", "gfx950", 1, "kfd-sysfs"],
        ["amd", "gfx942", 2, "kfd-sysfs"],
        ["amd", "gfx90a", 3, "kfd-sysfs"],
        ["amd", "gfx1101", 4, "kfd-sysfs"],
    ]
    assert out["names"] == ["gfx950", "gfx942", "gfx90a", "gfx1030", None] and out["sm"] == "sm_90"
    gpus_none, notes = out["none"]
    assert gpus_none == [] and "not present" in notes[0]


# ---------------------------------------------------------------------------------------------------
# The table format


def test_installed_table_follows_the_json_schema_and_the_parser(
    py: str, pkg: Path, table: dict[str, Any]
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    assert (pkg / "schemas" / "table.schema.json").read_bytes() == (
        schemas.FOLDER / "table.schema.json"
    ).read_bytes()
    schema = schemas.load("table")  # gpu_class, vendor and loader: the registry's
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(table)
    assert table["gpu_class"] == "gfx950" and table["certification"]["kind"] == "static"
    assert table["schema"] == 5
    assert (pkg / "_data" / "tables" / "gfx950.json").read_text() == json.dumps(
        table, indent=1, sort_keys=True
    ) + "\n"


def _hardware_table(table: dict[str, Any]) -> dict[str, Any]:
    """An sm_90-style table: hardware certification, an accepted candidate with its evidence."""
    t = json.loads(json.dumps(table))
    t.update(gpu_class="sm_90", vendor="nvidia", loader="cuda")
    t["certification"] = {
        "kind": "hardware",
        "note": "Certified on an H200 against the float64 reference.",
        "runs": [{
            "device": "NVIDIA H200", "driver": "580.65.06", "runtime": "CUDA 13.0",
            "toolchain": {"flavour": "nvcc", "version": "13.0.88"}, "clocks": None, "netra": "0.1.0", "seed": 0,
            "protocol": {"rows": [1, 8192], "warmup": 3, "replays": 25, "prefill_rows": 8192},
        }],
    }  # fmt: skip
    for entry in t["entries"]:
        for x in entry["candidates"]:
            x["file"] = "sm_90/" + x["file"].split("/", 1)[1]
            x["maturity"] = "experiment"
            x["evidence"]["hardware"] = None
    c = t["entries"][0]["candidates"][0]
    c["maturity"] = "accepted"
    c["evidence"]["hardware"] = certevidence.hardware(c["text_sha256"])
    return t


def test_accepted_requires_hardware_evidence_in_schema_and_parser(
    py: str, pkg: Path, table: dict[str, Any], tmp_path: Path
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(schemas.load("table"))
    good = _hardware_table(table)
    no_evidence = json.loads(json.dumps(good))
    no_evidence["entries"][0]["candidates"][0]["evidence"]["hardware"] = None
    static_accepted = json.loads(json.dumps(table))
    static_accepted["entries"][0]["candidates"][0]["maturity"] = "accepted"
    over = json.loads(json.dumps(good))
    over["entries"][0]["candidates"][0]["evidence"]["hardware"]["max_rel_deviation"] = 0.5
    cases = {  # as the table file holds them: each evidence record summarized (tables.split)
        name: tables.split(t)[0]
        for name, t in {
            "good": good,
            "no_evidence": no_evidence,
            "static_accepted": static_accepted,
            "over_tolerance": over,
        }.items()
    }
    schema_ok = {name: validator.is_valid(t) for name, t in cases.items()}
    out = _json(
        py,
        """
        import json, sys
        from netra.runtime import tables
        res = {}
        for name, t in json.loads(open(sys.argv[1], encoding="utf-8").read()).items():
            try:
                p = tables.parse(t, name)
                res[name] = ["ok", p.maturity_counts()["accepted"], p.certification]
            except tables.TableError as e:
                res[name] = ["refused", str(e)]
        print(json.dumps(res))
        """,
        str(_written(tmp_path / "cases.json", json.dumps(cases))),  # a table is past the argv limit
    )
    assert schema_ok == {"good": True, "no_evidence": False, "static_accepted": False, "over_tolerance": True}
    assert out["good"] == ["ok", 1, "hardware"]
    assert out["no_evidence"][0] == "refused" and "without hardware evidence" in out["no_evidence"][1]
    assert out["static_accepted"][0] == "refused" and "'static'" in out["static_accepted"][1]
    assert out["over_tolerance"][0] == "refused" and "above tolerance" in out["over_tolerance"][1]


# ---------------------------------------------------------------------------------------------------
# A source checkout (editable): release/ and build/kernels/ instead of netra/_data


def test_source_checkout_reads_release_and_build_kernels(
    py: str, pkg: Path, table: dict[str, Any], tmp_path: Path
) -> None:
    """A tree laid out like the repo (files copied from the installed wheel): the runtime finds the lock
    and tables in release/ and code objects in build/kernels/, checks .text against the lock, and tells
    the user to run `netra build build/kernels` when one is missing."""
    src = tmp_path / "src"
    shutil.copytree(pkg, src / "netra", ignore=shutil.ignore_patterns("_data", "__pycache__"))
    data = pkg / "_data"
    (src / "kernels").mkdir()
    (src / "pyproject.toml").write_text('[project]\nname = "netra-kernel"\n')
    shutil.copytree(data / "manifests", src / "manifests")
    (src / "release" / "tables").mkdir(parents=True)
    shutil.copy(data / "manifest.lock", src / "release" / "manifest.lock")
    shutil.copy(data / "tables" / "gfx950.json", src / "release" / "tables" / "gfx950.json")
    shutil.copytree(data / "gfx950", src / "build" / "kernels" / "gfx950")
    key, cand = _first_verified(table)
    code = """
        import json, sys
        from netra.errors import IntegrityError
        from netra.runtime import open_catalog
        cat = open_catalog("gfx950")
        try:
            k = cat.select(sys.argv[1], policy="verified")
            r = ["Kernel", k.artifact]
        except IntegrityError as e:
            r = [type(e).__name__, e.message, e.hint]
        print(json.dumps({"kind": cat.install.kind, "root": str(cat.install.root), "select": r}))
        """
    env = {"PYTHONPATH": str(src)}
    ok = _json(py, code, key, env=env)
    # No installed distribution records that package: a source checkout on sys.path (docs/doctor.md).
    assert ok == {"kind": "source", "root": str(src), "select": ["Kernel", cand["artifact"]]}
    obj = src / "build" / "kernels" / cand["file"]
    blob = obj.read_bytes()
    obj.unlink()
    missing = _json(py, code, key, env=env)["select"]
    assert (
        missing[0] == "MissingFileError"
        and str(obj) in missing[1]
        and "netra build build/kernels" in missing[2]
    )
    obj.write_bytes(_flip_text_byte(blob))
    altered = _json(py, code, key, env=env)["select"]
    assert (
        altered[0] == "AlteredFileError"
        and ".text sha256" in altered[1]
        and cand["text_sha256"] in altered[1]
    )


def _flip_text_byte(blob: bytes) -> bytes:
    import io

    from elftools.elf.elffile import ELFFile  # the test's own ELF reader, independent of netra's

    sec = ELFFile(io.BytesIO(blob)).get_section_by_name(".text")
    b = bytearray(blob)
    b[sec["sh_offset"]] ^= 0x01
    return bytes(b)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def _written(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
