"""String rules (`kind = "string"`): a regex over the plain string literals of Python code,
reported where it matches, never rewritten: `subprocess.run(["nvidia-smi", ...])` asks
NVIDIA's tool from Python, which an Ascend host does not have. kernel = true: what the
string stands for is CUDA-only, so a device check guarding it stays (NPU110,
python/gates.py). One module: the schema, its checks, the piece, examples."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from titan_doctor.findings import Status
from titan_doctor.migrate.context import Context
from titan_doctor.migrate.cstutil import string_value
from titan_doctor.migrate.rules.kind import Example, Family, Kind, PythonFile, Rule, fill, regex_errors
from titan_doctor.migrate.rules.prefilter import word
from titan_doctor.migrate.rules.ruleset import RuleSet


@dataclass(frozen=True, kw_only=True)
class String(Rule):
    """Regex `pattern` searched in every plain string literal of Python code; a match is
    reported ({old}: the matched text). `marker`: a word every match spells (the
    pre-filter). kernel = true: CUDA-only, so a device check guarding it stays."""

    pattern: str
    marker: str
    kernel: bool = False


def _check(rule: String) -> list[str]:
    return regex_errors([rule.pattern], "pattern")


def _index(rules: RuleSet, rule: String) -> None:
    rules.strings.append((re.compile(rule.pattern), rule))


class Strings:
    """The piece: reports the string literals a string rule matches."""

    def __init__(self, ctx: Context, rules: RuleSet) -> None:
        self.ctx, self.rules = ctx, rules
        self._docstrings: set[int] = set()  # a string statement is documentation, not a call

    def visit_Expr(self, node: cst.Expr) -> None:
        if isinstance(node.value, (cst.SimpleString, cst.ConcatenatedString)):
            self._docstrings.add(id(node.value))
            if isinstance(node.value, cst.ConcatenatedString):
                self._docstrings.update((id(node.value.left), id(node.value.right)))

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        if id(original) in self._docstrings:
            return updated
        value = string_value(original)
        if value:
            for pattern, rule in self.rules.strings:
                m = pattern.search(value)
                if m:
                    message = fill(rule.message, old=m.group(0), version=self.rules.npu_version)
                    self.ctx.emit(rule.code, Status.MANUAL, original, message, rule.fix)
        return updated


def _pieces(ctx: Context, rules: RuleSet, file: PythonFile) -> list:
    return [Strings(ctx, rules) if rules.strings else None]


STRING = Kind(
    "string",
    String,
    _index,
    markers=lambda r: (r.marker,),
    line=lambda r: [word(r.marker)],
    check=_check,
    valid=(Example('import subprocess\n\nsubprocess.run(["npu-smi", "info"])\n'),),
    invalid=(Example('import subprocess\n\nout = subprocess.check_output(["nvidia-smi", "-L"])\n'),),
)

FAMILY = Family(
    kinds=(STRING,),
    fields={"strings": list},  # (compiled pattern, rule), in load order
    python=_pieces,
)
