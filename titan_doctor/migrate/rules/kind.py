"""What a migrate rule is: the literal words, one frozen dataclass per rule kind, and the
one table (KINDS) that says what each kind contributes.

Each kind entry supplies its marker words (the cheap pre-filter), its line regex
alternatives (statement skipping), its one-line description (--list-rules, SARIF), its
extra load-time checks and the hook that indexes it into a RuleSet (rules.py). Adding a
kind is one dataclass plus one table entry; nothing reads a rule as a dict. The words
"cuda" -> "npu" and "nccl" -> "hccl" are spelled once, in `LITERALS`.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

from titan_knowledge import typed_entry

if TYPE_CHECKING:
    from titan_doctor.migrate.rules.load import RuleSet

CODE_RE = re.compile(r"^[A-Z]{2,}\d{3}$")


# -- the literal words --------------------------------------------------------------------
@dataclass(frozen=True)
class Literal:
    """A string kind whose CUDA spelling has an NPU spelling: a device or a backend."""

    kind: str
    cuda: str                 # the word on a CUDA host
    npu: str                  # the word on an Ascend host
    whole: re.Pattern         # a complete value of this kind that names CUDA
    head: re.Pattern          # the start of a value built at run time ("cuda:" + ...)

    def rewrite(self, value: str) -> str | None:
        """The NPU spelling of a complete value, or None when it is not one of ours."""
        if self.kind == "device":
            return self.npu + value[len(self.cuda):] if self.whole.match(value) else None
        if not self.whole.match(value):
            return None
        dev = LITERALS["device"]
        value = re.sub(rf"\b{self.cuda}\b", self.npu, value)
        return re.sub(rf"\b{dev.cuda}:", f"{dev.npu}:", value)

    def rewrite_head(self, text: str) -> str | None:
        """The NPU spelling of the literal part that starts a composed value
        ("cuda:" + str(rank), "cuda:%d" % rank, "cuda:{}".format(rank), f"cuda:{rank}")."""
        return self.npu + text[len(self.cuda):] if self.head.match(text) else None


# torch_npu registers torch.npu as a module (the torch.cuda counterpart); its submodules
# are not in sys.modules, so imports of them go through the torch_npu package.
NPU_MODULE = ("torch", "npu")
NPU_PACKAGE = "torch_npu"
GATE_NPU = "npu"          # Rename.gate: the next name must be one torch.npu provides

LITERALS: dict[str, Literal] = {
    "device": Literal("device", "cuda", "npu", re.compile(r"^cuda(:\d+)?$"),
                      re.compile(r"^cuda(?::(?:\d*|%[-0-9]*[dis]|\{[^{}]*\}))?$")),
    # "nccl", or a per-device list such as "cpu:gloo,cuda:nccl"
    "backend": Literal("backend", "nccl", "hccl",
                       re.compile(r"^(?=.*\bnccl\b)(?:\w+:)?\w+(?:,(?:\w+:)?\w+)*$"),
                       re.compile(r"^nccl$")),
}


# -- rule kinds ---------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Rule:
    """Keys every rule has."""

    kind: str
    code: str
    message: str
    source: str
    fix: str = ""


@dataclass(frozen=True, kw_only=True)
class Rename(Rule):
    """A qualified name (longest `old` wins) renamed to `new`. gate = "npu": the next name
    must be one torch.npu provides, else gate_code/gate_message is reported; gate =
    "members": the next name must be in `members`. status = "manual": rewritten, but a
    person must review it."""

    old: str
    new: str
    gate: str | None = None
    gate_code: str = ""
    gate_message: str = ""
    gate_fix: str = ""
    members: tuple[str, ...] = ()
    status: str = "fixed"
    provided_by: str = ""     # registered at import time: the file that does it ...
    evidence: str = ""        # ... and the text there that proves it (tests check both)


@dataclass(frozen=True, kw_only=True)
class Report(Rule):
    """A qualified-name prefix reported with `fix`, never rewritten. A `match` with a `*`
    is a glob on its last component: on the top-level module name (`*_cuda`: the compiled
    CUDA extensions that setup.py CUDAExtension or cpp_extension.load build, imported by
    their own names) or under a fixed prefix (`torch._C._cuda_*`); a plain name rule
    always wins over it. kernel = true: a
    CUDA-only kernel library, so a device check that selects it is not flipped (NPU110).
    only_if_args / only_if_keywords: report a call only when a string in its arguments
    matches one of these regexes, or it passes one of these keywords."""

    match: str
    kernel: bool = False
    only_if_args: tuple[str, ...] = ()
    only_if_keywords: tuple[str, ...] = ()


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
class Method(Rule):
    """.old() / .old -> .new on any object (call = true: only when called)."""

    old: str
    new: str
    call: bool = False


@dataclass(frozen=True, kw_only=True)
class Ambiguous(Rule):
    """A literal of that kind anywhere else: reported, never touched."""

    literal: str


ENV_VALUE_KINDS = ("same", "scale", "map", "keys", "manual")


@dataclass(frozen=True, kw_only=True)
class Env(Rule):
    """Environment variable `old` (trailing * = a family). Without `new`: reported. With
    `new`, `value` says whether its value carries over (see envvalues.py): same (as is;
    `pattern` limits which values), scale (new = old / factor, exact only, >= min), map
    (`values` table), keys (comma list of key:value, keys in `keys`/`rename_keys`), manual
    (never converted by the tool). old_unit/new_unit and old_source/source document each
    side; `note` is said with every converted value."""

    old: str
    new: str | None = None
    value: str = "same"
    old_unit: str = ""
    new_unit: str = ""
    old_source: str = ""
    pattern: str | None = None
    factor: int | None = None
    min: int | None = None
    values: dict[str, str] = field(default_factory=dict)
    keys: tuple[str, ...] = ()
    rename_keys: dict[str, str] = field(default_factory=dict)
    conflicts: tuple[str, ...] = ()
    note: str = ""            # said with every converted value (what else differs)


@dataclass(frozen=True, kw_only=True)
class Text(Rule):
    """Regex `pattern` searched in every line of scripts and configs (sh, Slurm, .env, YAML,
    TOML, JSON, Dockerfiles, notebook shell lines; textfiles.py), never in Python code.
    Each match is replaced by `new`, or only reported when `new` is absent. Named groups:
    `pre` is text the match needs as context and keeps (`--device ` before `cuda`: the
    match becomes pre + new); `opt` is the part the finding points at (its column) and
    shows. `message` may use {old} (the `opt` group, else the whole match) and {new} (the
    whole replacement, pre + new), quotes dropped. `marker` is plain text every match spells (the line
    rewriter's pre-filter)."""

    pattern: str
    marker: str
    new: str | None = None


@dataclass(frozen=True, kw_only=True)
class File(Rule):
    """Files with one of `suffixes` are reported (e.g. .cu)."""

    suffixes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class AddImport(Rule):
    """The `import torch_npu` insertion, in files that import torch."""


@dataclass(frozen=True, kw_only=True)
class KernelGate(Rule):
    """A device check (`x.device.type == "cuda"`, a name in `gates`, or `.attr` in `gates`
    such as ".is_cuda") whose guarded code uses a CUDA-only kernel (a `kernel = true`
    report rule, a name imported from a module with a path component matching one of
    `module_globs` or `extension_globs`, an object returned by one of `builders`) is left
    as is and reported (see gates.py). `extension_globs` name compiled extension modules
    only: a called name (`get_cuda_rng_tracker()`) is a function, never matched by them."""

    gates: tuple[str, ...] = ()
    module_globs: tuple[str, ...] = ()
    extension_globs: tuple[str, ...] = ()
    builders: tuple[str, ...] = ()   # calls whose result is a compiled CUDA extension


@dataclass(frozen=True, kw_only=True)
class Capability(Rule):
    """A CUDA compute-capability (or other hardware property) check, never rewritten and
    reported at each use: the call `match` itself when `attrs` is empty
    (torch.cuda.get_device_capability: its result is the capability), else those
    attributes read from its result (`get_device_properties(0).major`,
    `.multi_processor_count`), directly or through a name the result is bound to
    (`props = ...; props.major`). torch_npu answers these with None (or a configured
    stand-in), so a comparison raises or lies on Ascend and only a person knows what the
    check was for: `fix` names what to ask instead. The expression or condition holding
    one is left whole (a condition with NPU111). Other uses of the call (`.name`,
    `.total_memory`) are rewritten as usual."""

    match: str
    attrs: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class MixedCondition(Rule):
    """A condition that mixes a rewritable CUDA call with a CUDA-only one is left whole."""


# -- what each kind contributes -----------------------------------------------------------
def _rule_name(rule) -> str:
    """The qualified name a name rule (or an implicit-default call rule) is about."""
    if isinstance(rule, Rename):
        return rule.old
    return rule.match if isinstance(rule, (Report, Capability)) else rule.callee


def _name_words(rule) -> tuple[str, ...]:
    """A reference to a.b.c spells every component somewhere: the import names the bound
    prefix (`import a.b as x`, `from a.b import c`) and the use spells the rest."""
    return tuple(_rule_name(rule).split("."))


def _name_line(rule) -> list[str]:
    """A use of a.b.c.d spells at least `c.d` (the binding names a prefix, the use the
    rest; bindings at or below a rule's name are added per file, see skipping.note_binding)."""
    parts = _name_words(rule)
    if len(parts) == 1 and "*" in parts[0]:
        # a module glob (`*_cuda`) names an import; `use_cuda=True` mentions no module
        return [r"(?:import|from)\s[^\n#]*?(?<![\w.])" + _word(parts[0])]
    if len(parts) == 1:
        return [re.escape(parts[0]) + r"(?![\w])"]
    last = _word(parts[-1]) if "*" in parts[-1] else re.escape(parts[-1]) + r"(?![\w])"
    return [re.escape(parts[-2]) + r"\s*\.\s*" + last]


def _word(w: str) -> str:
    """A whole word; a word ending in `_` is a prefix (NCCL_*); `*` in a word (a glob
    report rule's module name, a package marker such as flash*attn) stands for any word
    characters and hyphens."""
    if "*" in w:
        return r"[\w-]*".join(map(re.escape, w.split("*"))) + r"(?![\w])"
    return re.escape(w) + ("" if w.endswith("_") else r"(?![\w])")


def _literal_word(rule) -> tuple[str, ...]:
    return (LITERALS[rule.literal].cuda,)


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return "..."


def fill(template: str, **values: object) -> str:
    """A rule message with its {placeholders} filled; unknown ones read "..." instead of
    raising (a user rule may name a placeholder this kind does not provide)."""
    return template.format_map(_Blank(values))


def _describe_name(rule) -> str:
    if isinstance(rule, Rename):
        return f"{rule.old} -> {rule.new}"
    return fill(rule.message, old=rule.match, new="", version="").strip()


def _describe_literal(rule) -> str:
    lit = LITERALS[rule.literal]
    return fill(rule.message, old=repr(lit.cuda), new=repr(lit.npu), version="").strip()


def _describe_plain(rule) -> str:
    return fill(rule.message, old=getattr(rule, "old", "...") or "...",
                new=getattr(rule, "new", "...") or "...", version="").strip()


def _check_rename(rule: Rename) -> list[str]:
    errors = []
    if rule.gate not in (None, GATE_NPU, "members"):
        errors.append("'gate' must be \"npu\" or \"members\"")
    if rule.gate and not (rule.gate_code and rule.gate_message):
        errors.append("a gate needs 'gate_code' and 'gate_message'")
    if rule.gate_code and not CODE_RE.match(rule.gate_code):
        errors.append(f"gate_code {rule.gate_code!r} must look like NPU101")
    if rule.gate == "members" and not rule.members:
        errors.append("gate = \"members\" needs a non-empty 'members' list")
    if rule.new.split(".")[0] not in ("torch", "torch_npu"):
        errors.append("'new' must start with torch. or torch_npu.")
    if rule.status not in ("fixed", "manual"):
        errors.append("'status' must be \"fixed\" or \"manual\"")
    return errors


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


def _check_report(rule: Report) -> list[str]:
    errors = _regex_errors(rule.only_if_args, "only_if_args")
    *head, last = rule.match.split(".")
    if "*" in rule.match and ("*" in "".join(head) or not last.strip("*")):
        errors.append(f"match {rule.match!r}: a glob is in the last component only "
                      "(`*_cuda`, `torch._C._cuda_*`), and not only `*`")
    return errors


def _check_env(rule: Env) -> list[str]:
    errors = []
    if rule.value not in ENV_VALUE_KINDS:
        errors.append(f"'value' must be one of {', '.join(ENV_VALUE_KINDS)}")
    if rule.new is None and rule.value != "same":
        errors.append("'value' needs 'new' (what the value converts to)")
    needs = {"scale": ("factor",), "map": ("values",), "keys": ("keys",)}.get(rule.value, ())
    errors += [f"value = \"{rule.value}\" needs '{k}'" for k in needs if not getattr(rule, k)]
    if rule.new is not None and rule.value != "same" and not (rule.old_unit and rule.new_unit):
        errors.append("a converted value needs 'old_unit' and 'new_unit' (what each side means)")
    if rule.new is not None and rule.value != "same" and not rule.old_source:
        errors.append("a converted value needs 'old_source' (where the CUDA side's meaning is documented)")
    errors += _regex_errors([rule.pattern] if rule.pattern else [], "pattern")
    return errors


TEXT_GROUPS = ("pre", "opt")
TEXT_FIELDS = ("old", "new")


def _check_text(rule: Text) -> list[str]:
    errors = _regex_errors([rule.pattern], "pattern")
    if not errors:
        unknown = sorted(set(re.compile(rule.pattern).groupindex) - set(TEXT_GROUPS))
        if unknown:
            errors.append(f"pattern group(s) {', '.join(unknown)} mean nothing here "
                          f"(named groups: {', '.join(TEXT_GROUPS)})")
    fields = sorted({f for _, f, _, _ in string.Formatter().parse(rule.message) if f}
                    - set(TEXT_FIELDS))
    if fields:
        errors.append(f"message field(s) {{{'}, {'.join(fields)}}} are not filled for text "
                      f"rules (fields: {{old}}, {{new}})")
    return errors


def _regex_errors(patterns: Iterable[str], key: str) -> list[str]:
    errors = []
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            errors.append(f"bad regex in '{key}': {e}")
    return errors


def _no_check(rule) -> list[str]:
    return []


# The two rewriters a rule can apply in: the libcst transformer (Python files, notebook
# code cells) and the line rewriter (scripts, configs, notebook shell lines; textfiles.py).
# Each has its own pre-filter, so a word only a script rule needs (SBATCH, gres) never
# makes a Python file worth a full parse.
PYTHON_CODE = "python"
SCRIPT_LINES = "lines"
REWRITERS = (PYTHON_CODE, SCRIPT_LINES)


@dataclass(frozen=True)
class Kind:
    """One rule kind: its schema and what it contributes to a RuleSet."""

    schema: type
    markers: Callable[[Rule], tuple[str, ...]]   # words a file must all contain to match
    line: Callable[[Rule], list[str]]            # regex alternatives a matching line spells
    describe: Callable[[Rule], str]              # one line for --list-rules / SARIF
    check: Callable[[Rule], list[str]]           # more load-time checks, one line each
    index: Callable[["RuleSet", Rule], None]     # where the transformer finds it
    rewriters: tuple[str, ...] = (PYTHON_CODE,)  # which rewriters apply it (pre-filters)


def _words(rule) -> list[str]:
    return [_word(w) for w in _KIND_OF[type(rule)].markers(rule)]


def _index_name(rs: "RuleSet", rule) -> None:
    if isinstance(rule, Report) and "*" in rule.match:
        *head, last = rule.match.split(".")
        rs.name_globs.append((head, last, rule))
        return
    rs.names[rule.old if isinstance(rule, Rename) else rule.match] = rule
    if isinstance(rule, Rename) and rule.gate_code:
        rs.help.setdefault(rule.gate_code, fill(rule.gate_message, old=rule.old + ".<name>",
                                                 version=rs.npu_version))


def _index_env(rs: "RuleSet", rule: Env) -> None:
    if rule.old.endswith("*"):
        rs.env_families.append((rule.old[:-1], rule))
        rs.env_families.sort(key=lambda pr: -len(pr[0]))
    else:
        rs.env[rule.old] = rule


def _index_text(rs: "RuleSet", rule: Text) -> None:
    rs.text.append((re.compile(rule.pattern), rule))


def _index_files(rs: "RuleSet", rule: File) -> None:
    for s in rule.suffixes:
        rs.files[s] = rule


def _index_assign(rs: "RuleSet", rule: Assign) -> None:
    rs.assigns.append(rule)


def _set(attr: str):
    def index(rs: "RuleSet", rule) -> None:
        setattr(rs, attr, rule)
    return index


def _append(attr: str):
    def index(rs: "RuleSet", rule) -> None:
        getattr(rs, attr).append(rule)
    return index


KINDS: dict[str, Kind] = {
    "rename": Kind(Rename, _name_words, _name_line, _describe_name, _check_rename, _index_name),
    "report": Kind(Report, _name_words, _name_line, _describe_name, _check_report, _index_name),
    # a rule that makes a CUDA default explicit matches calls that spell no "cuda" at all
    "literal_arg": Kind(LiteralArg, lambda r: _name_words(r) if r.implicit else _literal_word(r),
                        lambda r: [_word(w) for w in _literal_word(r)] + (_name_line(r) if r.implicit else []),
                        _describe_literal, _check_literal_arg, _append("literal_args")),
    "compare": Kind(Compare, _literal_word, _words, _describe_literal, _check_literal,
                    _append("compares")),
    "assign": Kind(Assign, _literal_word, _words, _describe_literal, _check_literal, _index_assign),
    "capability": Kind(Capability, _name_words, _name_line, _describe_name, _no_check,
                       lambda rs, r: rs.capabilities.__setitem__(r.match, r)),
    "method": Kind(Method, lambda r: (r.old,), _words, _describe_plain, _no_check,
                   lambda rs, r: rs.methods.__setitem__(r.old, r)),
    "ambiguous": Kind(Ambiguous, _literal_word, _words, _describe_literal, _check_literal,
                      lambda rs, r: rs.ambiguous.__setitem__(r.literal, r)),
    "env": Kind(Env, lambda r: (r.old.rstrip("*"),), _words, _describe_plain, _check_env, _index_env,
                rewriters=REWRITERS),
    "text": Kind(Text, lambda r: (r.marker,), _words, _describe_plain, _check_text, _index_text,
                 rewriters=(SCRIPT_LINES,)),
    "file": Kind(File, lambda r: (), lambda r: [], _describe_plain, _no_check, _index_files,
                 rewriters=()),
    "add_import": Kind(AddImport, lambda r: (), lambda r: [], _describe_plain, _no_check,
                       _set("add_import")),
    "kernel_gate": Kind(KernelGate, lambda r: (), lambda r: [], _describe_plain, _no_check,
                        _set("kernel_gate")),
    "mixed_condition": Kind(MixedCondition, lambda r: (), lambda r: [], _describe_plain, _no_check,
                            _set("mixed_condition")),
}
_KIND_OF = {k.schema: k for k in KINDS.values()}



def parse_rule(entry: object, where: str) -> tuple[Rule | None, list[str]]:
    """One [[rule]] table as its typed rule, or the one-line errors that stop it."""
    if not isinstance(entry, dict):
        return None, [f"{where}: expected a table"]
    kind = entry.get("kind")
    code = entry.get("code")
    label = f"{where} ({code})" if isinstance(code, str) and code else where
    if kind not in KINDS:
        return None, [f"{label}: unknown kind {kind!r} (one of {', '.join(KINDS)})"]
    rule, errors = typed_entry(entry, KINDS[kind].schema, label)
    if isinstance(code, str) and not CODE_RE.match(code):
        errors.append(f"{label}: code {code!r} must look like NPU101")
    if rule is None:
        return None, errors
    errors += [f"{label}: {e}" for e in KINDS[kind].check(rule)]
    return (rule if not errors else None), errors
