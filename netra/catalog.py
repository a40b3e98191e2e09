"""From manifests and templates to the list of artifacts a release must contain.

Inputs: template manifests (kernels/<target>/<template>.toml), tactic lists
(manifests/<target>/tactics.toml) and model manifests (manifests/models/*.toml). Output: one
ArtifactSpec per (exact contract, tactic), deduplicated across models, sorted by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netra import _toml
from netra.errors import ManifestError
from netra.ops import FAMILIES, contract_key, contract_params, family

MATURITIES = ("rejected", "experiment", "verified", "accepted")
VALUE_KINDS = ("global_buffer", "by_value")


@dataclass(frozen=True)
class Arg:
    name: str
    offset: int
    size: int
    value_kind: str
    type: str
    address_space: str | None = None
    access: str | None = None


@dataclass(frozen=True)
class Template:
    name: str
    target: str
    op: str
    source: str  # relative to the project root
    vgprs: int
    sgprs: int
    lds_bytes: int
    rows_per_wave: int
    constants: dict[str, str]
    args: tuple[Arg, ...]

    @property
    def kernarg_bytes(self) -> int:
        return max((a.offset + a.size for a in self.args), default=0)


@dataclass(frozen=True)
class Tactic:
    op: str
    name: str
    template: str
    block: int
    maturity: str
    why: str


@dataclass(frozen=True)
class ArtifactSpec:
    name: str
    target: str
    template: Template
    tactic: Tactic
    contract: dict[str, int]
    used_by: tuple[str, ...] = field(default=(), compare=False)

    @property
    def op(self) -> str:
        return self.template.op

    @property
    def definitions(self) -> dict[str, int]:
        """The assembler-time constants that specialize the template: contract plus launch geometry."""
        d = {k.upper(): v for k, v in self.contract.items()}
        d["NETRA_BLOCK"] = self.tactic.block
        return dict(sorted(d.items()))

    @property
    def symbol(self) -> str:
        return self.name

    @property
    def file(self) -> str:
        return f"{self.target}/{self.name}.hsaco"

    @property
    def key(self) -> str:
        return contract_key(self.op, self.contract)


@dataclass(frozen=True)
class Fallback:
    model: str
    op: str
    use: str
    reason: str


@dataclass(frozen=True)
class Catalog:
    root: Path
    templates: dict[str, Template]
    tactics: tuple[Tactic, ...]
    artifacts: tuple[ArtifactSpec, ...]
    fallbacks: tuple[Fallback, ...]
    models: dict[str, str]  # manifest path -> model name
    certification: dict[str, str]  # target -> how its tables are certified ("static", or by hardware)

    def artifact(self, name: str) -> ArtifactSpec | None:
        return next((a for a in self.artifacts if a.name == name), None)

    def targets(self) -> list[str]:
        return sorted({a.target for a in self.artifacts})


def _need(raw: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in raw:
        raise ManifestError(f"{where}: missing required key {key!r}", "see docs/authoring.md")
    v = raw[key]
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise ManifestError(f"{where}: {key} has the wrong type ({v!r})", "see docs/authoring.md")
    return v


def _load_toml(path: Path, root: Path) -> dict[str, Any]:
    try:
        return _toml.load(path)
    except _toml.TOMLDecodeError as e:
        raise ManifestError(f"{path.relative_to(root)}: not valid TOML ({e})", "fix the syntax") from e


def _template(path: Path, root: Path, target: str) -> Template:
    where = path.relative_to(root).as_posix()
    raw = _load_toml(path, root)
    name = _need(raw, "template", str, where)
    if name != path.stem:
        raise ManifestError(
            f"{where}: template {name!r} must match its file name {path.stem!r}", "rename one"
        )
    op = _need(raw, "op", str, where)
    family(op, where)
    source = path.parent / _need(raw, "source", str, where)
    if not source.is_file():
        raise ManifestError(f"{where}: source {source.name} not found next to it", "add the template source")
    constants = dict(_need(raw, "constants", dict, where))
    expected = {p.upper() for p in FAMILIES[op].params}
    if set(constants) != expected:
        raise ManifestError(
            f"{where}: [constants] must be exactly the {op} contract parameters {sorted(expected)}",
            "declare one constant per contract parameter",
        )
    args: list[Arg] = []
    offset = 0
    for i, a in enumerate(_need(raw, "args", list, where)):
        aw = f"{where}: args[{i}]"
        size = _need(a, "size", int, aw)
        kind = _need(a, "value_kind", str, aw)
        if kind not in VALUE_KINDS or size not in (1, 2, 4, 8):
            raise ManifestError(
                f"{aw}: value_kind {kind!r} / size {size} not supported", "see docs/authoring.md"
            )
        offset = (offset + size - 1) // size * size  # natural alignment, as the HIP ABI lays arguments
        args.append(
            Arg(
                name=_need(a, "name", str, aw),
                offset=offset,
                size=size,
                value_kind=kind,
                type=_need(a, "type", str, aw),
                address_space=a.get("address_space"),
                access=a.get("access"),
            )
        )
        offset += size
    return Template(
        name=name,
        target=target,
        op=op,
        source=source.relative_to(root).as_posix(),
        vgprs=_need(raw, "vgprs", int, where),
        sgprs=_need(raw, "sgprs", int, where),
        lds_bytes=_need(raw, "lds_bytes", int, where),
        rows_per_wave=int(raw.get("rows_per_wave", 1)),
        constants=constants,
        args=tuple(args),
    )


def _tactics(path: Path, root: Path, target: str, templates: dict[str, Template]) -> tuple[str, list[Tactic]]:
    where = path.relative_to(root).as_posix()
    raw = _load_toml(path, root)
    certification = raw.get("certification", "hardware")
    if certification not in ("static", "hardware"):
        raise ManifestError(f"{where}: certification {certification!r}", "use 'static' or 'hardware'")
    if raw.get("target") != target:
        raise ManifestError(f"{where}: target must be {target!r}", f"set target = {target!r}")
    out = []
    seen = set()
    for i, t in enumerate(_need(raw, "tactics", list, where)):
        tw = f"{where}: tactics[{i}]"
        tac = Tactic(
            op=_need(t, "op", str, tw),
            name=_need(t, "name", str, tw),
            template=_need(t, "template", str, tw),
            block=_need(t, "block", int, tw),
            maturity=_need(t, "maturity", str, tw),
            why=str(t.get("why", "")),
        )
        family(tac.op, tw)
        if tac.template not in templates or templates[tac.template].op != tac.op:
            raise ManifestError(f"{tw}: no {tac.op} template named {tac.template!r} for {target}", "add it")
        if tac.maturity not in MATURITIES:
            raise ManifestError(f"{tw}: maturity {tac.maturity!r}", f"use one of {', '.join(MATURITIES)}")
        if certification == "static" and tac.maturity == "accepted":
            raise ManifestError(
                f"{tw}: tactic {tac.op}/{tac.name} claims 'accepted' on {target}, whose evidence is static only",
                "use 'verified' until hardware certification for this GPU class exists",
            )
        if (tac.op, tac.name) in seen:
            raise ManifestError(f"{tw}: duplicate tactic {tac.op}/{tac.name}", "give it another name")
        seen.add((tac.op, tac.name))
        out.append(tac)
    return certification, out


def artifact_name(op: str, contract: dict[str, int], tactic: str) -> str:
    fam = FAMILIES[op]
    return "_".join(["netra", op, *(f"{fam.short[p]}{contract[p]}" for p in fam.params), tactic])


def load(root: str | Path) -> Catalog:
    root = Path(root).resolve()
    templates: dict[str, Template] = {}
    tactics: list[Tactic] = []
    certification: dict[str, str] = {}
    kernels = root / "kernels"
    if not kernels.is_dir():
        raise ManifestError(f"{root}: no kernels/ folder", "run from the netra source tree or pass --root")
    for tdir in sorted(p for p in kernels.iterdir() if p.is_dir()):
        target = tdir.name
        for path in sorted(tdir.glob("*.toml")):
            t = _template(path, root, target)
            templates[t.name] = t
        tpath = root / "manifests" / target / "tactics.toml"
        if tpath.is_file():
            certification[target], found = _tactics(tpath, root, target, templates)
            tactics.extend(found)

    uses: dict[tuple[str, tuple[tuple[str, int], ...]], list[str]] = {}
    fallbacks: list[Fallback] = []
    models: dict[str, str] = {}
    for path in sorted((root / "manifests" / "models").glob("*.toml")):
        where = path.relative_to(root).as_posix()
        raw = _load_toml(path, root)
        model = _need(raw, "model", str, where)
        models[where] = model
        for i, op in enumerate(raw.get("ops", [])):
            ow = f"{where}: ops[{i}]"
            name = _need(op, "op", str, ow)
            params = contract_params(name, {k: v for k, v in op.items() if k not in ("op", "use")}, ow)
            uses.setdefault((name, tuple(params.items())), []).append(model)
        for i, fb in enumerate(raw.get("fallbacks", [])):
            fw = f"{where}: fallbacks[{i}]"
            fallbacks.append(
                Fallback(
                    model, _need(fb, "op", str, fw), str(fb.get("use", "")), _need(fb, "reason", str, fw)
                )
            )

    artifacts: list[ArtifactSpec] = []
    for (op, items), users in sorted(uses.items()):
        contract = dict(items)
        matching = [t for t in tactics if t.op == op]
        if not matching:
            raise ManifestError(
                f"contract {contract_key(op, contract)} (used by {', '.join(users)}) has no tactic",
                f"add a [[tactics]] entry for {op} in manifests/<target>/tactics.toml",
            )
        for tac in matching:
            tpl = templates[tac.template]
            artifacts.append(
                ArtifactSpec(
                    name=artifact_name(op, contract, tac.name),
                    target=tpl.target,
                    template=tpl,
                    tactic=tac,
                    contract=contract,
                    used_by=tuple(sorted(set(users))),
                )
            )
    artifacts.sort(key=lambda a: (a.target, a.name))
    return Catalog(
        root=root,
        templates=templates,
        tactics=tuple(tactics),
        artifacts=tuple(artifacts),
        fallbacks=tuple(fallbacks),
        models=models,
        certification=certification,
    )


def tracked_files(root: str | Path) -> list[tuple[str, str]]:
    """Every file a release depends on, with its role, sorted: kernels/ sources, manifests, tables."""
    root = Path(root)
    out: list[tuple[str, str]] = []
    for base, role in (("kernels", "source"), ("manifests", "manifest"), ("release/tables", "table")):
        d = root / base
        if d.is_dir():
            for p in sorted(d.rglob("*")):
                if p.is_file() and not p.name.startswith("."):
                    out.append((p.relative_to(root).as_posix(), role))
    return sorted(out)
