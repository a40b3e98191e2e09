"""One call of the prototype (30b_pdl2) at the given M, for Nsight Compute."""
import sys
import torch
import run_proto as rp

M = int(sys.argv[1])
m = rp.Moe("30b", 1)
m.use("30b_pdl2", 256, 256, True)
g = torch.Generator(device=rp.dev).manual_seed(5)
xq, xs = rp.inputs(M, m.H, g)
ids, tw = rp.routing(M, "uniform", g)
out = torch.empty(M, m.H, dtype=torch.bfloat16, device=rp.dev)
m.call(out, xq, xs, ids, tw, 0)
torch.cuda.synchronize()
