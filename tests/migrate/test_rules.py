"""Typed rules: every kind parses into its dataclass, user rule files are checked in full
at load time (one line per problem), and the CUDA/NPU words are spelled in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import titan_doctor.migrate as migrate_pkg
from titan_doctor.migrate.rules import load_rules
from titan_doctor.migrate.rules.load import parse_rule
from titan_doctor.migrate.rules.registry import KINDS
from titan_doctor.migrate.rules.words import LITERALS
from titan_knowledge import KnowledgeError

MIGRATE = Path(migrate_pkg.__file__).parent


def _load(tmp_path, text: str):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    return load_rules([path])


def _errors(tmp_path, text: str) -> list[str]:
    with pytest.raises(KnowledgeError) as e:
        _load(tmp_path, text)
    return str(e.value).splitlines()


def test_builtin_rules_load_typed():
    rs = load_rules()
    assert rs.names["torch.cuda"].new == "torch.npu"  # a Rename, read by attribute
    assert rs.methods["cuda"].call is True and rs.methods["is_cuda"].call is False
    assert rs.env["NCCL_BUFFSIZE"].factor == 1048576
    assert rs.kernel_gate is not None and rs.mixed_condition is not None


def test_method_rule_without_call_gets_the_default(tmp_path):
    rs = _load(
        tmp_path,
        '[[rule]]\ncode = "ACME001"\nkind = "method"\nold = "to_gpu"\nnew = "to_npu"\nmessage = "m"\nsource = "s"\n',
    )
    assert rs.methods["to_gpu"].call is False


@pytest.mark.parametrize(
    "body, needle",
    [
        (
            'kind = "rename"\nold = "acme.gpu"\nnew = "torch.npu"\ngate = "npu"\n',
            "a gate needs 'gate_code' and 'gate_message'",
        ),
        (
            'kind = "rename"\nold = "acme.gpu"\nnew = "torch.npu"\ngate = "members"\ngate_code = "ACME002"\n'
            'gate_message = "g"\n',
            "gate = \"members\" needs a non-empty 'members' list",
        ),
        ('kind = "rename"\nold = "acme.gpu"\nnew = "acme.npu"\n', "'new' must start with torch. or torch_npu."),
        ('kind = "literal_arg"\nliteral = "device"\n', "literal_arg needs 'callee' or 'method'"),
        ('kind = "compare"\nliteral = "dev"\noperands = ["x"]\n', "'literal' must be one of device, backend"),
        ('kind = "report"\nmatch = "acme"\nkeyword = ["x"]\n', "unknown key 'keyword'"),
        ('kind = "report"\nmatch = "acme"\nkernel = "yes"\n', "'kernel' must be true or false"),
        ('kind = "report"\nmatch = "acme*.x_cuda"\n', "a glob is in the last component only"),
        ('kind = "report"\nmatch = "*"\n', "a glob is in the last component only"),
        ('kind = "report"\nmatch = "acme.*"\n', "a glob is in the last component only"),
        ('kind = "env"\nold = "X_BUF"\nnew = "Y_BUF"\nvalue = "scale"\n', "value = \"scale\" needs 'factor'"),
        (
            'kind = "env"\nold = "X_BUF"\nnew = "Y_BUF"\nvalue = "scale"\nfactor = 2\n',
            "a converted value needs 'old_unit' and 'new_unit'",
        ),
        ('kind = "env"\nold = "X_BUF"\nvalue = "map"\n', "'value' needs 'new'"),
        ('kind = "text"\npattern = "(["\nmarker = "x"\n', "bad regex in 'pattern'"),
        ('kind = "wat"\n', "unknown kind 'wat'"),
    ],
)
def test_a_bad_user_rule_is_one_line_naming_the_problem(tmp_path, body, needle):
    errors = _errors(tmp_path, f'[[rule]]\ncode = "ACME001"\nmessage = "m"\nsource = "s"\n{body}')
    assert any(needle in e for e in errors), errors
    assert all(f"{tmp_path / 'mine.toml'}: rule 0 (ACME001): " in e for e in errors)


def test_every_problem_of_every_rule_is_reported_at_once(tmp_path):
    errors = _errors(
        tmp_path,
        '[[rule]]\ncode = "ACME001"\nkind = "rename"\nmessage = "m"\n'
        '[[rule]]\ncode = "x"\nkind = "method"\nold = "a"\nnew = "b"\nmessage = "m"\nsource = "s"\n',
    )
    assert errors == [
        f"{tmp_path / 'mine.toml'}: rule 0 (ACME001) lacks source, old, new",
        f"{tmp_path / 'mine.toml'}: rule 1 (x): code 'x' must look like NPU101",
    ]


def test_every_kind_has_a_frozen_schema_with_the_common_keys():
    for name, kind in KINDS.items():
        fields = kind.schema.__dataclass_fields__
        assert {"kind", "code", "message", "source", "fix"} <= set(fields), name
        assert kind.schema.__dataclass_params__.frozen, name


def test_kernel_libraries_and_producer_names_are_derived_from_the_rules():
    rs = load_rules()
    assert rs.kernel_rule("flash_attn.flash_attn_func").match == "flash_attn"
    assert rs.kernel_rule("torch.cuda.synchronize") is None
    assert rs.value_literal("eval_device") == "device" and rs.value_literal("dist_backend") == "backend"
    # every producer name is also a consumer name: both ends change together
    assert rs.compare_rule("eval_device").literal == "device"
    assert rs.compare_rule("dist_backend").literal == "backend"


def test_cuda_and_npu_words_are_spelled_once():
    """Only rules/words.py spells "cuda"/"npu"/"nccl"/"hccl" as string constants in code."""
    words = set()
    for lit in LITERALS.values():
        words |= {lit.cuda, lit.npu}
    offenders = []
    for path in MIGRATE.rglob("*.py"):
        if path.relative_to(MIGRATE).as_posix() == "rules/words.py":
            continue
        tree = ast.parse(path.read_text())
        # command.py spells the --target names again, for --help (test_portable.py)
        targets = {
            id(c)
            for n in ast.walk(tree)
            if path.name == "command.py" and isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "TARGETS"
            for c in ast.walk(n.value)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in words and id(node) not in targets:
                offenders.append(f"{path.name}:{node.lineno} {node.value!r}")
    assert offenders == []


def test_parse_rule_rejects_non_tables():
    rule, errors = parse_rule(["not", "a", "table"], "f: rule 0")
    assert rule is None and errors == ["f: rule 0: expected a table"]


def test_text_rule_groups_and_message_fields_are_checked_at_load(tmp_path):
    errors = _errors(
        tmp_path,
        '[[rule]]\ncode = "ACME901"\nkind = "text"\nsource = "s"\n'
        "pattern = '(?P<flag>--accel)[= ](?P<dev>gpu)'\nmarker = \"accel\"\n"
        'message = "{flag} asks for {dev}"\n',
    )
    assert errors == [
        f"{tmp_path / 'mine.toml'}: rule 0 (ACME901): pattern group(s) dev, flag mean nothing "
        "here (named groups: pre, opt)",
        f"{tmp_path / 'mine.toml'}: rule 0 (ACME901): message field(s) {{dev}}, {{flag}} are "
        "not filled for text rules (fields: {old}, {new})",
    ]


def test_a_user_text_rule_uses_pre_opt_old_and_new_as_documented(tmp_path):
    """What the Text kind's docstring promises: `pre` kept before `new`, the finding at
    `opt` showing it as {old}, {new} the replacement."""
    from titan_doctor.migrate.text.lines import migrate_text

    rules = tmp_path / "mine.toml"
    rules.write_text(
        '[[rule]]\ncode = "ACME901"\nkind = "text"\nsource = "s"\nmarker = "accel"\n'
        "pattern = '(?P<pre>--accel[= ])gpu'\nnew = \"npu\"\n"
        'message = "accelerator {old} -> {new}"\n'
        '[[rule]]\ncode = "ACME902"\nkind = "text"\nsource = "s"\nmarker = "gpus"\n'
        "pattern = 'x(?P<opt>--gpus \\S+)'\nmessage = \"{old} asks for GPUs\"\n"
    )
    rs = load_rules([rules])
    new, findings = migrate_text(b"run --accel=gpu\nlaunch x--gpus 8\n", rs, "r.sh")
    assert new == b"run --accel=npu\nlaunch x--gpus 8\n"
    assert [(f.code, f.line, f.col, f.message) for f in findings] == [
        ("ACME901", 1, 5, "accelerator --accel=gpu -> --accel=npu"),
        ("ACME902", 2, 9, "--gpus 8 asks for GPUs"),
    ]


@pytest.mark.parametrize(
    "line, mentioned",
    [
        ("import fused_rmsnorm_cuda", True),  # a module glob (*_cuda) names an import
        ("from masked_softmax_cuda import forward", True),
        ("%time run(use_cuda=True)", False),  # ... not a keyword that ends in _cuda
        ("%pip install -q flash-attn==2.6.3", True),  # a marker glob (flash*attn) spans - and _
        ("%pip install -q flash_attn", True),
        ("%pip install -q transformers pytorch-lightning", False),  # transformer*engine is not transformers
        ("%sql SELECT name FROM runs", False),  # a Dockerfile rule is not about every FROM
    ],
)
def test_glob_markers_mention_only_what_their_rules_match(line, mentioned):
    # rules.mentions decides whether a notebook magic line "mentions CUDA" (NPU005)
    assert load_rules().mentions(line.encode()) is mentioned
