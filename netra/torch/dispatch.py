"""Which implementation runs a call: the certified kernel of its exact contract, or the composite, never silently.

Per call (the hot path), each op looks its *plan* up in a dict keyed by what decides the contract and
the route (dtypes, devices, the row length, the contract's integer parameters); then, on a plan that
has kernels, it checks contiguity and 16-byte alignment of the inputs, allocates the outputs (or, with
out=, checks the caller's: dtype, shape, device, layout, no overlap), and launches the kernel chosen
for the row count by an integer compare. Nothing on that path opens a
catalog, parses a key, hashes, reads a file or loads a module: all of that happens once, when the
plan is made (the first call of a contract on a device, or netra.torch.prepare()).

A plan is made by checking the call (netra.torch.contracts: malformed calls raise ContractError),
deriving the contract key, and asking, in order: is every tensor a CUDA tensor (else `device`), of the
certified dtypes (else `dtype`); is this torch a CUDA build, not ROCm's (else `platform`: netra.torch
serves NVIDIA classes only); does the device's GPU class have a certified table (else `no_table`);
does the catalog serve the contract at the policy (else the runtime's Fallback code: `no_entry`,
`below_policy`, `rejected`, ...); is this host's driver at least the one the class's code objects
need, as `netra env` reads it (else `driver`, decided before any module is loaded). Integrity errors
(IntegrityError and its subclasses, TableError) propagate from the catalog: they are never a fallback. For a served contract, the catalog is asked once
per row-count rule of the table's certified dispatch (`select(key, rows=...)`) and each kernel is made
launchable once (the vendor's loader: Vendor.open_loader, its prepare()).

Every call that runs the composite is counted per (contract, code), logged once per (contract, reason)
on the "netra.torch" logger, and raises StrictModeError instead while strict mode is on.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch

from netra import targets
from netra.core.ops import CHAINS, FAMILIES
from netra.errors import (
    ContractError,
    CudaError,
    RuntimeUnavailableError,
    UncertifiedGPUClassError,
)
from netra.torch import composite, contracts
from netra.torch.routes import (
    BATCH_INVARIANT,
    MUTEX,
    POLICY,
    TACTICS,
    Plan,
    Route,
    batch_invariant,
    fallback_reasons,
    is_strict,
    new_plan,
    policy,
    reset_stats,
    route,
    set_strict,
    stats,
    strict,
    tactics,
)

__all__ = [  # the public functions of netra.torch that live in netra.torch.routes are named from here too
    "batch_invariant",
    "fallback_reasons",
    "is_strict",
    "kernel_for",
    "policy",
    "prepare",
    "reset_stats",
    "set_batch_invariant",
    "set_policy",
    "set_strict",
    "set_tactics",
    "stats",
    "strict",
    "tactics",
]

BF16 = torch.bfloat16
ALIGN = 16  # the kernels read their inputs with 16-byte vector loads
NAMES = {op: f.args for op, f in FAMILIES.items()}  # each family's kernel arguments, in the order passed
# The chain stages launched with programmatic dependent launch (they wait for their producer in-kernel).
OVERLAPS = {s: o for c in CHAINS.values() for s, o in zip(c.stages, c.overlaps_previous, strict=True) if o}
_ALL_ROWS = sys.maxsize
_LOADER = "cuda"  # the loader of the classes netra.torch serves: torch.cuda's devices, torch's CUDA streams
_classes: dict[int, str] = {}
_drivers: dict[str, str | None] = {}  # GPU class -> why this host's driver cannot load its code, or None
_kernels: dict[
    tuple[int, str, str, bool, str | None], Any
] = {}  # (device, contract, policy, invariant, set tactic) -> Served | Route


def set_policy(policy: str) -> str:
    """The minimum maturity served (the runtime's policies; default "accepted"). Plans are rebuilt."""
    from netra.runtime import POLICIES

    if policy not in POLICIES:
        raise ContractError(
            f"policy {policy!r} is not one of {', '.join(POLICIES)}", "the default is 'accepted'"
        )
    with MUTEX:
        prev = POLICY[0]
        POLICY[0] = policy
        _forget_plans()
    return prev


def set_batch_invariant(on: bool = True) -> bool:
    """Serve every contract with one tactic whatever the row count (True), or let the certified table's
    dispatch pick the tactic measured fastest at each row count (False, the default). Each certified
    kernel is batch-invariant within its tactic (a row's or token's output bits do not depend on the other
    rows or on how many there are: conformance proves it), but two tactics may round differently, so only
    one tactic for every M makes a token's bits independent of the batch (what vLLM's batch-invariant mode
    asks of its kernels). The tactic is the table's first ranked one that meets the policy (the runtime's
    `select` without rows). Returns the previous setting; plans are rebuilt."""
    if type(on) is not bool:
        raise ContractError(f"set_batch_invariant takes True or False, got {on!r}", "pass a bool")
    with MUTEX:
        prev = BATCH_INVARIANT[0]
        BATCH_INVARIANT[0] = on
        _forget_plans()
    return prev


def _op_contract(text: Any, call: str, said: str = "") -> Any:
    """`text` as a Contract of a netra.torch op (as_contract's errors name `call`), else one ContractError
    line (prefixed `said`)."""
    from netra.runtime import as_contract

    c = as_contract(text, call=call)
    if c.op not in NAMES:
        raise ContractError(f"{said}{text!r} is not a netra.torch op", f"one of {', '.join(NAMES)}")
    return c


def set_tactics(chosen: dict[str, str] | None = None) -> dict[str, str]:
    """Serve each contract named in `chosen` by exactly that tactic of its certified table, whatever the
    policy and the row-count dispatch (a candidate certify accepted or marked `experiment`; never a
    rejected one): how a kernel author or a benchmark runs one tactic through the operator path. A
    tactic the table does not serve for the contract is that contract's fallback, naming it (strict mode
    refuses the call). None or {} serves every contract by policy again. Replaces the whole mapping;
    returns the previous one; plans are rebuilt."""
    from netra.runtime import arguments

    if chosen is not None and not isinstance(chosen, dict):
        raise arguments.wrong_type("set_tactics", "chosen", chosen, "a dict of contract -> tactic, or None")
    new: dict[str, str] = {}
    for text, tactic in (chosen or {}).items():
        c = _op_contract(text, "set_tactics", said="set_tactics: ")
        if type(tactic) is not str or not tactic:
            raise arguments.wrong_type("set_tactics", f"chosen[{text!r}]", tactic, "a tactic name")
        new[c.key] = tactic
    with MUTEX:
        prev = dict(TACTICS)
        TACTICS.clear()
        TACTICS.update(new)
        _forget_plans()
    return prev


def _forget_plans() -> None:
    """Every plan and chosen kernel, made under the old setting (MUTEX held)."""
    for table in _TABLES:
        table.clear()
    for forget in PLAN_RESETS:  # plans kept outside this module (a chain operator's: nt.fp8_moe)
        forget()


# ---------------------------------------------------------------------------------------------------
# GPU classes, catalogs, kernels


def gpu_class(index: int) -> str:
    """The GPU class of cuda:`index`, as the registry names its device identity (compute capability)."""
    cls = _classes.get(index)
    if cls is None:
        ident = tuple(torch.cuda.get_device_capability(index))
        named = (v.gpu_class(ident) for v in targets.vendors())
        cls = _classes[index] = next((c for c in named if c), None) or "compute capability {}.{}".format(
            *ident
        )
    return cls


def _rocm() -> str | None:
    """Why a HIP (ROCm) build of torch is not served: it calls its AMD GPUs `cuda` devices and reports a
    gfx target as a compute capability, so no class may be read from it, and netra.torch launches
    through the CUDA loader only today. None for any other build."""
    hip = getattr(torch.version, "hip", None)
    if not hip:
        return None
    by_loader: dict[str, list[str]] = {}
    for t in targets.every():
        by_loader.setdefault(t.vendor.loader, []).append(t.name)
    served = by_loader.pop(_LOADER, [])
    others = ", ".join(c for names in by_loader.values() for c in names) or "no other class"
    return (
        f"this torch {torch.__version__} is built for HIP {hip}, not CUDA: netra.torch serves "
        f"{', '.join(served)} only today; {others} through HIP is not wired into netra.torch "
        "(netra.runtime and netra.loaders.hip serve it)"
    )


def _driver_problem(cls: str, lock: Any) -> str | None:
    """Why this host's driver cannot load `cls`'s code objects: the version found is below the minimum
    the class's locked toolchain needs (Target.driver_need, held to Vendor.versions: what `netra env`
    and doctor print). None when it is met or cannot be told (the load then reports any failure).
    Read once per class and process, before the class's first module load."""
    if cls in _drivers:
        return _drivers[cls]
    why = None
    toolchain = lock.toolchains.get(cls)
    if toolchain is not None:
        t = targets.get(cls)
        need = t.driver_need(toolchain)
        found = t.vendor.versions()
        if need.met(found) is False:
            why = (
                f"{cls} code objects need {need.describe()}, this host has {getattr(found, need.of)}: "
                f"upgrade the {need.what} (the minimum: {need.why})"
            )
    _drivers[cls] = why
    return why


def _loader(gpu_class: str) -> Any:
    """The process's loader of the class's vendor (Vendor.open_loader): netra.torch names no loader."""
    return targets.get(gpu_class).vendor.open_loader(shared=True)


def _stream_of(index: int) -> Callable[[], int]:
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return functools.partial(raw, index)
    return lambda: torch.cuda.current_stream(index).cuda_stream


def _guarded(index: int, call: Callable[..., None]) -> Callable[..., None]:
    """With several devices: launch with the tensors' device current (its context owns the function)."""
    if torch.cuda.device_count() <= 1:
        return call
    current = torch.cuda.current_device
    device = torch.cuda.device

    def launch(rows: int, *vals: Any) -> None:
        if current() != index:
            with device(index):
                return call(rows, *vals)
        return call(rows, *vals)

    return launch


class Served:
    """A contract's certified kernels on one device: `rules` ((max rows, Kernel), ...) from the table's
    row-count dispatch (one rule without one), and `launch(rows, *values)` choosing among them."""

    __slots__ = ("launch", "rules")

    def __init__(self, rules: tuple[tuple[int, Any], ...], launches: tuple[Callable[..., None], ...]) -> None:
        self.rules = rules
        if len(set(launches)) == 1:  # one kernel for every row count: no compare at all
            self.launch = launches[0]
        else:
            pairs = tuple((top, fn) for (top, _), fn in zip(rules, launches, strict=True))

            def launch(rows: int, *vals: Any) -> None:
                for top, fn in pairs:
                    if rows <= top:
                        return fn(rows, *vals)

            self.launch = launch

    def kernel(self, rows: int) -> Any:
        return next(k for top, k in self.rules if rows <= top)


def kernels(index: int, key: str, op: str) -> Served | Route:
    """The certified kernels of `key` on cuda:`index`, or the Route saying why there are none. Made
    once per (device, contract, policy)."""
    pol, invariant, tactic = POLICY[0], BATCH_INVARIANT[0], TACTICS.get(key)
    memo = (index, key, pol, invariant, tactic)
    hit = _kernels.get(memo)
    if hit is not None:
        return hit
    with MUTEX:
        hit = _kernels.get(memo)
        if hit is None:
            hit = _kernels[memo] = _make_kernels(index, key, op, pol, invariant, tactic)
    return hit


def _make_kernels(
    index: int, key: str, op: str, pol: str, invariant: bool, tactic: str | None
) -> Served | Route:
    from netra.runtime import open_catalog
    from netra.runtime.catalog import Fallback

    rocm = _rocm()
    if rocm is not None:
        return route(key, "platform", rocm)
    cls = gpu_class(index)
    try:
        cat = open_catalog(cls)
    except UncertifiedGPUClassError as e:
        return route(key, "no_table", f"no certified table for {cls} (cuda:{index}): {e.message}")
    if tactic is not None:  # set_tactics: this one candidate, whatever the policy and the dispatch
        one = cat.select(key, "experiment", tactic=tactic)
        if isinstance(one, Fallback):
            return route(key, one.code, f"set_tactics {tactic}: {one.reason}")
        served: Any = ((None, one),)
    else:
        served = cat.served(key, pol)
    if not isinstance(served, tuple):  # the Fallback saying why nothing is served
        return route(key, served.code, served.reason)
    if invariant and tactic is None:  # one tactic for every row count: the first ranked that meets the policy
        first = cat.select(key, pol)
        if isinstance(first, Fallback):
            return route(key, first.code, first.reason)
        served = ((None, first),)
    old = _driver_problem(cls, cat.lock)
    if old is not None:
        return route(key, "driver", old)
    chosen = [(_ALL_ROWS if top is None else top, k) for top, k in served]
    if torch.cuda.is_current_stream_capturing():
        raise CudaError(
            f"{key}: its first certified call on cuda:{index} is inside a CUDA graph capture, where its "
            "module cannot be loaded",
            "run each op once before capturing (warm-up), or call netra.torch.prepare() at startup",
        )
    cu = _loader(cls)
    stream = _stream_of(index)
    rebind = functools.partial(cu.context, index)  # a thread with no current context: bind the device's
    made: dict[str, Callable[..., None]] = {}
    with torch.cuda.device(index):
        cu.context(index)  # torch's primary context of the device, current on this thread
        have = cu.current_device()
        if have != index:
            raise CudaError(
                f"{key}: the current CUDA context is device {have}'s, not cuda:{index}'s",
                "launch from a thread whose current device is the tensors' (torch.cuda.set_device)",
            )
        overlap = OVERLAPS.get(op, False)
        for _, k in chosen:
            if k.artifact not in made:
                launch = (
                    cu.prepare(k, NAMES[op], stream, rebind, overlap)
                    if overlap
                    else cu.prepare(k, NAMES[op], stream, rebind)
                )
                made[k.artifact] = _guarded(index, launch)
    return Served(tuple(chosen), tuple(made[k.artifact] for _, k in chosen))


def _device_route(key: str, tensors: tuple[tuple[str, torch.Tensor], ...]) -> Route | None:
    for name, t in tensors:
        if t.device.type != "cuda":
            return route(
                key, "device", f"{name} is a {t.device.type} tensor; Netra's kernels run on CUDA devices"
            )
    return None


def _dtype_route(key: str, tensors: tuple[tuple[str, torch.Tensor], ...], dtype: torch.dtype) -> Route | None:
    bad = [f"{name} is {t.dtype}" for name, t in tensors if t.dtype != dtype]
    if bad:
        names = ", ".join(n for n, _ in tensors)
        return route(key, "dtype", f"{'; '.join(bad)}; the certified kernels take {names} as {dtype}")
    return None


def _plan(
    op: str, shape: contracts.Shape, tensors: tuple[tuple[str, torch.Tensor], ...], dtype: torch.dtype = BF16
) -> Plan:
    """`dtype`: what the certified kernels take every input tensor as (bf16, fp32 for the grouped router)."""
    key = shape.key
    rt = _device_route(key, tensors)
    if rt is None:  # (a Route is falsy: compare with None)
        rt = _dtype_route(key, tensors, dtype)
    if rt is None:
        k = kernels(tensors[0][1].device.index or 0, key, op)
        if isinstance(k, Route):
            rt = k
        else:
            return new_plan(key, shape.width, k.launch, None)
    return new_plan(key, shape.width, None, rt)


_LAYOUT = "{} is not row-major contiguous; the kernel reads contiguous rows (call .contiguous() to use it)"
_ALIGNED = "{} does not start on a 16-byte boundary; the kernel reads its rows with 16-byte loads"


def _layout_route(
    p: Plan, ins: tuple[tuple[str, torch.Tensor], ...], outs: tuple[torch.Tensor, ...] | None = None
) -> Route:
    """Why a planned kernel cannot take this call: the first input, then output, not contiguous or
    not 16-byte aligned (outputs are written with 16-byte stores too)."""
    op = p.contract.split("(", 1)[0]
    tensors = ins + (() if outs is None else tuple(zip(contracts.OUT_NAMES[op], outs, strict=True)))
    for name, t in tensors:
        if not t.is_contiguous():
            return route(p.contract, "layout", _LAYOUT.format(name))
    for name, t in tensors:
        if t.data_ptr() % ALIGN:
            return route(p.contract, "alignment", _ALIGNED.format(name))
    raise AssertionError("internal: a layout fallback without a reason")  # pragma: no cover


def _into(
    a: Any,
    da: torch.dtype,
    sa: tuple[int, ...],
    b: Any,
    db: torch.dtype,
    sb: tuple[int, ...],
    x: Any,
    xp: int,
) -> tuple[int, int]:
    """The data pointers of a caller's pair of outputs that the kernel can write as they are (dtypes
    da, db, shapes sa, sb, on x's device, contiguous, 16-byte aligned), else (-1, -1): the slow path
    then says why; (-2, -2) when they overlap x or each other (the caller raises, naming them). One
    call with the checks inline: this is the hot path of out=."""
    if (
        isinstance(a, _Tensor)
        and isinstance(b, _Tensor)
        and a.dtype is da
        and b.dtype is db
        and a.is_contiguous()
        and b.is_contiguous()
        and a.shape == sa
        and b.shape == sb
    ):
        dev = x.get_device()
        if a.get_device() == dev and b.get_device() == dev:
            ap, bp = a.data_ptr(), b.data_ptr()
            if not (ap | bp) & 15:
                ae, be, xe = ap + a.nbytes, bp + b.nbytes, xp + x.nbytes
                if (ap < xe and xp < ae) or (bp < xe and xp < be) or (ap < be and bp < ae):
                    return -2, -2
                return ap, bp
    return -1, -1


def _pair(op: str, out: Any) -> tuple[Any, Any]:
    if type(out) is tuple and len(out) == 2:
        return out
    return contracts.as_outs(op, out)  # from a list, or the ContractError


def _check_outs(
    op: str, s: contracts.Shape, first: torch.Tensor, outs: tuple[Any, ...], ins: tuple[tuple[str, Any], ...]
) -> None:
    contracts.outputs(op, s, first, outs)
    contracts.disjoint(op, outs, ins)


def _eps(eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise ContractError(
            f"netra.torch.rmsnorm: eps must be a number, got {eps!r}", "pass eps as a Python float"
        )
    return float(eps)


# ---------------------------------------------------------------------------------------------------
# The ops (eager implementations; the custom ops of netra.torch.ops call these)

_rms: dict[Any, Plan] = {}
_quant: dict[Any, Plan] = {}
_silu: dict[Any, Plan] = {}
_moe: dict[Any, Plan] = {}
_fused: dict[Any, Plan] = {}
_grouped: dict[Any, Plan] = {}
_TABLES = (_rms, _quant, _silu, _moe, _fused, _grouped, _kernels)
_MISS = (KeyError, IndexError, TypeError, AttributeError)
_Tensor = torch.Tensor


def _remember(table: dict[Any, Plan], key: Any, make: Callable[[], Plan]) -> Plan:
    with MUTEX:
        p = table.get(key)
        if p is None:
            p = table[key] = make()
    return p


def rmsnorm(
    x: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0, out: torch.Tensor | None = None
) -> torch.Tensor:
    try:
        if type(weight_offset) is not int:
            raise TypeError
        shape = x.shape
        p = _rms[(x.dtype, w.dtype, x.device, w.device, shape[-1], w.shape, weight_offset)]
    except _MISS:
        s = contracts.rmsnorm(x, w, eps, weight_offset)
        p = _remember(
            _rms,
            (x.dtype, w.dtype, x.device, w.device, x.shape[-1], w.shape, weight_offset),
            lambda: _plan("rmsnorm", s, (("x", x), ("w", w))),
        )
        shape = x.shape
    if type(eps) is not float:
        eps = _eps(eps)
    launch = p.launch
    if launch is not None:
        if x.is_contiguous() and w.is_contiguous():
            xp, wp = x.data_ptr(), w.data_ptr()
            if not (xp | wp) & 15:
                if out is None:
                    y = x.new_empty(shape)
                    yp = y.data_ptr()
                else:
                    y, yp = out, -1
                    if (
                        isinstance(out, _Tensor)
                        and out.dtype is BF16
                        and out.is_contiguous()
                        and out.shape == shape
                        and out.get_device() == x.get_device()
                    ):
                        yp = out.data_ptr()
                        ye = yp + out.nbytes
                        if (yp < xp + x.nbytes and xp < ye) or (yp < wp + w.nbytes and wp < ye):
                            contracts.disjoint("rmsnorm", (out,), (("x", x), ("w", w)))
                        if yp & 15:
                            yp = -1
                if yp >= 0:
                    rows = x.numel() // p.width
                    if rows:
                        launch(rows, yp, xp, wp, rows, eps)
                    p.count += 1
                    return y
        rt = None
    else:
        rt = p.route
    ins = (("x", x), ("w", w))
    if out is not None:
        _check_outs("rmsnorm", contracts.rmsnorm(x, w, eps, weight_offset), x, (out,), ins)
    (_layout_route(p, ins, None if out is None else (out,)) if rt is None else rt).take()  # (Route is falsy)
    y = composite.rmsnorm(x, w, composite.f32(eps), weight_offset)
    return y if out is None else out.copy_(y)


def _pair_op(
    table: dict[Any, Plan],
    op: str,
    arg: str,
    check: Callable[[Any, Any], contracts.Shape],
    run: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]],
    default: int | None,
) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The eager implementation of a family with one tensor `arg`, one integer (the schema's
    `default` when the dispatcher leaves it out) and two outputs (contracts.PAIR_DTYPES: the two
    quantizers' codes and scales, the router's ids and weights)."""
    da, db = contracts.PAIR_DTYPES[op]

    def make(s: contracts.Shape, x: torch.Tensor) -> Plan:
        p = _plan(op, s, ((arg, x),))
        p.extra = s.out[0][-1], s.out[1][-1]  # each output's row length
        return p

    def impl(
        x: torch.Tensor, n: Any = default, out: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            if type(n) is not int:
                raise TypeError
            shape = x.shape
            p = table[(x.dtype, x.device, shape[-1], n)]
        except _MISS:
            s = check(x, n)
            p = _remember(table, (x.dtype, x.device, x.shape[-1], n), lambda: make(s, x))
            shape = x.shape
        launch = p.launch
        if launch is not None:
            if x.is_contiguous():
                xp = x.data_ptr()
                if not xp & 15:
                    lead = shape[:-1]
                    na, nb = p.extra
                    if out is None:
                        a = x.new_empty((*lead, na), dtype=da)
                        b = x.new_empty((*lead, nb), dtype=db)
                        ap, bp = a.data_ptr(), b.data_ptr()
                    else:
                        a, b = out if type(out) is tuple and len(out) == 2 else _pair(op, out)
                        ap, bp = _into(a, da, (*lead, na), b, db, (*lead, nb), x, xp)
                        if ap == -2:
                            contracts.disjoint(op, (a, b), ((arg, x),))
                    if ap >= 0:
                        rows = x.numel() // p.width
                        if rows:
                            launch(rows, ap, bp, xp, rows)
                        p.count += 1
                        return a, b
            rt = None
        else:
            rt = p.route
        outs = None if out is None else _pair(op, out)
        if outs is not None:
            _check_outs(op, check(x, n), x, outs, ((arg, x),))
        (_layout_route(p, ((arg, x),), outs) if rt is None else rt).take()
        a, b = run(x, n)
        return (a, b) if outs is None else (outs[0].copy_(a), outs[1].copy_(b))

    impl.__name__ = impl.__qualname__ = op
    return impl


fp8_group_quant = _pair_op(
    _quant, "fp8_group_quant", "x", contracts.fp8_group_quant, composite.fp8_group_quant, 128
)
silu_mul_fp8_quant = _pair_op(
    _silu,
    "silu_mul_fp8_quant",
    "x",
    contracts.silu_mul_fp8_quant,
    composite.silu_mul_fp8_quant,
    128,
)
moe_topk_softmax = _pair_op(
    _moe,
    "moe_topk_softmax",
    "logits",
    contracts.moe_topk_softmax,
    composite.moe_topk_softmax,
    None,
)


_F32 = torch.float32
_GROUPED = "moe_grouped_topk_sigmoid"


def _scale(scale: Any) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ContractError(
            f"netra.torch.{_GROUPED}: scale must be a number, got {scale!r}",
            "pass routed_scaling_factor as a Python float, e.g. 2.5 (see docs/ops/moe_grouped_topk_sigmoid.md)",
        )
    return float(scale)


def _grouped_memo(logits: Any, bias: Any, topk: int, groups: int, topk_groups: int) -> tuple[Any, ...]:
    """What decides a router call's plan: the operands' dtypes, devices and widths, the contract's integers."""
    return (
        logits.dtype,
        bias.dtype,
        logits.device,
        bias.device,
        logits.shape[-1],
        bias.shape,
        topk,
        groups,
        topk_groups,
    )


