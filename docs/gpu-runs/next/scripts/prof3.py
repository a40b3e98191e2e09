# nt.fp8_moe at argv[3] tokens (default 64), Qwen3-30B-A3B: argv[1] "same" (every token on the same 8 experts) or "uniform"
# (distinct random experts per token); argv[2] the chain GATE+DOWN (pinned with nt.set_tactics).
import sys, torch
import netra.torch as nt
E, K, H, I = 128, 8, 2048, 768
M = int(sys.argv[3]) if len(sys.argv) > 3 else 64
g = torch.Generator(device="cuda").manual_seed(0)
def f8(*s): return (torch.randn(*s, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
w = (f8(E, 2 * I, H), torch.rand(E, 2 * I // 128, H // 128, device="cuda", generator=g) * 1e-3,
     f8(E, H, I), torch.rand(E, H // 128, I // 128, device="cuda", generator=g) * 1e-3)
if sys.argv[1] == "same":
    eight = torch.randperm(E, device="cuda", generator=g)[:K]
    ids = torch.stack([eight[torch.randperm(K, device="cuda", generator=g)] for _ in range(M)]).int()
else:
    ids = torch.stack([torch.randperm(E, device="cuda", generator=g)[:K] for _ in range(M)]).int()
args = (f8(M, H), torch.rand(M, H // 128, device="cuda", generator=g) + 0.5, ids,
        torch.rand(M, K, device="cuda", generator=g), *w)
g_t, d_t = sys.argv[2].split("+")
p = dict(experts=E, topk=K, hidden=H, inter=I)
from netra.core.ops import contract_key
nt.set_tactics({contract_key("fp8_moe_gate_up", p): g_t, contract_key("fp8_moe_down", p): d_t})
with nt.strict():
    for _ in range(3): nt.fp8_moe(*args)
torch.cuda.synchronize()
print("ok", sys.argv[1], sys.argv[2])
