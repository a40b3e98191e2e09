"""How netra.torch accounts for what ran: a Route per fallback (contract, code, reason), a Plan per call
signature, the counters behind stats() and fallback_reasons(), strict mode and the serving policy.

A Route is falsy, like the runtime's Fallback: taking it (the composite is about to run) raises
StrictModeError in strict mode, else counts the call and logs the reason once on the "netra.torch"
logger. The plans themselves are made and looked up by netra.torch.dispatch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from netra.errors import StrictModeError

log = logging.getLogger("netra.torch")

CERTIFIED = "certified"  # the stats key of calls that ran a certified kernel

MUTEX = threading.RLock()  # guards every table of routes, plans and kernels in netra.torch
POLICY = ["accepted"]  # the serving policy (set_policy in netra.torch.dispatch rebuilds the plans)
# One tactic per contract for every row count (set_batch_invariant in netra.torch.dispatch rebuilds the plans)
BATCH_INVARIANT = [False]
# Contracts served by exactly one named tactic of their table (set_tactics in netra.torch.dispatch)
TACTICS: dict[str, str] = {}
_strict = [False]


# ---------------------------------------------------------------------------------------------------
# Routes: a fallback record per (contract, code, reason), a plan per call signature


class Route:
    """A fallback route: the composite runs, for `code` and `reason`. Falsy, like runtime.Fallback."""

    __slots__ = ("code", "contract", "count", "logged", "reason")

    def __init__(self, contract: str, code: str, reason: str) -> None:
        self.contract = contract
        self.code = code
        self.reason = reason
        self.count = 0
        self.logged = False

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Route({self.contract!r}, {self.code!r}, {self.reason!r})"

    def take(self) -> None:
        """The composite is about to run for this route: strict check, count, log once."""
        if _strict[0]:
            raise StrictModeError(
                f"strict mode: {self.contract} would run the PyTorch composite ({self.code}: {self.reason})",
                "serve a certified contract on a certified GPU (netra.torch.prepare() lists them), or call "
                "outside strict mode",
                contract=self.contract,
                code=self.code,
                reason=self.reason,
            )
        self.count += 1
        if not self.logged:
            self.logged = True
            log.warning("%s runs the PyTorch composite: %s (%s)", self.contract, self.reason, self.code)


class Plan:
    """What one call signature runs: `launch` (kernels by row count) or `route` (the composite)."""

    __slots__ = ("contract", "count", "extra", "launch", "route", "width")

    def __init__(
        self, contract: str, width: int, launch: Callable[..., None] | None, route: Route | None
    ) -> None:
        self.contract = contract
        self.width = width
        self.launch = launch
        self.route = route
        self.count = 0  # calls that ran the kernel
        self.extra: Any = None  # per-op constant (groups per row, k)


_routes: dict[tuple[str, str, str], Route] = {}
_plans: list[Plan] = []  # every plan ever made (stats survive set_policy)


def route(contract: str, code: str, reason: str) -> Route:
    key = (contract, code, reason)
    r = _routes.get(key)
    if r is None:
        with MUTEX:
            r = _routes.setdefault(key, Route(contract, code, reason))
    return r


def new_plan(contract: str, width: int, launch: Callable[..., None] | None, rt: Route | None) -> Plan:
    p = Plan(contract, width, launch, rt)
    _plans.append(p)
    return p


# ---------------------------------------------------------------------------------------------------
# Stats, strict mode, policy


def stats() -> dict[str, dict[str, int]]:
    """Calls per contract and path since the last reset: {"certified": n} for the kernel, and one entry
    per fallback code ("device", "dtype", "layout", "alignment", "no_table", "no_entry", "below_policy",
    ...) for the composite. Contracts with no calls are left out."""
    out: dict[str, dict[str, int]] = {}
    with MUTEX:
        for p in _plans:
            if p.count:
                d = out.setdefault(p.contract, {})
                d[CERTIFIED] = d.get(CERTIFIED, 0) + p.count
        for r in _routes.values():
            if r.count:
                d = out.setdefault(r.contract, {})
                d[r.code] = d.get(r.code, 0) + r.count
    return out


def fallback_reasons() -> dict[str, dict[str, list[str]]]:
    """Each contract's fallback codes and the reasons given, for every composite run since the last reset."""
    out: dict[str, dict[str, list[str]]] = {}
    with MUTEX:
        for r in _routes.values():
            if r.count:
                out.setdefault(r.contract, {}).setdefault(r.code, []).append(r.reason)
    return out


def reset_stats() -> None:
    """Zero every counter (the one-time log lines are not repeated)."""
    with MUTEX:
        for p in _plans:
            p.count = 0
        for r in _routes.values():
            r.count = 0


def set_strict(on: bool = True) -> bool:
    """Process-wide: while on, a call that would run the composite raises StrictModeError. Returns the
    previous setting."""
    prev = _strict[0]
    _strict[0] = bool(on)
    return prev


def is_strict() -> bool:
    return _strict[0]


@contextlib.contextmanager
def strict(on: bool = True) -> Iterator[None]:
    """`with netra.torch.strict():` strict mode for the block (process-wide), restored afterwards."""
    prev = set_strict(on)
    try:
        yield
    finally:
        set_strict(prev)


def policy() -> str:
    return POLICY[0]


def batch_invariant() -> bool:
    """Whether every contract is served by one tactic whatever the row count (set_batch_invariant)."""
    return BATCH_INVARIANT[0]


def tactics() -> dict[str, str]:
    """The contracts served by one named tactic (set_tactics): contract -> tactic, a copy."""
    return dict(TACTICS)
