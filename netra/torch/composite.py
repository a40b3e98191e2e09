"""The PyTorch composites: the unfused op families written with torch ops, with the semantics of docs/ops/.

They run wherever Netra serves no certified kernel (another width or dtype, a strided or misaligned
input, a GPU class without a table, a CPU tensor), on any device torch supports, and compute in fp32
with the single output rounding the contracts name:

* rmsnorm: y = round(x * rsqrt(mean(x^2) + eps) * (w + weight_offset)) to x's dtype, once; the
  caller passes eps as the fp32 value a kernel receives (f32(eps); netra.torch.dispatch does).
* group quantization: s = max(amax, 1e-10) / 448 in fp32, q = e4m3fn RNE of clamp(v / s, +-448)
  (torch's float -> float8_e4m3fn conversion rounds to nearest even; the clamp comes first).
* silu_mul: h = silu(g) * u in fp32, never rounded to bf16, then the same quantization.
* moe router: top-k of softmax(logits) selected on the logits, descending, equal logits (+0 and -0
  included) to the lower expert id, by a stable sort; weights = the softmax over the k selected.
* grouped sigmoid router (DeepSeek-V3): s = sigmoid(logits), b = s + bias in fp32; the topk_groups
  groups of largest top-2 sum of b kept, the top-k experts by b among them, both by a stable sort;
  weights = scale * s / (sum of the chosen s + 1e-20).

* the routed FP8 MoE: per (token, slot) h = silu(gate) * up of the slot's expert in fp32 from the
  dequantized FP8 activations and weights (block scales applied in fp32), h quantized per 128 columns
  as above, the down projection from h's dequantized codes, out = bf16 of the router-weighted sum over
  the slots in slot order; a slot whose id names no expert contributes nothing. Computed for every
  expert with masks, so no host synchronisation (it captures in CUDA graphs) and slow.
* the residual add of the fused families: bf16(x + residual), one rounding (add). The fused families
  themselves have no composite of their own: their fallback is the chain of the unfused netra.torch
  implementations (netra.torch.dispatch), which is what their contract is defined as.

Inputs are checked by netra.torch.contracts before any of these run.
"""

from __future__ import annotations

import struct

import torch

FP8_MAX = 448.0
SCALE_FLOOR = 1e-10  # as fp32 (0x2edbe6ff) once it meets an fp32 tensor, as in the kernels


