"""The worker's protocol: the plan it reads (what to launch) and the lines it prints (what it launched).

certify writes a plan, a vendor's tool runs `python -m netra.certify.worker PLAN` (netra.certify.worker),
and certify reads the tool's output, in which the worker's lines mark where each launch begins and ends:

    netra-worker: begin <item> <artifact> <text sha256>
    netra-worker: end <item> <artifact> ok <launches>
    netra-worker: end <item> <artifact> fault <the CUDA error, one line>
    netra-worker: done <items>

A plan is JSON, read through one strict schema: the GPU class and install the worker opens, and per
item one candidate (by artifact) and its launches, each with its row count, scalars, inputs (.npy files
certify wrote, or bytes left uninitialized), outputs (dtype and shape: poisoned and fenced as certify
does) and extra rows (a deliberately bad launch: more rows than the buffers hold).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netra.core import schema as s
from netra.errors import CertificationError

SCHEMA = 1
MARK = "netra-worker:"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DTYPE = s.Str(choices=("uint8", "uint16", "int32", "float32"))
_SHAPE = s.ListOf(s.Int(min=0, max=1 << 31), min_len=1, max_len=4)
_LAUNCH = s.Table(
    {
        "rows": s.Int(min=1, max=1 << 24),
        "scalars": s.MapOf(s.Str(pattern=_NAME, max_len=64), s.Num(), max_len=16),
        "inputs": s.MapOf(
            s.Str(pattern=_NAME, max_len=64),
            s.Table({"file": s.Str(max_len=4096), "initialized": s.Bool()}),
            max_len=16,
        ),
        "outputs": s.MapOf(
            s.Str(pattern=_NAME, max_len=64), s.Table({"dtype": _DTYPE, "shape": _SHAPE}), max_len=16
        ),
    }
)
_READER = s.Reader(
    s.Table(
        {
            "schema": s.Const(SCHEMA),
            "gpu_class": s.Str(pattern=re.compile(r"[a-z][a-z0-9_]*"), max_len=32),
            "install": s.Table({"kind": s.Str(max_len=16), "root": s.Str(max_len=4096)}),
            "items": s.ListOf(
                s.Table(
                    {
                        "artifact": s.Str(pattern=re.compile(r"netra_[a-z0-9_]+"), max_len=128),
                        "extra_rows": s.Int(min=0, max=1 << 20),
                        "launches": s.ListOf(_LAUNCH, min_len=1, max_len=64),
                    },
                    label="artifact",
                ),
                max_len=10_000,
            ),
        }
    ),
    CertificationError,
    "the plan is written by `netra certify`; run the worker only through it",
)


@dataclass(frozen=True)
class Launch:
    rows: int
    scalars: dict[str, float]
    inputs: dict[str, tuple[str, bool]]  # name -> (.npy file, initialized)
    outputs: dict[str, tuple[str, tuple[int, ...]]]  # name -> (dtype, shape)

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "scalars": dict(sorted(self.scalars.items())),
            "inputs": {k: {"file": f, "initialized": i} for k, (f, i) in sorted(self.inputs.items())},
            "outputs": {k: {"dtype": d, "shape": list(sh)} for k, (d, sh) in sorted(self.outputs.items())},
        }


@dataclass(frozen=True)
class Item:
    artifact: str
    launches: tuple[Launch, ...]
    extra_rows: int = 0  # > 0: a deliberately bad launch (the canary), never a certified candidate's


@dataclass(frozen=True)
class Plan:
    gpu_class: str
    install_kind: str
    install_root: str
    items: tuple[Item, ...]

    def write(self, path: Path) -> None:
        data = {
            "schema": SCHEMA,
            "gpu_class": self.gpu_class,
            "install": {"kind": self.install_kind, "root": self.install_root},
            "items": [
                {
                    "artifact": i.artifact,
                    "extra_rows": i.extra_rows,
                    "launches": [x.to_json() for x in i.launches],
                }
                for i in self.items
            ],
        }
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")

    def part(self, start: int) -> Plan:
        """The plan from item `start` on (a restarted worker continues there)."""
        return Plan(self.gpu_class, self.install_kind, self.install_root, self.items[start:])


def read(path: Path) -> Plan:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise CertificationError(f"{path}: not a readable plan ({str(e)[:200]})", _READER.hint) from None
    d = _READER.read(raw, str(path))
    items = []
    for it in d["items"]:
        launches = tuple(
            Launch(
                rows=x["rows"],
                scalars={k: float(v) for k, v in x["scalars"].items()},
                inputs={k: (v["file"], v["initialized"]) for k, v in x["inputs"].items()},
                outputs={k: (v["dtype"], tuple(v["shape"])) for k, v in x["outputs"].items()},
            )
            for x in it["launches"]
        )
        items.append(Item(it["artifact"], launches, it["extra_rows"]))
    return Plan(d["gpu_class"], d["install"]["kind"], d["install"]["root"], tuple(items))


# -- the worker's lines -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    kind: str  # "begin", "end" or "done"
    item: int  # the item's index in the plan the worker ran ("done": the number of items)
    artifact: str = ""
    text_sha256: str = ""  # begin: the machine code the worker loaded
    status: str = ""  # end: "ok" or "fault"
    launches: int = 0  # end ok: launches run
    message: str = ""  # end fault: the error


def begin(i: int, artifact: str, text_sha256: str) -> str:
    return f"{MARK} begin {i} {artifact} {text_sha256}"


def end_ok(i: int, artifact: str, launches: int) -> str:
    return f"{MARK} end {i} {artifact} ok {launches}"


def end_fault(i: int, artifact: str, message: str) -> str:
    return f"{MARK} end {i} {artifact} fault {' '.join(message.split())[:400]}"


def done(n: int) -> str:
    return f"{MARK} done {n}"


_BEGIN = re.compile(r"begin (\d+) (\S+) ([0-9a-f]{64})")
_END = re.compile(r"end (\d+) (\S+) (ok (\d+)|fault (.*))")
_DONE = re.compile(r"done (\d+)")


def marker(line: str) -> Marker | None:
    """The worker's line as a Marker; None for any other line (a line with the mark that does not parse
    is not the worker's either: certify then finds its markers missing, and says so)."""
    at = line.find(MARK)  # a tool may print its own progress on the line before the worker's
    if at < 0:
        return None
    body = line[at + len(MARK) :].strip()
    if m := _BEGIN.fullmatch(body):
        return Marker("begin", int(m.group(1)), m.group(2), text_sha256=m.group(3))
    if m := _END.fullmatch(body):
        if m.group(4) is not None:
            return Marker("end", int(m.group(1)), m.group(2), status="ok", launches=int(m.group(4)))
        return Marker("end", int(m.group(1)), m.group(2), status="fault", message=m.group(5))
    if m := _DONE.fullmatch(body):
        return Marker("done", int(m.group(1)))
    return None
