"""The routed FP8 MoE as a PyTorch operator: the chain fp8_moe (netra/core/families/fp8_moe.py) served by
its two certified families, fp8_moe_gate_up then fp8_moe_down, or the composite, never silently.

    out = netra.torch.fp8_moe(xq, xs, ids, weights, w13, w13s, w2, w2s)        # bf16 [tokens, hidden]

What a call checks (one ContractError line each): every argument a tensor of the record's dtype and of the
shape its record derives from (experts, topk, hidden, inter) read off w13 and ids: xq FP8 [M, H] and xs
f32 [M, H/128] (what fused_add_rmsnorm_fp8_group_quant writes), ids [M, k] and weights f32 [M, k] (what
moe_topk_softmax writes), w13 FP8 [E, 2I, H], w13s f32 [E, 2I/128, H/128], w2 FP8 [E, H, I], w2s f32
[E, H/128, I/128]; all on one device. ids may be int64 (torch.topk's): that call runs the composite, with
the reason (the kernels read int32).

The certified path, per (device, contract, policy), is served only where both stages are (else the
stage's fallback, named). Per call: the link tensors (h's FP8 codes and scales) are allocated, and each
stage is launched on torch's current stream with its workspace carved from one buffer per (device,
stream, contract) that was zeroed when it was made: the stages' counters reset themselves, so no call
clears anything. Per contract, because the layout is the contract's: another contract's h32 or y32 lies
where this one's counters are (one buffer per stream gave the H100 on 2026-12-05 unwritten rows in a
Qwen3-30B-A3B call after a Qwen3-235B-A22B call on the same stream). Past the chain's max tokens (64), the
composite runs, with the reason. The second stage is launched with programmatic dependent launch (the
chain record's overlaps_previous, netra.torch.dispatch's OVERLAPS): it may start while gate/up runs, loads
its first weights, and waits in griddepcontrol.wait for gate/up's writes (docs/ops/fp8_moe.md).

The composite is the contract's semantics in fp32 torch ops, one token at a time over its gathered experts
(no host synchronisation, so it captures in CUDA graphs): correct anywhere, slow (it dequantizes each routed
expert).
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import torch

from netra.core.ops import CHAINS, FAMILIES, chain_family, contract_key
from netra.errors import ContractError
from netra.torch import composite, contracts
from netra.torch.routes import MUTEX, Plan, Route, new_plan, route

OP = "fp8_moe"
CHAIN = CHAINS[OP]
VIEW = chain_family(OP)
STAGES = tuple(FAMILIES[s] for s in CHAIN.stages)
FP8 = torch.float8_e4m3fn
TORCH_DTYPES = contracts.TORCH_DTYPES
ALIGN = 16
_plans: dict[Any, Plan] = {}
_spaces: dict[tuple[int, int, str], torch.Tensor] = {}
_spaces_lock = threading.Lock()


class Shape(NamedTuple):
    """A checked call: the contract's parameters and the tokens."""

    params: dict[str, int]
    tokens: int

    @property
    def key(self) -> str:
        return contract_key(OP, self.params)


def _fail(what: str, fix: str) -> ContractError:
    return contracts._fail(OP, what, fix)  # the operators' one line: "netra.torch.fp8_moe: ..., see its doc"


