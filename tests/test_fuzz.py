"""Property-based tests of every reader a user (or a bad merge, a bad disk, an attacker) can feed.

Each reader gets real inputs mutated (bytes flipped, truncated, inserted, spliced; parsed structures
with a leaf replaced, a key dropped or added) and structured garbage. The property is the same for all:
the reader returns, or raises the project's own error type (NetraError), never another exception and
never hangs (a SIGALRM guard fails a call that runs past CALL_LIMIT_S). netra.core.elf is the one
exception: its documented contract is ValueError, which its callers (text_sha256) turn into a
NetraError; both levels are tested.

The CI campaign is short (NETRA_FUZZ_EXAMPLES, default 200 examples per reader). The long campaign is
the same tests with a larger count, run once and recorded in docs/reliability.md:

    NETRA_FUZZ_EXAMPLES=20000 .venv-test/bin/python -m pytest tests/test_fuzz.py -q
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from netra import targets  # noqa: E402
from netra.core import elf, models  # noqa: E402
from netra.core import schema as s  # noqa: E402
from netra.core import toml as _toml  # noqa: E402
from netra.errors import NetraError, TableError  # noqa: E402
from netra.release import manifests  # noqa: E402
from netra.runtime import layout, tables  # noqa: E402
from netra.runtime import lockfile as lock_mod  # noqa: E402
from netra.targets.gfx950 import codeobject  # noqa: E402
from netra.targets.sm_90 import cubin  # noqa: E402

EXAMPLES = int(os.environ.get("NETRA_FUZZ_EXAMPLES", "200"))
CALL_LIMIT_S = 30  # one reader call on inputs of a few hundred KiB takes milliseconds
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # nothing written into the tree
    derandomize=EXAMPLES <= 1000,  # the CI campaign is the same every run; the long one explores
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


class Hang(Exception):
    """A reader ran past CALL_LIMIT_S (raised by the SIGALRM guard, never by a reader)."""


@contextmanager
def guard() -> Iterator[None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"a reader ran for more than {CALL_LIMIT_S}s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(CALL_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


CALLS: dict[
    str, dict[str, int]
] = {}  # test -> {"calls", "refused"}: reader calls made (the campaign's cases)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    """With NETRA_FUZZ_REPORT=path, the reader calls made per test are written there as JSON."""
    yield
    if os.environ.get("NETRA_FUZZ_REPORT"):
        Path(os.environ["NETRA_FUZZ_REPORT"]).write_text(json.dumps(CALLS, indent=1, sort_keys=True))


def parses_or_refuses(read: Callable[[], Any], allowed: type[BaseException] = NetraError) -> Any:
    """The property: `read()` returns, or raises `allowed` with a one-line message; nothing else."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split(" ")[0]
    count = CALLS.setdefault(test, {"calls": 0, "refused": 0})
    count["calls"] += 1
    with guard():
        try:
            return read()
        except allowed as e:
            count["refused"] += 1
            if isinstance(e, NetraError):
                assert "\n" not in str(e), f"a multi-line message: {e!r}"
            return None


# -- real inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    root: Path  # a private copy of kernels/, manifests/, release/
    lock_bytes: bytes
    lock_dict: dict[str, Any]
    tables: dict[str, bytes]  # gpu class -> table bytes
    record: bytes  # a build.json bound to lock_bytes
    hsaco: bytes
    hsaco_symbol: str
    cubin: bytes
    cubin_symbol: str
    blackwell_cubin: bytes  # sm_100a: its launch digest also reads the kernel's Mercury sections
    blackwell_symbol: str
    manifests: dict[str, bytes]  # tracked manifest path -> bytes


