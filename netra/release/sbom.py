"""The wheel's SBOM: a CycloneDX 1.6 JSON document generated from the lock alone.

The lock already names everything a release is made of: every tracked file with its sha256, every
code object with the sha256 of its machine code, and the toolchain each GPU class was built with
(where the project pins it as wheels, each pinned package with the sha256 of each of its files). The
SBOM says the same in the format supply-chain tools read, at the place PEP 770 gives it in a wheel
(`<name>.dist-info/sboms/`). Because it is a pure function of the lock's bytes and the version, the
build hook writes it and `netra verify-wheel` regenerates it and compares bytes: an SBOM that is not
what its lock generates is refused like any other altered member. Standard library only (json,
hashlib, uuid): the runtime needs no CycloneDX library, and nothing here is imported by serving.

Deterministic: sorted keys and components, no timestamp, no machine path; the serialNumber is a UUID
derived from the document's own content.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from netra.runtime import layout
from netra.runtime.installed import DISTRIBUTION
from netra.runtime.lockfile import LOCK_PATH, Lock, PinnedPackage, ToolchainPins

SPEC_VERSION = "1.6"
FILE = f"{DISTRIBUTION}.cdx.json"  # its name under <name>.dist-info/sboms/
FOLDER = "sboms"  # PEP 770
_PROP = "netra:"  # the namespace of netra's own properties


def member(dist_info: str) -> str:
    """The SBOM's path inside a wheel whose metadata folder is `dist_info`."""
    return f"{dist_info}/{FOLDER}/{FILE}"


def _props(**values: str | int) -> list[dict[str, str]]:
    return [{"name": _PROP + k, "value": str(v)} for k, v in sorted(values.items())]


def _sha(hexdigest: str) -> list[dict[str, str]]:
    return [{"alg": "SHA-256", "content": hexdigest}]


def _toolchain_ref(flavour: str, version: str) -> str:
    return f"toolchain:{flavour}@{version}"


def _purl(p: PinnedPackage) -> str:
    return f"pkg:pypi/{p.name}@{p.version}"


def _distributions(p: PinnedPackage) -> list[dict[str, Any]]:
    """One `distribution` reference per pinned file (a package's wheels are alternatives, one per
    platform, so no single hash is the package's): its sha256, as `pip --require-hashes` checks it."""
    n = len(p.sha256)
    return [
        {
            "type": "distribution",
            "url": f"https://pypi.org/project/{p.name}/{p.version}/",
            "hashes": _sha(h),
            "comment": f"one of the {n} files of {p.name} {p.version} requirements/build.txt pins",
        }
        for h in sorted(p.sha256)
    ]


def _unpinned(classes: list[str], provision: set[str]) -> str:
    kinds = {x.split(" ", 1)[0] for x in provision}
    if kinds == {"apt"}:
        why = (
            f"it is a system toolchain (provisioned as {'; '.join(sorted(provision))}, or the vendor's own "
            "install the class's target also accepts) that no file of the project pins by hash, so its files "
            "have none here"
        )
    else:
        why = "requirements/build.txt pins no package of this version, so its files have no hash here"
    return (
        f"the toolchain the lock records for GPU class(es) {', '.join(classes)}, by flavour and version: {why}; "
        "what the lock pins instead is the sha256 of every code object's machine code (.text), which any "
        "build of the same toolchain must reproduce"
    )


def _pinned(classes: list[str], pins: ToolchainPins, own: PinnedPackage) -> str:
    return (
        f"the toolchain the lock records for GPU class(es) {', '.join(classes)}: {own.name} {own.version} as "
        f"requirements/build.txt pins it, installed with the {len(pins.packages) - 1} other pinned packages "
        "it depends on here; each distribution reference is one file pip --require-hashes accepts for it"
    )


