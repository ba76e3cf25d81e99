"""Rename and report rules: the schemas, checks and examples of the rules on qualified
names (torch.cuda.*, torch.profiler.*, apex, flash_attn, ...). They are applied by the
names family's piece (names.py)."""

from __future__ import annotations

from dataclasses import dataclass

from titan_doctor.migrate.rules.kind import CODE_RE, Example, Kind, Rule, fill, name_line, name_words, regex_errors
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import GATE_NPU, NPU_PACKAGE


@dataclass(frozen=True, kw_only=True)
class Rename(Rule):
    """A qualified name (longest `old` wins) renamed to `new`. gate = "npu": the next name
    must be one torch.npu provides, else gate_code/gate_message is reported; gate =
    "members": the next name must be in `members`. status = "manual": rewritten, but a
    person must review it. args = "positional" (no argument by keyword) / "named" (only
    arguments `members` names, in its order when positional; no *args or **kwargs): a call
    passing its arguments otherwise is reported under gate_code
    instead (--target portable's torch.accelerator functions take the device positionally;
    rules/portable.py)."""

    old: str
    new: str
    gate: str | None = None
    gate_code: str = ""
    gate_message: str = ""
    gate_fix: str = ""
    members: tuple[str, ...] = ()
    args: str = ""
    status: str = "fixed"
    provided_by: str = ""  # registered at import time: the file that does it ...
    evidence: str = ""  # ... and the text there that proves it (tests check both)


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


def _check_rename(rule: Rename) -> list[str]:
    errors = []
    if rule.gate not in (None, GATE_NPU, "members"):
        errors.append('\'gate\' must be "npu" or "members"')
    if rule.gate and not (rule.gate_code and rule.gate_message):
        errors.append("a gate needs 'gate_code' and 'gate_message'")
    if rule.gate_code and not CODE_RE.match(rule.gate_code):
        errors.append(f"gate_code {rule.gate_code!r} must look like NPU101")
    if rule.gate == "members" and not rule.members:
        errors.append("gate = \"members\" needs a non-empty 'members' list")
    if rule.new.split(".")[0] not in ("torch", NPU_PACKAGE):
        errors.append("'new' must start with torch. or torch_npu.")
    if rule.args not in ("", "positional", "named"):
        errors.append('\'args\' must be "positional" or "named"')
    if rule.args and not (rule.gate_code and rule.gate_message):
        errors.append("'args' needs 'gate_code' and 'gate_message'")
    if rule.status not in ("fixed", "manual"):
        errors.append('\'status\' must be "fixed" or "manual"')
    return errors


def _check_report(rule: Report) -> list[str]:
    errors = regex_errors(rule.only_if_args, "only_if_args")
    *head, last = rule.match.split(".")
    if "*" in rule.match and ("*" in "".join(head) or not last.strip("*")):
        errors.append(
            f"match {rule.match!r}: a glob is in the last component only "
            "(`*_cuda`, `torch._C._cuda_*`), and not only `*`"
        )
    return errors


def _index_rename(rules: RuleSet, rule: Rename) -> None:
    rules.names[rule.old] = rule
    if rule.gate_code:
        rules.help.setdefault(
            rule.gate_code, fill(rule.gate_message, old=rule.old + ".<name>", version=rules.npu_version)
        )


def _index_report(rules: RuleSet, rule: Report) -> None:
    if "*" in rule.match:
        *head, last = rule.match.split(".")
        rules.name_globs.append((head, last, rule))
    else:
        rules.names[rule.match] = rule


def describe_match(rule: Report) -> str:
    return fill(rule.message, old=rule.match, new="", version="").strip()


RENAME = Kind(
    "rename",
    Rename,
    _index_rename,
    markers=lambda r: name_words(r.old),
    line=lambda r: name_line(r.old),
    describe=lambda r: f"{r.old} -> {r.new}",
    check=_check_rename,
    valid=(
        Example("import torch\n\nx = torch.npu.device_count()\n"),
        Example("import mylib\n\nmylib.cuda.synchronize()\n"),
    ),
    invalid=(
        Example(
            "import torch as th\n\nth.cuda.synchronize()\n",
            fixed="import torch as th\n\nth.npu.synchronize()\n",
        ),
        Example(
            "from torch.cuda import synchronize as sync\n\nsync()\n",
            fixed="from torch.npu import synchronize as sync\n\nsync()\n",
        ),
        Example("import torch\n\ntorch.cuda.memory_snapshot_of_nothing()\n"),
    ),
)

REPORT = Kind(
    "report",
    Report,
    _index_report,
    markers=lambda r: name_words(r.match),
    line=lambda r: name_line(r.match),
    describe=describe_match,
    check=_check_report,
    valid=(Example("import torch\n\ny = torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"),),
    invalid=(
        Example("from flash_attn import flash_attn_func\n\ny = flash_attn_func(q, k, v)\n"),
        Example("import fused_layer_norm_cuda\n"),
    ),
)