def _record_for(lock_bytes: bytes, lock: lock_mod.Lock) -> bytes:
    """A build.json exactly as layout.build_record writes it, from the lock's own facts."""
    record: dict[str, Any] = {
        "schema": layout.RECORD_SCHEMA,
        "lock_sha256": hashlib.sha256(lock_bytes).hexdigest(),
        "toolchains": {
            t: {"flavour": tc.flavour, "version": tc.version} for t, tc in sorted(lock.toolchains.items())
        },
        "code_objects": {
            a.file: {
                "artifact": a.name,
                "sha256": a.code_sha256,
                "text_sha256": a.text_sha256,
                "launch_sha256": a.launch_sha256,
            }
            for a in lock.artifacts
        },
        "lock": lock_mod.to_dict(lock),
    }
    record["record_sha256"] = hashlib.sha256(layout.canonical(record)).hexdigest()
    return (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()


@pytest.fixture(scope="module")
def inputs(repo_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    root = tmp_path_factory.mktemp("fuzz") / "tree"
    for d in ("kernels", "manifests", "release", "requirements"):
        shutil.copytree(repo_copy / d, root / d)
    raw = (root / lock_mod.LOCK_PATH).read_bytes()
    lock = lock_mod.loads(raw, "lock")
    cat = manifests.load(root)
    work = tmp_path_factory.mktemp("fuzz-build")
    (work / "src").mkdir()
    built: dict[str, tuple[bytes, str]] = {}
    for cls in ("gfx950", "sm_90", "sm_100"):  # one real code object per class, by its real toolchain
        spec = next(a for a in cat.artifacts if a.target == cls)
        tgt = targets.get(cls)
        path = tgt.compile(spec, tgt.discover(), root, work / "src", work / "out")
        built[cls] = (path.read_bytes(), spec.symbol)
    manifest_bytes = {
        rel: (root / rel).read_bytes() for rel, role in manifests.tracked_files(root) if rel.endswith(".toml")
    }
    return Inputs(
        root=root,
        lock_bytes=raw,
        lock_dict=_toml.loads(raw.decode()),
        tables={c: (root / tables.table_path(c)).read_bytes() for c in ("gfx950", "sm_90", "sm_100")},
        record=_record_for(raw, lock),
        hsaco=built["gfx950"][0],
        hsaco_symbol=built["gfx950"][1],
        cubin=built["sm_90"][0],
        cubin_symbol=built["sm_90"][1],
        blackwell_cubin=built["sm_100"][0],
        blackwell_symbol=built["sm_100"][1],
        manifests=manifest_bytes,
    )


def test_the_real_inputs_parse(inputs: Inputs) -> None:
    """The baseline the mutations start from is valid: otherwise every 'refusal' below is meaningless."""
    lock = lock_mod.loads(inputs.lock_bytes, "lock")
    for cls, raw in inputs.tables.items():
        tables.loads(raw, cls, cls)
    layout.read_record(inputs.record, inputs.lock_bytes, "build.json", "manifest.lock", "")
    assert codeobject.inspect(inputs.hsaco).kernels[inputs.hsaco_symbol]
    assert codeobject.launch_digest(inputs.hsaco, inputs.hsaco_symbol, "x")
    assert inputs.cubin_symbol in cubin.inspect(inputs.cubin).kernels
    assert cubin.launch_digest(inputs.cubin, inputs.cubin_symbol, "x")
    assert lock.artifacts and manifests.load(inputs.root).artifacts


# -- strategies -------------------------------------------------------------------------------------

# Structured garbage: what a JSON or TOML parser can hand a schema reader.
LEAVES = (
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40)
    | st.sampled_from(["", "x", "0" * 64, "A" * 64, "netra_x", "kernels/../x", "/etc/hostname", "\0", "gfx950",
                      "sm_90", "llvm", "nvcc", "static", "accepted", "verified", "rmsnorm"])
)  # fmt: skip
GARBAGE = st.recursive(
    LEAVES,
    lambda kids: st.lists(kids, max_size=6) | st.dictionaries(st.text(max_size=12), kids, max_size=6),
    max_leaves=40,
)


@st.composite
def mutated_bytes(draw: st.DrawFn, base: bytes) -> bytes:
    """A real file with a few byte-level edits: flips, truncation, insertion, deletion, splices."""
    data = bytearray(base)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if not data:
            data += draw(st.binary(min_size=1, max_size=16))
            continue
        kind = draw(st.sampled_from(["flip", "byte", "truncate", "insert", "delete", "splice", "repeat"]))
        i = draw(st.integers(min_value=0, max_value=len(data) - 1))
        if kind == "flip":
            data[i] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif kind == "byte":
            data[i] = draw(st.integers(min_value=0, max_value=255))
        elif kind == "truncate":
            del data[i:]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=32))
        elif kind == "delete":
            del data[i : i + draw(st.integers(min_value=1, max_value=64))]
        elif kind == "splice":  # a block of the file moved elsewhere (what a bad merge does)
            j = draw(st.integers(min_value=0, max_value=len(data) - 1))
            block = data[i : i + draw(st.integers(min_value=1, max_value=400))]
            data[j:j] = block
        else:  # repeat a block in place (a duplicated entry)
            block = data[i : i + draw(st.integers(min_value=1, max_value=400))]
            data[i:i] = block
    return bytes(data)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_structure(draw: st.DrawFn, base: Any) -> Any:
    """A real parsed file with a few structural edits: a value replaced, a key dropped, added or renamed,
    a list entry duplicated or dropped."""
    data = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = data
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        kind = draw(st.sampled_from(["replace", "drop", "add", "duplicate"]))
        if kind == "replace":
            parent[key] = draw(GARBAGE)
        elif kind == "drop":
            del parent[key]
        elif kind == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(GARBAGE)
        elif kind == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
    return data