def moe_grouped_topk_sigmoid(
    logits: torch.Tensor,
    bias: torch.Tensor,
    topk: int,
    groups: int,
    topk_groups: int,
    scale: float,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3's router: the certified kernel of the call's contract (fp32 logits and bias), else the
    composite, counted (docs/ops/moe_grouped_topk_sigmoid.md)."""
    try:
        if type(topk) is not int or type(groups) is not int or type(topk_groups) is not int:
            raise TypeError
        memo = _grouped_memo(logits, bias, topk, groups, topk_groups)
        p = _grouped[memo]
    except _MISS:
        s = contracts.moe_grouped_topk_sigmoid(logits, bias, topk, groups, topk_groups, scale)
        memo = _grouped_memo(logits, bias, topk, groups, topk_groups)
        p = _remember(_grouped, memo, lambda: _plan(_GROUPED, s, (("logits", logits), ("bias", bias)), _F32))
    if type(scale) is not float:
        scale = _scale(scale)
    ins = (("logits", logits), ("bias", bias))
    launch = p.launch
    if launch is not None:
        if logits.is_contiguous() and bias.is_contiguous():
            xp, bp = logits.data_ptr(), bias.data_ptr()
            if not (xp | bp) & 15:
                lead = logits.shape[:-1]
                if out is None:
                    a = logits.new_empty((*lead, topk), dtype=torch.int32)
                    b = logits.new_empty((*lead, topk), dtype=_F32)
                    ap, wp = a.data_ptr(), b.data_ptr()
                else:
                    a, b = out if type(out) is tuple and len(out) == 2 else _pair(_GROUPED, out)
                    ap, wp = _into(a, torch.int32, (*lead, topk), b, _F32, (*lead, topk), logits, xp)
                    if ap >= 0 and (
                        (ap < bp + bias.nbytes and bp < ap + a.nbytes)
                        or (wp < bp + bias.nbytes and bp < wp + b.nbytes)
                    ):
                        ap = -2
                    if ap == -2:
                        contracts.disjoint(_GROUPED, (a, b), ins)
                if ap >= 0:
                    rows = logits.numel() // p.width
                    if rows:
                        launch(rows, ap, wp, xp, bp, rows, scale)
                    p.count += 1
                    return a, b
        rt = None
    else:
        rt = p.route
    outs = None if out is None else _pair(_GROUPED, out)
    if outs is not None:
        _check_outs(
            _GROUPED,
            contracts.moe_grouped_topk_sigmoid(logits, bias, topk, groups, topk_groups, scale),
            logits,
            outs,
            ins,
        )
    (_layout_route(p, ins, outs) if rt is None else rt).take()
    a, b = composite.moe_grouped_topk_sigmoid(logits, bias, topk, groups, topk_groups, composite.f32(scale))
    return (a, b) if outs is None else (outs[0].copy_(a), outs[1].copy_(b))


# ---------------------------------------------------------------------------------------------------
# Introspection and warm-up


def _index(device: Any, call: str) -> int:
    """The CUDA device index `device` names (None: the current one), checked before torch is asked:
    a torch without CUDA, or a device it does not have, is the project's error naming the argument."""
    from netra.runtime import arguments

    if isinstance(device, bool) or not (device is None or isinstance(device, (str, int, torch.device))):
        raise arguments.wrong_type(
            call, "device", device, "a CUDA device ('cuda:0', 0, torch.device) or None"
        )
    try:
        d = torch.device("cuda" if device is None else device)
    except (RuntimeError, TypeError, ValueError):
        raise ContractError(
            f"{call}: device {arguments.shown(device)} is not a device", "pass a CUDA device, e.g. 'cuda:0'"
        ) from None
    if d.type != "cuda":
        raise ContractError(f"{call}: device {d} is not a CUDA device", "pass a CUDA device, e.g. 'cuda:0'")
    if not torch.cuda.is_available():
        raise RuntimeUnavailableError(
            f"{call}: this torch {torch.__version__} has no usable CUDA device "
            f"({'built without CUDA' if torch.version.cuda is None else 'no device visible'})",
            "install a CUDA build of torch on a host with a CUDA GPU (docs/torch.md)",
        )
    index = d.index if d.index is not None else torch.cuda.current_device()
    if not 0 <= index < torch.cuda.device_count():
        raise ContractError(
            f"{call}: device {d} does not exist ({torch.cuda.device_count()} CUDA device(s))",
            "pass one of this host's CUDA devices",
        )
    return index


def _host(device: Any, call: str) -> tuple[str, str] | int:
    """The device index a call names, or (code, reason) for a host netra.torch cannot serve on: a torch
    without a usable CUDA device (`device`, as a call on CPU tensors) or a ROCm build (`platform`).
    A wrong argument raises."""
    rocm = _rocm()
    try:
        index = _index(device, call)  # a wrong argument raises, whatever the host
    except RuntimeUnavailableError as e:  # no CUDA here: the composite serves the call, as on CPU tensors
        return ("platform", rocm) if rocm else ("device", e.message.removeprefix(f"{call}: "))
    return ("platform", rocm) if rocm else index


def kernel_for(contract: str, rows: int = 1, device: Any = None) -> Any:
    """The runtime Kernel a call of `contract` with `rows` rows launches on `device` (default: the
    current CUDA device), or the falsy Route (`.code`, `.reason`) naming why the composite runs
    instead: a torch without CUDA, or with no device visible, is the `device` route, as a call on CPU
    tensors is; a ROCm build of torch the `platform` route; a driver below the class's minimum the
    `driver` route. Arguments of the wrong type or value raise (docs/torch.md)."""
    from netra.runtime import arguments

    arguments.count(rows, call="kernel_for", arg="rows")
    c = _op_contract(contract, "kernel_for")
    index = _host(device, "kernel_for")
    if isinstance(index, tuple):
        return route(c.key, *index)
    k = kernels(index, c.key, c.op)
    return k if isinstance(k, Route) else k.kernel(rows)


def prepare(device: Any = None, keys: list[str] | None = None) -> dict[str, str]:
    """Make every contract of the device's certified table (or `keys`) launchable now: catalog opened,
    kernels selected and their code objects verified, modules loaded. Returns contract -> the tactic
    served ("r8"; with a row-count dispatch "w1 (rows <= 16), w8") or "fallback <code>: <reason>", and
    for the routed MoE's first stage also the chain (`fp8_moe(...)`: both stages, and the current
    stream's zeroed workspace made, so that a CUDA graph captured next finds it);
    "*" stands for every contract where the host itself is the reason (no CUDA device, a ROCm torch,
    no certified table for the class). Never raises for the host: run it at startup (to fail on an
    altered install before taking traffic) and before capturing CUDA graphs."""
    from netra.runtime import as_contract, open_catalog

    if keys is not None and not isinstance(keys, (list, tuple)):
        from netra.runtime import arguments

        raise arguments.wrong_type("prepare", "keys", keys, "a list of contracts or None")
    contracts_ = []
    for text in keys or ():
        contracts_.append(_op_contract(text, "as_contract"))
    index = _host(device, "prepare")
    if isinstance(index, tuple):
        said = "fallback {}: {}".format(*index)
        return {"*": said} if keys is None else {c.key: said for c in contracts_}
    if keys is None:
        try:
            keys = open_catalog(gpu_class(index)).contracts()
        except UncertifiedGPUClassError as e:
            return {"*": f"fallback no_table: no certified table for {gpu_class(index)}: {e.message}"}
        contracts_ = [as_contract(text) for text in keys]
    out: dict[str, str] = {}
    for c in contracts_:
        k = kernels(index, c.key, c.op)
        if isinstance(k, Route):
            out[c.key] = f"fallback {k.code}: {k.reason}"
        else:
            out[c.key] = ", ".join(
                kern.tactic if top == _ALL_ROWS else f"{kern.tactic} (rows <= {top})" for top, kern in k.rules
            )
    # a chain (the routed MoE) whose first stage was asked for: its stages and its stream's workspace,
    # made now so that a CUDA graph captured next finds them (the zeroing is not captured)
    for c in contracts_:
        for first, make in CHAIN_PREPARERS.items():
            if c.op == first:
                key, said = make(index, dict(c.params))
                out[key] = said
    return out


# A chain's operator module registers how it is made ready (netra.torch.moe), keyed by its first stage:
# prepare() calls it without importing it.
CHAIN_PREPARERS: dict[str, Callable[[int, dict[str, int]], tuple[str, str]]] = {}
# What set_policy must also forget: plans an operator module keeps itself (its kernels were chosen under
# the old policy); each registers a function that clears them, without taking MUTEX (set_policy holds it).
PLAN_RESETS: list[Callable[[], None]] = []
