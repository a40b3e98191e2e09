"""The package's shape, as docs/architecture.md states it: layers, no import cycles, no class named outside
netra/targets/, and a registry whose every class and vendor is complete.

Read from the source with ast (every import statement: at module level, inside functions, and under
`if TYPE_CHECKING:`), so the rules hold for imports that only run on some paths too. The forbidden words
come from the registry, so the test grows with it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO

from netra import targets

PACKAGE = REPO / "netra"

# Each layer and the layers it may import (docs/architecture.md). A module's layer is the first
# prefix that names it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("netra.core", ("core",)),
    ("netra.errors", ("core",)),
    ("netra.targets", ("targets",)),
    ("netra.runtime", ("runtime",)),
    ("netra.loaders", ("loaders",)),
    ("netra.release", ("release",)),
    ("netra.certify", ("certify",)),
    ("netra.torch", ("torch",)),
    ("netra.integrations", ("integrations",)),
    ("netra.cli", ("cli",)),
    ("netra.__main__", ("cli",)),
)
MAY_IMPORT = {
    "core": {"core"},
    "targets": {"core", "targets"},
    "runtime": {"core", "targets", "runtime"},
    "loaders": {"core", "targets", "runtime", "loaders"},
    "release": {"core", "targets", "runtime", "release"},
    "certify": {"core", "targets", "runtime", "loaders", "certify"},
    "torch": {"core", "targets", "runtime", "loaders", "torch"},
    # the engines' integrations: the top layer beside torch; no layer lists it, so nothing imports it
    "integrations": {"core", "targets", "runtime", "loaders", "torch", "integrations"},
    "cli": {"core", "targets", "runtime", "loaders", "release", "certify", "cli"},
}


def layer(module: str) -> str:
    if module == "netra":  # the package itself: __version__ only
        return "core"
    for prefix, (name,) in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return name
    raise AssertionError(f"{module}: in no layer of docs/architecture.md (add it to a subpackage)")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # "module" (runs on import), "lazy" (inside a function), "typing" (under TYPE_CHECKING)
    line: int


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = modules()


def _resolve(source: str, path: Path, node: ast.ImportFrom) -> list[str]:
    if node.level:
        base = source.split(".")
        if path.name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    if module != "netra" and not module.startswith("netra."):
        return []
    return [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]


def edges(source: str, path: Path) -> list[Edge]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[Edge] = []

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            k = kind
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and kind == "module":
                k = "lazy"
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.body:
                    visit_stmt(stmt, "typing")
                for stmt in child.orelse:
                    visit_stmt(stmt, k)
                continue
            visit_stmt(child, k)

    def visit_stmt(node: ast.AST, kind: str) -> None:
        if isinstance(node, ast.Import):
            out.extend(
                Edge(source, a.name, kind, node.lineno) for a in node.names if a.name.split(".")[0] == "netra"
            )
        elif isinstance(node, ast.ImportFrom):
            out.extend(Edge(source, t, kind, node.lineno) for t in _resolve(source, path, node))
        else:
            visit(node, kind)

    visit(tree, "module")
    return [e for e in out if e.target != source]


EDGES = [e for m, p in MODULES.items() for e in edges(m, p)]


def test_every_import_names_a_module_of_the_package() -> None:
    unknown = sorted({f"{e.source}:{e.line} imports {e.target}" for e in EDGES if e.target not in MODULES})
    assert not unknown, unknown


def test_every_import_follows_the_layers() -> None:
    """Module-level, lazy and type-checking imports alike: a layer imports only the layers below it."""
    wrong = [
        f"{e.source}:{e.line} ({layer(e.source)}) imports {e.target} ({layer(e.target)}, {e.kind})"
        for e in EDGES
        if layer(e.target) not in MAY_IMPORT[layer(e.source)]
    ]
    assert not wrong, "\n".join(wrong)


def test_torch_reaches_the_loader_only_through_its_vendor() -> None:
    """netra.torch opens the vendor's loader (Vendor.open_loader) and calls its prepared launch: it
    imports no loader module and no ctypes, so a loader's internals stay the loader's."""
    wrong = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in EDGES
        if layer(e.source) == "torch" and layer(e.target) == "loaders"
    ]
    for m, path in MODULES.items():
        if layer(m) == "torch":
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                wrong += [f"{m}:{node.lineno} imports ctypes" for n in names if n.split(".")[0] == "ctypes"]
    assert not wrong, wrong


def _cycle(kinds: set[str]) -> list[str] | None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in EDGES:
        if e.kind in kinds:
            graph[e.source].add(e.target)
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*stack[stack.index(n) :], n]
            if n not in state:
                found = dfs(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = dfs(m)
            if found:
                return found
    return None


def test_no_import_cycle() -> None:
    """Neither among the imports that run when a module is imported, nor with the lazy ones added."""
    assert _cycle({"module"}) is None, " -> ".join(_cycle({"module"}) or [])
    assert _cycle({"module", "lazy"}) is None, " -> ".join(_cycle({"module", "lazy"}) or [])


def test_serving_code_never_loads_release_code() -> None:
    """What `import netra.runtime` (or a loader) pulls in, followed transitively, has no release-time,
    certification or command-line module (the layer rules imply it; this says it in one line)."""
    graph: dict[str, set[str]] = {}
    for e in EDGES:
        if e.kind == "module":
            graph.setdefault(e.source, set()).add(e.target)
    for start in [m for m in MODULES if layer(m) in ("runtime", "loaders")]:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += sorted(graph.get(m, ()))
        bad = sorted(m for m in seen if layer(m) in ("release", "certify", "cli", "torch", "integrations"))
        assert not bad, f"importing {start} imports {bad}"


# -- no GPU class, vendor or toolchain flavour named outside netra/targets/ -------------------------


def forbidden_words() -> list[str]:
    words = {*targets.names(), *targets.vendor_names(), *targets.flavour_names()}
    return sorted(words, key=lambda w: (-len(w), w))


def _pattern() -> re.Pattern[str]:
    return re.compile(
        r"(?<![a-z0-9])(" + "|".join(map(re.escape, forbidden_words())) + r")(?![a-z0-9])", re.I
    )


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def named_in_literals(path: Path, root: Path = REPO) -> list[str]:
    """Each string literal of a module (docstrings and comments aside) that names a class, vendor or flavour."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    pat = _pattern()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            m = pat.search(node.value)
            if m:
                out.append(f"{path.relative_to(root)}:{node.lineno}: {m.group(0)!r} in {node.value[:80]!r}")
    return out