# -- the lock ---------------------------------------------------------------------------------------


def test_lock_bytes_mutations(inputs: Inputs) -> None:
    @FUZZ
    @given(mutated_bytes(inputs.lock_bytes))
    def check(raw: bytes) -> None:
        parses_or_refuses(lambda: lock_mod.loads(raw, "release/manifest.lock"))

    check()


def test_lock_structure_mutations(inputs: Inputs) -> None:
    @FUZZ
    @given(mutated_structure(inputs.lock_dict))
    def check(data: Any) -> None:
        parses_or_refuses(lambda: lock_mod.from_dict(data, "release/manifest.lock"))

    check()


@FUZZ
@given(GARBAGE)
def test_lock_garbage(data: Any) -> None:
    parses_or_refuses(lambda: lock_mod.from_dict(data, "release/manifest.lock"))
    parses_or_refuses(
        lambda: lock_mod.from_dict(
            {"schema": lock_mod.SCHEMA, "toolchains": {}, "files": data, "artifacts": data}
        )
    )


@FUZZ
@given(st.binary(max_size=2000) | st.text(max_size=2000).map(str.encode))
def test_lock_random_bytes(raw: bytes) -> None:
    parses_or_refuses(lambda: lock_mod.loads(raw, "release/manifest.lock"))


def test_deeply_nested_toml_and_json_are_refused() -> None:
    """The parsers recurse: thousands of nested arrays used to escape as RecursionError."""
    deep = b"x = " + b"[" * 50_000 + b"]" * 50_000 + b"\n"
    with pytest.raises(NetraError, match="nested too deeply"):
        lock_mod.loads(deep, "release/manifest.lock")
    with pytest.raises(NetraError, match="not valid JSON"):
        tables.loads(b"[" * 50_000, "t.json")
    with pytest.raises(NetraError, match="not a readable build record"):
        layout.read_record(b"[" * 50_000, b"", "build.json", "manifest.lock", "")


# -- manifests: templates, tactics, models ----------------------------------------------------------


def _readers() -> dict[str, s.Reader]:
    from netra.errors import ManifestError

    # A template manifest is read with the budget of the class whose folder holds it (or of the classes
    # sharing that folder, kernels/cuda/: they have the same budget keys).
    return {
        **{
            "template " + d.rsplit("/", 1)[1]: s.Reader(
                manifests._template_schema(t.budget), ManifestError, ""
            )
            for t in targets.every()
            for d in t.sources
        },
        "tactics": s.Reader(manifests._TACTICS, ManifestError, ""),
        "model": s.Reader(models.SCHEMA, ManifestError, ""),
    }


