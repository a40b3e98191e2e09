# The shortest useful device run (the session's last minutes): at Qwen3-30B-A3B, each chain against g4r8+d3
# on the same inputs (largest row-relative difference) and its time per call in a CUDA graph of 20 calls
# over 5 layer copies of the weights (3 GB, past L2), median of 5 replays, at 1 token uniform and 64
# tokens on the same 8 experts. Chains in argv.
import sys, torch
import netra.torch as nt
from netra.core.ops import contract_key
E, K, H, I, L = 128, 8, 2048, 768, 5
p = dict(experts=E, topk=K, hidden=H, inter=I)
g = torch.Generator(device="cuda").manual_seed(0)
def f8(*s): return (torch.randn(*s, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
layers = [(f8(E, 2 * I, H), torch.rand(E, 2 * I // 128, H // 128, device="cuda", generator=g) * 1e-3,
           f8(E, H, I), torch.rand(E, H // 128, I // 128, device="cuda", generator=g) * 1e-3) for _ in range(L)]
def inputs(M, same):
    if same:
        eight = torch.randperm(E, device="cuda", generator=g)[:K]
        ids = torch.stack([eight[torch.randperm(K, device="cuda", generator=g)] for _ in range(M)]).int()
    else:
        ids = torch.stack([torch.randperm(E, device="cuda", generator=g)[:K] for _ in range(M)]).int()
    return ((torch.randn(M, H, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn),
            torch.rand(M, H // 128, device="cuda", generator=g) + 0.5, ids, torch.rand(M, K, device="cuda", generator=g))
def pin(chain):
    gt, dt = chain.split("+")
    nt.set_tactics({contract_key("fp8_moe_gate_up", p): gt, contract_key("fp8_moe_down", p): dt})
for M, same in ((1, False), (64, True), (16, True), (64, False)):
    x = inputs(M, same)
    pin("g4r8+d3")
    with nt.strict():
        ref = nt.fp8_moe(*x, *layers[0]).float()
    for chain in ["g4r8+d3"] + sys.argv[1:]:
        try:
            pin(chain)
            with nt.strict():
                y = nt.fp8_moe(*x, *layers[0]).float()
                rel = ((y - ref).abs().amax(dim=1) / ref.abs().amax(dim=1).clamp_min(1e-30)).max().item()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for i in range(L): nt.fp8_moe(*x, *layers[i])
                torch.cuda.current_stream().wait_stream(s)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for r in range(4):
                        for i in range(L): nt.fp8_moe(*x, *layers[i])
            graph.replay(); torch.cuda.synchronize()
            ts = []
            for _ in range(5):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); graph.replay(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) * 1000 / (4 * L))
            ts.sort()
            print(f"M={M:<3} {'same' if same else 'uniform':8} {chain:14} {ts[2]:8.1f} us  rel diff {rel:.3g}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"M={M:<3} {'same' if same else 'uniform':8} {chain:14} FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
