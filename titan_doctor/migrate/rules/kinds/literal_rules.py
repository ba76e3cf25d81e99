"""Device and backend string rules: the schemas, checks and examples of the four kinds
that say where a "cuda" / "nccl" string is a device or backend (literal_arg: given to a
call; assign: bound to a name; compare: compared with a name) and where it may be
anything (ambiguous: reported). They are applied by the literals family's piece
(literals.py)."""

from __future__ import annotations

from dataclasses import dataclass

from titan_doctor.migrate.rules.kind import Example, Kind, Rule, append_to, fill, name_line, name_words
from titan_doctor.migrate.rules.prefilter import word
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import LITERALS


@dataclass(frozen=True, kw_only=True)
class LiteralArg(Rule):
    """A device/backend string given to `callee` ("*": any call, keywords only; "a.b.*":
    any function under a.b) or to `.method()`, at positional index `pos` or one of
    `keywords` (any_arg: every argument). implicit: the callee's parameter defaults to
    CUDA, so when neither `pos` nor the first keyword is given, the NPU value is passed
    explicitly (`torch.amp.GradScaler()` -> `torch.amp.GradScaler(device="npu")`)."""

    literal: str
    callee: str | None = None
    method: str | None = None
    pos: int | None = None
    keywords: tuple[str, ...] = ()
    any_arg: bool = False
    implicit: bool = False
    # implicit: the callee's positional parameters, by name; the explicit device goes in as
    # a keyword, so positional arguments are passed by these names (--target portable's amp)
    positional_names: tuple[str, ...] = ()
    report_only: bool = False


@dataclass(frozen=True, kw_only=True)
class Compare(Rule):
    """A literal compared (==, !=, in, not in, .startswith) with an operand whose name
    matches a glob in `operands` (`x.device.type` is "type", `f()` is "f()",
    `cfg["device"]` is "device"); the assign rule's targets of the same literal count too,
    so a producer and its consumers are always handled alike."""

    literal: str
    operands: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Assign(Rule):
    """A literal bound to a name matching a glob in `targets`: variables, attributes,
    parameter defaults, keyword arguments, dict keys, argparse options (default and
    choices), `.get(name, default)`."""

    literal: str
    targets: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Ambiguous(Rule):
    """A literal of that kind anywhere else: reported, never touched."""

    literal: str


def _check_literal(rule) -> list[str]:
    if rule.literal not in LITERALS:
        return [f"'literal' must be one of {', '.join(LITERALS)}"]
    return []


def _check_literal_arg(rule: LiteralArg) -> list[str]:
    errors = _check_literal(rule)
    if not (rule.callee or rule.method):
        errors.append("literal_arg needs 'callee' or 'method'")
    if rule.implicit and not (rule.callee and rule.keywords and rule.pos is not None):
        errors.append("implicit = true needs 'callee', 'pos' and 'keywords' (the parameter it fills)")
    return errors


def _cuda_word(rule) -> tuple[str, ...]:
    return (LITERALS[rule.literal].cuda,)


def _describe(rule) -> str:
    lit = LITERALS[rule.literal]
    return fill(rule.message, old=repr(lit.cuda), new=repr(lit.npu), version="").strip()


def _index_ambiguous(rules: RuleSet, rule: Ambiguous) -> None:
    rules.ambiguous[rule.literal] = rule


LITERAL_ARG = Kind(
    # a rule that makes a CUDA default explicit matches calls that spell no "cuda" at all
    "literal_arg",
    LiteralArg,
    append_to("literal_args"),
    markers=lambda r: name_words(r.callee) if r.implicit else _cuda_word(r),
    line=lambda r: [word(w) for w in _cuda_word(r)] + (name_line(r.callee) if r.implicit else []),
    describe=_describe,
    check=_check_literal_arg,
    valid=(Example('import torch\n\nx = torch.zeros(4, device="cpu")\n'),),
    invalid=(
        Example(
            'import torch\n\nx = torch.zeros(4, device="cuda:0")\n',
            fixed='import torch\n\nx = torch.zeros(4, device="npu:0")\n',
        ),
        Example(
            "import torch\n\nscaler = torch.amp.GradScaler()\n",
            fixed='import torch\n\nscaler = torch.amp.GradScaler(device="npu")\n',
        ),
    ),
)

COMPARE = Kind(
    "compare",
    Compare,
    append_to("compares"),
    markers=_cuda_word,
    describe=_describe,
    check=_check_literal,
    valid=(Example('if name == "cuda":\n    pass\n'),),
    invalid=(
        Example(
            'def f(x):\n    return x.device.type == "cuda"\n', fixed='def f(x):\n    return x.device.type == "npu"\n'
        ),
    ),
)

ASSIGN = Kind(
    "assign",
    Assign,
    append_to("assigns"),
    markers=_cuda_word,
    describe=_describe,
    check=_check_literal,
    valid=(Example('label = "gpu"\n'),),
    invalid=(
        Example('device = "cuda"\n', fixed='device = "npu"\n'),
        Example('dist_backend = "nccl"\n', fixed='dist_backend = "hccl"\n'),
    ),
)

AMBIGUOUS = Kind(
    "ambiguous",
    Ambiguous,
    _index_ambiguous,
    markers=_cuda_word,
    describe=_describe,
    check=_check_literal,
    valid=(Example('device = "cuda"\n', fixed='device = "npu"\n'),),
    invalid=(Example('print("cuda")\n'),),
)
