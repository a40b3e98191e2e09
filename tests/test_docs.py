"""The docs cannot drift from the release: every count a page gives of a GPU class's contracts, candidates
(artifacts, code objects) or maturities is held to the committed table of that class, so is every
statement of which classes the default policy serves, no page says a GPU test has not run that
docs/gpu.md records as passed, and the READMEs' Python snippets name nothing they do not define.

A count is attributed to the class named nearest before it on its line (else the first named after it);
a line naming no class is not read. A count inside a dated record (a section whose heading, or a
paragraph, list item, table row or the paragraph introducing a code block, carries a YYYY-MM-DD date) is
what a run reported then, not a claim about this release, and is left as written. Anything else must be
today's number, or be written without one (`netra catalog` prints them).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from conftest import REPO

from netra import targets

NOUNS = {
    "contract": "contracts",
    "contracts": "contracts",
    "candidate": "candidates",
    "candidates": "candidates",
    "artifact": "candidates",
    "artifacts": "candidates",
    "code object": "candidates",
    "code objects": "candidates",
}
MATURITIES = ("accepted", "verified", "experiment", "rejected")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")


def pages(root: Path = REPO) -> list[Path]:
    """Every page of docs/ (the raw logs of docs/gpu-runs/ aside) and the two READMEs."""
    docs = [p for p in sorted((root / "docs").rglob("*.md")) if "gpu-runs" not in p.relative_to(root).parts]
    return [root / "README.md", root / "README.pypi.md", *docs]


def _class_pattern() -> str:
    return "|".join(map(re.escape, sorted(targets.names(), key=lambda n: (-len(n), n))))


def _count_pattern() -> re.Pattern[str]:
    cls = _class_pattern()
    nouns = "|".join(sorted(map(re.escape, NOUNS), key=len, reverse=True))
    mats = "|".join(MATURITIES)
    return re.compile(
        rf"(?<![\w.,/-])(?P<n>\d+)(?:\s+of\s+\d+)?\s+(?:(?P<cls>{cls})\s+)?(?:(?P<noun>{nouns})|(?P<mat>{mats}))\b"
        rf"|\b(?P<mat2>{mats})\s+(?P<n2>\d+)(?![\w.])"
    )


def blocks(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, line, dated) for every line. Dated: its section's heading names a date, or its block
    does (the lines between blank lines; a code block whole, and joined to the paragraph ending in ":"
    that introduces it), or, in a table, its own row does."""
    lines = text.splitlines()
    spans: list[tuple[int, int]] = []  # [start, end) of each block
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        j, fenced = i, False
        while j < len(lines) and (fenced or lines[j].strip()):
            if lines[j].lstrip().startswith("```"):
                fenced = not fenced
            j += 1
        spans.append((i, j))
        i = j
    heading_dated = False
    before = (False, "")  # the previous block: dated, and its last line
    for start, end in spans:
        first = lines[start]
        if first.startswith("#"):
            heading_dated = bool(DATE.search(first))
        table = first.startswith("|")
        dated = heading_dated or (not table and any(DATE.search(ln) for ln in lines[start:end]))
        if first.lstrip().startswith("```") and before[1].rstrip().endswith(":"):
            dated = dated or before[0]
        for n in range(start, end):
            yield n + 1, lines[n], dated or (table and bool(DATE.search(lines[n])))
        before = (dated, lines[end - 1])


@cache
def committed() -> dict[str, dict[str, int]]:
    """Per class: its committed table's contracts, candidates and candidates per maturity."""
    from netra.runtime import open_catalog

    out = {}
    for cls in targets.names():
        cat = open_catalog(cls)
        out[cls] = {
            "contracts": len(cat.contracts()),
            "candidates": len(cat.table.candidates()),
            **cat.maturity_counts(),
        }
    return out


def claims(path: Path) -> Iterator[tuple[int, str, str, int, str]]:
    """(line, class, what, number, the words) for each count of a class's contents outside a dated record."""
    cls_re = re.compile(rf"(?<![\w])({_class_pattern()})(?![\w])")
    count = _count_pattern()
    for n, line, dated in blocks(path.read_text()):
        named = [(m.start(), m.group(1)) for m in cls_re.finditer(line)]
        if dated or not named:
            continue
        for m in count.finditer(line):
            before = [c for at, c in named if at < m.start()]
            cls = m.group("cls") or (before[-1] if before else named[0][1])
            what = NOUNS[m.group("noun")] if m.group("noun") else (m.group("mat") or m.group("mat2"))
            yield n, cls, what, int(m.group("n") or m.group("n2")), m.group(0)


def test_every_count_of_a_class_in_the_docs_is_its_committed_table_s() -> None:
    """Issue 30: runtime.md, cli.md and gpu.md said sm_90 had 12 contracts and 35 candidates when the
    release had 21 and 64."""
    have = committed()
    wrong = [
        f"{p.relative_to(REPO)}:{n}: {words!r} ({cls} {what}: the committed table has {have[cls][what]})"
        for p in pages()
        for n, cls, what, num, words in claims(p)
        if have[cls][what] != num
    ]
    assert not wrong, "\n".join(wrong)


