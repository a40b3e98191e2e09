"""From manifests and templates to the list of artifacts a release must contain (the release's catalog).

Inputs: template manifests (<folder>/<template>.toml for each of the class's `sources` folders: its own,
kernels/<class>/, then any folder it shares with other classes, where a manifest of the class's own
folder replaces a shared one of the same name: the class-specific variant), tactic lists
(manifests/<class>/tactics.toml) and model manifests (manifests/models/*.toml), each read through one
strict schema (netra.core.schema) with every path checked and every file read without following links.
Output: `Manifests`, with one ArtifactSpec per (exact contract, GPU class, tactic) that the template
admits (its manifest's `requires`, over the compile-time constants the pair defines; the pairs it does
not admit are listed with the requirement each fails), deduplicated across models, sorted by class and
name. Every contract parameter is range-checked against the template's
declared range here, before anything is assembled or compiled; what the class makes of a template and
a tactic (definitions, rows per block, file) is asked of it once, here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netra import targets
from netra.core import expr, files, models
from netra.core import schema as s
from netra.core import toml as _toml
from netra.core.ops import FAMILIES, OpFamily, contract_key
from netra.core.types import (
    CERTIFICATIONS,
    MATURITIES,
    Arg,
    ArtifactSpec,
    ModelFallback,
    NotAdmitted,
    Range,
    Requirement,
    Tactic,
    Template,
    artifact_file,
    artifact_name,
)
from netra.errors import LaunchError, ManifestError
from netra.runtime import lockfile

VALUE_KINDS = ("global_buffer", "by_value")
ARG_SIZES = (1, 2, 4, 8)
# What each tracked folder holds, and the role the lock gives its files.
TRACKED = tuple((folder, role) for role, folder in sorted(lockfile.ROLE_FOLDERS.items()))
HINT = models.HINT

_UPPER = re.compile(r"[A-Z][A-Z0-9_]*")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TACTIC = re.compile(r"[a-z0-9]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE = re.compile(r"(bf16|f16|f32|f64|u8|u16|u32|u64|i8|i16|i32|i64)\*?")


@dataclass(frozen=True)
class Manifests:
    """Everything the tree declares: templates, tactics, the artifacts they make, the models' gaps."""

    root: Path
    templates: dict[tuple[str, str], Template]  # (class, template name) -> template
    tactics: tuple[Tactic, ...]
    artifacts: tuple[ArtifactSpec, ...]
    fallbacks: tuple[ModelFallback, ...]
    models: dict[str, str]  # manifest path -> model name
    certification: dict[str, str]  # class -> how its tables are certified ("static" or "hardware")
    not_admitted: tuple[NotAdmitted, ...] = ()  # (contract, tactic) pairs a template's `requires` refuses

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

_REQUIRES = s.Table(
    {
        "holds": s.Str(max_len=200),
        "why": s.Str(max_len=300),
    },
    label="holds",
)