def test_manifest_schemas_on_mutated_real_manifests(inputs: Inputs) -> None:
    readers = _readers()
    parsed = {rel: _toml.loads(raw.decode()) for rel, raw in inputs.manifests.items()}

    def reader_of(rel: str) -> s.Reader:
        if rel.startswith("manifests/models/"):
            return readers["model"]
        if rel.endswith("tactics.toml"):
            return readers["tactics"]
        return readers["template " + rel.split("/")[1]]

    @FUZZ
    @given(
        st.sampled_from(sorted(parsed)).flatmap(
            lambda rel: st.tuples(st.just(rel), mutated_structure(parsed[rel]))
        )
    )
    def check(case: tuple[str, Any]) -> None:
        rel, data = case
        parses_or_refuses(lambda: reader_of(rel).read(data, rel))

    check()


@FUZZ
@given(st.sampled_from(sorted(_readers())), GARBAGE)
def test_manifest_schemas_on_garbage(which: str, data: Any) -> None:
    parses_or_refuses(lambda: _readers()[which].read(data, which))


def test_catalog_load_on_mutated_manifest_files(inputs: Inputs, tmp_path: Path) -> None:
    """The whole reader (bytes -> TOML -> schema -> cross-checks -> contracts in range), on a tree."""
    tree = tmp_path / "tree"
    for d in ("kernels", "manifests"):
        shutil.copytree(inputs.root / d, tree / d)
    names = sorted(inputs.manifests)

    @FUZZ
    @given(
        st.sampled_from(names).flatmap(
            lambda rel: st.tuples(st.just(rel), mutated_bytes(inputs.manifests[rel]))
        )
    )
    def check(case: tuple[str, bytes]) -> None:
        rel, raw = case
        (tree / rel).write_bytes(raw)
        try:
            parses_or_refuses(lambda: manifests.load(tree))
        finally:
            (tree / rel).write_bytes(inputs.manifests[rel])

    check()


# -- tables -----------------------------------------------------------------------------------------


def test_table_bytes_mutations(inputs: Inputs) -> None:
    @FUZZ
    @given(
        st.sampled_from(sorted(inputs.tables)).flatmap(
            lambda c: st.tuples(st.just(c), mutated_bytes(inputs.tables[c]))
        )
    )
    def check(case: tuple[str, bytes]) -> None:
        cls, raw = case
        parses_or_refuses(lambda: tables.loads(raw, tables.table_path(cls), cls))

    check()


def test_table_structure_mutations(inputs: Inputs) -> None:
    parsed = {c: json.loads(raw) for c, raw in inputs.tables.items()}
    lock = lock_mod.loads(inputs.lock_bytes, "lock")

    @FUZZ
    @given(
        st.sampled_from(sorted(parsed)).flatmap(lambda c: st.tuples(st.just(c), mutated_structure(parsed[c])))
    )
    def check(case: tuple[str, Any]) -> None:
        cls, data = case
        table = parses_or_refuses(lambda: tables.parse(data, tables.table_path(cls), cls))
        if table is not None:  # what parses is held to the lock, which must never raise either
            parses_or_refuses(lambda: tables.against_lock(table, lock))
        # As doctor and the runtime read bytes whose sha256 a vouched lock records (a resealed wheel):
        # the format is not read again, yet whatever a gated build does not write still ends as a
        # TableError, and what is accepted is exactly what the strict read accepts when it accepts it.
        fast = parses_or_refuses(lambda: tables.parse(data, tables.table_path(cls), cls, vouched=True))
        if fast is not None and table is not None:
            assert fast == table
        # As a first lookup serves it (each entry held to the rules and the lock when first read):
        # opening and reading every entry either gives the strict read's table or a TableError.
        served = parses_or_refuses(lambda: _served_whole(data, cls, lock))
        if served is not None and table is not None:
            assert served == table

    check()


def _served_whole(data: Any, cls: str, lock: Any) -> Any:
    """tables.serve's table with every entry read (each is checked when first read)."""
    raw = json.dumps(data, allow_nan=True).encode()
    t = tables.serve(raw, tables.table_path(cls), cls, lock, "reinstall")
    for key in t.entries:
        t.entries[key]
    return t


