"""`--target portable`: the npu rules with rules/migrate/portable.toml laid over them, so
CUDA code becomes device-generic PyTorch that runs unchanged on CUDA, NPU and CPU.

What the table maps is rewritten (torch.cuda.X -> torch.accelerator.Y; torch.cuda.amp's
autocast / GradScaler and torch.cuda.Event -> torch.autocast / torch.amp.GradScaler /
torch.Event given the device type, positional arguments passed by name; a
bare "cuda" device string or "nccl" backend in a call -> an expression that resolves the
device type where it runs). Everything else keeps its npu rule and finding but is not
rewritten (RuleSet.report_only: code -> why), and what stays CUDA counts as CUDA-only for
the device checks that guard it (python/gates.py keeps those checks), since torch.npu's
names are no longer what the rewrite targets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from titan_doctor.migrate.rules.kind import Rule
from titan_doctor.migrate.rules.kinds.literal_rules import LiteralArg
from titan_doctor.migrate.rules.kinds.name_rules import Rename, Report
from titan_doctor.migrate.rules.ruleset import RuleSet
from titan_doctor.migrate.rules.words import GATE_NPU, TARGETS
from titan_knowledge import load_toml, rules_dir

FILE = "portable.toml"
TARGET = TARGETS[1]
CUDA = "torch.cuda"
ACCELERATOR_CODE = "NPU150"  # torch.cuda.X -> torch.accelerator.Y
CLASS_CODE = "NPU151"  # torch.cuda.amp.autocast / GradScaler, Event -> torch's device-generic classes
# the codes the portable target still rewrites under: its own, the npu rules' device and
# backend strings given to a call (rules/kinds/literals.py writes the expression) and
# .cuda() (rules/kinds/methods.py: .to(<device type>))
REWRITTEN = frozenset({ACCELERATOR_CODE, CLASS_CODE, "NPU104", "NPU201", "NPU401", "NPU106"})
REASON = "no device-generic form for --target portable"
KEPT = "--target portable has no device-generic form for it"


@dataclass(frozen=True)
class Portable:
    """The table: rules/migrate/portable.toml, rows as read (tests check each target)."""

    device: str  # the device-type expression, {torch}: the file's name for torch
    backend: str  # the backend expression, {device}: the one above
    accelerator: tuple[dict, ...]  # name (torch.cuda's), accelerator, memory, source
    classes: tuple[dict, ...]  # device_class rows: old, new, keyword, params, code, source
    kept: tuple[dict, ...] = ()  # names, fix, source: torch.cuda names left, with advice


def table() -> Portable:
    data = load_toml(rules_dir() / "migrate" / FILE)
    return Portable(
        data["device"],
        data["backend"],
        tuple(data["accelerator"]),
        tuple(data["device_class"]),
        tuple(data.get("kept", ())),
    )


def accelerator_names(t: Portable) -> dict[str, str]:
    """torch.cuda qualified name -> its torch.accelerator name (memory = true rows also
    under torch.cuda.memory)."""
    out = {}
    for row in t.accelerator:
        new = f"torch.accelerator.{row['accelerator']}"
        out[f"{CUDA}.{row['name']}"] = new
        if row.get("memory"):
            out[f"{CUDA}.memory.{row['name']}"] = new
    return out


def overlay(rules: list[Rule], t: Portable) -> list[Rule]:
    """The npu rules as the portable target uses them (see the module docstring)."""
    out: list[Rule] = []
    for rule in rules:
        if isinstance(rule, Rename) and rule.old == CUDA and rule.gate == GATE_NPU:
            out += _kept(rule, t)
            # every torch.cuda name the table does not map stays, said under the gate code
            rule = dataclasses.replace(
                rule,
                gate="members",
                members=(),
                gate_message="{old}: not rewritten, " + REASON,
                gate_fix="keep it behind a CUDA check, or use --target npu",
            )
        elif isinstance(rule, Rename):  # stays CUDA: a device check guarding it is kept
            rule = Report(
                code=rule.code,
                kind="report",
                match=rule.old,
                kernel=True,
                message=f"{{old}}: not rewritten, {KEPT}: {rule.old} -> {rule.new}",
                fix=rule.fix,
                source=rule.source,
            )
        out.append(rule)
    for old, new in accelerator_names(t).items():
        out.append(
            Rename(
                code=ACCELERATOR_CODE,
                kind="rename",
                old=old,
                new=new,
                args="positional",
                gate_code=ACCELERATOR_CODE,
                gate_message="{old}(...) passes an argument by keyword; "
                + new
                + " takes it positionally: not rewritten",
                gate_fix=f"pass it positionally, then {new}",
                message="{old} -> {new} (the current accelerator)",
                source=f"rules/migrate/{FILE}",
            )
        )
    for row in t.classes:
        out.append(
            Rename(
                code=CLASS_CODE,
                kind="rename",
                old=row["old"],
                new=row["new"],
                args="named",
                members=tuple(row["params"]),
                gate_code=CLASS_CODE,
                gate_message="{old}(...) passes an argument "
                + row["new"]
                + " cannot take by name (*args, **kwargs, or one it lacks): not rewritten",
                gate_fix=f"pass its arguments one by one, then {row['new']}(..., {row['keyword']}=...)",
                message="{old} -> {new}",
                source=f"rules/migrate/{FILE}",
            )
        )
        out.append(
            LiteralArg(
                code=row["code"],
                kind="literal_arg",
                literal="device",
                callee=row["old"],
                keywords=(row["keyword"],),
                implicit=True,
                positional_names=tuple(row["params"]),
                message=f"{row['new']} device {{old}} -> {{new}}",
                source=f"rules/migrate/{FILE}",
            )
        )
    return out


def _kept(cuda: Rename, t: Portable) -> list[Rule]:
    """The kept rows as report rules under the torch.cuda rule's gate code, each with its
    advice (kernel: the device checks guarding them stay CUDA)."""
    return [
        Report(
            code=cuda.gate_code,
            kind="report",
            match=f"{CUDA}.{name}",
            kernel=True,
            message="{old}: not rewritten, " + REASON,
            fix=row["fix"].replace("<name>", name),
            source=row["source"],
        )
        for row in t.kept
        for name in row["names"]
    ]


def finish(rs: RuleSet, rules: list[Rule], t: Portable) -> None:
    """What the pieces read for the portable target: the expressions, the codes that are
    reported and not rewritten, and which torch.cuda names stay usable (python/gates.py's
    cheap check asks npu_names which torch.cuda names torch.npu lacks)."""
    rs.target = TARGET
    rs.portable_exprs = {"device": t.device, "backend": t.backend}
    codes = {r.code for r in rules} | {getattr(r, "gate_code", "") for r in rules}
    rs.report_only = {c: REASON for c in sorted(codes - REWRITTEN - {""})}
    rs.npu_names = frozenset(q.split(".")[2] for q in accelerator_names(t) if q.count(".") == 2)