def document(lock: Lock, lock_sha256: str, version: str) -> dict[str, Any]:
    """The SBOM as data: the package, every locked file and code object, and each toolchain."""
    from netra import targets

    root = f"pkg:pypi/{DISTRIBUTION}@{version}"
    components: list[dict[str, Any]] = []
    dependencies: list[dict[str, Any]] = []
    toolchains: dict[str, dict[str, Any]] = {}
    for cls, tc in sorted(lock.toolchains.items()):
        ref = _toolchain_ref(tc.flavour, tc.version)
        entry = toolchains.setdefault(ref, {"classes": [], "provision": set(), "flavour": tc.flavour,
                                            "version": tc.version, "pins": lock.pins.get(cls)})  # fmt: skip
        entry["classes"].append(cls)  # the lock's reader holds one toolchain to one set of pins
        tgt = targets.get(cls) if cls in targets.names() else None
        if tgt is not None:
            entry["provision"].add(" ".join(tgt.provision))
    packages: dict[str, dict[str, Any]] = {}
    for ref, t in toolchains.items():
        component: dict[str, Any] = {
            "type": "application",
            "bom-ref": ref,
            "name": t["flavour"],
            "version": t["version"],
            "scope": "excluded",  # what built the code objects; not in the wheel
            "description": _unpinned(t["classes"], t["provision"]),
            "properties": _props(
                gpu_classes=",".join(t["classes"]), provision="; ".join(sorted(t["provision"]))
            ),
        }
        pins: ToolchainPins | None = t["pins"]
        own = pins.pinned(pins.package) if pins is not None else None
        if pins is not None and own is not None:
            component["purl"] = _purl(own)
            component["externalReferences"] = _distributions(own)
            component["description"] = _pinned(t["classes"], pins, own)
            others = [p for p in pins.packages if p.name != own.name]
            for p in others:
                packages[_purl(p)] = {
                    "type": "library",
                    "bom-ref": _purl(p),
                    "name": p.name,
                    "version": p.version,
                    "purl": _purl(p),
                    "scope": "excluded",
                    "description": "installed with a toolchain, as requirements/build.txt pins it",
                    "externalReferences": _distributions(p),
                }
            if others:
                dependencies.append({"ref": ref, "dependsOn": sorted(_purl(p) for p in others)})
        components.append(component)
    components += packages.values()
    shipped = [f"file:{LOCK_PATH}"]
    components.append(
        {
            "type": "file",
            "bom-ref": f"file:{LOCK_PATH}",
            "name": LOCK_PATH,
            "hashes": _sha(lock_sha256),
            "scope": "required",
            "properties": _props(role="lock", packaged_as=f"{layout.PACKAGE_DATA}/manifest.lock"),
        }
    )
    for f in lock.files:
        data = layout.data_path(f.path)
        props: dict[str, str | int] = {"role": f.role}
        if data is not None:
            props["packaged_as"] = f"{layout.PACKAGE_DATA}/{data}"
            shipped.append(f"file:{f.path}")
        components.append(
            {
                "type": "file",
                "bom-ref": f"file:{f.path}",
                "name": f.path,
                "hashes": _sha(f.sha256),
                "scope": "required" if data is not None else "excluded",  # sources build, never ship
                "properties": _props(**props),
            }
        )
    for a in lock.artifacts:
        ref = f"artifact:{a.name}"
        shipped.append(ref)
        built_with = lock.toolchains.get(a.target)
        components.append(
            {
                "type": "file",
                "bom-ref": ref,
                "name": f"{layout.PACKAGE_DATA}/{a.file}",
                "description": f"{a.target} code object of {a.op} (tactic {a.tactic}); its hash is the sha256 "
                "of its machine code (.text), what the lock pins across toolchain builds",
                "hashes": _sha(a.text_sha256),
                "scope": "required",
                "properties": _props(
                    gpu_class=a.target,
                    op=a.op,
                    tactic=a.tactic,
                    template=a.template,
                    hash="text_sha256",
                    code_sha256=a.code_sha256,
                    launch_sha256=a.launch_sha256,
                ),
            }
        )
        if built_with is not None:
            dependencies.append(
                {"ref": ref, "dependsOn": [_toolchain_ref(built_with.flavour, built_with.version)]}
            )
    dependencies.append({"ref": root, "dependsOn": sorted(shipped)})
    body: dict[str, Any] = {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "version": 1,
        "metadata": {
            "component": {
                "type": "library",
                "bom-ref": root,
                "name": DISTRIBUTION,
                "version": version,
                "purl": root,
                "properties": _props(lock_sha256=lock_sha256),
            },
            "tools": {"components": [{"type": "application", "name": "netra", "version": version}]},
            "properties": _props(generated_from=LOCK_PATH),
        },
        "components": sorted(components, key=lambda c: c["bom-ref"]),
        "dependencies": sorted(dependencies, key=lambda d: d["ref"]),
    }
    digest = hashlib.sha256(_canonical(body)).hexdigest()
    body["serialNumber"] = uuid.uuid5(uuid.NAMESPACE_URL, f"sha256:{digest}").urn  # from the content
    return body


def _canonical(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def render(doc: dict[str, Any]) -> bytes:
    """The SBOM file's bytes: sorted keys, one space indent, a final newline."""
    return (json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def generate(lock: Lock, lock_bytes: bytes, version: str) -> bytes:
    """The SBOM file for a wheel of `version` carrying exactly these lock bytes."""
    return render(document(lock, hashlib.sha256(lock_bytes).hexdigest(), version))
