"""The runtime's Catalog: a certified kernel for an exact contract, an explicit fallback, or a refusal.

    from netra.runtime import open_catalog
    cat = open_catalog("gfx950")                       # or open_catalog(): the detected GPU's class
    k = cat.select("rmsnorm(hidden=4096,weight_offset=0)", policy="verified")
    if k:                                              # a Kernel; a Fallback is falsy and says why
        k.grid(rows), k.block, k.pack(y=..., rows=...), k.code_object, k.symbol

Opening a catalog reads the packaged lock and the class's table and checks the table (sha256 against
the lock) and the binding of build.json to the lock. In a wheel install whose bytes RECORD vouches for,
each table entry is held to the rules and the lock the first time it is read (tables.serve), and each
code object is checked the first time it is selected (netra.runtime.verifier, as doctor and the wheel
gate check it: whole-file sha256 against build.json, whose .text sha256 must equal the lock's); both
are then kept in memory, so repeated selection does no file access
and no hashing. Anything missing or altered
raises an IntegrityError subclass naming the file, the GPU class, what was expected, and the fix; no
environment variable or argument turns that into a warning.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from netra.core.ops import FAMILIES
from netra.core.types import MATURITIES, Toolchain
from netra.errors import (
    AlteredFileError,
    ContractError,
    MissingFileError,
    NetraError,
    NoGPUError,
    UncertifiedGPUClassError,
)
from netra.runtime import arguments, installed, tables
from netra.runtime.contract import Contract, as_contract
from netra.runtime.installed import Install
from netra.runtime.kernarg import KernargLayout
from netra.runtime.layout import CodeRecord
from netra.runtime.lockfile import Lock
from netra.runtime.tables import Candidate, Table, TableError

if TYPE_CHECKING:
    from pathlib import Path

DEFAULT_POLICY = "accepted"
POLICIES = ("experiment", "verified", "accepted")  # the minimum maturity a caller accepts; never "rejected"
_UNCERTIFIED_HINT = (
    "use a GPU of a certified class, or a release certifying this one; `netra doctor` shows the host"
)


@dataclass(frozen=True, eq=False)
class Kernel:
    """A certified kernel, verified against the lock: everything needed to launch it."""

    gpu_class: str
    loader: str  # the class's vendor's loader (netra.loaders.<loader>), as its table names it
    contract: str
    tactic: str
    artifact: str
    symbol: str
    maturity: str
    block: tuple[int, int, int]
    lds_bytes: int
    dynamic_lds_bytes: int
    workspace_bytes: int
    kernarg: KernargLayout
    evidence: Mapping[str, Any] = field(repr=False)
    code_object: bytes = field(repr=False)
    candidate: Candidate = field(repr=False)

    def __bool__(self) -> bool:
        return True

    def grid(self, rows: int) -> tuple[int, int, int]:
        """Blocks per axis for `rows` rows (the flattened token dimension)."""
        arguments.count(rows, call="Kernel.grid", arg="rows")
        return self.candidate.launch.grid(rows)

    def pack(self, /, **args: Any) -> bytes:
        """The kernarg segment for these arguments, byte-exact per the table's layout."""
        return self.kernarg.pack(**args)


@dataclass(frozen=True)
class Fallback:
    """Netra does not serve this request: the caller must use its own implementation. Falsy."""

    gpu_class: str
    contract: str
    code: str  # "unknown_op", "not_built", "no_entry", "no_tactic", "below_policy", "rejected"
    reason: str
    policy: str
    candidates: tuple[tuple[str, str], ...] = ()  # (tactic, maturity) of the table entry, ranked
    documented: str | None = None  # the table's documented fallback reason for this op, if any

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.reason


