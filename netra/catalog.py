"""From manifests and templates to the list of artifacts a release must contain.

Inputs: template manifests (kernels/<class>/<template>.toml), tactic lists
(manifests/<class>/tactics.toml) and model manifests (manifests/models/*.toml), each read through one
strict schema (netra.schema) with every path checked and every file read without following links.
Output: one ArtifactSpec per (exact contract, GPU class, tactic), deduplicated across models, sorted
by class and name. Every contract parameter is range-checked against the template's declared range
here, before anything is assembled or compiled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netra import _toml, files, targets
from netra import schema as s
from netra.errors import ManifestError
from netra.ops import FAMILIES, contract_key, contract_params

MATURITIES = ("rejected", "experiment", "verified", "accepted")
CERTIFICATIONS = ("static", "hardware")
VALUE_KINDS = ("global_buffer", "by_value")
ARG_SIZES = (1, 2, 4, 8)
# What each tracked folder holds, and the role the lock gives its files.
TRACKED = (("kernels", "source"), ("manifests", "manifest"), ("release/tables", "table"))
HINT = "see docs/authoring.md for the manifest formats"

_UPPER = re.compile(r"[A-Z][A-Z0-9_]*")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TACTIC = re.compile(r"[a-z0-9]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE = re.compile(r"(bf16|f16|f32|f64|u8|u16|u32|u64|i8|i16|i32|i64)\*?")


@dataclass(frozen=True)
class Range:
    """Which integers a constant accepts: bounded by min/max (and a step), or an explicit list."""

    min: int | None = None
    max: int | None = None
    multiple_of: int | None = None
    values: tuple[int, ...] | None = None
    note: str = ""

    def admits(self, v: int) -> bool:
        if self.values is not None and v not in self.values:
            return False
        if self.min is not None and v < self.min:
            return False
        if self.max is not None and v > self.max:
            return False
        return not (self.multiple_of and v % self.multiple_of)

    def __str__(self) -> str:
        if self.values is not None:
            return "one of " + ", ".join(map(str, self.values))
        step = f"a multiple of {self.multiple_of} " if self.multiple_of else ""
        return f"{step}in [{self.min}, {self.max}]"


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
    constants: dict[str, Range]
    args: tuple[Arg, ...]
    budget: dict[str, int] = field(default_factory=dict)  # the class's own keys (registers, LDS, ...)
    tactic_constants: dict[str, Range] = field(default_factory=dict)

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
    target: str = ""
    rows_per_block: int | None = None  # None: the class derives it from block (gfx950)
    grid_y: int = 1
    constants: dict[str, int] = field(default_factory=dict)


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
        """The compile-time constants that specialize the template: contract plus launch geometry."""
        d = {k.upper(): v for k, v in self.contract.items()}
        d["NETRA_BLOCK"] = self.tactic.block
        d.update(targets.get(self.target).tactic_defines(self.tactic))
        return dict(sorted(d.items()))

    @property
    def rows_per_block(self) -> int:
        return targets.get(self.target).rows_per_block(self.template, self.tactic)

    @property
    def symbol(self) -> str:
        return self.name

    @property
    def file(self) -> str:
        return artifact_file(self.target, self.name)

    @property
    def key(self) -> str:
        return contract_key(self.op, self.contract)


def artifact_file(target: str, name: str) -> str:
    """Where a code object lives, relative to a build folder or the packaged data."""
    return f"{target}/{name}{targets.get(target).suffix}"


@dataclass(frozen=True)
class Fallback:
    model: str
    op: str
    use: str
    reason: str


@dataclass(frozen=True)
class Catalog:
    root: Path
    templates: dict[tuple[str, str], Template]  # (class, template name) -> template
    tactics: tuple[Tactic, ...]
    artifacts: tuple[ArtifactSpec, ...]
    fallbacks: tuple[Fallback, ...]
    models: dict[str, str]  # manifest path -> model name
    certification: dict[str, str]  # class -> how its tables are certified ("static" or "hardware")

    def artifact(self, name: str) -> ArtifactSpec | None:
        return next((a for a in self.artifacts if a.name == name), None)

    def targets(self) -> list[str]:
        return sorted(self.certification)


# -- schemas ----------------------------------------------------------------------------------------

_RANGE = s.Table(
    {
        "min": s.opt(s.Int(min=0, max=2**31 - 1)),
        "max": s.opt(s.Int(min=0, max=2**31 - 1)),
        "multiple_of": s.opt(s.Int(min=1, max=2**20)),
        "values": s.opt(s.ListOf(s.Int(min=0, max=2**31 - 1), min_len=1, max_len=64, unique=lambda v: v)),
        "note": s.opt(s.Str(max_len=300), ""),
    }
)
_ARG = s.Table(
    {
        "name": s.Str(pattern=_IDENT, max_len=64),
        "size": s.Int(min=1, max=8),
        "value_kind": s.Str(choices=VALUE_KINDS),
        "type": s.Str(pattern=_TYPE),
        "address_space": s.opt(s.Str(choices=("global",))),
        "access": s.opt(s.Str(choices=("read_only", "write_only", "read_write"))),
    },
    label="name",
)


def _template_schema(budget: dict[str, s.Field]) -> s.Table:
    return s.Table(
        {
            "template": s.Str(pattern=s.NAME, max_len=64),
            "op": s.Str(choices=tuple(sorted(FAMILIES))),
            "source": s.Str(pattern=_FILE_NAME, max_len=128),
            "constants": s.MapOf(s.Str(pattern=_UPPER, max_len=64), _RANGE, max_len=16),
            "tactic_constants": s.opt(s.MapOf(s.Str(pattern=_UPPER, max_len=64), _RANGE, max_len=16), {}),
            "args": s.ListOf(_ARG, min_len=1, max_len=64, unique="name"),
            **budget,
        }
    )


_TACTICS = s.Table(
    {
        "target": s.Str(pattern=s.NAME),
        "certification": s.Str(choices=CERTIFICATIONS),
        "tactics": s.ListOf(
            s.Table(
                {
                    "op": s.Str(choices=tuple(sorted(FAMILIES))),
                    "name": s.Str(pattern=_TACTIC, max_len=16),
                    "template": s.Str(pattern=s.NAME, max_len=64),
                    "block": s.Int(min=1, max=1024),
                    "rows_per_block": s.opt(s.Int(min=1, max=1024)),
                    "grid_y": s.opt(s.Int(min=1, max=65535), 1),
                    "maturity": s.Str(choices=MATURITIES),
                    "why": s.Str(max_len=500),
                    "constants": s.opt(
                        s.MapOf(s.Str(pattern=_UPPER, max_len=64), s.Int(min=0, max=2**20)), {}
                    ),
                },
                label="name",
            ),
            min_len=1,
            max_len=256,
            unique=lambda t: (t["op"], t["name"]),
        ),
    }
)
_MODEL_OP = s.Table({"op": s.Str(max_len=64), "use": s.opt(s.Str(max_len=300), "")}, label="op", extra=True)
_MODEL = s.Table(
    {
        "model": s.Str(max_len=128),
        "ops": s.opt(s.ListOf(_MODEL_OP, max_len=1000), []),
        "fallbacks": s.opt(
            s.ListOf(
                s.Table(
                    {
                        "op": s.Str(max_len=64),
                        "use": s.opt(s.Str(max_len=300), ""),
                        "reason": s.Str(max_len=500),
                    },
                    label="op",
                ),
                max_len=1000,
            ),
            [],
        ),
    }
)


def _read_toml(root: Path, rel: str, reader: s.Reader) -> Any:
    text = files.read_text(root, rel, limit=files.SOURCE_LIMIT, where=rel)
    try:
        data = _toml.loads(text)
    except _toml.TOMLDecodeError as e:
        raise ManifestError(f"{rel}: not valid TOML ({e})", "fix the syntax") from e
    except RecursionError:  # arrays or inline tables nested thousands deep
        raise ManifestError(f"{rel}: not valid TOML (nested too deeply)", "fix the syntax") from None
    return reader.read(data, rel)


def _range(raw: dict[str, Any], at: str) -> Range:
    values = tuple(raw["values"]) if raw["values"] is not None else None
    r = Range(raw["min"], raw["max"], raw["multiple_of"], values, raw["note"])
    if values is None and (r.min is None or r.max is None):
        raise ManifestError(f"{at}: a range needs min and max, or values", HINT)
    if r.min is not None and r.max is not None and r.min > r.max:
        raise ManifestError(f"{at}: min {r.min} is above max {r.max}", HINT)
    return r


def _template(root: Path, rel: str, target: str, present: set[str]) -> Template:
    tgt = targets.get(target)
    raw = _read_toml(root, rel, s.Reader(_template_schema(tgt.budget), ManifestError, HINT))
    stem = rel.rsplit("/", 1)[1][: -len(".toml")]
    if raw["template"] != stem:
        raise ManifestError(
            f"{rel}: template {raw['template']!r} must match its file name {stem!r}", "rename one"
        )
    op = raw["op"]
    source = f"{rel.rsplit('/', 1)[0]}/{raw['source']}"
    if source not in present:
        raise ManifestError(
            f"{rel}: its source {source} is missing", "restore the template source (git checkout)"
        )
    constants = {k: _range(v, f"{rel}: constants.{k}") for k, v in raw["constants"].items()}
    expected = {p.upper() for p in FAMILIES[op].params}
    if set(constants) != expected:
        raise ManifestError(
            f"{rel}: [constants] must be exactly the {op} contract parameters {sorted(expected)}",
            "declare one constant per contract parameter",
        )
    args: list[Arg] = []
    offset = 0
    for i, a in enumerate(raw["args"]):
        at = f"{rel}: args[{i}] ({a['name']})"
        size, kind = a["size"], a["value_kind"]
        if size not in ARG_SIZES:
            raise ManifestError(f"{at}: size {size} must be one of {ARG_SIZES}", HINT)
        if (kind == "global_buffer") != (size == 8 and a["type"].endswith("*")):
            raise ManifestError(f"{at}: a global_buffer is an 8-byte pointer type (ends in '*')", HINT)
        offset = (offset + size - 1) // size * size  # natural alignment, as the HIP and CUDA ABIs lay them
        args.append(Arg(a["name"], offset, size, kind, a["type"], a["address_space"], a["access"]))
        offset += size
    tactic_constants = {
        k: _range(v, f"{rel}: tactic_constants.{k}") for k, v in raw["tactic_constants"].items()
    }
    budget = {k: raw[k] for k in tgt.budget}
    return Template(raw["template"], target, op, source, constants, tuple(args), budget, tactic_constants)


def _tactics(
    root: Path, rel: str, target: str, templates: dict[tuple[str, str], Template]
) -> tuple[str, list[Tactic]]:
    raw = _read_toml(root, rel, s.Reader(_TACTICS, ManifestError, HINT))
    if raw["target"] != target:
        raise ManifestError(f"{rel}: target must be {target!r}", f"set target = {target!r}")
    certification = raw["certification"]
    tgt = targets.get(target)
    out = []
    for i, t in enumerate(raw["tactics"]):
        at = f"{rel}: tactics[{i}] ({t['op']}/{t['name']})"
        tac = Tactic(
            op=t["op"], name=t["name"], template=t["template"], block=t["block"], maturity=t["maturity"],
            why=t["why"], target=target, rows_per_block=t["rows_per_block"], grid_y=t["grid_y"],
            constants=dict(sorted(t["constants"].items())),
        )  # fmt: skip
        tpl = templates.get((target, tac.template))
        if tpl is None or tpl.op != tac.op:
            raise ManifestError(f"{at}: no {tac.op} template named {tac.template!r} for {target}", "add it")
        if certification == "static" and tac.maturity == "accepted":
            raise ManifestError(
                f"{at}: tactic {tac.op}/{tac.name} claims 'accepted' on {target}, whose evidence is static only",
                "use 'verified' until hardware certification for this GPU class exists",
            )
        if certification == "hardware" and tac.maturity not in ("experiment", "rejected"):
            raise ManifestError(
                f"{at}: tactic {tac.op}/{tac.name} claims {tac.maturity!r} before certification; on a "
                f"hardware-certified class only `netra certify` raises a tactic above experiment",
                "set maturity = 'experiment' (the certified table records the result)",
            )
        problem = tgt.tactic_problem(tpl, tac)
        if problem:
            raise ManifestError(f"{at}: {problem}", HINT)
        for k, v in tac.constants.items():
            rng = tpl.tactic_constants.get(k)
            if rng is None:
                raise ManifestError(f"{at}: template {tpl.name} declares no tactic constant {k}", HINT)
            if not rng.admits(v):
                raise ManifestError(f"{at}: {k} = {v} is not {rng} ({tpl.source})", HINT)
        missing = sorted(set(tpl.tactic_constants) - set(tac.constants))
        if missing:
            raise ManifestError(f"{at}: missing tactic constants {', '.join(missing)} of {tpl.name}", HINT)
        out.append(tac)
    return certification, out


def artifact_name(op: str, contract: dict[str, int], tactic: str) -> str:
    fam = FAMILIES[op]
    return "_".join(["netra", op, *(f"{fam.short[p]}{contract[p]}" for p in fam.params), tactic])


def load(root: str | Path) -> Catalog:
    root = Path(root).resolve()
    if not (root / "kernels").is_dir():
        raise ManifestError(f"{root}: no kernels/ folder", "run from the netra source tree or pass --root")
    present = {p for p, _ in tracked_files(root)}
    templates: dict[tuple[str, str], Template] = {}
    tactics: list[Tactic] = []
    certification: dict[str, str] = {}
    classes = sorted({p.split("/")[1] for p in present if p.startswith("kernels/") and p.count("/") >= 2})
    for target in classes:
        if not targets.known(target):
            raise ManifestError(
                f"kernels/{target}: not a GPU class this netra knows ({', '.join(targets.names())})",
                "remove the folder, or add the class (docs/authoring.md)",
            )
        for rel in sorted(p for p in present if p.startswith(f"kernels/{target}/") and p.count("/") == 2):
            if rel.endswith(".toml"):
                t = _template(root, rel, target, present)
                templates[(target, t.name)] = t
        trel = f"manifests/{target}/tactics.toml"
        if trel not in present:
            raise ManifestError(f"{trel}: missing: kernels/{target}/ has templates but no tactics", "add it")
        certification[target], found = _tactics(root, trel, target, templates)
        tactics.extend(found)
    stray = sorted(
        p for p in present
        if p.startswith("manifests/") and not p.startswith("manifests/models/")
        and p.split("/")[1] not in certification
    )  # fmt: skip
    if stray:
        raise ManifestError(
            f"{stray[0]}: no kernels/ folder for its GPU class", "remove it or add the templates"
        )

    uses: dict[tuple[str, tuple[tuple[str, int], ...]], list[str]] = {}
    fallbacks: list[Fallback] = []
    models: dict[str, str] = {}
    model_files = sorted(p for p in present if p.startswith("manifests/models/"))
    for rel in model_files:
        if not rel.endswith(".toml") or rel.count("/") != 2:
            raise ManifestError(
                f"{rel}: manifests/models/ holds <model>.toml files only", "move or remove it"
            )
        raw = _read_toml(root, rel, s.Reader(_MODEL, ManifestError, HINT))
        model = raw["model"]
        if model in models.values():
            raise ManifestError(f"{rel}: model {model!r} is also described by another manifest", "merge them")
        models[rel] = model
        for i, op in enumerate(raw["ops"]):
            at = f"{rel}: ops[{i}] ({op['op']})"
            params = contract_params(op["op"], {k: v for k, v in op.items() if k not in ("op", "use")}, at)
            uses.setdefault((op["op"], tuple(params.items())), []).append(model)
        for fb in raw["fallbacks"]:
            fallbacks.append(Fallback(model, fb["op"], fb["use"], fb["reason"]))

    artifacts: list[ArtifactSpec] = []
    for (op, items), users in sorted(uses.items()):
        contract = dict(items)
        key = contract_key(op, contract)
        matching = [t for t in tactics if t.op == op]
        if not matching:
            raise ManifestError(
                f"contract {key} (used by {', '.join(sorted(set(users)))}) has no tactic",
                f"add a [[tactics]] entry for {op} in manifests/<class>/tactics.toml",
            )
        for tac in matching:
            tpl = templates[(tac.target, tac.template)]
            for p, v in contract.items():
                rng = tpl.constants[p.upper()]
                if not rng.admits(v):
                    raise ManifestError(
                        f"contract {key} (used by {', '.join(sorted(set(users)))}): {p} = {v} is not {rng}, "
                        f"the range {tpl.source} declares for {p.upper()}",
                        "fix the model manifest, or widen the template and its declared range",
                    )
            artifacts.append(
                ArtifactSpec(
                    name=artifact_name(op, contract, tac.name),
                    target=tac.target,
                    template=tpl,
                    tactic=tac,
                    contract=contract,
                    used_by=tuple(sorted(set(users))),
                )
            )
    artifacts.sort(key=lambda a: (a.target, a.name))
    seen: dict[str, str] = {}
    for a in artifacts:
        if a.name in seen:
            raise ManifestError(
                f"artifact {a.name} is made by both {seen[a.name]} and {a.target} (tactic names collide)",
                "give one of the tactics another name: artifact names are global",
            )
        seen[a.name] = a.target
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
    """Every file a release depends on, with its role, sorted: kernels/ sources, manifests, tables.

    Walked without following links; a link, FIFO, device or hidden file there is refused (every file
    where tracked files live must be an ordinary, trackable file).
    """
    root = Path(root)
    out: list[tuple[str, str]] = []
    for base, role in TRACKED:
        out += [(p, role) for p in files.walk(root, base, where=base)]
    return sorted(out)
