import sys, torch
import netra.torch as nt
E, K, H, I = 128, 8, int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator(device="cuda").manual_seed(0)
def f8(*s): return (torch.randn(*s, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
w = (f8(E, 2 * I, H), torch.rand(E, 2 * I // 128, H // 128, device="cuda", generator=g) * 1e-3,
     f8(E, H, I), torch.rand(E, H // 128, I // 128, device="cuda", generator=g) * 1e-3)
nt.set_policy("experiment")
for m in (1, 64):
    ids = torch.stack([torch.randperm(E, device="cuda", generator=g)[:K] for _ in range(m)]).int()
    args = (f8(m, H), torch.rand(m, H // 128, device="cuda", generator=g) + 0.5, ids,
            torch.rand(m, K, device="cuda", generator=g), *w)
    with nt.strict():
        for _ in range(3): nt.fp8_moe(*args)
    torch.cuda.synchronize()
print("ok")
