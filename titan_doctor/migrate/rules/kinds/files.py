"""File rules (`kind = "file"`): files with one of `suffixes` are reported as a whole, never
read (CUDA sources, .cu / .cuh). engine/filekinds.py asks `rules.files` which suffixes
those are; engine/runner.py reports them."""

from __future__ import annotations

from dataclasses import dataclass

from titan_doctor.migrate.rules.kind import Example, Family, Kind, Rule
from titan_doctor.migrate.rules.ruleset import RuleSet


@dataclass(frozen=True, kw_only=True)
class File(Rule):
    """Files with one of `suffixes` are reported (e.g. .cu)."""

    suffixes: tuple[str, ...]


def _index(rules: RuleSet, rule: File) -> None:
    for s in rule.suffixes:
        rules.files[s] = rule


FILE = Kind(
    "file",
    File,
    _index,
    valid=(Example("int main() { return 0; }\n", name="main.c"),),
    invalid=(Example("__global__ void k() {}\n", name="kernel.cu"),),
)

FAMILY = Family(kinds=(FILE,), fields={"files": dict})  # suffix -> rule