def test_the_count_check_fails_on_a_page_with_an_old_count(tmp_path: Path) -> None:
    """The check reads the sentences that drifted, and leaves a dated run's record alone."""
    have = committed()["sm_90"]
    page = tmp_path / "page.md"
    page.write_text(
        "# Runtime\n\n"
        "There is no `rejected` policy. **On sm_90 the default serves every contract**: all 35 candidates\n"
        "were certified.\n\n"
        "```\n"
        f"class sm_90 (hardware, loader cuda): 12 contracts, {have['candidates']} artifacts; accepted 35\n"
        "```\n\n"
        "| piece | status |\n| --- | --- |\n"
        "| sm_90 | ran on an H200 (2026-12-01): certification of all 35 candidates |\n\n"
        "A run on 2026-12-02 printed:\n\n"
        "```\n"
        "certified: sm_90 (hardware, loader cuda): 21 contracts; candidates accepted 49\n"
        "```\n\n"
        "## The run of 2026-12-01\n\n"
        "sm_90: 35 of 35 candidates accepted.\n\n"
        "## Served\n\n"
        "21 contracts on gfx950 and 64 sm_90 artifacts.\n"
    )
    found = {(n, cls, what, num) for n, cls, what, num, _ in claims(page)}
    assert found == {
        (3, "sm_90", "candidates", 35),
        (7, "sm_90", "contracts", 12),
        (7, "sm_90", "candidates", have["candidates"]),
        (7, "sm_90", "accepted", 35),
        (26, "gfx950", "contracts", 21),
        (26, "sm_90", "candidates", 64),
    }, found


def served_claims(root: Path = REPO) -> Iterator[tuple[str, str, str]]:
    """(where, class, "all" / "some" / "none") for each statement of what the default policy serves of a
    class: a "served by default" table column (yes / partly / no) and "On <class> the default serves every
    contract / every contract but ... / nothing"."""
    cls = _class_pattern()
    sentence = re.compile(rf"On ({cls}) the default serves (every contract but|every contract|nothing)")
    level = {"yes": "all", "partly": "some", "no": "none"}
    said = {"every contract": "all", "every contract but": "some", "nothing": "none"}
    for p in pages(root):
        column = None
        for n, line in enumerate(p.read_text().splitlines(), 1):
            where = f"{p.relative_to(root)}:{n}"
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
            if "served by default" in cells:
                column = cells.index("served by default")
            elif not cells:
                column = None
            elif column is not None and column < len(cells):
                m = re.fullmatch(rf"`({cls})`", cells[0])
                if m:
                    yield where, m.group(1), level.get(cells[column].split()[0].strip(":,"), "?")
            for m in sentence.finditer(line):
                yield where, m.group(1), said[m.group(2)]


def test_every_class_said_to_be_served_by_default_is_by_its_committed_table() -> None:
    """README.pypi.md's class table and runtime.md's policy section say which classes the default policy
    (`accepted`) serves: exactly those whose every contract has an accepted candidate."""
    from netra.runtime import open_catalog

    def served(cls: str) -> str:  # how many contracts have an accepted candidate in the committed table
        entries = open_catalog(cls).table.entries.values()
        n = sum(any(c.maturity == "accepted" for c in e.candidates) for e in entries)
        return "all" if n == len(entries) else "none" if n == 0 else "some"

    said = list(served_claims())
    assert {c for _, c, _ in said} >= {"sm_90", "gfx950"}, said
    wrong = [
        f"{where}: {cls} is said to be served ({s}), the table serves {served(cls)}"
        for where, cls, s in said
        if s != served(cls)
    ]
    assert not wrong, wrong


GPU_TEST = re.compile(r"tests/test_gpu_\w+\.py")


def test_no_page_says_a_gpu_test_has_not_run_that_gpu_md_records_as_passed() -> None:
    """Issue 30: torch.md said tests/test_gpu_torch_fused.py had not run; docs/gpu.md, the record of every
    H200 run, lists it passed. A table row that says "not run" for a GPU test file must agree with gpu.md."""
    ran = {
        name
        for line in (REPO / "docs/gpu.md").read_text().splitlines()
        if line.startswith("|") and "passed" in line
        for name in GPU_TEST.findall(line)
    }
    assert "tests/test_gpu_torch_ops.py" in ran
    wrong = []
    for p in pages():
        if p.name == "gpu.md":
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
            if any(c.startswith("not run") for c in cells):
                wrong += [f"{p.relative_to(REPO)}:{n}: {t}" for t in GPU_TEST.findall(cells[0]) if t in ran]
    assert not wrong, wrong


def test_the_readme_snippets_name_nothing_they_do_not_define(tmp_path: Path) -> None:
    """Issue 30: README.pypi.md's snippet passed `rows=rows` with no `rows`. The READMEs' Python blocks are
    what a user pastes first: each must define every name it uses (ruff's undefined-name check)."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is in the test extra)")
    snippets = []
    for readme in ("README.md", "README.pypi.md"):
        text = (REPO / readme).read_text()
        for i, m in enumerate(re.finditer(r"```python\n(.*?)```", text, re.S)):
            f = tmp_path / f"{readme.replace('.', '_')}_{i}.py"
            f.write_text(m.group(1))
            snippets.append(f)
    assert snippets
    r = subprocess.run(
        [
            ruff,
            "check",
            "--no-cache",
            "--isolated",
            "--select",
            "F821,F841",
            "--output-format",
            "concise",
            *snippets,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