def f32(value: float) -> float:
    """The fp32 value of a Python float (what a kernel's f32 argument receives). Outside the composites,
    so that torch.compile traces them without a graph break."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int) -> torch.Tensor:
    xf = x.float().contiguous()  # the row's sum in one order whatever x's strides: the same bits
    rs = torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)
    wf = w.float()
    if weight_offset:
        wf = wf + float(weight_offset)
    return ((xf * rs) * wf).to(x.dtype).contiguous()


def _quantize(v: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 E4M3FN codes and fp32 scales of fp32 values v [..., n], one scale per `group` elements."""
    n = v.shape[-1]
    g = v.reshape(*v.shape[:-1], n // group, group)
    scales = g.abs().amax(dim=-1, keepdim=True).clamp_min(SCALE_FLOOR) / FP8_MAX
    q = (g / scales).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(v.shape).contiguous(), scales.squeeze(-1).contiguous()


def fp8_group_quant(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _quantize(x.float(), group)


def silu_mul_fp8_quant(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    inter = x.shape[-1] // 2
    h = torch.nn.functional.silu(xf[..., :inter]) * xf[..., inter:]
    return _quantize(h, group)


def add(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """x + residual rounded once to x's dtype: the fp32 sum of two bf16 values is exact or rounded once
    more finely than bf16, so one RNE to bf16 is the correctly rounded sum."""
    return (x.float() + residual.float()).to(x.dtype).contiguous()


def moe_topk_softmax(logits: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    # + 0.0 turns -0.0 into +0.0: they are equal logits, and a radix sort (CUDA) would order them
    lf = logits.float() + 0.0
    top, ids = torch.sort(lf, dim=-1, descending=True, stable=True)
    top, ids = top[..., :topk], ids[..., :topk]
    e = torch.exp(top - top[..., :1])
    return ids.to(torch.int32).contiguous(), (e / e.sum(dim=-1, keepdim=True)).contiguous()


def moe_grouped_topk_sigmoid(
    logits: torch.Tensor, bias: torch.Tensor, topk: int, groups: int, topk_groups: int, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3's router in fp32: s = sigmoid(logits), b = s + bias; groups by the sum of their two
    largest b, experts by b in the kept groups, both by a stable descending sort (equal scores: the lower
    index first; b is never -0, s being >= +0); weights = scale * s / (sum of the chosen s + 1e-20).
    `scale` is the fp32 value the kernel receives (f32(scale); netra.torch.dispatch does)."""
    s = torch.sigmoid(logits.float())
    b = s + bias.float()
    e = b.shape[-1]
    by_group = b.unflatten(-1, (groups, e // groups))
    top2 = torch.topk(by_group, 2, dim=-1).values
    gscore = top2[..., 0] + top2[..., 1]
    kept = torch.sort(gscore, dim=-1, descending=True, stable=True).indices[..., :topk_groups]
    mask = torch.zeros_like(gscore, dtype=torch.bool).scatter_(-1, kept, True)
    masked = b.masked_fill(~mask.repeat_interleave(e // groups, dim=-1), float("-inf"))
    ids = torch.sort(masked, dim=-1, descending=True, stable=True).indices[..., :topk]
    chosen = torch.gather(s, -1, ids)
    w = chosen / (chosen.sum(dim=-1, keepdim=True) + 1e-20) * scale
    return ids.to(torch.int32).contiguous(), w.contiguous()


def _blocks(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """FP8 weights [..., rows, cols] with f32 scales per 128 x 128 block, dequantized to fp32."""
    *lead, r, c = w.shape
    blocks = w.float().reshape(*lead, r // 128, 128, c // 128, 128) * s[..., :, None, :, None]
    return blocks.reshape(*lead, r, c)


def fp8_moe(
    xq: torch.Tensor,
    xs: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    w13: torch.Tensor,
    w13s: torch.Tensor,
    w2: torch.Tensor,
    w2s: torch.Tensor,
) -> torch.Tensor:
    """One token at a time, its TOPK experts gathered and dequantized (only the experts a call routes to
    are read: a loop over every expert took 8.7 ms at one token on the H200, docs/performance.md); no
    host synchronisation and no data-dependent shapes, so a CUDA graph can capture it."""
    m, hidden = xq.shape
    experts, inter, k = w13.shape[0], w2.shape[2], ids.shape[1]
    x = (xq.float().reshape(m, hidden // 128, 128) * xs[..., None]).reshape(m, hidden)
    valid = (ids >= 0) & (ids < experts)
    safe = torch.where(valid, ids, torch.zeros_like(ids)).long()  # a slot naming no expert reads expert 0
    acc = x.new_zeros(m, hidden)
    for t in range(m):
        e = safe[t]
        gu = torch.bmm(_blocks(w13[e], w13s[e]), x[t, None, :, None].expand(k, hidden, 1)).squeeze(-1)
        h = torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
        q, sc = _quantize(h, 128)
        hd = (q.float().reshape(k, inter // 128, 128) * sc[..., None]).reshape(k, inter, 1)
        y = torch.bmm(_blocks(w2[e], w2s[e]), hd).squeeze(-1)  # [k, hidden]
        row = x.new_zeros(hidden)
        for slot in range(k):  # the slots in slot order, as the contract sums them
            row = row + torch.where(valid[t, slot], weights[t, slot].float() * y[slot], 0.0)
        acc[t] = row
    return acc.to(torch.bfloat16)
