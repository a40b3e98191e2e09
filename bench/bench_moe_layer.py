"""The decode step of a Qwen3-30B-A3B decoder layer with FP8 experts: Netra serving it against transformers.

Issue 28's end to end. One decoder layer of the published Qwen3-30B-A3B config (tests/hf_models.py, written
from its config.json), random weights, its routed experts made what loading the FP8 checkpoint makes of
them (transformers' own FP8Experts: E4M3FN codes, float32 scales per 128 x 128 block). Per batch size B
(B sequences, one new token each, no KV cache: the attention sees one token, so the step is the layer's
norms, projections, router and experts), the base model's forward (the decoder layer and the final norm;
the embedding lookup, no lm_head) timed as

- netra: apply_netra(model, strict=True): its norms and FP8 experts through netra.torch, certified only
  (`nt.strict()` around every call); in a CUDA graph and eagerly;
- transformers-fp8 IMPL: the same model unpatched, its FP8Experts run by each of transformers' experts
  implementations (`config._experts_implementation`: its default, batched_mm, grouped_mm); in a CUDA graph
  where it captures, else eagerly (the capture's error said);
- torch-bf16 IMPL: the same layer with the experts dequantized to bf16 (what a user without an FP8 kernel
  runs), by the same implementations;

each output against torch-bf16's default (relative error norm). Interleaved rounds, the median; us per step.

    python bench/bench_moe_layer.py --json OUT.json          # on the GPU machine, the wheel installed
    python bench/bench_moe_layer.py --cpu-smoke --json OUT.json

--cpu-smoke builds the shrunk config (tests/hf_models.tiny) on CPU, runs every variant once (netra.torch's
composite there), compares them and times nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_moe as bm
from _entry import run

# tests/hf_models.py holds the published configs (written from each config.json, no network) and makes FP8
# experts as a FineGrainedFP8 checkpoint loads them; the GPU test of the same layer uses it too
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

MODEL = "Qwen3-30B-A3B"
IMPLS = ("default", "batched_mm", "grouped_mm")  # transformers' experts implementations tried
STEPS = 10  # forwards a CUDA graph holds


def dequantize(fp8: Any, dq: Any) -> None:
    """dq's experts (transformers' bf16 class) given fp8's weights, decoded: codes x their block's scale."""
    import torch

    for name, module in fp8.named_modules():
        if not name.endswith(".experts"):
            continue
        target = dq.get_submodule(name)
        with torch.no_grad():
            for proj in ("gate_up_proj", "down_proj"):
                w, s = getattr(module, proj), getattr(module, f"{proj}_scale_inv")
                full = s.float().repeat_interleave(128, -2).repeat_interleave(128, -1)
                getattr(target, proj).copy_((w.float() * full).to(torch.bfloat16))


def rel(torch: Any, got: Any, ref: Any) -> float:
    return float((got.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30))


class Timed:
    """One variant's step: its graph of STEPS forwards where it captures, and its eager time."""

    def __init__(self, torch: Any, step: Callable[[], Any], strict: Any, gpu: bool) -> None:
        self.torch, self.step, self.strict = torch, step, strict
        self.graph: Any = None
        self.why = ""
        self.eager: list[float] = []
        self.replays: list[float] = []
        with strict():
            self.out = step()
        if not gpu:
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(side), strict():
                for _ in range(2):
                    step()
            side.synchronize()
            g = torch.cuda.CUDAGraph()
            with strict(), torch.cuda.graph(g, stream=side):
                for _ in range(STEPS):
                    step()
            g.replay()
            torch.cuda.synchronize()
            self.graph = g
        except Exception as e:  # transformers' own paths may not capture (a host read): said, timed eagerly
            self.why = bm.one_line(e)
            torch.cuda.synchronize()

    def round(self) -> None:
        torch = self.torch
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if self.graph is not None:
            a.record()
            self.graph.replay()
            b.record()
            b.synchronize()
            self.replays.append(a.elapsed_time(b) * 1e3 / STEPS)
        with self.strict():
            a.record()
            for _ in range(STEPS):
                self.step()
            b.record()
        b.synchronize()
        self.eager.append(a.elapsed_time(b) * 1e3 / STEPS)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument(
        "--batch", nargs="+", type=int, default=[1, 8, 32], help="sequences a step (a token each)"
    )
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--cpu-smoke", action="store_true", help="the shrunk config on CPU, nothing timed")
    a = ap.parse_args(argv)
    if any(b < 1 or b > 64 for b in a.batch):
        ap.error("--batch: each from 1 to 64 (the routed experts' decode range)")
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if a.json is not None and not a.json.parent.is_dir():
        ap.error(f"--json {a.json}: its folder does not exist")
    return a