def choose(candidates: tuple[Candidate, ...], policy: str, tactic: str | None = None) -> Candidate | None:
    """The first ranked candidate at or above the policy; rejected never qualifies."""
    floor = MATURITIES.index(policy)
    for c in candidates:
        if (tactic is None or c.tactic == tactic) and c.maturity != "rejected" and c.rank >= floor:
            return c
    return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: Any, what: str, hint: str, root: Path) -> bytes | None:
    """A packaged file's bytes, None when absent; anything that is not a readable regular file is an
    AlteredFileError naming it (a FIFO or a folder in an install must not hang or crash a server,
    and a link below the install's root is not followed: files.read_below)."""
    from netra.core import files

    try:  # the reader names the path itself: `what` without it, so the message says it once
        what = what.removeprefix(f"{path}: ")
        return files.read_below(root, path, limit=files.CODE_OBJECT_LIMIT, what=what)
    except MissingFileError:
        return None
    except NetraError as e:
        raise AlteredFileError(e.message, hint) from None


class Catalog:
    """One GPU class's certified table in one install. Made by open_catalog; safe to share across threads."""

    def __init__(
        self,
        install: Install,
        lock: Lock,
        table: Table,
        certified: tuple[str, ...],
        built: Mapping[str, CodeRecord] | None,
        *,
        built_with: Mapping[str, Toolchain] | None = None,
    ) -> None:
        self.install = install
        self.lock = lock
        self.table = table
        self.gpu_class = table.gpu_class
        self.certified_classes = certified
        self._built = built  # build.json code_objects (wheel), None in a source checkout
        # build.json's toolchain for this class is the lock's: its code objects are the locked bytes
        self._same_toolchain = built_with is not None and built_with.get(
            self.gpu_class
        ) == lock.toolchains.get(self.gpu_class)
        self._mutex = threading.Lock()
        self._code: dict[str, bytes] = {}
        self._selected: dict[tuple[Any, str, str | None], Kernel | Fallback] = {}

    def contracts(self) -> list[str]:
        return sorted(self.table.entries)

    def maturity_counts(self) -> dict[str, int]:
        return self.table.maturity_counts()

    def select(
        self,
        contract: Contract | str | Mapping[str, Any],
        policy: str = DEFAULT_POLICY,
        *,
        tactic: str | None = None,
        rows: int | None = None,
    ) -> Kernel | Fallback:
        """The certified kernel for this exact contract at or above `policy`, else a Fallback saying why.

        `rows` (the call's row count) lets the table's certified dispatch pick the tactic measured
        fastest at that size (decode or prefill); without it, or without a dispatch, the first ranked
        candidate that meets the policy is served. Results are memoized: asking again returns the same
        object without parsing or file access."""
        if type(policy) is not str or not (tactic is None or type(tactic) is str) or rows is not None:
            self._check(policy, tactic, rows)  # before any lookup: an unhashable one is no dict's TypeError
        if rows is not None and tactic is None:
            tactic = self._dispatch(contract, policy, rows)
        raw = (contract, policy, tactic) if isinstance(contract, (str, Contract)) else None
        if raw is not None:
            hit = self._selected.get(raw)
            if hit is not None:
                return hit
        c = as_contract(contract, call="select")
        memo = (c.key, policy, tactic)
        hit = self._selected.get(memo)
        if hit is None:
            if policy not in POLICIES:
                self._check(policy, tactic, rows)
            result = self._select(c, policy, tactic)
            with self._mutex:
                hit = self._selected.setdefault(memo, result)
        if raw is not None:
            self._selected[raw] = hit
        return hit

    def served(
        self, contract: Contract | str | Mapping[str, Any], policy: str = DEFAULT_POLICY
    ) -> tuple[tuple[int | None, Kernel], ...] | Fallback:
        """The kernels this contract is served with, by row count: ((max_rows, kernel), ..., (None,
        kernel)) from the entry's certified dispatch, or ((None, kernel),) without one; the Fallback
        when nothing meets the policy. For callers that select once and choose per call by rows."""
        selected = self.select(contract, policy)
        if not selected:  # a Fallback is falsy, a Kernel true
            return cast(Fallback, selected)
        default = cast(Kernel, selected)
        entry = self.table.entries[default.contract]
        if not entry.dispatch:
            return ((None, default),)
        out: list[tuple[int | None, Kernel]] = []
        low = 0
        for d in entry.dispatch:
            k = self.select(contract, policy, rows=d.max_rows if d.max_rows is not None else low + 1)
            out.append((d.max_rows, cast(Kernel, k) if k else default))
            low = d.max_rows if d.max_rows is not None else low
        return tuple(out)

    @staticmethod
    def _check(policy: object, tactic: object, rows: object) -> None:
        arguments.choice(policy, POLICIES, call="select", arg="policy", hint="the default is 'accepted'")
        arguments.text(
            tactic, call="select", arg="tactic", optional=True, hint="pass a tactic name, e.g. 'b256'"
        )
        arguments.count(rows, call="select", arg="rows", optional=True)

    def _dispatch(self, contract: Contract | str | Mapping[str, Any], policy: str, rows: int) -> str | None:
        """The tactic the entry's certified dispatch names for `rows`, if it meets the policy."""
        entry = self.table.entries.get(contract) if isinstance(contract, str) else None
        if entry is None:
            entry = self.table.entries.get(as_contract(contract, call="select").key)
        if entry is None or not entry.dispatch:
            return None
        name = entry.tactic_for(max(rows, 1))
        floor = MATURITIES.index(policy) if policy in MATURITIES else len(MATURITIES)
        chosen = next((c for c in entry.candidates if c.tactic == name), None)
        return name if chosen is not None and chosen.maturity != "rejected" and chosen.rank >= floor else None

    def _select(self, c: Contract, policy: str, tactic: str | None) -> Kernel | Fallback:
        cls = self.gpu_class
        fam = FAMILIES.get(c.op)
        # The gap of this very contract (a class that does not build it), else a model-wide one of an
        # op that is no family. A model-wide gap of a family (a shape its tactics cannot build) names
        # no contract, so it explains no other request of that family (and must not hide a class gap).
        gap = next(
            (f for f in self.table.fallbacks if f.covers(c.op, c.key) and (f.contract or fam is None)), None
        )
        documented = gap.reason if gap is not None else None
        if fam is None:
            why = f"op {c.op!r} is not a Netra op family ({', '.join(sorted(FAMILIES))})"
            if documented:
                why += f"; the {cls} table documents: {documented}"
            return Fallback(cls, c.key, "unknown_op", why, policy, documented=documented)
        if set(c.params) != set(fam.params):
            raise ContractError(
                f"contract {c.key}: op {c.op} takes exactly the parameters {', '.join(fam.params)}",
                f"see {fam.doc}",
            )
        entry = self.table.entries.get(c.key)
        if entry is None and gap is not None and gap.contract:
            why = f"{c.key} is not built for {cls} (the {gap.model} manifest documents: {gap.reason})"
            return Fallback(cls, c.key, "not_built", why, policy, documented=documented)
        if entry is None:
            why = f"{c.key} is not in the certified {cls} table (Netra serves exact contracts only)"
            return Fallback(cls, c.key, "no_entry", why, policy, documented=documented)
        ranked = tuple((x.tactic, x.maturity) for x in entry.candidates)
        listed = ", ".join(f"{t} ({m})" for t, m in ranked)
        if tactic is not None and all(x.tactic != tactic for x in entry.candidates):
            why = f"{c.key} on {cls} has no tactic {tactic!r}; its tactics: {listed}"
            return Fallback(cls, c.key, "no_tactic", why, policy, ranked)
        chosen = choose(entry.candidates, policy, tactic)
        if chosen is None:
            pool = [x for x in entry.candidates if tactic is None or x.tactic == tactic]
            if all(x.maturity == "rejected" for x in pool):
                which = f"tactic {tactic}" if tactic else "every tactic"
                why = f"{c.key} on {cls}: {which} is rejected, and rejected tactics are never served"
                return Fallback(cls, c.key, "rejected", why, policy, ranked)
            best = max((x for x in pool if x.maturity != "rejected"), key=lambda x: x.rank)
            why = (
                f"{c.key} on {cls}: the best {'match' if tactic else 'candidate'} is {best.tactic} at "
                f"maturity {best.maturity!r}, below the policy {policy!r} ({listed}); "
                f"to opt in, select(..., policy={best.maturity!r})"
            )
            return Fallback(cls, c.key, "below_policy", why, policy, ranked)
        return self._kernel(entry.key, chosen)

    def kernel(self, c: Candidate) -> Kernel:
        """The launchable kernel of any candidate of this table, whatever its maturity (certification
        runs every candidate; serving goes through select, which applies the policy)."""
        arguments.instance(c, Candidate, call="Catalog.kernel", arg="the candidate")
        entry = next((e for e in self.table.entries.values() if c in e.candidates), None)
        if entry is None:
            raise ContractError(
                f"Catalog.kernel: candidate {c.artifact} is not in the {self.gpu_class} table of this catalog",
                "pass a candidate of this catalog's table (catalog.table.entries[...].candidates)",
            )
        return self._kernel(entry.key, c)

    def _kernel(self, contract: str, c: Candidate) -> Kernel:
        """The launchable kernel of candidate `c` of the entry `contract` (select knows the entry: only
        the entry it serves is read)."""
        return Kernel(
            gpu_class=self.gpu_class,
            loader=self.table.loader,
            contract=contract,
            tactic=c.tactic,
            artifact=c.artifact,
            symbol=c.symbol,
            maturity=c.maturity,
            block=c.launch.block,
            lds_bytes=c.lds_bytes,
            dynamic_lds_bytes=c.launch.dynamic_lds_bytes,
            workspace_bytes=c.workspace_bytes,
            kernarg=c.kernarg,
            evidence=c.evidence,
            code_object=self.code_object(c),
            candidate=c,
        )

    def code_object(self, c: Candidate) -> bytes:
        """The candidate's code object bytes, verified against the lock the first time, then cached."""
        arguments.instance(c, Candidate, call="Catalog.code_object", arg="the candidate")
        data = self._code.get(c.file)
        if data is not None:
            return data
        with self._mutex:
            data = self._code.get(c.file)
            if data is None:
                data = self._verified_code_object(c)
                self._code[c.file] = data
            return data

    def _verified_code_object(self, c: Candidate) -> bytes:
        inst = self.install
        path = inst.code_object(c.file)
        what = f"{path}: code object {c.artifact} of GPU class {self.gpu_class}"
        locked = self.lock.artifact(c.artifact)
        assert locked is not None  # _cross_check proved every candidate is locked
        data = _read(path, what, inst.rebuild, inst.root)
        if data is None:
            want = (
                f"sha256 {self._built[c.file].sha256}"
                if self._built is not None
                else f".text sha256 {c.text_sha256}"
            )
            raise MissingFileError(f"{what} is missing (expected {want})", inst.rebuild)
        # The one verifier's code-object check (netra.runtime.verifier, as doctor and the wheel gate
        # make it): hashing only, unless the bytes are not exactly those the lock examined.
        from netra.runtime import verifier

        recorded = self._built[c.file].sha256 if self._built is not None else None
        found = verifier.code_object(
            str(path), data, locked, recorded=recorded, same_toolchain=self._same_toolchain
        )
        if not found:
            return data
        f = next((f for f in found if f.check == "sha256"), None) or verifier.first(found)
        assert f is not None
        if f.check == "sha256":
            raise AlteredFileError(
                f"{what} is altered: sha256 {f.found}, expected {f.expected} (build.json, .text locked as "
                f"{c.text_sha256})",
                inst.rebuild,
            )
        if f.check == "parse":
            said = (
                f.detail
                if f.detail.startswith("not a readable")
                else f"not a readable code object ({f.detail})"
            )
            raise AlteredFileError(f"{what} is {said}", inst.rebuild) from None
        said = {
            "text_sha256": f".text sha256 {f.found}, locked {f.expected}",
            "launch_sha256": f"what it launches with (descriptor and metadata) hashes to {f.found}, locked "
            f"{f.expected}",
            "code_sha256": f"sha256 {f.found}, locked {f.expected} for the toolchain build.json records",
        }[f.check]
        raise AlteredFileError(f"{what} differs from the lock: {said}", inst.rebuild)

    def verify(self) -> None:
        """Check every code object this table references now, instead of at first selection."""
        for c in self.table.candidates():
            self.code_object(c)


