"""What a rule kind is, and what the modules under rules/kinds/ build theirs from.

A rule is a frozen dataclass (its kind's schema; nothing reads a rule as a dict). A
`Kind` says what each of its rules contributes: marker words and line regex alternatives
(the pre-filters), a one-line description (--list-rules, SARIF), its load-time checks,
where it is indexed in the RuleSet, and the VALID / INVALID examples the tests run
(tests/migrate/test_kind_examples.py). A `Family` is the kinds one module defines and what
they share: their RuleSet fields, the lookups derived over all rules, and the pieces that
apply them, to Python code (the libcst walk) and to script lines.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import libcst as cst

from titan_doctor.migrate.context import Context, Hold, LineContext
from titan_doctor.migrate.rules.prefilter import word
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.walk.positions import Positions
from titan_doctor.migrate.walk.scopes import Scopes

CODE_RE = re.compile(r"^[A-Z]{2,}\d{3}$")

# The two rewriters a rule can apply in: the libcst walk (Python files, notebook code
# cells) and the line rewriter (scripts, configs, notebook shell lines). Each has its own
# pre-filter; a kind's words go to the pre-filters of the rewriters its family has a
# piece for.
PYTHON_CODE = "python"
SCRIPT_LINES = "lines"
REWRITERS = (PYTHON_CODE, SCRIPT_LINES)


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return "..."


def fill(template: str, **values: object) -> str:
    """A rule message with its {placeholders} filled; unknown ones read "..." instead of
    raising (a user rule may name a placeholder this kind does not provide)."""
    return template.format_map(_Blank(values))


def describe_plain(rule: Rule) -> str:
    return fill(
        rule.message, old=getattr(rule, "old", "...") or "...", new=getattr(rule, "new", "...") or "...", version=""
    ).strip()


@dataclass(frozen=True, kw_only=True)
class Rule:
    """Keys every rule has."""

    kind: str
    code: str
    message: str
    source: str
    fix: str = ""


@dataclass(frozen=True)
class Example:
    """A file the built-in rules of one kind must leave alone (VALID: no finding of that
    kind) or act on (INVALID: one at least), read as `name`. `fixed`: the file after
    migrate, other kinds' rewrites included (None: unchanged)."""

    source: str
    fixed: str | None = None
    name: str = "example.py"


@dataclass(frozen=True)
class Kind:
    """One rule kind: the schema of its [[rule]] tables and what each rule contributes."""

    name: str  # `kind = "..."` in the TOML
    schema: type[Rule]
    index: Callable[[RuleSet, Rule], None]  # files one rule in its family's fields
    markers: Callable[[Rule], tuple[str, ...]] = lambda rule: ()  # words a file must all contain
    line: Callable[[Rule], list[str]] | None = None  # regex alternatives a matching line
    #                                                      spells (default: a marker word)
    describe: Callable[[Rule], str] = describe_plain  # --list-rules, SARIF
    check: Callable[[Rule], list[str]] = lambda rule: []  # more load-time checks, one line each
    valid: tuple[Example, ...] = ()
    invalid: tuple[Example, ...] = ()

    def spelled(self, rule: Rule) -> list[str]:
        return self.line(rule) if self.line is not None else [word(w) for w in self.markers(rule)]


@dataclass(frozen=True)
class PythonFile:
    """What a Python file's walk offers its pieces besides the Context: built by
    python/transform.py before the walk."""

    positions: Positions  # the source text, lines, which statements are skipped
    scopes: Scopes  # import bindings, fed by the walk's ScopeTracker
    device_names: frozenset[str]  # variables that carry a device string (python/flows.py)
    # True (after reporting NPU110) when the device check at a node guards CUDA-only code
    # (python/gates.py found some on its line): the caller leaves it as it is
    kernel_gate: Callable[[cst.CSTNode, str], bool]
    # device/backend value names whose CUDA values stay (python/backends.py): they also take
    # another accelerator's value here, or npu's in the tree's modules
    held_names: dict[str, Hold] = field(default_factory=dict)
    # names used where CUDA stays: the imports that bind them stay too (backends.Holds.bound)
    held_bound: frozenset[str] = frozenset()
    # qualified names the tree's package modules keep CUDA (python/facts.py): a mock.patch
    # target naming one patches what that code still calls, so it stays too
    kept_names: frozenset[str] = frozenset()


Pieces = Callable[[Context, RuleSet, PythonFile], list]
LinePiece = Callable[[str, RuleSet, LineContext], str]


@dataclass(frozen=True)
class Family:
    """The kinds one module of rules/kinds/ defines and what they share. `fields`: the
    RuleSet fields they fill (name -> empty value); `derive`: lookups computed once over
    all rules, after every kind has indexed its own (families derive in registry order);
    `python`: the walk pieces that apply them to a Python file (None entries are left
    out); `lines`: the piece that rewrites one script line."""

    kinds: tuple[Kind, ...]
    fields: dict[str, Callable[[], object]]
    derive: Callable[[RuleSet], None] | None = None
    python: Pieces | None = None
    lines: LinePiece | None = None

    @property
    def rewriters(self) -> tuple[str, ...]:
        return tuple(w for w, piece in ((PYTHON_CODE, self.python), (SCRIPT_LINES, self.lines)) if piece)


# -- what kind modules build theirs from --------------------------------------------------
def name_words(qname: str) -> tuple[str, ...]:
    """The markers of a rule about a qualified name: a reference to a.b.c spells every
    component somewhere (the import names the bound prefix, `import a.b as x` /
    `from a.b import c`, and the use spells the rest)."""
    return tuple(qname.split("."))


def name_line(qname: str) -> list[str]:
    """The line alternatives of a rule about a qualified name: a use of a.b.c.d spells at
    least `c.d` (the binding names a prefix, the use the rest; bindings at or below a
    rule's name are added per file, see python/skipping.py note_binding)."""
    parts = name_words(qname)
    if len(parts) == 1 and "*" in parts[0]:
        # a module glob (`*_cuda`) names an import; `use_cuda=True` mentions no module
        return [r"(?:import|from)\s[^\n#]*?(?<![\w.])" + word(parts[0])]
    if len(parts) == 1:
        return [re.escape(parts[0]) + r"(?![\w])"]
    last = word(parts[-1]) if "*" in parts[-1] else re.escape(parts[-1]) + r"(?![\w])"
    return [re.escape(parts[-2]) + r"\s*\.\s*" + last]


def regex_errors(patterns: Iterable[str], key: str) -> list[str]:
    errors = []
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            errors.append(f"bad regex in '{key}': {e}")
    return errors


def glob_re(globs: Iterable[str]) -> re.Pattern:
    """One regex matching any of the shell globs (nothing when there are none)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in sorted(set(globs))) or r"(?!)")


def set_field(name: str) -> Callable[[RuleSet, Rule], None]:
    """An index for a kind with one rule that counts (the last one loaded wins)."""

    def index(rules: RuleSet, rule: Rule) -> None:
        setattr(rules, name, rule)

    return index


def append_to(name: str) -> Callable[[RuleSet, Rule], None]:
    """An index for a kind whose rules are kept as a list, in load order."""

    def index(rules: RuleSet, rule: Rule) -> None:
        getattr(rules, name).append(rule)

    return index