def test_evidence_file_mutations(inputs: Inputs) -> None:
    """The sm_90 evidence file mutated (bytes, then structure): read with its table as one certified
    table, it either reads or is refused with a TableError, never anything else."""
    table = inputs.tables["sm_90"]
    evidence = (inputs.root / tables.evidence_path("sm_90")).read_bytes()
    where = (tables.table_path("sm_90"), tables.evidence_path("sm_90"))
    parsed = json.loads(evidence)

    @FUZZ
    @given(st.one_of(mutated_bytes(evidence), mutated_structure(parsed)))
    def check(mutated: Any) -> None:
        raw = mutated if isinstance(mutated, bytes) else json.dumps(mutated, allow_nan=True).encode()
        parses_or_refuses(lambda: tables.read_certified(table, raw, *where, "sm_90"))

    check()


def test_a_vouched_table_reads_as_the_schema_reads_it(inputs: Inputs) -> None:
    """The hash-first path (no format check) gives exactly the strict read's table, for every class."""
    assert sorted(inputs.tables) == sorted(targets.names())
    for cls, raw in inputs.tables.items():
        strict = tables.loads(raw, cls, cls)
        fast = tables.loads(raw, cls, cls, vouched=True)
        assert fast == strict and fast.entries and fast.candidates()


def test_a_served_table_reads_as_the_schema_reads_it(inputs: Inputs) -> None:
    """The first lookup's read (tables.serve: the whole table's rules now, each entry's when it is
    first read) gives exactly the strict read's table for every class, and builds only what is read."""
    lock = lock_mod.loads(inputs.lock_bytes, "lock")
    for cls, raw in inputs.tables.items():
        strict = tables.loads(raw, cls, cls)
        served = tables.serve(raw, cls, cls, lock, "reinstall")
        key = sorted(strict.entries)[-1]
        assert served.entries[key] == strict.entries[key]
        assert served.entries._built.keys() == {key}  # type: ignore[attr-defined]
        assert sorted(served.entries) == sorted(strict.entries) and key in served.entries
        assert served == strict


def test_a_vouched_table_still_obeys_the_rules(inputs: Inputs) -> None:
    """What the hash-first path skips is the format only: a rule broken in well-formed data is refused
    with the strict read's message (the edits the resealed-wheel tests make, and one per rule family)."""
    base = json.loads(inputs.tables["gfx950"])
    lock = lock_mod.loads(inputs.lock_bytes, "lock")

    def accepted_on_static(t: dict[str, Any]) -> None:
        t["entries"][0]["candidates"][0]["maturity"] = "accepted"

    def duplicate_entry(t: dict[str, Any]) -> None:
        t["entries"].append(t["entries"][0])

    def duplicate_tactic(t: dict[str, Any]) -> None:
        t["entries"][0]["candidates"].append(t["entries"][0]["candidates"][0])

    def misaligned_argument(t: dict[str, Any]) -> None:
        t["entries"][0]["candidates"][0]["kernarg"]["args"][1]["offset"] = 3

    def missing_field(t: dict[str, Any]) -> None:  # not what a gated build writes: the strict read names it
        del t["entries"][0]["candidates"][0]["launch"]

    for edit in (accepted_on_static, duplicate_entry, duplicate_tactic, misaligned_argument, missing_field):
        data = json.loads(json.dumps(base))
        edit(data)
        with pytest.raises(TableError) as strict:
            tables.parse(data, "gfx950.json", "gfx950")
        with pytest.raises(TableError) as fast:
            tables.parse(data, "gfx950.json", "gfx950", vouched=True)
        assert str(fast.value) == str(strict.value), edit.__name__
        # Served (a first lookup): refused when the table is opened or when the broken entry is first
        # read, before anything is served from it, in the strict read's words with the caller's fix.
        with pytest.raises(TableError) as served:
            t = tables.serve(json.dumps(data).encode(), "gfx950.json", "gfx950", lock, "reinstall")
            t.entries[data["entries"][0]["key"]]
        assert (served.value.message, served.value.hint) == (strict.value.message, "reinstall"), edit.__name__


@FUZZ
@given(GARBAGE)
def test_table_garbage(data: Any) -> None:
    parses_or_refuses(lambda: tables.parse(data, "release/tables/gfx950.json", "gfx950"))
    parses_or_refuses(lambda: tables.parse(data, "release/tables/gfx950.json", "gfx950", vouched=True))