# ---------------------------------------------------------------------------------------------------
# Opening


def installed_lock(inst: Install) -> tuple[Lock, dict[str, CodeRecord] | None]:
    """The installed lock and build.json's code-object records (None in a source checkout).

    In a wheel install build.json must have been made for this very lock (its lock_sha256) and be
    intact (its own record_sha256); its JSON copy of the lock is then what is read.
    """
    lock, built, _, _ = _installed_lock(inst)
    return lock, built


def _installed_lock(
    inst: Install, *, every_class: bool = True
) -> tuple[Lock, dict[str, CodeRecord] | None, bool, dict[str, Toolchain] | None]:
    """installed_lock, whether the lock is vouched for (build.json's bytes are the ones the wheel's
    RECORD holds and bind the installed lock's: what the gated build checked, not checked again) and
    the toolchains build.json says built the code objects (None in a source checkout).
    `every_class` False: the caller serves one class and holds that class's entries to their files."""
    from netra.runtime import layout
    from netra.runtime import lockfile as lock_mod

    raw = _read(inst.lock_file, f"{inst.lock_file}: the release lock", inst.reinstall, inst.root)
    if raw is None:
        raise MissingFileError(
            f"{inst.lock_file}: the release lock of this netra install is missing", inst.reinstall
        )
    if inst.build_record is None:
        try:
            return lock_mod.loads(raw, str(inst.lock_file)), None, False, None
        except NetraError as e:
            raise AlteredFileError(
                f"{inst.lock_file}: not a readable lock ({e.message})", inst.reinstall
            ) from e
    rec_raw = _read(inst.build_record, f"{inst.build_record}: the build record", inst.reinstall, inst.root)
    if rec_raw is None:
        raise MissingFileError(
            f"{inst.build_record}: the build record of this netra install is missing", inst.reinstall
        )
    vouched = installed.recorded_sha256(inst, layout.BUILD_RECORD) == _sha256(rec_raw)  # hash first
    record = layout.read_record(
        rec_raw, raw, str(inst.build_record), str(inst.lock_file), inst.reinstall, vouched=vouched,
        files_of_every_class=every_class,
    )  # fmt: skip
    return record.lock, record.code_objects, vouched, record.toolchains


