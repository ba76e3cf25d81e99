"""The loaded rules, indexed the way the pieces look them up (RuleSet).

RuleSet itself holds only what is not any one kind's: torch_npu's names (from
rules/migrate/npu_api.toml), the one-line help per code and the pre-filters. Every family
of rule kinds (rules/kinds/*.py) adds the fields it fills, named in its `Family.fields`
with their meaning; rules/load.py creates them and lets each kind index its rules there.
The lookups below are the ones asked across families (and by the tests), each over the
fields of the family named in its docstring.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable

from titan_doctor.migrate.rules.prefilter import Prefilter
from titan_doctor.migrate.rules.words import TARGETS


class RuleSet:
    """Validated rules; see the module docstring for where each field comes from."""

    def __init__(
        self,
        fields: dict[str, Callable[[], object]],
        npu_names: frozenset = frozenset(),
        npu_submodules: dict[str, frozenset] | None = None,
        npu_version: str = "",
    ) -> None:
        self.npu_names = npu_names  # what torch.npu provides
        self.npu_submodules = npu_submodules or {}  # torch.npu.<submodule> -> its names
        self.npu_version = npu_version  # the torch_npu those were read from
        self.help: dict[str, str] = {}  # code -> one line (--list-rules, SARIF)
        self.prefilters: dict[str, Prefilter] = {}  # rewriter -> its pre-filter
        self._name_rules: dict[str, object] = {}  # qname -> name_rule's answer (asked per use)
        # --target portable (rules/portable.py): codes reported and not rewritten -> why,
        # and the device / backend expressions a "cuda" / "nccl" string becomes
        self.target = TARGETS[0]
        self.report_only: dict[str, str] = {}
        self.portable_exprs: dict[str, str] = {}
        for name, empty in fields.items():
            setattr(self, name, empty())

    def mentions(self, text: bytes) -> bool:
        """True when `text` spells something some rule (either rewriter) matches."""
        return any(p.line_re.search(text) for p in self.prefilters.values())

    def may_match(self, data: bytes, rewriters: Iterable[str]) -> bool:
        """True when a rule of one of `rewriters` could match this file's text; False
        means nothing to do."""
        return any(self.prefilters[w].may_match(data) for w in rewriters)

    def env_rule(self, name: str):
        """The env rule for a variable name: exact name first, then the family
        (kinds/env.py)."""
        rule = self.env.get(name)
        if rule is not None:
            return rule
        for prefix, fam in self.env_families:
            if name.startswith(prefix):
                return fam
        return None

    def name_rule(self, qname: str):
        """(rule, number of components it covers): the longest rename/report rule whose
        name is a component-wise prefix of `qname`, then the glob report rules
        (kinds/names.py). Asked for every use of every name: answered once per name."""
        try:
            return self._name_rules[qname]
        except KeyError:
            hit = self._name_rule(qname)
            if len(self._name_rules) < 100_000:
                self._name_rules[qname] = hit
            return hit

    def _name_rule(self, qname: str):
        parts = qname.split(".")
        for n in range(len(parts), 0, -1):
            rule = self.names.get(".".join(parts[:n]))
            if rule is not None:
                return rule, n
        for head, last, rule in self.name_globs:  # `*_cuda`, `torch._C._cuda_*`
            n = len(head) + 1
            if len(parts) >= n and parts[: len(head)] == head and fnmatch.fnmatchcase(parts[len(head)], last):
                return rule, n
        return None

    def kernel_rule(self, qname: str):
        """The CUDA-only report rule (`kernel = true`: a kernel library, NVML, a private CUDA
        binding) `qname` falls under, if any (kinds/names.py)."""
        hit = self.name_rule(qname)
        return hit[0] if hit and getattr(hit[0], "kernel", False) else None

    def gate_miss(self, rule, qparts: list[str], k: int) -> int:
        """How many names past a rename rule's `old` torch_npu lacks a counterpart for
        (0: provided; kinds/name_rules.py). torch.cuda.memory.x is checked against
        torch.npu.memory too."""
        gate = getattr(rule, "gate", None)
        if gate is None or len(qparts) <= k:
            return 0
        if gate == "members":
            return 0 if qparts[k] in rule.members else 1
        if qparts[k] not in self.npu_names:
            return 1
        sub = self.npu_submodules.get(qparts[k])
        if sub is not None and len(qparts) > k + 1 and qparts[k + 1] not in sub:
            return 2
        return 0

    def stays_cuda(self, qname: str) -> tuple[str, str] | None:
        """(what, NPU alternative) when `qname` names something that stays CUDA after the
        migration (a CUDA-only report rule, a torch.cuda name torch.npu lacks, a compute
        capability), so code that uses it must keep its CUDA guard (python/gates.py)."""
        hit = self.name_rule(qname)
        if hit is not None:
            rule, k = hit
            if getattr(rule, "kernel", False):
                return qname, rule.fix
            if hasattr(rule, "new"):
                miss = self.gate_miss(rule, qname.split("."), k)
                if miss:
                    return ".".join(qname.split(".")[: k + miss]), rule.gate_fix
        cap = self.capabilities.get(qname)
        if cap is not None and not cap.attrs:
            return qname, cap.fix
        return None

    def portable_text(self, kind: str, torch: str) -> str:
        """--target portable: the expression a bare "cuda" device (kind "device") or "nccl"
        backend ("backend") becomes, spelled with `torch`, the file's name for torch."""
        device = self.portable_exprs["device"].format(torch=torch)
        return device if kind == "device" else self.portable_exprs["backend"].format(torch=torch, device=device)

    def value_literal(self, name: str) -> str | None:
        """The literal kind a name holds when a producer binds it (`device`,
        `dist_backend`; kinds/literals.py)."""
        for literal, pattern in self.value_names.items():
            if pattern.match(name):
                return literal
        return None

    def compare_rule(self, operand: str):
        """The compare rule for an operand name, over all literal kinds (kinds/literals.py)."""
        for entries in self.operand_names.values():
            for pattern, rule in entries:
                if pattern.match(operand):
                    return rule
        return None