# -- RECORD's hash fields ----------------------------------------------------------------------------


@FUZZ
@given(st.binary(min_size=32, max_size=32), st.integers(0, 42), st.characters(), st.booleans())
def test_record_hash_fields_decode_alike(digest: bytes, at: int, digit: str, padded: bool) -> None:
    """doctor's decoder (binascii, every row) and a first lookup's (one row, no extension module loaded)
    give the digest of a canonical field, and agree on every other field: the same hex or both None."""
    import base64

    from netra.runtime import installed

    field = base64.urlsafe_b64encode(digest).decode()
    field = field if padded else field.rstrip("=")
    assert (
        installed.record_sha256("sha256=" + field)
        == installed.one_record_sha256("sha256=" + field)
        == digest.hex()
    )
    bent = "sha256=" + field[:at] + digit + field[at + 1 :]
    assert installed.record_sha256(bent) == installed.one_record_sha256(bent)


# -- build.json -------------------------------------------------------------------------------------


def test_build_record_bytes_mutations(inputs: Inputs) -> None:
    @FUZZ
    @given(mutated_bytes(inputs.record))
    def check(raw: bytes) -> None:
        parses_or_refuses(
            lambda: layout.read_record(raw, inputs.lock_bytes, "build.json", "manifest.lock", "")
        )

    check()


def test_build_record_structure_mutations_resealed(inputs: Inputs) -> None:
    """Mutations with record_sha256 recomputed, so the schema and the cross-checks are what is tested."""
    base = json.loads(inputs.record)

    @FUZZ
    @given(mutated_structure(base))
    def check(data: Any) -> None:
        if isinstance(data, dict):
            body = {k: v for k, v in data.items() if k != "record_sha256"}
            # not serializable canonically (NaN...): the reader must refuse it as it is
            with contextlib.suppress(TypeError, ValueError):
                data["record_sha256"] = hashlib.sha256(layout.canonical(body)).hexdigest()
        try:
            raw = json.dumps(data).encode()
        except (TypeError, ValueError):
            return
        parses_or_refuses(
            lambda: layout.read_record(raw, inputs.lock_bytes, "build.json", "manifest.lock", "")
        )
        # As the runtime and doctor read it when RECORD vouches for the bytes (a resealed wheel): the
        # schemas are skipped, and whatever a gated build does not write still ends as a NetraError.
        parses_or_refuses(
            lambda: layout.read_record(
                raw, inputs.lock_bytes, "build.json", "manifest.lock", "", vouched=True
            )
        )
        # As the first lookup reads it (entries matched to the lock by artifact name).
        by_name = {"vouched": True, "files_of_every_class": False}
        parses_or_refuses(
            lambda: layout.read_record(raw, inputs.lock_bytes, "build.json", "manifest.lock", "", **by_name)
        )

    check()


def test_a_vouched_build_record_reads_as_the_schema_reads_it(inputs: Inputs) -> None:
    """The fast path (bytes vouched for by RECORD: no schema) gives exactly what the strict read gives."""
    strict = layout.read_record(inputs.record, inputs.lock_bytes, "build.json", "manifest.lock", "")
    fast = layout.read_record(
        inputs.record, inputs.lock_bytes, "build.json", "manifest.lock", "", vouched=True
    )
    assert fast == strict
    first_lookup = layout.read_record(
        inputs.record, inputs.lock_bytes, "build.json", "manifest.lock", "", vouched=True,
        files_of_every_class=False,
    )  # fmt: skip
    assert first_lookup == strict
    assert lock_mod.to_dict(fast.lock) == lock_mod.to_dict(strict.lock) == json.loads(inputs.record)["lock"]


# -- code objects -----------------------------------------------------------------------------------


def test_gfx950_code_object_mutations(inputs: Inputs) -> None:
    @FUZZ
    @given(mutated_bytes(inputs.hsaco))
    def check(raw: bytes) -> None:
        sym = inputs.hsaco_symbol
        parses_or_refuses(lambda: codeobject.inspect(raw, "x.hsaco"))
        parses_or_refuses(lambda: codeobject.text_sha256(raw, "x.hsaco"))
        parses_or_refuses(lambda: codeobject.launch_digest(raw, sym, "x.hsaco"))
        parses_or_refuses(lambda: targets.get("gfx950").text_sha256(raw, sym, "x.hsaco"))

    check()