def main(argv: list[str] | None = None) -> None:
    import contextlib

    a = parse(argv)
    torch, nt, gpu, env = bm.start("bench_moe_layer", a.cpu_smoke)
    import hf_models

    from netra.integrations.transformers import apply_netra

    dev = "cuda" if gpu else "cpu"
    cfg = hf_models.tiny(MODEL) if a.cpu_smoke else hf_models.published(MODEL, layers=1)
    fp8 = hf_models.build(cfg, torch.bfloat16, dev)
    hf_models.fp8_experts(fp8)
    dq = hf_models.build(cfg, torch.bfloat16, dev)  # the same seed: the same weights but the experts'
    dequantize(fp8, dq)
    served = hf_models.build(cfg, torch.bfloat16, dev)  # fp8's twin (the same seeds), served by netra
    hf_models.fp8_experts(served)
    apply_netra(served, strict=gpu, experts="auto" if gpu else "netra")
    none = contextlib.nullcontext
    rows = []
    for b in a.batch if not a.cpu_smoke else [1, 3]:
        ids = torch.randint(0, cfg.vocab_size, (b, 1), generator=torch.Generator().manual_seed(b)).to(dev)

        def forward(model: Any, impl: str | None = None, ids: Any = ids) -> Any:
            """One step, under the experts implementation `impl` (None: transformers' default): set at each
            call, since every variant's eager steps run in the same rounds."""
            model.config._experts_implementation = impl
            with torch.no_grad():
                return model.model(input_ids=ids, use_cache=False).last_hidden_state

        variants: dict[str, Timed] = {}
        for impl in IMPLS:
            for name, model in (("torch-bf16", dq), ("transformers-fp8", fp8)):
                which = None if impl == "default" else impl
                try:
                    variants[f"{name} {impl}"] = Timed(
                        torch, lambda m=model, w=which: forward(m, w), none, gpu
                    )
                except Exception as e:  # an implementation this torch or GPU lacks: said, not timed
                    print(f"B={b} {name} {impl}: failed: {bm.one_line(e)}")
        nt.reset_stats()
        variants["netra"] = Timed(torch, lambda: forward(served), nt.strict if gpu else none, gpu)
        if gpu:
            for _ in range(a.rounds):
                for v in variants.values():
                    v.round()
            paths = {k: p for k, p in nt.stats().items() if set(p) != {"certified"}}
            if paths:
                raise SystemExit(f"bench_moe_layer: netra served a call uncertified while timed: {paths}")
        ref = variants["torch-bf16 default"].out
        rec: dict[str, Any] = {"batch": b, "variants": {}}
        for n, v in variants.items():
            e: dict[str, Any] = {"rel_to_torch_bf16": rel(torch, v.out, ref)}
            if v.eager:
                e["eager_us"] = statistics.median(v.eager)
            if v.replays:
                e["graph_us"] = statistics.median(v.replays)
            if v.why:
                e["graph_failed"] = v.why
            rec["variants"][n] = e
        rows.append(rec)
        print(f"B={b}: " + "; ".join(
            f"{n} " + (f"graph {e['graph_us']:.1f} us, " if "graph_us" in e else "")
            + (f"eager {e['eager_us']:.1f} us, " if "eager_us" in e else "") + f"rel {e['rel_to_torch_bf16']:.2e}"
            for n, e in rec["variants"].items()))  # fmt: skip
    if a.json:
        a.json.write_text(
            json.dumps({"environment": env, "model": MODEL, "rows": rows}, indent=1, sort_keys=True)
        )
        print(f"wrote {a.json}")


if __name__ == "__main__":
    run(main)