def check(*args: Any) -> Shape:
    """The call's contract, derived from w13 and ids and checked against every operand's shape and dtype
    in the record (netra/core/families/fp8_moe_*.py); a malformed call is one ContractError line."""
    if len(args) != len(VIEW.inputs):
        raise _fail(f"takes {len(VIEW.inputs)} tensors, got {len(args)}", f"pass {', '.join(CHAIN.inputs)}")
    given = dict(zip(CHAIN.inputs, args, strict=True))
    for name, t in given.items():
        if not isinstance(t, torch.Tensor):
            raise _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}", f"pass {name} as a tensor")
    w13, ids, xq = given["w13"], given["ids"], given["xq"]
    if w13.dim() != 3 or ids.dim() != 2 or xq.dim() != 2:
        raise _fail(
            f"w13 is {w13.dim()}-D, ids {ids.dim()}-D, xq {xq.dim()}-D",
            "pass w13 as [experts, 2 * inter, hidden], ids as [tokens, topk], xq as [tokens, hidden]",
        )
    experts, two_inter, hidden = (int(d) for d in w13.shape)
    params = {"experts": experts, "topk": int(ids.shape[1]), "hidden": hidden, "inter": two_inter // 2}
    if hidden % 128 or two_inter % 256 or not hidden or not two_inter:
        raise _fail(
            f"w13 is {list(w13.shape)}: hidden and inter must be positive multiples of 128",
            "pass the checkpoint's block-quantized weights (128 x 128 blocks)",
        )
    env = {**params, "tokens": int(xq.shape[0])}
    first = xq.device
    for o in VIEW.inputs:
        t = given[o.name]
        want = o.dims(env)
        if tuple(t.shape) != want:
            raise _fail(
                f"{o.name} is {list(t.shape)}, expected {list(want)}", f"pass {o.name} as {list(want)}"
            )
        dtype = TORCH_DTYPES[o.dtype]
        if t.dtype != dtype and not (o.name == "ids" and t.dtype == torch.int64):
            raise _fail(f"{o.name} has dtype {t.dtype}", f"pass {o.name} as {dtype}")
        if t.device != first:
            raise _fail(f"{o.name} is on {t.device} but xq on {first}", "put every tensor on one device")
    return Shape(params, env["tokens"])


def _stage_kernels(index: int, params: dict[str, int]) -> tuple[Any, ...] | Route:
    """Each stage's certified kernels on cuda:`index`, or the Route naming the stage that is not served."""
    from netra.torch import dispatch

    key = contract_key(OP, params)
    out = []
    for fam in STAGES:
        k = dispatch.kernels(index, contract_key(fam.name, params), fam.name)
        if isinstance(k, Route):
            return route(key, k.code, f"{fam.name}: {k.reason}")
        out.append(k)
    return tuple(out)


def _plan(s: Shape, given: dict[str, torch.Tensor]) -> Plan:
    key = s.key
    for name, t in given.items():
        if t.device.type != "cuda":
            return new_plan(key, 0, None, route(key, "device", f"{name} is a {t.device.type} tensor; "
                                                 "Netra's kernels run on CUDA devices"))  # fmt: skip
    if given["ids"].dtype != torch.int32:
        return new_plan(key, 0, None, route(key, "dtype", "ids is int64; the kernels read int32 (ids.int())"))
    k = _stage_kernels(given["xq"].device.index or 0, s.params)
    if isinstance(k, Route):
        return new_plan(key, 0, None, k)
    return new_plan(key, 0, _chain(s.params, k), None)


def _workspace(index: int, stream: int, key: str, nbytes: int) -> torch.Tensor:
    """The zeroed workspace of (device, stream, contract), made once: the kernels leave their counters at
    zero, where the contract's layout puts them (never shared between contracts: their layouts differ)."""
    memo = (index, stream, key)
    ws = _spaces.get(memo)
    if ws is None:
        with _spaces_lock:
            ws = _spaces.get(memo)
            if ws is None:
                ws = _spaces[memo] = torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{index}")
    return ws


def _layout(params: dict[str, int]) -> tuple[list[Any], list[int], int]:
    """Each stage's workspace plan at the chain's most tokens, where it starts in the one buffer, and the
    buffer's size."""
    plans = [fam.launch.workspace({**params, "tokens": CHAIN.max_dispatch}) for fam in STAGES]
    at, bases = 0, []
    for p in plans:
        bases.append(at)
        at += -(-p.workspace_bytes // 256) * 256
    return plans, bases, at


def prepare(index: int, params: dict[str, int]) -> tuple[str, str]:
    """Make the chain launchable on cuda:`index` before traffic or a CUDA graph capture: both stages'
    kernels (netra.torch.dispatch.kernels) and the zeroed workspace of the current stream. Returns the
    contract and the stages' tactics, or the fallback naming the stage that is not served."""
    key = contract_key(OP, params)
    k = _stage_kernels(index, params)
    if isinstance(k, Route):
        return key, f"fallback {k.code}: {k.reason}"
    _workspace(index, torch.cuda.current_stream(index).cuda_stream, key, _layout(params)[2])
    return key, " then ".join(
        f"{fam.name} " + ", ".join(kern.tactic for _, kern in served.rules)
        for fam, served in zip(STAGES, k, strict=True)
    )


def _chain(params: dict[str, int], served: tuple[Any, ...]) -> Any:
    """launch(out, given, tokens): the stages in order, each with its workspace carved from one buffer."""
    plans, bases, total = _layout(params)
    key = contract_key(OP, params)
    link_shapes = {o.name: o for o in STAGES[0].outputs}

    def launch(out: torch.Tensor, given: dict[str, torch.Tensor], tokens: int) -> None:
        index = out.get_device()
        ws = _workspace(index, torch.cuda.current_stream(index).cuda_stream, key, total)
        env = {**params, "tokens": tokens}
        links = {
            n: torch.empty(o.dims(env), dtype=TORCH_DTYPES[o.dtype], device=out.device)
            for n, o in link_shapes.items()
        }
        tensors = {
            **{n: t.data_ptr() for n, t in given.items()},
            **{n: t.data_ptr() for n, t in links.items()},
        }
        tensors["out"] = out.data_ptr()
        for fam, plan, base, kernels in zip(STAGES, plans, bases, served, strict=True):
            vals = fam.launch.step_args(0, plan, tensors, {"tokens": tokens}, base=ws.data_ptr() + base)
            kernels.launch(tokens, *(vals[a] for a in fam.args))

    return launch


def fp8_moe(
    xq: torch.Tensor,
    xs: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    w13: torch.Tensor,
    w13s: torch.Tensor,
    w2: torch.Tensor,
    w2s: torch.Tensor,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The eager implementation: the certified chain where it serves the call, else the composite."""
    args = (xq, xs, ids, weights, w13, w13s, w2, w2s)
    s = check(*args)
    given = dict(zip(CHAIN.inputs, args, strict=True))
    want = (s.tokens, s.params["hidden"])
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.dtype != torch.bfloat16 or tuple(out.shape) != want:
            raise _fail(
                "out must be a bf16 tensor of shape " + str(list(want)), "allocate it so, or omit out"
            )
        if out.device != xq.device:
            raise _fail(f"out is on {out.device} but xq on {xq.device}", "put out on the inputs' device")
        contracts.disjoint(OP, (out,), tuple(given.items()))
    memo = (s.key, xq.device, ids.dtype)
    p = _plans.get(memo)
    if p is None:
        with MUTEX:
            p = _plans.get(memo)
            if p is None:
                p = _plans[memo] = _plan(s, given)
    rt = p.route
    if p.launch is not None:
        if s.tokens > CHAIN.max_dispatch:
            rt = route(
                s.key, "tokens", f"{s.tokens} tokens; the certified chain takes at most {CHAIN.max_dispatch}"
            )
        elif not all(t.is_contiguous() for t in given.values()):
            rt = route(s.key, "layout", "an input is not contiguous; the kernels read contiguous rows")
        elif any(t.data_ptr() % ALIGN for t in given.values()):
            rt = route(s.key, "alignment", "an input does not start on a 16-byte boundary")
        else:
            y = (
                out
                if out is not None and out.is_contiguous()
                else torch.empty(want, dtype=torch.bfloat16, device=xq.device)
            )
            if s.tokens:
                p.launch(y, given, s.tokens)
            p.count += 1
            if out is not None and y is not out:
                out.copy_(y)
                return out
            return y
    assert rt is not None
    rt.take()
    y = composite.fp8_moe(xq, xs, ids, weights, w13, w13s, w2, w2s)
    if out is not None:
        out.copy_(y)
        return out
    return y


def quantized_route(params: dict[str, int], device: torch.device) -> str:
    """Why an engine's routed experts at `params`, which quantize their bf16 tokens first, are not served
    on `device` ("" when they are): this install must serve the tokens' fp8_group_quant and both stages at
    the policy. "<code>: <contract>: <reason>" of the first that is not (what the integrations route on)."""
    from netra.torch.dispatch import kernel_for

    quant = contract_key("fp8_group_quant", {"hidden": params["hidden"], "group": 128})
    for contract in (quant, *(contract_key(fam.name, params) for fam in STAGES)):
        kernel = kernel_for(contract, device=device)
        if not kernel:
            return f"{kernel.code}: {contract}: {kernel.reason}"
    return ""


def reset() -> None:
    """Forget plans and workspaces (netra.torch.set_policy and tests)."""
    with MUTEX:
        _plans.clear()
    with _spaces_lock:
        _spaces.clear()


def _register() -> None:
    from netra.torch import dispatch

    dispatch.CHAIN_PREPARERS[STAGES[0].name] = prepare
    dispatch.PLAN_RESETS.append(_plans.clear)


_register()