def test_sm_90_cubin_mutations(inputs: Inputs) -> None:
    @FUZZ
    @given(mutated_bytes(inputs.cubin))
    def check(raw: bytes) -> None:
        sym = inputs.cubin_symbol
        parses_or_refuses(lambda: cubin.inspect(raw, "x.cubin"))
        parses_or_refuses(lambda: cubin.text_sha256(raw, sym, "x.cubin"))
        parses_or_refuses(lambda: cubin.launch_digest(raw, sym, "x.cubin"))

    check()


def test_sm_100_cubin_mutations(inputs: Inputs) -> None:
    tgt = targets.get("sm_100")

    @FUZZ
    @given(mutated_bytes(inputs.blackwell_cubin))
    def check(raw: bytes) -> None:
        sym = inputs.blackwell_symbol
        parses_or_refuses(lambda: tgt.text_sha256(raw, sym, "x.cubin"))
        parses_or_refuses(lambda: tgt.launch_digest(raw, sym, "x.cubin"))

    check()


def test_elf_reader_mutations(inputs: Inputs) -> None:
    """netra.core.elf's contract is ValueError for anything it does not handle (its callers convert it)."""

    @FUZZ
    @given(st.sampled_from(["hsaco", "cubin"]).flatmap(lambda k: mutated_bytes(getattr(inputs, k))))
    def check(raw: bytes) -> None:
        parses_or_refuses(lambda: elf.sections(raw), ValueError)
        parses_or_refuses(lambda: elf.section_bytes(raw, ".text"), ValueError)

    check()


@FUZZ
@given(st.binary(max_size=512), st.sampled_from([b"", b"\x7fELF\x02\x01\x01"]))
def test_code_object_readers_on_random_bytes(raw: bytes, head: bytes) -> None:
    data = head + raw
    parses_or_refuses(lambda: elf.sections(data), ValueError)
    parses_or_refuses(lambda: codeobject.inspect(data, "x.hsaco"))
    parses_or_refuses(lambda: codeobject.text_sha256(data, "x.hsaco"))
    parses_or_refuses(lambda: cubin.inspect(data, "x.cubin"))
    parses_or_refuses(lambda: cubin.text_sha256(data, "netra_x", "x.cubin"))


def test_truncated_code_objects_at_every_length_are_refused(inputs: Inputs) -> None:
    """Every prefix of a real code object (the case doctor used to crash on): exhaustive, not sampled."""
    for blob, sym in ((inputs.hsaco, inputs.hsaco_symbol), (inputs.cubin, inputs.cubin_symbol)):
        tgt = targets.get("gfx950" if blob is inputs.hsaco else "sm_90")
        step = max(1, len(blob) // 1000)
        for n in range(0, len(blob), step):
            part = blob[:n]
            parses_or_refuses(lambda: tgt.text_sha256(part, sym, "x"))  # noqa: B023 - called at once
            parses_or_refuses(lambda: tgt.launch_digest(part, sym, "x"))  # noqa: B023


# -- the Python API: any argument works or raises the project's error (issue 14) ---------------------


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("a __repr__ that fails")


_LEAVES = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40)
    | st.binary(max_size=20) | st.builds(_BadRepr) | st.builds(Path, st.text(max_size=20))
    | st.sampled_from(["sm_90", "gfx950", "accepted", "verified", "experiment", "rejected", "b256", "cuda:0",
                       "cpu", "rmsnorm(hidden=4096,weight_offset=0)", "rmsnorm(hidden=x)", "", "\x00"])
)  # fmt: skip
VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.sets(st.integers(), max_size=3)
    | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4) | st.tuples(inner, inner),
    max_leaves=8,
)  # fmt: skip
# Numbers as a caller may write them in a key: plain, signed, of other scripts' digits ('٤', '²', which
# str.isdigit() accepts and int() may refuse), and past int()'s 4300-digit limit.
NUMBERS = (
    st.integers().map(str) | st.text(alphabet="0123456789-+_ ²³¹٤٠१", min_size=1, max_size=12)
    | st.integers(4290, 4400).map(lambda n: "9" * n)
)  # fmt: skip
KEYS = st.builds(
    lambda op, params: f"{op}(" + ",".join(f"{k}={v}" for k, v in params) + ")",
    st.sampled_from(["rmsnorm", "fp8_group_quant", "x"]),
    st.lists(st.tuples(st.sampled_from(["hidden", "weight_offset", "group", "x"]), NUMBERS), max_size=3),
)
CONTRACTS = VALUES | KEYS | st.sampled_from(["rmsnorm(hidden=4096,weight_offset=0)", "fp8_group_quant(hidden=4096,group=128)"]) | st.builds(
    lambda p: {"op": "rmsnorm", **p}, st.dictionaries(st.sampled_from(["hidden", "weight_offset", "x"]), VALUES, max_size=3)
)  # fmt: skip


