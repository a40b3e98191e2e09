"""The staged fused rmsnorm kernels (kernels/sm_90/fused/): build here, check and time on the H200.

    python bench/bench_fused_sm90.py build CUBINS            # any machine with nvcc 13 (the wheel's flags)
    python bench/bench_fused_sm90.py run CUBINS [--json OUT] [--table sm_90.json]   # the GPU machine

The fused families are not in netra's catalog yet (kernels/sm_90/fused/README.md), so this script
builds each contract x proposed tactic (tactics.proposed.toml) itself, with the flags of
netra/targets/sm_90/compile.py, and launches the cubins through the CUDA driver. `run` needs torch and
an installed netra wheel (the unfused kernels and netra.reference / netra.conformance). Per op,
contract and tactic:

- bit equality with the unfused Netra chain, which is what the headers claim: residual_out = the
  bf16 add (torch's x + residual: fp32 add, one rounding); y = netra rmsnorm of the same
  THREADS_PER_ROW on residual_out; q, scales = netra fp8_group_quant of that y; the same again with
  residual_out aliasing residual (in place). Outputs are poisoned and fenced by guard bytes;
- float64: netra.conformance.judge of y (rmsnorm, on residual_out) and of q / scales
  (fp8_group_quant, on y), the certify judges, for every tactic;
- time per call in CUDA-graph replay at 1, 16, 8192, 32768 rows (inputs rotated past L2), against
  the unfused chain (the fastest certified tactic of each unfused kernel at that row count, from
  --table, plus torch's add, always timed for the add families) and the bench's copy kernels moving
  the same bytes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parent.parent
FUSED = ROOT / "kernels" / "sm_90" / "fused"
FLAGS = ["-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-Xptxas=-Werror,-warn-spills,-warn-lmem-usage"]
CONTRACTS = ((2048, 0), (3584, 1), (4096, 0))
OPS = {  # op: (adds a residual, writes y, quantizes)
    "fused_add_rmsnorm": (True, True, False),
    "rmsnorm_fp8_group_quant": (False, False, True),
    "fused_add_rmsnorm_fp8_group_quant": (True, False, True),
}
CHECK_ROWS = (1, 3, 515)
TIME_ROWS = (1, 16, 8192, 32768)
GUARD = 256
EPS = 1e-6


def tactics() -> list[dict[str, Any]]:
    return tomllib.loads((FUSED / "tactics.proposed.toml").read_text())["tactics"]


def symbol(op: str, h: int, wo: int, tactic: str) -> str:
    g = "" if op == "fused_add_rmsnorm" else "_g128"
    return f"netra_{op}_h{h}_wo{wo}{g}_{tactic}"


def build(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for t in tactics():
        for h, wo in CONTRACTS:
            defs = {
                "HIDDEN": h,
                "WEIGHT_OFFSET": wo,
                "GROUP": 128,
                "NETRA_BLOCK": t["block"],
                "NETRA_ROWS_PER_BLOCK": t["rows_per_block"],
                "NETRA_GRID_Y": t.get("grid_y", 1),
                **t["constants"],
            }
            jobs.append((t["op"], symbol(t["op"], h, wo, t["name"]), defs))

    def one(job: tuple[str, str, dict[str, int]]) -> str:
        op, sym, defs = job
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / f"{sym}.cu"
            src.write_text(
                "".join(f"#define {k} {v}\n" for k, v in {"NETRA_SYMBOL": sym, **defs}.items())
                + f'#include "{op}.cu"\n'
            )
            r = subprocess.run(
                [
                    "nvcc",
                    *FLAGS,
                    "-Xptxas=-v",
                    "-I",
                    str(FUSED),
                    "-I",
                    str(ROOT / "kernels" / "cuda"),  # include/, shared by the CUDA classes
                    "-o",
                    str(out / f"{sym}.cubin"),
                    src.name,
                ],
                cwd=tmp,
                capture_output=True,
                text=True,
            )
        if r.returncode:
            raise SystemExit(f"{sym}: nvcc failed:\n{r.stderr}")
        used = next((ln.split("Used", 1)[1].strip() for ln in r.stderr.splitlines() if "Used" in ln), "?")
        return f"{sym}: {used}"

    with ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        for line in ex.map(one, jobs):
            print(line)
    return 0


# ---------------------------------------------------------------------------------------------------


class Fused:
    def __init__(self, cubins: Path) -> None:
        import torch

        sys.path.insert(0, str(ROOT / "bench"))
        import bench_sm90

        from netra.loaders.cuda import Cuda
        from netra.runtime import open_catalog

        self.torch, self.b = torch, bench_sm90
        self.cu = Cuda()
        self.cu.context()
        self.cat = open_catalog("sm_90")
        self.copies = bench_sm90.Copies(torch, self.cu)
        self.l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.fns: dict[str, Any] = {}
        self.keep: list[Any] = []
        for p in sorted(cubins.glob("*.cubin")):
            mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
            self.cu.check(self.cu.lib.cuModuleLoadData(ctypes.byref(mod), p.read_bytes()), p.name)
            self.cu.check(self.cu.lib.cuModuleGetFunction(ctypes.byref(fn), mod, p.stem.encode()), p.stem)
            self.fns[p.stem] = fn

    def launcher(self, sym: str, t: dict[str, Any], ptrs: list[int], rows: int) -> Any:
        vals = [ctypes.c_uint64(p) for p in ptrs] + [ctypes.c_uint32(rows), ctypes.c_float(EPS)]
        arr = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        grid = max(1, -(-rows // t["rows_per_block"]))
        fn, cu, torch = self.fns[sym], self.cu, self.torch

        def launch(_: int = 0) -> None:
            keep = (vals, arr)  # noqa: F841
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream or None)
            cu.check(cu.lib.cuLaunchKernel(fn, grid, 1, 1, t["block"], 1, 1, 0, stream, arr, None), sym)

        return launch

    def netra(self, key: str, tactic: str, args: dict[str, int], rows: int) -> None:
        k = self.cat.select(key, "experiment", tactic=tactic)
        if not k:
            raise SystemExit(f"{key} {tactic}: {k}")
        self.cu.launch(k, rows, None, {**args, "rows": rows})

    # -- correctness --------------------------------------------------------------------------------

    def inputs(self, h: int, wo: int, rows: int, seed: int) -> dict[str, Any]:
        torch = self.torch
        g = torch.Generator(device="cuda").manual_seed(seed)
        scale = torch.tensor([1e-3, 1.0, 1e3], device="cuda")[torch.arange(rows, device="cuda") % 3][:, None]
        x = (torch.randn(rows, h, device="cuda", generator=g) * scale).bfloat16()
        res = (torch.randn(rows, h, device="cuda", generator=g) * scale).bfloat16()
        if rows > 2:
            x[1] = 0
            res[1] = 0  # a zero row
            x[2, 5] = 3e4  # one large value
        w = (torch.randn(h, device="cuda", generator=g) * (0.5 if wo == 0 else 0.3) + (1 - wo)).bfloat16()
        return {"x": x, "residual": res, "w": w}

    def out(self, n: int, dtype: Any) -> Any:
        t = self.torch.full((n * dtype.itemsize + 2 * GUARD,), 0xA5, dtype=self.torch.uint8, device="cuda")
        t[GUARD:-GUARD] = 0xFF
        return t

    def check_case(self, op: str, t: dict[str, Any], h: int, wo: int, rows: int, seed: int) -> dict[str, Any]:
        import numpy as np

        from netra.certify import conformance

        torch = self.torch
        add, store_y, quant = OPS[op]
        inp = self.inputs(h, wo, rows, seed)
        x, res, w = inp["x"], inp["residual"], inp["w"]
        r_ref = x + res if add else x  # torch bf16 add: fp32 sum, one rounding
        tpr = t["constants"]["THREADS_PER_ROW"]
        rms_tactic = {128: "t128", 256: "t256", 512: "t512"}[tpr]
        y_n = torch.empty_like(x)
        self.netra(
            f"rmsnorm(hidden={h},weight_offset={wo})",
            rms_tactic,
            {"y": y_n.data_ptr(), "x": r_ref.data_ptr(), "w": w.data_ptr(), "eps": EPS},
            rows,
        )
        q_n = torch.empty(rows, h, dtype=torch.uint8, device="cuda")
        s_n = torch.empty(rows, h // 128, dtype=torch.float32, device="cuda")
        self.netra(
            f"fp8_group_quant(hidden={h},group=128)",
            "r1",
            {"q": q_n.data_ptr(), "scales": s_n.data_ptr(), "x": y_n.data_ptr()},
            rows,
        )
        result: dict[str, Any] = {"rows": rows, "failures": []}
        for inplace in (False, True) if add else (False,):
            bufs = {
                "residual_out": self.out(rows * h, torch.bfloat16),
                "y": self.out(rows * h, torch.bfloat16),
                "q": self.out(rows * h, torch.uint8),
                "scales": self.out(rows * h // 128, torch.float32),
            }
            res_in = res.clone()
            ro = res_in.data_ptr() if inplace else bufs["residual_out"].data_ptr() + GUARD
            if op == "fused_add_rmsnorm":
                ptrs = [ro, bufs["y"].data_ptr() + GUARD, x.data_ptr(), res_in.data_ptr(), w.data_ptr()]
            elif op == "rmsnorm_fp8_group_quant":
                ptrs = [
                    bufs["q"].data_ptr() + GUARD,
                    bufs["scales"].data_ptr() + GUARD,
                    x.data_ptr(),
                    w.data_ptr(),
                ]
            else:
                ptrs = [
                    ro,
                    bufs["q"].data_ptr() + GUARD,
                    bufs["scales"].data_ptr() + GUARD,
                    x.data_ptr(),
                    res_in.data_ptr(),
                    w.data_ptr(),
                ]
            self.launcher(symbol(op, h, wo, t["name"]), t, ptrs, rows)()
            torch.cuda.synchronize()
            tag = " (in place)" if inplace else ""
            used = {"residual_out": add and not inplace, "y": store_y, "q": quant, "scales": quant}
            for name, b in bufs.items():
                if used[name] and (bool((b[:GUARD] != 0xA5).any()) or bool((b[-GUARD:] != 0xA5).any())):
                    result["failures"].append(f"{name}{tag}: guard bytes written")
            got = {
                "residual_out": res_in
                if inplace
                else bufs["residual_out"][GUARD:-GUARD].view(torch.bfloat16).view(rows, h),
                "y": bufs["y"][GUARD:-GUARD].view(torch.bfloat16).view(rows, h),
                "q": bufs["q"][GUARD:-GUARD].view(rows, h),
                "scales": bufs["scales"][GUARD:-GUARD].view(torch.float32).view(rows, h // 128),
            }
            want = {"residual_out": r_ref, "y": y_n, "q": q_n, "scales": s_n}
            for name in ("residual_out", "y", "q", "scales"):
                if (name == "residual_out" and add) or used[name]:
                    a, b = got[name].view(torch.uint8), want[name].view(torch.uint8)
                    if not torch.equal(a, b):
                        n = int(
                            (
                                got[name].view(-1).view(torch.uint8) != want[name].view(-1).view(torch.uint8)
                            ).sum()
                        )
                        result["failures"].append(
                            f"{name}{tag}: {n} bytes differ from the unfused Netra chain"
                        )
        # float64 judges (netra.conformance, as certify judges the unfused kernels)
        rb = r_ref.view(torch.int16).cpu().numpy().view(np.uint16)
        wb = w.view(torch.int16).cpu().numpy().view(np.uint16)
        yb = y_n.view(torch.int16).cpu().numpy().view(np.uint16)
        pr = {"hidden": h, "weight_offset": wo}
        case = conformance.Case("fused", rows, {"x": rb, "w": wb}, {"eps": float(np.float32(EPS))})
        v = conformance.judge("rmsnorm", pr, case, {"y": yb})
        result["y_max_rel_deviation"] = v.max_rel_deviation
        result["y_one_ulp_at_midpoint"] = v.counts.get("bf16_one_ulp_at_midpoint", 0)
        if not v.passed:
            result["failures"].append(f"y vs float64: {v.reason}")
        if quant:
            pq = {"hidden": h, "group": 128}
            qc = conformance.Case("fused", rows, {"x": yb})
            vq = conformance.judge(
                "fp8_group_quant", pq, qc, {"q": q_n.cpu().numpy(), "scales": s_n.cpu().numpy()}
            )
            result["dequant_max_rel_deviation"] = vq.deviations.get("dequant")
            result["fp8_one_step_at_midpoint"] = vq.counts.get("fp8_one_step_at_midpoint", 0)
            if not vq.passed:
                result["failures"].append(f"q/scales vs float64: {vq.reason}")
        return result

    # -- timing -------------------------------------------------------------------------------------

    def time_fused(self, op: str, t: dict[str, Any], h: int, wo: int, rows: int) -> float:
        torch = self.torch
        add, store_y, quant = OPS[op]
        per_set = (
            rows * h * 2 * (2 if add else 1) + rows * h * (2 if store_y else 0) + rows * h * (2 if add else 0)
        )
        per_set += rows * (h + h // 32) if quant else 0
        sets = self.b.sets_for(per_set, rows, self.l2)
        launches, keep = [], []
        for i in range(sets):
            inp = self.inputs(h, wo, rows, 100 + i)
            ro, y = torch.empty_like(inp["x"]), torch.empty_like(inp["x"])
            q = torch.empty(rows, h, dtype=torch.uint8, device="cuda")
            s = torch.empty(rows, h // 128, dtype=torch.float32, device="cuda")
            keep += [inp, ro, y, q, s]
            x, res, w = inp["x"].data_ptr(), inp["residual"].data_ptr(), inp["w"].data_ptr()
            ptrs = {
                "fused_add_rmsnorm": [ro.data_ptr(), y.data_ptr(), x, res, w],
                "rmsnorm_fp8_group_quant": [q.data_ptr(), s.data_ptr(), x, w],
                "fused_add_rmsnorm_fp8_group_quant": [ro.data_ptr(), q.data_ptr(), s.data_ptr(), x, res, w],
            }[op]
            launches.append(self.launcher(symbol(op, h, wo, t["name"]), t, ptrs, rows))
        us = self.b.graph_us(torch, lambda i: launches[i % sets](i), self.b.per_graph(per_set, sets))
        del keep
        return us

    def time_add(self, h: int, rows: int) -> float:
        torch = self.torch
        per_set = rows * h * 6
        sets = self.b.sets_for(per_set, rows, self.l2)
        xs = [
            (
                torch.randn(rows, h, device="cuda").bfloat16(),
                torch.randn(rows, h, device="cuda").bfloat16(),
                torch.empty(rows, h, device="cuda", dtype=torch.bfloat16),
            )
            for _ in range(sets)
        ]
        return self.b.graph_us(
            torch,
            lambda i: torch.add(xs[i % sets][0], xs[i % sets][1], out=xs[i % sets][2]),
            self.b.per_graph(per_set, sets),
        )


def best_certified(table: dict[str, Any] | None, key: str, rows: int) -> tuple[str, float] | None:
    if table is None:
        return None
    entry = next((e for e in table["entries"] if e["key"] == key), None)
    best = None
    for c in entry["candidates"] if entry else []:
        hw = (c.get("evidence") or {}).get("hardware")
        if not hw or not hw["passed"]:
            continue
        t = next((x["median_us"] for x in hw["timings"] if x["rows"] == rows), None)
        if t is not None and (best is None or t < best[1]):
            best = (c["tactic"], t)
    return best


def bytes_moved(op: str, h: int, rows: int) -> int:
    add, store_y, quant = OPS[op]
    return (
        rows
        * (
            2 * h * (2 if add else 1)
            + (2 * h if add else 0)
            + (2 * h if store_y else 0)
            + ((h + h // 32) if quant else 0)
        )
        + 2 * h
    )


def run(args: argparse.Namespace) -> int:
    f = Fused(Path(args.cubins))
    table = json.loads(Path(args.table).read_text()) if args.table and Path(args.table).exists() else None
    out: dict[str, Any] = {"checks": [], "timings": []}
    copy_cache: dict[int, dict[str, float]] = {}
    add_cache: dict[tuple[int, int], float] = {}
    lines = []
    for t in tactics():
        op = t["op"]
        for h, wo in CONTRACTS:
            fails = []
            for i, rows in enumerate(args.check_rows):
                r = f.check_case(op, t, h, wo, rows, seed=i)
                r.update(op=op, hidden=h, weight_offset=wo, tactic=t["name"])
                out["checks"].append(r)
                fails += r["failures"]
            print(f"check {op} h{h} {t['name']}: {'ok' if not fails else '; '.join(fails)}", flush=True)
    for t in tactics():
        op = t["op"]
        add, _, quant = OPS[op]
        for h, wo in CONTRACTS:
            for rows in TIME_ROWS:
                us = f.time_fused(op, t, h, wo, rows)
                nb = bytes_moved(op, h, rows)
                each = -(-nb // 32) * 16
                if each not in copy_cache:
                    copy_cache[each] = {} if args.no_copies else f.copies.time(each, rows, f.l2)
                copy = copy_cache[each]
                if add and (h, rows) not in add_cache:
                    add_cache[(h, rows)] = round(f.time_add(h, rows), 3)
                chain, parts = 0.0, []
                rk = best_certified(table, f"rmsnorm(hidden={h},weight_offset={wo})", rows)
                qk = (
                    best_certified(table, f"fp8_group_quant(hidden={h},group=128)", rows)
                    if quant
                    else ("", 0.0)
                )
                if rk and qk:
                    chain = rk[1] + qk[1] + (add_cache[(h, rows)] if add else 0.0)
                    parts = [f"rmsnorm {rk[0]} {rk[1]:.2f}"] + ([f"fp8 {qk[0]} {qk[1]:.2f}"] if quant else [])
                    parts += [f"add {add_cache[(h, rows)]:.2f}"] if add else []
                row = {
                    "op": op,
                    "hidden": h,
                    "weight_offset": wo,
                    "tactic": t["name"],
                    "rows": rows,
                    "us": round(us, 3),
                    "bytes": nb,
                    "copy_best_us": min(copy.values()) if copy else None,
                    "copy_us": copy,
                    "add_us": add_cache.get((h, rows)) if add else None,
                    "chain_us": round(chain, 3) if chain else None,
                    "chain": parts,
                }
                out["timings"].append(row)
                lines.append(
                    f"{op:34} h{h:<5} {t['name']:5} {rows:>6} {us:8.2f} us  {nb / us / 1e6:5.2f} TB/s  "
                    + (f"x copy {us / row['copy_best_us']:4.2f}  " if copy else "")
                    + (f"chain {chain:8.2f} ({chain / us:4.2f}x: {', '.join(parts)})" if chain else "")
                )
                print(lines[-1], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    bad = [c for c in out["checks"] if c["failures"]]
    print(f"fused checks: {len(out['checks']) - len(bad)} of {len(out['checks'])} cases ok")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("out")
    r = sub.add_parser("run")
    r.add_argument("cubins")
    r.add_argument("--json")
    r.add_argument(
        "--table", help="a certified sm_90 table: the unfused chain's fastest tactics per row count"
    )
    r.add_argument(
        "--check-rows",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        default=CHECK_ROWS,
        help="row counts of the correctness checks (default: %(default)s)",
    )
    r.add_argument("--no-copies", action="store_true", help="skip the same-bytes copy kernels")
    args = ap.parse_args(argv)
    return build(Path(args.out)) if args.cmd == "build" else run(args)


if __name__ == "__main__":
    sys.exit(main())
