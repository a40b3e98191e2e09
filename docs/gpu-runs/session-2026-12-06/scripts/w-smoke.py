# Smoke for the WGMMA tactics before anything else: nt.fp8_moe with a pinned chain at argv[1] contract
# ("30"/"235"), argv[2] chain GATE+DOWN, against the chain argv[3] (an mma.sync one) on the same inputs, at
# 1 token, 16 and 64 on the same 8 experts, 64 uniform; strict mode. The bits differ (14-bit partials
# against fp32 ones); a wrong operand layout gives garbage. One line per call: the largest difference
# relative to the reference chain's row maximum, LARGE where it exceeds 2% (both chains quantize h to
# FP8, which alone moves outputs by about 2.4% in norm against an unquantized computation, far less
# between two kernels of one contract).
import sys, torch
import netra.torch as nt
from netra.core.ops import contract_key
E, K = 128, 8
H, I = {"30": (2048, 768), "235": (4096, 1536)}[sys.argv[1]]
p = dict(experts=E, topk=K, hidden=H, inter=I)
g = torch.Generator(device="cuda").manual_seed(0)
def f8(*s): return (torch.randn(*s, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
w = (f8(E, 2 * I, H), torch.rand(E, 2 * I // 128, H // 128, device="cuda", generator=g) * 1e-3,
     f8(E, H, I), torch.rand(E, H // 128, I // 128, device="cuda", generator=g) * 1e-3)
def call(M, same, chain):
    gg = torch.Generator(device="cuda").manual_seed(M + same)
    if same:
        eight = torch.randperm(E, device="cuda", generator=gg)[:K]
        ids = torch.stack([eight[torch.randperm(K, device="cuda", generator=gg)] for _ in range(M)]).int()
    else:
        ids = torch.stack([torch.randperm(E, device="cuda", generator=gg)[:K] for _ in range(M)]).int()
    x = (torch.randn(M, H, device="cuda", generator=gg) * 2).to(torch.float8_e4m3fn)
    args = (x, torch.rand(M, H // 128, device="cuda", generator=gg) + 0.5, ids, torch.rand(M, K, device="cuda", generator=gg), *w)
    gt, dt = chain.split("+")
    nt.set_tactics({contract_key("fp8_moe_gate_up", p): gt, contract_key("fp8_moe_down", p): dt})
    with nt.strict():
        y = nt.fp8_moe(*args)
    torch.cuda.synchronize()
    return y.float()
for M, same in ((1, False), (16, True), (64, True), (64, False)):
    ref = call(M, same, sys.argv[3])
    y = call(M, same, sys.argv[2])
    rel = ((y - ref).abs().amax(dim=1) / ref.abs().amax(dim=1).clamp_min(1e-30)).max().item()
    print(f"{sys.argv[1]}B {sys.argv[2]} M={M} same={same}: max row-relative diff {rel:.3g}"
          f"{' LARGE' if not rel <= 0.02 else ''} finite {bool(torch.isfinite(y).all())}", flush=True)