def certified_classes(lock: Lock) -> tuple[str, ...]:
    """The GPU classes whose tables the lock tracks: the classes this install is certified for."""
    return tuple(sorted(c for f in lock.files_with_role("table") if (c := tables.gpu_class_of(f.path))))


def _cross_check(inst: Install, lock: Lock, table: Table) -> None:
    """The table and the lock must describe the same code objects (build.json was checked against the
    lock when it was read)."""
    where = inst.tracked(tables.table_path(table.gpu_class))
    problems = tables.against_lock(table, lock)
    if problems:
        raise tables.lock_disagreement(str(where), table.gpu_class, problems, _inconsistent(inst))


def _inconsistent(inst: Install) -> str:
    """The fix for a release that is wrong in itself: on a serving host, a reinstall."""
    return "the release is inconsistent; " + inst.reinstall


_catalogs: dict[tuple[str, str], Catalog] = {}
_detected: dict[tuple[Install, str | None], str] = {}
_open_mutex = threading.Lock()
_install: list[Install] = []


def _default_install() -> Install:
    """This package's install, located once per process."""
    if not _install:
        _install.append(installed.locate())
    return _install[0]


def _open(inst: Install, gpu_class: str) -> Catalog:
    lock, built, vouched, built_with = _installed_lock(inst, every_class=False)
    certified = certified_classes(lock)
    if gpu_class not in certified:
        raise UncertifiedGPUClassError(
            f"GPU class {gpu_class!r} is not certified by this netra-kernel {inst.version} install; "
            f"certified: {', '.join(certified) or 'none'}",
            _UNCERTIFIED_HINT,
        )
    lock_path = tables.table_path(gpu_class)
    locked = lock.file(lock_path)
    assert locked is not None
    path = inst.tracked(lock_path)
    raw = _read(path, f"{path}: the certified table of GPU class {gpu_class}", inst.reinstall, inst.root)
    if raw is None:
        raise MissingFileError(
            f"{path}: the certified table of GPU class {gpu_class} is missing "
            f"(expected sha256 {locked.sha256})",
            inst.reinstall,
        )
    got = _sha256(raw)
    if got != locked.sha256:
        raise AlteredFileError(
            f"{path}: the certified table of GPU class {gpu_class} is altered: sha256 {got}, "
            f"locked {locked.sha256}",
            inst.reinstall,
        )
    if vouched:
        # Hash first: bytes with the sha256 a vouched lock records are the ones the gated build read
        # through the table format. What holds for the whole table is checked now; each entry is held
        # to the rules and the lock when it is first read (tables.Entries), as each code object is
        # hashed when it is first selected.
        table = tables.serve(raw, str(path), gpu_class, lock, _inconsistent(inst))
    else:
        try:
            table = tables.loads(raw, str(path), gpu_class)
        except TableError as e:  # the release itself is wrong: on a serving host the fix is a reinstall
            raise TableError(e.message, _inconsistent(inst), e.details) from None
        _cross_check(inst, lock, table)
    if built is not None:
        # build.json was matched to the lock by artifact name (layout.read_record, hash first): its
        # entries for this class must also be at the files the class names.
        absent = sorted(a.file for a in lock.artifacts if a.target == gpu_class and a.file not in built)
        if absent:
            raise AlteredFileError(
                f"{inst.build_record}: does not record {absent[0]}"
                + (f" and {len(absent) - 1} more" if len(absent) > 1 else ""),
                inst.reinstall,
            )
    return Catalog(inst, lock, table, certified, built, built_with=built_with)


