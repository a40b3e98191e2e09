"""v3 driver (device only): correctness against float64 and CUDA-graph timings beside the read limit."""
import ctypes
import json
import math
import os
import sys

import numpy as np
import torch

import run_proto as rp
from run_proto import E, K, Func, dev, inputs, routing, deq, quant_groups, time_graph

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.environ.get("OUT", "/tmp")
SHAPES = {"30b": (2048, 768), "235b": (4096, 1536)}
SM = 132


class ArgsT(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("hq", "hs", "partA", "partB", "cntA", "cntB", "done", "xq", "xs", "ids",
                                                "tw", "w13", "s13", "w2", "s2", "out")] + [("M", ctypes.c_uint32)]


class Moe3:
    def __init__(self, name, layers, kpa=512, kpb=256, sa=4, sb=6):
        H, I = SHAPES[name]
        self.H, self.I = H, I
        self.kpa, self.kpb, self.sa, self.sb = kpa, kpb, sa, sb
        self.w13 = [rp.rand_fp8((E, 2 * I, H)) for _ in range(layers)]
        self.w2 = [rp.rand_fp8((E, H, I)) for _ in range(layers)]
        self.s13 = [torch.rand(E, 2 * I // 128, H // 128, device=dev) * 2e-4 + 1e-4 for _ in range(layers)]
        self.s2 = [torch.rand(E, H // 128, I // 128, device=dev) * 2e-4 + 1e-4 for _ in range(layers)]
        P = 64 * K
        self.hq = torch.zeros(P, I, dtype=torch.uint8, device=dev)
        self.hs = torch.zeros(P, I // 128, dtype=torch.float32, device=dev)
        self.partA = torch.zeros(P * (H // kpa) * 2 * I, dtype=torch.float32, device=dev)
        self.partB = torch.zeros(P * (I // kpb) * H, dtype=torch.float32, device=dev)
        self.cntA = torch.zeros(E * I // 128, dtype=torch.int32, device=dev)
        self.cntB = torch.zeros(64 * H // 32, dtype=torch.int32, device=dev)
        self.expert_bytes = 3 * I * H + 4 * (2 * I // 128) * (H // 128) + 4 * (H // 128) * (I // 128)
        self.parts = "AB"

    def use(self, cubin, ca, cb, fused=False, stages=4, kpb=256):
        path = os.path.join(HERE, cubin)
        self.fused = fused
        if fused:
            self.ff = Func(path, "moe_fused")
            self.ff.smem(stages * 32 * max(self.kpa, kpb))
            self.ca = ca
            self.done = torch.zeros(E + 1, dtype=torch.int32, device=dev)
            self.partB = torch.zeros(64 * K * (self.I // kpb) * self.H, dtype=torch.float32, device=dev)
            return
        self.fa = Func(path, "moe_gate_up")
        self.fb = Func(path, "moe_down")
        self.fa.smem(self.sa * 32 * self.kpa)
        self.fb.smem(self.sb * 32 * self.kpb)
        self.ca, self.cb = ca, cb

    def call(self, out, xq, xs, ids, tw, layer):
        M = xq.shape[0]
        if self.fused:
            p = lambda t: t.data_ptr()
            a = ArgsT(p(self.hq), p(self.hs), p(self.partA), p(self.partB), p(self.cntA), p(self.cntB), p(self.done),
                      p(xq), p(xs), p(ids), p(tw), p(self.w13[layer]), p(self.s13[layer]), p(self.w2[layer]),
                      p(self.s2[layer]), p(out), M)
            self._keep = a
            self.ff((SM * self.ca,), (160,), (a,))
            return
        if "A" in self.parts:
            self.fa((SM * self.ca,), (160,), (self.hq, self.hs, self.partA, self.cntA, xq, xs, ids,
                    self.w13[layer], self.s13[layer], M))
        if "B" in self.parts:
            self.fb((SM * self.cb,), (160,), (out, self.partB, self.cntB, self.hq, self.hs, ids, tw,
                    self.w2[layer], self.s2[layer], M), pdl=True)


def order(c):
    mag = c & 0x7F
    return torch.where(c & 0x80 != 0, -mag, mag)


def check(m, M, mode):
    g = torch.Generator(device=dev).manual_seed(1000 + M)
    xq, xs = inputs(M, m.H, g)
    ids, tw = routing(M, mode, g)
    out = torch.empty(M, m.H, dtype=torch.bfloat16, device=dev)
    m.call(out, xq, xs, ids, tw, 0)
    torch.cuda.synchronize()
    out2 = torch.empty_like(out)
    m.call(out2, xq, xs, ids, tw, 0)
    torch.cuda.synchronize()
    det = bool(torch.equal(out.view(torch.int16), out2.view(torch.int16)))
    xd = xq.double() * xs.double().repeat_interleave(128, 1)
    I, H = m.I, m.H
    worst_code = 0
    ref = torch.zeros(M, H, dtype=torch.float64, device=dev)
    for t in range(M):
        for s in range(K):
            e = int(ids[t, s])
            p = t * K + s
            gu = deq(m.w13[0][e], m.s13[0][e]) @ xd[t]
            gate, up = gu[:I], gu[I:]
            h = gate / (1 + torch.exp(-gate)) * up
            hq_ref, _ = quant_groups(h.float()[None])
            worst_code = max(worst_code, int((order(m.hq[p].int()) - order(hq_ref[0].view(torch.uint8).int())).abs().max()))
            hkd = m.hq[p].view(torch.float8_e4m3fn).double() * m.hs[p].double().repeat_interleave(128)
            ref[t] += tw[t, s].double() * (deq(m.w2[0][e], m.s2[0][e]) @ hkd)
    err = (out.double() - ref).abs().max(1).values / ref.abs().max(1).values
    return {"M": M, "mode": mode, "deterministic": det, "code_steps": worst_code,
            "out_rel_to_rowmax": float(err.max())}


def main():
    which = sys.argv[1:] or ["30b", "235b"]
    rl = Func(os.path.join(HERE, "moe_v4_30b.cubin"), "read16")
    big = torch.empty(6 << 30, dtype=torch.uint8, device=dev)
    big.random_(0, 255)
    sink = torch.zeros(1 << 16, dtype=torch.int32, device=dev)
    limits = {}

    def read_limit(nbytes):
        n = (nbytes // 16) * 16
        if n in limits:
            return limits[n]
        copies = max(4, int(math.ceil(700e6 / n)))
        offs = [(i * n) % (big.numel() - n) // 4096 * 4096 for i in range(copies)]
        best = 1e9
        for blocks in (264, 528, 1056, 2112):
            fns = [lambda o=o, b=blocks: rl((b,), (512,), (big[o : o + n], np.uint64(n // 16), sink)) for o in offs]
            best = min(best, time_graph(fns))
        limits[n] = best
        return best

    res = []

    def emit(r):
        print(json.dumps(r), flush=True)
        res.append(r)

    for name in which:
        layers = 4 if name == "30b" else 2
        m = Moe3(name, layers)
        for cub, ca, stages in ((f"moe_v4_{name}.cubin", 2, 4), (f"moe_v4_{name}_s6.cubin", 1, 6)):
            if not os.path.exists(os.path.join(HERE, cub)):
                continue
            m.use(cub, ca, 0, fused=True, stages=stages, kpb=768)
            tag = cub[4:-6]
            cb = 1
            if stages == 4:
                for M, mode in [(1, "uniform"), (7, "uniform"), (64, "uniform"), (64, "same8")]:
                    r = check(m, M, mode)
                    r["variant"] = tag
                    emit(r)
                g = torch.Generator(device=dev).manual_seed(7)
                xq, xs = inputs(64, m.H, g)
                ids, tw = routing(64, "uniform", g)
                outs = []
                for M in (1, 7, 64):
                    o = torch.empty(M, m.H, dtype=torch.bfloat16, device=dev)
                    m.call(o, xq[:M].contiguous(), xs[:M].contiguous(), ids[:M].contiguous(), tw[:M].contiguous(), 0)
                    outs.append(o[0].clone())
                torch.cuda.synchronize()
                emit({"variant": tag, "batch_invariant_token0": all(torch.equal(outs[0].view(torch.int16), o.view(torch.int16)) for o in outs[1:])})
            plan = [("uniform", M) for M in (1, 2, 4, 8, 16, 32, 64)] + [("same8", M) for M in (1, 8, 64)]
            for parts in ("AB",):
                m.parts = parts
                for mode, M in (plan if parts == "AB" else [("uniform", 1), ("uniform", 16)]):
                    g = torch.Generator(device=dev).manual_seed(99 + M)
                    xq, xs = inputs(M, m.H, g)
                    calls, hit_total = [], 0
                    for i in range(16):
                        ids, tw = routing(M, mode, g)
                        hit_total += len(set(ids.flatten().tolist()))
                        calls.append((ids, tw, i % layers))
                    out = torch.empty(M, m.H, dtype=torch.bfloat16, device=dev)
                    t = time_graph([lambda c=c: m.call(out, xq, xs, c[0], c[1], c[2]) for c in calls])
                    hits = hit_total / 16
                    nbytes = int(hits * m.expert_bytes)
                    lim = read_limit(nbytes)
                    emit({"variant": tag, "parts": parts, "mode": mode, "M": M, "experts_hit": hits, "bytes": nbytes,
                          "us": round(t, 2), "read_limit_us": round(lim, 2), "of_limit": round(lim / t, 3)})
                m.parts = "AB"
        del m
        torch.cuda.empty_cache()
    with open(os.path.join(OUT, "v3.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