def api_call(call: Callable[[], Any]) -> None:
    """The property: the call returns, or raises NetraError in one line; a wrong type is also a
    TypeError, a wrong value also a ValueError (an ArgumentTypeError is both: it is a ContractError)."""
    from netra.errors import ArgumentTypeError, ContractError

    try:
        with guard():
            call()
    except NetraError as e:
        assert "\n" not in str(e), str(e)
        if isinstance(e, ArgumentTypeError):
            assert isinstance(e, TypeError) and isinstance(e, ContractError), type(e).__mro__
        if isinstance(e, ContractError):
            assert isinstance(e, ValueError), type(e).__mro__


@pytest.fixture(scope="module")
def catalog() -> Any:
    from netra.runtime import open_catalog

    return open_catalog(targets.names()[0])


@FUZZ
@given(gpu_class=VALUES, sysfs=VALUES)
def test_open_catalog_with_any_argument(gpu_class: Any, sysfs: Any) -> None:
    from netra.runtime import open_catalog

    api_call(lambda: open_catalog(gpu_class))
    api_call(lambda: open_catalog("gfx950", sysfs_nodes=sysfs))
    api_call(lambda: open_catalog("gfx950", install=gpu_class))


@FUZZ
@given(contract=CONTRACTS, policy=VALUES, tactic=VALUES, rows=VALUES)
def test_select_with_any_argument(catalog: Any, contract: Any, policy: Any, tactic: Any, rows: Any) -> None:
    api_call(lambda: catalog.select(contract))
    api_call(lambda: catalog.select(contract, policy))
    api_call(lambda: catalog.select("rmsnorm(hidden=4096,weight_offset=0)", "experiment", tactic=tactic))
    api_call(lambda: catalog.select(contract, "accepted", tactic=tactic, rows=rows))
    api_call(lambda: catalog.served(contract, policy))
    api_call(lambda: catalog.kernel(policy))


@FUZZ
@given(op=VALUES, params=VALUES, text=VALUES | KEYS)
def test_contract_with_any_argument(op: Any, params: Any, text: Any) -> None:
    from netra.runtime import Contract, as_contract

    api_call(lambda: Contract(op, params))
    api_call(lambda: Contract.of("rmsnorm", hidden=params, weight_offset=0))
    api_call(lambda: Contract.parse(text))
    api_call(lambda: as_contract(text))
    api_call(lambda: as_contract({"op": op, "hidden": params}))


@FUZZ
@given(contract=CONTRACTS, rows=VALUES, device=VALUES)
def test_netra_torch_kernel_for_with_any_argument(contract: Any, rows: Any, device: Any) -> None:
    pytest.importorskip("torch")
    import netra.torch as nt

    api_call(lambda: nt.kernel_for(contract, rows, device))
    api_call(lambda: nt.kernel_for("rmsnorm(hidden=4096,weight_offset=0)", 1, device))
    api_call(lambda: nt.prepare(device, rows))


def test_the_api_property_can_fail() -> None:
    """A bare TypeError (what a dict lookup with an unhashable policy raised) fails the property."""
    with pytest.raises(TypeError):
        api_call(lambda: {}.get([]))  # type: ignore[arg-type]
    api_call(lambda: None)