def _template_schema(budget: Mapping[str, s.Field]) -> s.Table:
    return s.Table(
        {
            "template": s.Str(pattern=s.NAME, max_len=64),
            "op": s.Str(choices=tuple(sorted(FAMILIES))),
            "source": s.Str(pattern=_FILE_NAME, max_len=128),
            "constants": s.MapOf(s.Str(pattern=_UPPER, max_len=64), _RANGE, max_len=16),
            "tactic_constants": s.opt(s.MapOf(s.Str(pattern=_UPPER, max_len=64), _RANGE, max_len=16), {}),
            "args": s.ListOf(_ARG, min_len=1, max_len=64, unique="name"),
            "requires": s.opt(s.ListOf(_REQUIRES, max_len=32, unique="holds"), []),
            "dynamic_shared": s.opt(s.Str(max_len=200), "0"),
            "accumulator_bits": s.opt(s.Str(max_len=200), "24"),
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


def _read_toml(root: Path, rel: str, reader: s.Reader | None) -> Any:
    """A tracked TOML file, parsed and (with a reader) checked against its schema."""
    text = files.read_text(root, rel, limit=files.SOURCE_LIMIT, where=rel)
    try:
        data = _toml.loads(text)
    except _toml.TOMLDecodeError as e:
        raise ManifestError(f"{rel}: not valid TOML ({e})", "fix the syntax") from None
    return data if reader is None else reader.read(data, rel)


def _range(raw: dict[str, Any], at: str) -> Range:
    values = tuple(raw["values"]) if raw["values"] is not None else None
    r = Range(raw["min"], raw["max"], raw["multiple_of"], values, raw["note"])
    if values is None and (r.min is None or r.max is None):
        raise ManifestError(f"{at}: a range needs min and max, or values", HINT)
    if r.min is not None and r.max is not None and r.min > r.max:
        raise ManifestError(f"{at}: min {r.min} is above max {r.max}", HINT)
    return r


def _source(rel: str, name: str, target: str, present: set[str]) -> str:
    """Where a template's source is: the first of the class's `sources` folders that has it."""
    where = [f"{d}/{name}" for d in targets.get(target).sources]
    found = next((w for w in where if w in present), None)
    if found is None:
        others = (
            f" (nor in {', '.join(w.rsplit('/', 1)[0] + '/' for w in where[1:])})" if len(where) > 1 else ""
        )
        raise ManifestError(
            f"{rel}: its source {where[0]} is missing{others}", "restore the template source (git checkout)"
        )
    return found


def _template(root: Path, rel: str, target: str, present: set[str]) -> Template:
    tgt = targets.get(target)
    raw = _read_toml(root, rel, s.Reader(_template_schema(tgt.budget), ManifestError, HINT))
    stem = rel.rsplit("/", 1)[1][: -len(".toml")]
    if raw["template"] != stem:
        raise ManifestError(
            f"{rel}: template {raw['template']!r} must match its file name {stem!r}", "rename one"
        )
    op = raw["op"]
    source = _source(rel, raw["source"], target, present)
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
    _check_args(rel, FAMILIES[op], args)
    tactic_constants = {
        k: _range(v, f"{rel}: tactic_constants.{k}") for k, v in raw["tactic_constants"].items()
    }
    budget = {k: raw[k] for k in tgt.budget}
    requires = tuple(_requirement(rel, r, {*constants, *tactic_constants}) for r in raw["requires"])
    names = {*constants, *tactic_constants}
    dynamic = _expression(rel, "dynamic_shared", raw["dynamic_shared"], names)
    bits = _expression(rel, "accumulator_bits", raw["accumulator_bits"], names)
    return Template(
        raw["template"], target, op, source, constants, tuple(args), budget, tactic_constants, requires, rel,
        dynamic, bits,
    )  # fmt: skip


MAX_DYNAMIC_SHARED = 1 << 20  # what a class's table may record (launch.dynamic_lds_bytes); the class's
# static gate holds each kernel to its hardware's limit
# A template's expressions of its instantiation's constants, and the values an admitted pair may give:
# dynamic shared memory bytes a launch can give; significant bits of a partial sum (a table's
# accumulator_bits), from an E4M3 product's 8 to fp32's 24
EXPRESSIONS = {  # key: (least, most, unit, hint)
    "dynamic_shared": (
        0,
        MAX_DYNAMIC_SHARED,
        " bytes",
        "make the expression the bytes the kernel's extern __shared__ array indexes",
    ),
    "accumulator_bits": (
        8,
        24,
        "",
        "make the expression the significant bits the kernel's tensor core keeps of a partial sum",
    ),
}


def _expression(rel: str, key: str, text: str, constants: set[str]) -> str:
    """A template's `dynamic_shared` or `accumulator_bits`: an expression that parses and reads only the
    constants an instantiation defines (as a requirement does)."""
    _read_defined(f"{rel}: {key} {text!r}", expr.names, text, constants)
    return text


def _requirement(rel: str, raw: dict[str, str], constants: set[str]) -> Requirement:
    """One [[requires]] entry: a condition that parses and reads only the constants an instantiation
    defines (the contract's, the tactic's and NETRA_BLOCK)."""
    _read_defined(f"{rel}: requires {raw['holds']!r}", expr.condition_names, raw["holds"], constants)
    return Requirement(raw["holds"], raw["why"])


def _read_defined(at: str, names: Callable[[str], frozenset[str]], text: str, constants: set[str]) -> None:
    """`text` parses (`names` reads it) and names only constants an instantiation defines; else one
    ManifestError line at `at`."""
    try:
        read = names(text)
    except LaunchError as e:
        raise ManifestError(f"{at}: {e.message}", e.hint) from None
    unknown = sorted(read - constants - {"NETRA_BLOCK"})
    if unknown:
        raise ManifestError(
            f"{at}: reads {', '.join(unknown)}, which no instantiation defines",
            "name only the template's [constants], its [tactic_constants] and NETRA_BLOCK",
        )


def _check_args(rel: str, fam: OpFamily, args: list[Arg]) -> None:
    """A template's [[args]] are the family's kernel arguments, as its record declares them: same names
    in ABI order, each of the record's type and access (the lock hashes the manifest; the record says
    what it must hold)."""
    names = tuple(a.name for a in args)
    if names != fam.args:
        raise ManifestError(
            f"{rel}: [[args]] are {', '.join(names)}, but the {fam.name} family's kernel takes "
            f"{', '.join(fam.args)}",
            f"declare exactly those, in that order (the family's record: netra/core/families/{fam.name}.py)",
        )
    for a in args:
        want_type, want_access = fam.kernel_arg(a.name)
        if a.type != want_type or (want_access is not None and a.access != want_access):
            got = a.type + (f", {a.access}" if a.access else "")
            want = want_type + (f", {want_access}" if want_access else "")
            raise ManifestError(
                f"{rel}: argument {a.name} is {got}, but the {fam.name} family's record declares {want}",
                f"make the [[args]] entry {want} (netra/core/families/{fam.name}.py)",
            )


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


def _shared_folders() -> set[str]:
    """Folders under kernels/ that registered classes list among their `sources` besides their own."""
    return {
        d.removeprefix("kernels/") for t in targets.every() for d in t.sources if d != f"kernels/{t.name}"
    }


def _template_manifests(target: str, present: set[str]) -> list[str]:
    """The class's template manifests: those in its own folder, then those of the folders it shares
    whose template name its own folder does not declare (a shared template, unless the class has its
    own variant of it)."""
    out: dict[str, str] = {}
    for d in targets.get(target).sources:
        depth = d.count("/") + 1
        for rel in sorted(p for p in present if p.startswith(f"{d}/") and p.count("/") == depth):
            if rel.endswith(".toml"):
                out.setdefault(rel.rsplit("/", 1)[1], rel)
    return [out[k] for k in sorted(out)]


def load(root: str | Path) -> Manifests:
    root = Path(root).resolve()
    if not (root / "kernels").is_dir():
        raise ManifestError(f"{root}: no kernels/ folder", "run from the netra source tree or pass --root")
    present = {p for p, _ in tracked_files(root)}
    templates: dict[tuple[str, str], Template] = {}
    tactics: list[Tactic] = []
    certification: dict[str, str] = {}
    folders = {p.split("/")[1] for p in present if p.startswith("kernels/") and p.count("/") >= 2}
    shared = _shared_folders()
    for folder in sorted(folders - shared):
        if not targets.known(folder):
            raise ManifestError(
                f"kernels/{folder}: not a GPU class this netra knows ({', '.join(targets.names())})",
                "remove the folder, or add the class (docs/authoring.md)",
            )
    # A class takes part when it has a folder of its own or a tactics file (its templates may all be shared).
    tactic_files = {
        p.split("/")[1] for p in present if p.startswith("manifests/") and p.endswith("/tactics.toml")
    }
    for target in sorted((folders - shared) | {t for t in tactic_files if targets.known(t)}):
        for rel in _template_manifests(target, present):
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
        cls = stray[0].split("/")[1]
        if not targets.known(cls):
            raise ManifestError(
                f"{stray[0]}: {cls} is not a GPU class this netra knows ({', '.join(targets.names())})",
                "remove it, or add the class (docs/authoring.md)",
            )
        raise ManifestError(
            f"{stray[0]}: no tactics file or kernels/ folder for its GPU class",
            "remove it or add the templates",
        )

    uses: dict[tuple[str, tuple[tuple[str, int], ...]], list[str]] = {}
    fallbacks: list[ModelFallback] = []
    model_names: dict[str, str] = {}
    model_files = sorted(p for p in present if p.startswith("manifests/models/"))
    for rel in model_files:
        if not rel.endswith(".toml") or rel.count("/") != 2:
            raise ManifestError(
                f"{rel}: manifests/models/ holds <model>.toml files only", "move or remove it"
            )
        data = _read_toml(root, rel, None)
        m = models.parse(data, rel)
        if m.model in model_names.values():
            raise ManifestError(
                f"{rel}: model {m.model!r} is also described by another manifest", "merge them"
            )
        model_names[rel] = m.model
        for op, params in m.needs:
            uses.setdefault((op, tuple(params.items())), []).append(m.model)
        fallbacks.extend(m.fallbacks)

    artifacts: list[ArtifactSpec] = []
    refused: list[NotAdmitted] = []
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
            definitions = instance_definitions(tac, contract)
            failed = _refusal(tpl, definitions, f"contract {key}, tactic {tac.target}/{tac.name}")
            if failed is not None:
                refused.append(NotAdmitted(tac.target, key, tac.name, tpl.manifest, failed))
                continue
            _check_expressions(tpl, definitions, f"contract {key}, tactic {tac.target}/{tac.name}")
            spec = artifact_spec(tpl, tac, contract, definitions, users)
            _check_launch(spec, f"contract {key}, tactic {tac.target}/{tac.name}")
            artifacts.append(spec)
    artifacts.sort(key=lambda a: (a.target, a.name))
    _check_class_gaps(uses, artifacts, fallbacks, sorted(certification), refused)
    seen: dict[str, str] = {}
    for a in artifacts:
        if a.name in seen:
            raise ManifestError(
                f"artifact {a.name} is made by both {seen[a.name]} and {a.target} (tactic names collide)",
                "give one of the tactics another name: artifact names are global",
            )
        seen[a.name] = a.target
    return Manifests(
        root=root,
        templates=templates,
        tactics=tuple(tactics),
        artifacts=tuple(artifacts),
        fallbacks=tuple(fallbacks),
        models=model_names,
        certification=certification,
        not_admitted=tuple(sorted(refused, key=lambda n: (n.target, n.key, n.tactic))),
    )


def artifact_spec(
    tpl: Template,
    tac: Tactic,
    contract: dict[str, int],
    definitions: dict[str, int],
    users: Sequence[str] = (),
) -> ArtifactSpec:
    """The code object of one admitted (contract, tactic) pair: its name, file and the class's launch facts
    (one place, so that a test compiling a variant no manifest builds makes it as the catalog would)."""
    tgt = targets.get(tac.target)
    name = artifact_name(tpl.op, contract, tac.name)
    return ArtifactSpec(
        name=name,
        target=tac.target,
        template=tpl,
        tactic=tac,
        contract=contract,
        definitions=dict(sorted(definitions.items())),
        rows_per_block=tgt.rows_per_block(tpl, tac),
        file=artifact_file(tac.target, name, tgt.suffix),
        used_by=tuple(sorted(set(users))),
    )


def instance_definitions(tac: Tactic, contract: dict[str, int]) -> dict[str, int]:
    """The compile-time constants of one (contract, tactic) pair, as its source sees them: the contract's
    parameters upper-cased, NETRA_BLOCK and what the class makes of the tactic. A template's `requires`
    read these."""
    definitions = {k.upper(): v for k, v in contract.items()}
    definitions["NETRA_BLOCK"] = tac.block
    definitions.update(targets.get(tac.target).tactic_defines(tac))
    return definitions


def _refusal(tpl: Template, definitions: dict[str, int], at: str) -> Requirement | None:
    """The first of the template's requirements this instantiation fails; a requirement that cannot be
    evaluated (a division the ones before it do not make exact) is the manifest's error."""
    try:
        return tpl.refusal(definitions)
    except LaunchError as e:
        raise ManifestError(
            f"{tpl.manifest}: {at}: {e.message}",
            "order [[requires]] so that the conditions before one make its divisions exact, or use cdiv()",
        ) from None


def _check_expressions(tpl: Template, definitions: dict[str, int], at: str) -> None:
    """The template's expressions evaluate, for an admitted pair, to values a table may record
    (EXPRESSIONS); else the manifest's one-line error, before anything is compiled or written."""
    for key, (lo, hi, unit, hint) in EXPRESSIONS.items():
        text = getattr(tpl, key)
        try:
            got = expr.evaluate(text, definitions)
        except LaunchError as e:
            raise ManifestError(f"{tpl.manifest}: {at}: {key}: {e.message}", e.hint) from None
        if not lo <= got <= hi:
            raise ManifestError(
                f"{tpl.manifest}: {at}: {key} {text!r} is {got}{unit}, outside [{lo}, {hi}]", hint
            )


def _check_launch(spec: ArtifactSpec, at: str) -> None:
    """Every name the family's launch reads is the contract's, a runtime value or the tactic's
    (ArtifactSpec.launch_env): else the table would record a grid the runtime cannot evaluate."""
    launch = FAMILIES[spec.op].launch
    unknown = sorted(launch.names() - launch.value_names - set(spec.launch_env))
    if unknown:
        raise ManifestError(
            f"{spec.template.manifest}: {at}: the {spec.op} family's launch reads {unknown[0]}, which neither "
            f"the contract nor the tactic defines",
            f"declare {unknown[0].upper()} in {spec.template.manifest}'s [tactic_constants] and give every "
            f"{spec.op} tactic a value",
        )


def _check_class_gaps(
    uses: dict[tuple[str, tuple[tuple[str, int], ...]], list[str]],
    artifacts: list[ArtifactSpec],
    fallbacks: list[ModelFallback],
    classes: list[str],
    refused: list[NotAdmitted],
) -> None:
    """Every contract a model needs is built for every class, or documented as not built for it: a
    class never lacks a contract silently (its table, the catalog and `netra explain` quote the reason).
    A class whose tactics for the op its template admits none of for the contract is named with the
    requirement the first of them fails."""
    built = {(a.target, a.key) for a in artifacts}
    documented: dict[tuple[str, str], list[str]] = {}
    for f in fallbacks:
        if not f.gpu_class:
            continue
        if f.gpu_class not in classes:
            raise ManifestError(
                f"the {f.model} manifest: fallback for {f.contract} names GPU class {f.gpu_class!r}, "
                f"which has no kernels/ folder here ({', '.join(classes)})",
                "fix gpu_class, or remove the fallback",
            )
        if (f.gpu_class, f.contract) in built:
            raise ManifestError(
                f"the {f.model} manifest: {f.contract} is documented as not built for {f.gpu_class}, but "
                f"manifests/{f.gpu_class}/tactics.toml builds it",
                "remove the fallback, or the class's tactics for the op",
            )
        documented.setdefault((f.gpu_class, f.contract), []).append(f.model)
    for (op, items), users in sorted(uses.items()):
        key = contract_key(op, dict(items))
        for cls in classes:
            if (cls, key) in built:
                continue
            undocumented = sorted(set(users) - set(documented.get((cls, key), [])))
            first = next((n for n in refused if (n.target, n.key) == (cls, key)), None)
            if undocumented and first is not None:
                raise ManifestError(
                    f"contract {key} (used by {', '.join(undocumented)}): its template admits none of the "
                    f"{cls} tactics for {op}: {first}",
                    f"add to manifests/{cls}/tactics.toml a tactic for {op} whose constants meet the "
                    f"requirements of {first.template} (one that divides the contract), or to each model "
                    f"manifest a [[fallbacks]] entry with gpu_class = {cls!r}",
                )
            if undocumented:
                raise ManifestError(
                    f"contract {key} (used by {', '.join(undocumented)}) has no {cls} tactic, and no "
                    f"[[fallbacks]] entry says it is not built for {cls}",
                    f"add a [[tactics]] entry for {op} to manifests/{cls}/tactics.toml, or to each model "
                    f"manifest a [[fallbacks]] entry with gpu_class = {cls!r}, the contract's parameters and a reason",
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