def open_catalog(
    gpu_class: str | None = None,
    *,
    install: Install | None = None,
    sysfs_nodes: str | None = None,
) -> Catalog:
    """The certified catalog of `gpu_class` (default: the class of this host's GPU) in this install.

    Raises UncertifiedGPUClassError (listing the certified classes) for a class this install does not
    certify, NoGPUError when no class is given and no GPU is found, and an IntegrityError subclass when
    the lock, build record or table is missing or altered. Catalogs are cached per install and class.
    """
    arguments.text(
        gpu_class,
        call="open_catalog",
        arg="gpu_class",
        optional=True,
        hint="pass a GPU class name, e.g. from certified_classes(), or None to detect it",
    )
    arguments.instance(install, Install, call="open_catalog", arg="install", optional=True)
    sysfs_nodes = arguments.path(sysfs_nodes, call="open_catalog", arg="sysfs_nodes")
    inst = install or _default_install()
    if gpu_class is None:
        found = _detected.get((inst, sysfs_nodes))
        if found is None:
            found = _detected[(inst, sysfs_nodes)] = _detected_class(inst, sysfs_nodes)
        gpu_class = found
    memo = (str(inst.root), gpu_class)
    cat = _catalogs.get(memo)
    if cat is None:
        with _open_mutex:
            cat = _catalogs.get(memo)
            if cat is None:
                cat = _catalogs[memo] = _open(inst, gpu_class)
    return cat


