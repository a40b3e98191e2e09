"""Where one routed-MoE call spends its time: the phase marks of a trace build of the chain's two kernels.

Issue 28: at one token the chain takes 1.66x the read limit on an H100, and ncu says latency, not
bandwidth, bounds both stages; requesting a CTA's whole tile at once (TILE) did not move it. What a
profile's averages cannot show is the order of the waits on the critical path: the routing, the weights,
the fence and counter that hand a 128-column group to its last CTA, the down stage's griddepcontrol.wait
and its slot sum. This script times them.

A trace build is the template compiled with NETRA_TRACE (kernels/cuda/include/netra_trace.cuh): thread 0
of each CTA writes %globaltimer at the kernel's marks into one more argument. Without NETRA_TRACE the
marks are nothing, so the release artifacts are what they were (`--cpu-smoke` checks that the release
build of each kernel still has the lock's .text). The trace cubins are built here from this tree's
kernels and manifests by the toolchain netra's build finds, never shipped; they are loaded and launched
through netra's CUDA driver bindings, gate/up then down with programmatic dependent launch as netra.torch
launches the chain, on inputs made on the device from a seed, with L2 refilled before each call by a
read of 256 MB so that the weights come from DRAM, as they do in a model of many layers (a read, not a
write: a write leaves L2 full of dirty lines whose write-back then competes with the weights' reads, which
inflated the first traces, 2026-12-06). Each call starts behind a spin kernel of about 50 us on the
stream, so that both launches are queued before gate/up runs, as a CUDA graph's replay queues them:
launched from Python on an idle GPU, the down stage's launch came about 12 us after gate/up had started
(its 512 CTAs all entered within 0.2 us of each other, 12.4 us in, on an H100 in the eleventh session),
which the traces before then measured instead of where the hardware lets the down CTAs in.

Marks, in ns from the call's first gate/up entry:
  gate/up: 0 entry, 1 routed, 2 multiplied (its h32 stored), 3 fenced, 4 counter read, 5 exit
           (the last CTA of a 128-column group: after quantizing it; flag 6 says which CTAs were last)
  down:    0 entry, 1 routed, 2 past griddepcontrol.wait, 3 multiplied (its y32 stored), 4 counter
           read, 5 exit (after the slot sums it wrote)
Each is printed as the median over --runs calls of its earliest, median and latest CTA (of those that
multiplied: a CTA whose grid row names no hit expert returns after routing). Then how many down CTAs
entered before the last gate/up CTA exited: the down stage requests its weights before
griddepcontrol.wait, which only overlaps the gate/up stage where its CTAs are resident beside gate/up's
(registers, shared memory). --carveout sets both
kernels' preferred shared-memory carveout (percent; the driver's choice otherwise), to tell the two
limits apart.

    python bench/trace_moe.py --contract Qwen3-30B-A3B --chain g4r8+d3 --tokens 1 --json OUT.json
    python bench/trace_moe.py --cpu-smoke --json OUT.json   # builds and checks the cubins; nothing runs

It runs from a source tree (PYTHONPATH at the repository) on a machine with nvcc, torch with CUDA and an
sm_90 GPU; tools/gpu-session does not wrap it (it needs the tree's kernels, not an install).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _entry import run
from bench_moe import CONTRACTS, ROUTINGS, one_line

REPO = Path(__file__).resolve().parent.parent
SLOTS = 8
GATE_MARKS = ("entry", "routed", "multiplied", "fenced", "counter", "exit")
DOWN_MARKS = ("entry", "routed", "waited", "multiplied", "counter", "exit")
LAST_FLAG = 6  # gate/up: 1 where the CTA quantized its group
# The tensor-core templates' marks, by slot (their sources): slot 7 is the first k block landing in the
# ring (after the routing and the ring's first requests); gate/up's 3 and 4 are h stored in shared
# memory and the group's max exchanged (the cluster barrier of a 64-column CTA; at once at 128)
TC_MARKS = {
    "fp8_moe_gate_up_tc": {0: "entry", 1: "routed", 7: "first block", 2: "multiplied", 3: "h stored",
                           4: "group max", 5: "exit"},
    "fp8_moe_down_tc": {0: "entry", 1: "routed", 2: "waited", 7: "first block", 3: "multiplied", 4: "counter",
                        5: "exit"},
}  # fmt: skip


def marks_of(spec: Any) -> dict[int, str]:
    """The slots the trace build of `spec` writes, in the order they are reached, and their names."""
    if spec.template.name in TC_MARKS:
        return TC_MARKS[spec.template.name]
    return dict(enumerate(GATE_MARKS if spec.op == "fp8_moe_gate_up" else DOWN_MARKS))


L2_FLUSH_BYTES = 256 * 2**20  # read before every call: past the H100's and H200's 50 MB of L2
SPIN_CYCLES = 100_000  # the spin before each call: about 50 us at the H100's and H200's 1.98 GHz


class TraceError(Exception):
    """What stops the run, in one line."""


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contract", choices=sorted(CONTRACTS), default="Qwen3-30B-A3B")
    ap.add_argument("--chain", default="g4r8+d3", help="gate/up tactic + down tactic (sm_90's names)")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--routing", choices=ROUTINGS, default="uniform")
    ap.add_argument("--runs", type=int, default=20, help="timed calls (after 3 warm-up calls)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--carveout",
        type=int,
        default=None,
        metavar="PERCENT",
        help="both kernels' preferred shared-memory carveout, 0 to 100 (default: the driver's choice)",
    )
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--cpu-smoke", action="store_true", help="build and check the trace cubins; run nothing")
    args = ap.parse_args(argv)
    if args.chain.count("+") != 1:
        ap.error(f"--chain {args.chain}: expected GATE_UP_TACTIC+DOWN_TACTIC, e.g. g4r8+d3")
    if not 1 <= args.tokens <= 64:
        ap.error(f"--tokens {args.tokens}: the contracts serve 1 to 64 tokens per call")
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.carveout is not None and not 0 <= args.carveout <= 100:
        ap.error(f"--carveout {args.carveout}: a percentage of the shared memory and L1, 0 to 100")
    if args.json is not None and not args.json.parent.is_dir():
        ap.error(f"--json {args.json}: its folder does not exist")
    return args


# -- the trace build ---------------------------------------------------------------------------------


def specs(contract: str, chain: str) -> tuple[Any, Any]:
    """The release specs of the chain's two sm_90 artifacts at `contract` (this tree's manifests)."""
    from netra.release import manifests

    params = CONTRACTS[contract]
    cat = manifests.load(REPO)
    found = []
    for op, tactic in zip(("fp8_moe_gate_up", "fp8_moe_down"), chain.split("+"), strict=True):
        hit = [a for a in cat.artifacts if a.target == "sm_90" and a.op == op and a.tactic.name == tactic
               and all(a.contract.get(k) == v for k, v in params.items())]  # fmt: skip
        if not hit:
            raise TraceError(f"{op} tactic {tactic} is not built for {contract} on sm_90 (`netra explain` lists "
                             "the candidates of a contract)")  # fmt: skip
        found.append(hit[0])
    return found[0], found[1]


def build(spec: Any, tools: Any, trace: bool, work: Path) -> bytes:
    """The cubin of `spec`, or of its trace build (NETRA_TRACE defined), compiled here by `tools`."""
    from netra import targets
    from netra.errors import AssemblyError

    sm90 = targets.get("sm_90")
    if not trace:
        return sm90.compile(spec, tools, REPO, work, work / "release").read_bytes()

    def traced(definitions: dict[str, int]) -> bytes:
        built = dataclasses.replace(spec, definitions=definitions)
        return sm90.compile(built, tools, REPO, work, work / "trace").read_bytes()

    marks = {**spec.definitions, "NETRA_TRACE": 1, "NETRA_TRACE_SLOTS": SLOTS}
    try:
        return traced(marks)
    except AssemblyError as e:  # the marks cost a register the tactic has not got
        if "Local memory" not in e.message:
            raise
    print(f"{spec.name}: the trace build spills; built with NETRA_TRACE_RECOMPUTE (include/netra_trace.cuh)")
    return traced({**marks, "NETRA_TRACE_RECOMPUTE": 1})  # the slot read afresh at each mark


def layout(spec: Any) -> Any:
    """The trace build's kernarg layout: the template's arguments (its manifest), then the trace buffer,
    8-byte aligned after them (include/netra_trace.cuh's NETRA_TRACE_PARAM)."""
    from netra.runtime.kernarg import KernargArg, KernargLayout

    args = [KernargArg(a.name, a.offset, a.size, a.value_kind, a.type) for a in spec.template.args]
    at = -(-spec.template.kernarg_bytes // 8) * 8
    return KernargLayout(at + 8, (*args, KernargArg("netra_trace", at, 8, "global_buffer", "u64*")))


def grid(spec: Any, tokens: int) -> tuple[int, int, int]:
    """The launch's grid at `tokens`: the family record's expressions with the contract and the tactic
    bound, as netra's table writes them (netra.release.tablegen.grid)."""
    from netra.core import expr
    from netra.core.ops import FAMILIES

    fam = FAMILIES[spec.op]
    env = {**spec.launch_env, fam.dispatch: tokens}
    x, y, z = (expr.evaluate(axis, env) for axis in fam.launch.steps[0].grid)
    return x, y, z


def check(spec: Any, tools: Any, release: bytes, traced: bytes, tokens: int) -> dict[str, Any]:
    """The release build still has the lock's .text (the marks are nothing there) where `tools` is the
    toolchain the lock names (another nvcc makes other code: then only the next checks hold); the trace
    build takes the trace buffer after the template's arguments (layout) and has other machine code."""
    from netra.runtime import lockfile
    from netra.targets.sm_90 import cubin

    lock = lockfile.read(REPO / "release" / "manifest.lock")
    locked = next(a.text_sha256 for a in lock.artifacts if a.name == spec.name)
    got = cubin.text_sha256(release, spec.symbol)
    same = lock.toolchains.get("sm_90") == tools.identity
    if same and got != locked:
        raise TraceError(f"{spec.name}: the release build's .text {got[:12]} is not the lock's {locked[:12]}: "
                         "a trace mark reaches the release build (kernels/cuda/include/netra_trace.cuh)")  # fmt: skip
    k = cubin.inspect(traced).kernels[spec.symbol]
    last, want = max(k.params, key=lambda p: p.offset), layout(spec)
    if len(k.params) != len(want.args) or (last.offset, last.size) != (want.args[-1].offset, 8):
        raise TraceError(f"{spec.name}: the trace build's parameters are not the template's and a trace pointer "
                         f"({len(k.params)} parameters, last at {last.offset}, {last.size} bytes)")  # fmt: skip
    traced_text = cubin.text_sha256(traced, spec.symbol)
    if traced_text == got:
        raise TraceError(
            f"{spec.name}: the trace build has the release build's machine code: NETRA_TRACE changed nothing"
        )
    return {"artifact": spec.name, "release_text_sha256": got, "trace_text_sha256": traced_text,
            "release_is_locked": (got == locked) if same else None, "toolchain": str(tools.identity),
            "block": spec.definitions["NETRA_BLOCK"], "dynamic_shared": spec.dynamic_shared,
            "grid": list(grid(spec, tokens)), "kernarg_bytes": want.size}  # fmt: skip


# -- the run -------------------------------------------------------------------------------------------


def inputs(torch: Any, p: dict[str, int], tokens: int, routing: str, seed: int, dev: Any) -> dict[str, Any]:
    """The chain's operands and workspaces, made on the device from `seed` (FP8 codes never NaN)."""
    g = torch.Generator(device=dev).manual_seed(seed)
    e, k, h, i = p["experts"], p["topk"], p["hidden"], p["inter"]

    def fp8(*shape: int) -> Any:
        code = torch.randint(0, 0x7F, shape, generator=g, device=dev, dtype=torch.uint8)  # 0x7F is NaN
        return code | (torch.randint(0, 2, shape, generator=g, device=dev, dtype=torch.uint8) << 7)

    def scale(*shape: int) -> Any:
        return torch.rand(shape, generator=g, device=dev) * 0.01 + 0.001

    if routing == "same":
        ids = torch.arange(k, device=dev, dtype=torch.int32).repeat(tokens, 1)
    else:
        ids = torch.stack([torch.randperm(e, generator=g, device=dev)[:k] for _ in range(tokens)]).to(
            torch.int32
        )
    w = torch.rand((tokens, k), generator=g, device=dev)
    pairs = tokens * k
    return {
        "xq": fp8(tokens, h), "xs": scale(tokens, h // 128), "ids": ids.contiguous(), "weights": w / w.sum(1, keepdim=True),
        "w13": fp8(e, 2 * i, h), "w13s": scale(e, 2 * i // 128, h // 128), "w2": fp8(e, h, i),
        "w2s": scale(e, h // 128, i // 128), "hq": torch.zeros((pairs, i), device=dev, dtype=torch.uint8),
        "hs": torch.zeros((pairs, i // 128), device=dev), "h32": torch.zeros((pairs, i), device=dev),
        "counts_gate": torch.zeros((e, i // 128), device=dev, dtype=torch.int32),
        "out": torch.zeros((tokens, h), device=dev, dtype=torch.bfloat16), "y32": torch.zeros((pairs, h), device=dev),
        "counts_down": torch.zeros((tokens, h // 32), device=dev, dtype=torch.int32),
    }  # fmt: skip


def summarize(
    kernel: str, t: Any, marks: tuple[str, ...] | dict[int, str], t0: int
) -> dict[str, list[float]]:
    """Per mark: the earliest, median and latest CTA, in ns from t0, over the CTAs that multiplied (a CTA
    whose row of the grid names no hit expert returns after routing and is left out). Every one of them
    must have written every mark: one that did not is a mark missing from its path in the kernel."""
    busy = t[t[:, 2] > 0]
    if not len(busy):
        raise TraceError(f"no {kernel} CTA reached its third mark: the trace build wrote no marks")
    out = {}
    for s, name in (marks if isinstance(marks, dict) else dict(enumerate(marks))).items():
        v = sorted(x - t0 for x in busy[:, s].tolist() if x)
        if len(v) != len(busy):
            raise TraceError(f"{len(busy) - len(v)} of {len(busy)} {kernel} CTAs never wrote mark {s} ({name}): "
                             "a path of the kernel lacks it (include/netra_trace.cuh)")  # fmt: skip
        out[name] = [float(v[0]), float(statistics.median(v)), float(v[-1])]
    return out


def overlap(tg: Any, td: Any) -> dict[str, int]:
    """How many down CTAs entered before the last gate/up CTA exited (of all that entered): those whose
    weight requests before griddepcontrol.wait can overlap the gate/up stage."""
    gate_end = int(tg[:, 5].max())  # every template's exit mark (and 0 its entry)
    entered = td[:, 0]
    entered = entered[entered > 0]
    return {"down_ctas": len(entered), "down_early": int((entered < gate_end).sum())}


def timed(args: argparse.Namespace, gate: Any, down: Any, built: dict[str, bytes]) -> dict[str, Any]:
    import torch

    from netra.loaders import cuda

    if not torch.cuda.is_available():
        raise TraceError("no CUDA device visible to torch (--cpu-smoke builds and checks the cubins)")
    dev = torch.device("cuda")
    p = CONTRACTS[args.contract]
    x = inputs(torch, p, args.tokens, args.routing, args.seed, dev)  # torch's context is now current
    cu = cuda.Cuda()
    cu.context()
    traces: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    steps = []  # (name, grid, launch: cuLaunchKernel's signature, its arguments after the grid)
    marks = {"gate": marks_of(gate), "down": marks_of(down)}
    for name, spec in (("gate", gate), ("down", down)):
        _, fn = cu.load_function(built[name], spec.symbol, spec.name + " (trace build)")
        dyn, block, g = spec.dynamic_shared, spec.definitions["NETRA_BLOCK"], grid(spec, args.tokens)
        if dyn:
            cu.check(cu.lib.cuFuncSetAttribute(fn, cuda.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dyn),
                     f"cuFuncSetAttribute({spec.symbol})")  # fmt: skip
        if args.carveout is not None:
            cu.check(cu.lib.cuFuncSetAttribute(fn, cuda.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, args.carveout),
                     f"cuFuncSetAttribute({spec.symbol}, carveout)")  # fmt: skip
        traces[name] = torch.zeros((g[1], g[0], SLOTS), device=dev, dtype=torch.int64)
        own = {**x, "counts": x[f"counts_{name}"], "tokens": args.tokens, "netra_trace": traces[name]}
        want = layout(spec)
        extras[name] = cuda.Extra(want.pack(**{n: own[n] for n in want.names}))
        # the down stage overlaps the gate/up stage's tail (programmatic dependent launch), as netra.torch's chain
        launch = cu.lib.cuLaunchKernel if name == "gate" else cuda.overlapping(cu, (block, 1, 1), dyn)
        steps.append((name, g, launch, (fn, *g, block, 1, 1, dyn)))
    flush = torch.ones(L2_FLUSH_BYTES // 4, device=dev, dtype=torch.int32)
    stream = torch.cuda.current_stream()
    handle = stream.cuda_stream or None  # the current stream (0: the legacy default stream)
    runs = []
    for it in range(3 + args.runs):
        for t in traces.values():
            t.zero_()
        flush.sum()  # a read: L2 left holding clean lines of it
        torch.cuda.synchronize()
        torch.cuda._sleep(SPIN_CYCLES)  # both launches queued before gate/up starts, as in a graph's replay
        for name, _, launch, head in steps:
            rc = launch(*head, handle, None, extras[name].array)
            if rc:
                cu.check(rc, f"launch of the {name} trace build")
        torch.cuda.synchronize()
        if it < 3:
            continue
        tg, td = traces["gate"].view(-1, SLOTS).cpu(), traces["down"].view(-1, SLOTS).cpu()
        t0 = int(tg[:, 0][tg[:, 0] > 0].min())
        runs.append({"gate": summarize("gate/up", tg, marks["gate"], t0), "down": summarize("down", td, marks["down"], t0),
                     "last_ctas": int((tg[:, LAST_FLAG] == 1).sum()), **overlap(tg, td)})  # fmt: skip
    if not torch.isfinite(x["out"].float()).all() or not x["out"].float().abs().sum() > 0:
        raise TraceError(
            "the trace build's output is not finite or is all zero: the launch is not the chain's"
        )
    if int(x["counts_gate"].abs().sum()) or int(x["counts_down"].abs().sum()):
        raise TraceError("a counter is not back at zero after the calls: the launch is not the chain's")
    med = {}
    for kern, ms in marks.items():
        med[kern] = {m: [statistics.median(r[kern][m][j] for r in runs) for j in range(3)]
                     for m in ms.values()}  # fmt: skip
    return {"device": torch.cuda.get_device_name(0), "grids": {n: g for n, g, _, _ in steps}, "runs": len(runs),
            "last_ctas": runs[-1]["last_ctas"], "median_ns": med, "carveout": args.carveout,
            "down_ctas": runs[-1]["down_ctas"],
            "down_early": statistics.median(r["down_early"] for r in runs)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    sys.path.insert(0, str(REPO))
    try:
        from netra import targets

        gate, down = specs(args.contract, args.chain)
        tools = targets.get("sm_90").discover()
        built, checked = {}, []
        with tempfile.TemporaryDirectory(prefix="netra-trace-") as tmp:
            for name, spec in (("gate", gate), ("down", down)):
                release = build(spec, tools, False, Path(tmp))
                built[name] = build(spec, tools, True, Path(tmp))
                checked.append(check(spec, tools, release, built[name], args.tokens))
        for c in checked:
            held = (
                "= the lock's"
                if c["release_is_locked"]
                else f"(not compared: {c['toolchain']} is not the lock's)"
            )
            print(f"{c['artifact']}: release .text {c['release_text_sha256'][:12]} {held}; trace build "
                  f"{c['trace_text_sha256'][:12]} ({c['block']} threads)")  # fmt: skip
        doc: dict[str, Any] = {"bench": "trace_moe", "args": {k: (str(v) if isinstance(v, Path) else v)
                               for k, v in vars(args).items()}, "artifacts": checked}  # fmt: skip
        if not args.cpu_smoke:
            doc["trace"] = timed(args, gate, down, built)
            tr = doc["trace"]
            print(f"{tr['device']}: {args.contract} {args.chain}, {args.tokens} token(s) {args.routing}, grids "
                  f"{tr['grids']}, median of {tr['runs']} calls (ns from the first gate/up entry: first / median / "
                  f"last CTA); {tr['last_ctas']} gate/up CTAs quantized a group")  # fmt: skip
            for kern in ("gate", "down"):
                for mark, (a, b, c) in tr["median_ns"][kern].items():
                    print(f"  {kern:5s} {mark:11s} {a:9.0f} {b:9.0f} {c:9.0f}")
            print(
                f"  down CTAs that entered before the last gate/up CTA exited: {tr['down_early']:g} of "
                f"{tr['down_ctas']} (carveout: {'driver' if args.carveout is None else f'{args.carveout}%'})"
            )
    except TraceError as e:
        sys.exit(f"trace_moe: {e}")
    except BrokenPipeError:  # the reader went away: _entry.run ends quietly with 141, as every bench script
        raise
    except Exception as e:  # a toolchain or driver error: one line, not a traceback
        sys.exit(f"trace_moe: {one_line(e)}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    run(main)
