"""The next device run's driver (docs/gpu-runs/next/scripts/driver.sh) asks `netra certify` for what its
parser accepts: a device session is 30 minutes a day at best, and a part refused for its arguments (two
contracts after one --only) would spend it on nothing. Each certify part's arguments are what bash makes of
the driver's own lines, given to certify's real parser."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import REPO

from netra.cli import commands

DRIVER = REPO / "docs" / "gpu-runs" / "next" / "scripts" / "driver.sh"


def parts() -> list[tuple[str, list[str]]]:
    """(name, certify's --only arguments) of each `part` line, as bash expands them."""
    text = DRIVER.read_text()
    defs = [ln for ln in text.splitlines() if re.match(r"^Q\w+=", ln)]
    calls = [ln for ln in text.splitlines() if re.match(r"^part \w+", ln)]
    script = "\n".join([*defs, "part() { printf '%s\\0' \"$@\"; printf '\\n'; }", *calls])
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    return [(words[0], words[1:]) for line in out.splitlines() for words in [line.split("\0")[:-1]]]


def test_the_driver_certifies_every_moe_contract_in_parts() -> None:
    got = parts()
    assert [n for n, _ in got] == ["c30", "c235", "crest"]
    named = [a for _, args in got for a in args if a != "--only"]
    assert len(named) == 4 and all(a.startswith(("fp8_moe_gate_up(", "fp8_moe_down(")) for a in named)


@pytest.mark.parametrize(("name", "args"), parts())
def test_each_part_is_what_certify_s_parser_accepts(name: str, args: list[str]) -> None:
    ns = commands.parser().parse_args(
        [
            "certify",
            "--gpu-class",
            "sm_90",
            "--reuse",
            "t.json",
            "--across-devices",
            "--tool-timeout",
            "1500",
            *args,
        ]
    )
    assert ns.only == [a for a in args if a != "--only"] and ns.across_devices, name


def test_the_parts_reuse_across_devices_on_any_card_but_an_h200() -> None:
    """The committed table is the H200's: on an H100 a part without --across-devices is refused."""
    text = DRIVER.read_text()
    assert re.search(r'^across=\(\); grep -q H200 "\$R/which" \|\| across=\(--across-devices\)', text, re.M)
    assert '"${across[@]}"' in next(
        ln for ln in text.splitlines() if ln.lstrip().startswith('gs "$n" 1800 certify')
    )


def test_two_contracts_after_one_only_are_refused_by_the_parser() -> None:
    """What the check catches: the form the twenty-second session's first draft of the driver had."""
    with pytest.raises(SystemExit):
        commands.parser().parse_args(
            ["certify", "--gpu-class", "sm_90", "--only", "fp8_moe_gate_up(a=1)", "fp8_moe_down(a=1)"]
        )