def _detected_class(inst: Install, sysfs_nodes: str | None) -> str:
    from netra.runtime import gpus

    found = gpus.detect(sysfs_nodes) if sysfs_nodes is not None else gpus.detect()
    lock, _ = installed_lock(inst)
    certified = certified_classes(lock)
    if not found.gpus:
        raise NoGPUError(
            f"no GPU found on this host ({'; '.join(found.notes)}); "
            f"certified: {', '.join(certified) or 'none'}",
            f"pass the GPU class explicitly, e.g. open_catalog({(certified or ('<class>',))[0]!r}), to inspect a "
            "catalog without a GPU",
        )
    usable = [c for c in found.classes if c in certified]
    if len(usable) == 1:
        return usable[0]
    if not usable:
        raise UncertifiedGPUClassError(
            f"this host's GPU class(es) {', '.join(found.classes)} are not certified by this netra-kernel "
            f"{inst.version} install; certified: {', '.join(certified) or 'none'}",
            _UNCERTIFIED_HINT,
        )
    raise ContractError(
        f"this host has GPUs of several certified classes ({', '.join(usable)})",
        "pass the one to use: open_catalog('<class>')",
    )


def clear_cache() -> None:
    """Forget opened catalogs (and their verified code objects): the next open re-reads and re-checks."""
    with _open_mutex:
        _catalogs.clear()
        _detected.clear()
        _install.clear()