def test_the_forbidden_words_are_the_registrys() -> None:
    words = forbidden_words()
    assert set(targets.names()) <= set(words) and set(targets.vendor_names()) <= set(words)
    assert all(t.flavours for t in targets.every()) and set(targets.flavour_names()) <= set(words)


def test_no_literal_outside_targets_names_a_class_vendor_or_flavour() -> None:
    """Pipeline, runtime, loaders, certification, torch and CLI code ask the registry instead."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "targets" not in path.relative_to(PACKAGE).parts:
            found += named_in_literals(path)
    assert not found, "\n".join(found)


def test_no_json_schema_names_a_class_vendor_or_flavour() -> None:
    """The schemas leave those values open; netra.cli.schemas completes them from the registry."""
    pat = _pattern()
    found = [
        f"{p.name}: {m.group(0)}"
        for p in sorted((PACKAGE / "schemas").glob("*.json"))
        for m in pat.finditer(p.read_text())
    ]
    assert not found, found


def test_the_literal_check_can_fail(tmp_path: Path) -> None:
    """The check above sees a name in a string, an f-string and a dict key, and leaves docstrings alone."""
    name, vendor = targets.names()[0], targets.vendor_names()[0]
    src = tmp_path / "probe.py"
    src.write_text(
        f'"""Docstrings may name {name}."""\n'
        f"X = {{'{vendor}': 1}}\n"
        f'def f(v: int) -> str:\n    """and {vendor}"""\n    return f\'{name.upper()}-{{v}}\'\n'
    )
    hits = [h.split(": ", 2)[1].split(" in ")[0] for h in named_in_literals(src, tmp_path)]
    assert hits == [repr(vendor), repr(name.upper())], hits


# -- the registry: every class and vendor complete -------------------------------------------------


@pytest.mark.parametrize("name", targets.names())
def test_every_registered_class_is_complete(name: str) -> None:
    t = targets.get(name)
    assert t.name == name and targets.MODULES[name] == f"netra.targets.{name}"
    assert t.suffix.startswith(".") and t.checks and t.budget and t.flavours and t.identities
    assert (
        t.sources and t.sources[0] == f"kernels/{name}" and all(s.startswith("kernels/") for s in t.sources)
    )
    assert t.provision[0] in ("apt", "pip-pinned") and t.provision[1]
    # a pip-pinned toolchain names the pinned package that is it (the lock records its pins; the SBOM's purl)
    assert (t.toolchain_package is not None) == (t.provision[0] == "pip-pinned")
    assert t.toolchain_package is None or t.toolchain_package.startswith(t.provision[1])
    assert t.vendor in targets.vendors()


def test_every_vendor_is_complete_and_its_loader_exists() -> None:
    vendors = targets.vendors()
    assert len({v.name for v in vendors}) == len({v.loader for v in vendors}) == len(vendors)
    for v in vendors:
        assert v.libraries and v.sources and v.install_hint and v.runtime
        assert importlib.util.find_spec(v.loader_module) is not None, v.loader_module
        assert v.loader_module == f"netra.loaders.{v.loader}"
        mine = [t for t in targets.every() if t.vendor is v]
        ids = [i for t in mine for i in t.identities]
        assert len(ids) == len(set(ids)), f"{v.name}: two classes claim one device identity"
        for t in mine:
            assert all(v.gpu_class(i) == t.name for i in t.identities)


def test_schemas_complete_from_the_registry() -> None:
    from netra.cli import schemas

    table = schemas.load("table")
    assert table["$defs"]["class"]["enum"] == list(targets.names())
    assert table["$defs"]["vendor"]["enum"] == list(targets.vendor_names())
    doctor = schemas.load("doctor")
    assert doctor["properties"]["runtime_libraries"]["required"] == list(targets.loader_names())
    raw = json.loads((schemas.FOLDER / "doctor.schema.json").read_text())
    assert "required" not in raw["properties"]["runtime_libraries"]


# -- one decoding policy for every tool's output (issue 14) -----------------------------------------

_SPAWNERS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}


def tool_runs_and_decodes(path: Path, base: Path = PACKAGE) -> list[str]:
    """Every place that starts a process other than netra.core.proc, and every bytes.decode with an
    error policy other than netra.core.text's: both would read a tool's bytes by another policy."""
    rel = path.relative_to(base).as_posix()
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
        if owner == "subprocess" and node.func.attr in _SPAWNERS and rel != "core/proc.py":
            found.append(
                f"{rel}:{node.lineno}: subprocess.{node.func.attr} (run tools through netra.core.proc)"
            )
        if owner == "os" and (node.func.attr in ("popen", "system") or node.func.attr.startswith("spawn")):
            found.append(f"{rel}:{node.lineno}: os.{node.func.attr} (run tools through netra.core.proc)")
        if node.func.attr == "decode" and rel != "core/text.py":
            policy = [k.value for k in node.keywords if k.arg == "errors"] + node.args[1:2]
            if any(isinstance(p, ast.Constant) and p.value == "replace" for p in policy):
                found.append(f"{rel}:{node.lineno}: .decode(..., 'replace') (use netra.core.text.decode)")
    return found


def test_every_tool_runs_through_proc_and_its_bytes_are_decoded_by_one_policy() -> None:
    """A tool printing bytes that are not UTF-8 (an nvcc, an nvidia-smi on a broken host) once ended in a
    UnicodeDecodeError: subprocess's text mode decodes strictly. proc.run reads bytes, bounded, and
    decodes them with netra.core.text.decode; nothing else in the package starts a process."""
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in tool_runs_and_decodes(path)]
    assert not found, "\n".join(found)


def test_the_tool_run_check_can_fail(tmp_path: Path) -> None:
    src = tmp_path / "probe.py"
    src.write_text(
        "import os, subprocess\n"
        "subprocess.run(['x'], text=True)\n"
        "subprocess.check_output(['x'])\n"
        "os.system('x')\n"
        "b''.decode(errors='replace')\n"
        "b''.decode('utf-8', 'replace')\n"
        "b''.decode('utf-8')\n"
    )
    hits = [h.split(":")[1] for h in tool_runs_and_decodes(src, tmp_path)]
    assert hits == ["2", "3", "4", "5", "6"], hits


# -- one read path for every host source env and doctor read (issue 29) ---------------------------------

# What reads the host for `netra env`, doctor and GPU detection: sysfs, /proc, version files, package
# records, driver libraries. (The classes' toolchain modules read build outputs, not the host.)
HOST_READERS = ("targets/vendor.py", "targets/host.py", "targets/nvidia.py", "targets/amd.py",
                "cli/environment.py", "runtime/gpus.py", "runtime/installed.py", "core/libraries.py")  # fmt: skip


def host_reads(path: Path, base: Path = PACKAGE) -> list[str]:
    """Every read of a host file other than netra.core.files (open(), Path.read_text/read_bytes/open,
    importlib.metadata), and every library loaded other than by netra.core.libraries.load: each could
    block on a FIFO, read without bound, or call a symbol the library lacks."""
    rel = path.relative_to(base).as_posix()
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            if any(n and n.startswith("importlib.metadata") for n in names) or (
                isinstance(node, ast.ImportFrom) and node.module == "importlib" and "metadata" in names
            ):
                found.append(
                    f"{rel}:{node.lineno}: importlib.metadata (read dist-info by installed.DistInfo)"
                )
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            found.append(f"{rel}:{node.lineno}: open() (read host files by netra.core.files.read_path)")
        elif isinstance(f, ast.Attribute) and (
            (f.attr in ("read_bytes", "open") and not (isinstance(f.value, ast.Name) and f.value.id == "os"))
            or (f.attr == "read_text" and not node.args)
        ):
            found.append(f"{rel}:{node.lineno}: .{f.attr}() (read host files by netra.core.files.read_path)")
        elif (
            f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
        ) == "CDLL" and rel != "core/libraries.py":
            found.append(f"{rel}:{node.lineno}: CDLL (load a host library by netra.core.libraries.load)")
    return found


def test_every_host_source_is_read_by_one_bounded_non_blocking_path() -> None:
    """torch/version.py as a FIFO blocked `netra env` (a plain open()); a libcuda.so.1 without cuInit was an
    AttributeError (a bare CDLL). Every host read of env, doctor and detection goes through files.read_path
    and libraries.load."""
    found = [hit for rel in HOST_READERS for hit in host_reads(PACKAGE / rel)]
    assert not found, "\n".join(found)


def test_the_host_read_check_can_fail(tmp_path: Path) -> None:
    src = tmp_path / "probe.py"
    src.write_text(
        "import ctypes, os\n"
        "from importlib import metadata\n"
        "open('/proc/x').read()\n"
        "p.read_text(encoding='utf-8')\n"
        "p.read_bytes()\n"
        "ctypes.CDLL('libcuda.so.1')\n"
        "os.open('x', 0)\n"
        "dist.read_text('METADATA')\n"
    )
    hits = sorted((h.split(":")[1] for h in host_reads(src, tmp_path)), key=int)
    assert hits == ["2", "3", "4", "5", "6"], hits
