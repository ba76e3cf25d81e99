"""NPU kernel adapters: every torch_npu call in kernels.py binds to the op's schema in the
torch_npu 2.13.0 wheel and takes the right output, and on CPU, through a stand-in module
that implements the documented semantics, each adapter (and the whole model) matches the
reference path."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pytest
import torch

from titan_train.models import kernels
from titan_train.models.llama import ModelArgs, Transformer, rope_tables

from ..npu_wheel import DOCS_FILE, SCHEMA_FILE, op_schemas, read_member, torch_npu_wheel
from . import stand_in_torch_npu

KERNELS_PY = Path(kernels.__file__)
# op -> the output kernels.py must take, as its doc entry numbers them (1st output = index 0)
WANTED_OUTPUT = {"npu_rms_norm": 0, "npu_fusion_attention": 0}
# argument -> the values its doc entry allows (string arguments we pass as constants)
DOCUMENTED_VALUES = {"rotary_mode": {"half", "interleave"}, "input_layout": {"BSH", "SBH", "BSND", "BNSD", "TND"}}


# ---------------------------------------------------------------- static: schemas in the wheel


@pytest.fixture(scope="module")
def wheel():
    return torch_npu_wheel()


@pytest.fixture(scope="module")
def schemas(wheel):
    return op_schemas(read_member(wheel, SCHEMA_FILE))


def _torch_npu_calls(tree: ast.AST) -> list[tuple[ast.Call, ast.AST]]:
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return [
        (node, parents[node])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch_npu"
    ]


def binding_problems(call: ast.Call, parent: ast.AST, schema) -> list[str]:
    """What is wrong with this call against the schema (empty: it binds)."""
    problems, params = [], list(schema.params)
    positional = [p for p in params if not p.keyword_only]
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return ["uses *args / **kwargs; cannot be checked"]
    if len(call.args) > len(positional):
        problems.append(f"{len(call.args)} positional arguments, the schema takes {len(positional)}")
    bound = {p.name for p in positional[: len(call.args)]}
    names = {p.name for p in params}
    for kw in call.keywords:
        if kw.arg not in names:
            problems.append(f"no argument {kw.arg!r}")
        elif kw.arg in bound:
            problems.append(f"{kw.arg!r} given twice")
        elif kw.arg == "self":  # python bindings expose `self` positionally only
            problems.append("'self' passed by keyword")
        bound.add(kw.arg)
    missing = [p.name for p in params if p.default is None and p.name not in bound]
    if missing:
        problems.append(f"required {missing} not given")
    for kw in call.keywords:
        allowed = DOCUMENTED_VALUES.get(kw.arg)
        if allowed and isinstance(kw.value, ast.Constant) and kw.value.value not in allowed:
            problems.append(f"{kw.arg}={kw.value.value!r} is not one of {sorted(allowed)}")
    for p, a in zip(positional, call.args):
        allowed = DOCUMENTED_VALUES.get(p.name)
        if allowed and isinstance(a, ast.Constant) and a.value not in allowed:
            problems.append(f"{p.name}={a.value!r} is not one of {sorted(allowed)}")
    subscript = isinstance(parent, ast.Subscript) and parent.value is call
    if schema.returns_tuple:
        index = parent.slice.value if subscript and isinstance(parent.slice, ast.Constant) else None
        if index is None:
            problems.append(f"returns {len(schema.returns)} values; take one by a constant index")
        elif not (0 <= index < len(schema.returns)) or not schema.returns[index].startswith("Tensor"):
            problems.append(f"output [{index}] is not a Tensor of {schema.returns}")
        elif index != WANTED_OUTPUT.get(schema.name, index):
            problems.append(f"takes output [{index}], the result is [{WANTED_OUTPUT[schema.name]}]")
    elif subscript:
        problems.append("returns one Tensor but is indexed")
    return problems


def test_every_torch_npu_call_in_kernels_binds_to_its_schema(schemas):
    calls = _torch_npu_calls(ast.parse(KERNELS_PY.read_text()))
    assert sorted(c.func.attr for c, _ in calls) == [
        "npu_fusion_attention",
        "npu_rms_norm",
        "npu_rotary_mul",
        "npu_swiglu",
    ]
    report = {c.func.attr: binding_problems(c, p, schemas[c.func.attr]) for c, p in calls}
    assert report == {name: [] for name in report}


@pytest.mark.parametrize(
    "source, expected",
    [
        ("torch_npu.npu_rms_norm(x, w, epsilon=1e-5)", "returns 2 values"),
        ("torch_npu.npu_rms_norm(x, w, eps=1e-5)[0]", "no argument 'eps'"),
        ("torch_npu.npu_rms_norm(x, w)[1]", "takes output [1], the result is [0]"),
        ("torch_npu.npu_rms_norm(x, w, 1e-5, epsilon=1e-5)[0]", "'epsilon' given twice"),
        ("torch_npu.npu_rotary_mul(x, c, s, rotary_mode='interleaved')", "rotary_mode='interleaved' is not one of"),
        ("torch_npu.npu_rotary_mul(x, c, s)[0]", "returns one Tensor but is indexed"),
        ("torch_npu.npu_fusion_attention(q, k, v, 'BSND', head_num=4)[0]", "'head_num' given twice"),
        ("torch_npu.npu_fusion_attention(q, k, v, 4)[0]", "required ['input_layout'] not given"),
        ("torch_npu.npu_fusion_attention(q, k, v, 4, 'NSBD')[0]", "input_layout='NSBD' is not one of"),
        ("torch_npu.npu_fusion_attention(q, k, v, 4, 'BSND')[4]", "output [4] is not a Tensor"),
        ("torch_npu.npu_swiglu(self=x)", "'self' passed by keyword"),
    ],
)
def test_the_binding_check_catches_wrong_calls(schemas, source, expected):
    ((call, parent),) = _torch_npu_calls(ast.parse(source))
    assert any(expected in p for p in binding_problems(call, parent, schemas[call.func.attr]))


def test_the_stand_in_has_the_schema_signatures_and_quotes_the_wheel_docs(wheel, schemas):
    docs = read_member(wheel, DOCS_FILE)
    for op, sentences in stand_in_torch_npu.DOCUMENTED.items():
        sig = inspect.signature(getattr(stand_in_torch_npu, op))
        assert list(sig.parameters) == [p.name for p in schemas[op].params], op
        entry = docs[docs.index(f'"{op}",') :]
        entry = entry[: entry.index("_add_torch_npu_docstr(")]
        for sentence in sentences:
            assert sentence in entry, (op, sentence)


# ---------------------------------------------------------------- on CPU: adapters vs reference


@pytest.fixture
def npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", stand_in_torch_npu)
    return kernels.for_device("npu")


def test_device_picks_the_kernels(npu):
    assert kernels.for_device("cpu") is kernels.REFERENCE and kernels.for_device("cuda") is kernels.REFERENCE
    assert npu.name == "torch_npu"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm(npu, dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 16, generator=gen).to(dtype)
    w = torch.randn(16, generator=gen).to(dtype)
    ref = kernels.rms_norm(x, w, 1e-5)
    got = npu.rms_norm(x, w, 1e-5)
    assert got.dtype == ref.dtype == dtype
    torch.testing.assert_close(got, ref, **({} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}))
    assert npu.rms_norm(x, w.float(), 1e-5).dtype == dtype  # gamma is cast to x's dtype as the op requires


def test_rope_interleaved_pairs_match_and_half_mode_would_not(npu):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 7, 3, 8, generator=gen)
    table = rope_tables(ModelArgs(d_model=16, n_heads=2, max_seq_len=7, rope_theta=10000.0))
    torch.testing.assert_close(npu.rope(x, table), kernels.rope(x, table))
    cos, sin = (table[i].repeat_interleave(2, -1)[None, :, None, :] for i in (0, 1))
    half = stand_in_torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="half")
    assert not torch.allclose(half, kernels.rope(x, table), atol=1e-3)  # the layout matters
    many = torch.randn(250, 3, 4, 8, generator=gen)  # B * N = 1000: beyond interleave mode
    assert torch.equal(npu.rope(many, table[:, :3]), kernels.rope(many, table[:, :3]))


@pytest.mark.parametrize("heads, kv_heads, seq", [(4, 4, 5), (4, 2, 33), (6, 1, 9)])
def test_causal_attention_mha_and_gqa_with_gradients(npu, heads, kv_heads, seq):
    gen = torch.Generator().manual_seed(seq)
    q = torch.randn(2, seq, heads, 8, generator=gen, requires_grad=True)
    k = torch.randn(2, seq, kv_heads, 8, generator=gen, requires_grad=True)
    v = torch.randn(2, seq, kv_heads, 8, generator=gen, requires_grad=True)
    ref = kernels.attention(q, k, v)
    got = npu.attention(q, k, v)
    assert got.shape == ref.shape == (2, seq, heads, 8)
    torch.testing.assert_close(got, ref)
    grads = [torch.autograd.grad(out.square().sum(), (q, k, v)) for out in (ref, got)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_stand_in_refuses_a_causal_mask_of_the_wrong_polarity():
    q = torch.randn(1, 4, 2, 8)
    lower = torch.ones(2048, 2048, dtype=torch.bool).tril(-1)
    with pytest.raises(RuntimeError, match="True above the diagonal"):
        stand_in_torch_npu.npu_fusion_attention(q, q, q, 2, "BSND", atten_mask=lower, sparse_mode=2)


def test_swiglu(npu):
    gen = torch.Generator().manual_seed(2)
    gate, up = torch.randn(3, 4, 10, generator=gen), torch.randn(3, 4, 10, generator=gen)
    torch.testing.assert_close(npu.swiglu(gate, up), kernels.swiglu(gate, up))


def test_whole_model_on_npu_kernels_matches_the_reference(npu):
    args = ModelArgs(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, multiple_of=16, max_seq_len=16)
    models = []
    for ops in (kernels.REFERENCE, npu):
        with torch.device("meta"):
            m = Transformer(args, ops)
        m.to_empty(device="cpu")
        m.init_weights(seed=3)
        models.append(m)
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(4))
    logits = [m(tokens) for m in models]
    torch.testing.assert_close(logits[1], logits[0])
    for _model, out in zip(models, logits):
        out.logsumexp(-1).sum().backward()
    for (name, a), (_, b) in zip(models[0].named_parameters(), models[1].named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, msg=name)


@pytest.mark.parametrize("pp", [1, 2])
def test_build_chooses_the_kernels_once_for_every_stage_and_the_fake_tensor_build(npu, monkeypatch, fake_world, pp):
    """build() asks kernels.for_device once, by the device it builds on, and every block of
    every local pipeline stage calls that choice; under FakeTensorMode (the memory planner's
    build) the same happens, and a step traces through the NPU adapters."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from titan_train.build import build
    from titan_train.config import job as config
    from titan_train.config.parallel_dims import ParallelDims
    from titan_train.step import train_step

    from .conftest import REPO

    asked = []
    monkeypatch.setattr(kernels, "for_device", lambda device_type: asked.append(device_type) or npu)
    cfg = config.load(
        REPO / "configs" / "llama_debug.toml",
        [
            "training.seq_len=64",
            "model.n_layers=4",
            f"distributed.pp_size={pp}",
            'distributed.pp_schedule="interleaved_1f1b"',
        ],
    )
    config.validate(cfg, 2)
    fake_world(2)
    with FakeTensorMode(allow_non_fake_inputs=True):
        parts = build(cfg, ParallelDims.for_world(2, pp=pp), torch.device("cpu"))
        if pp == 1:
            tokens = torch.randint(0, 2048, (4, 65))
            train_step(parts, [(tokens[:, :-1], tokens[:, 1:])])
    assert asked == ["cpu"] and parts.kernels is npu
    assert len(parts.model_parts) == (1 if pp == 1 else 2)  # interleaved: stages 0 and 2 on this rank
    users = [(name, m) for part in parts.model_parts for name, m in part.named_modules() if hasattr(m, "kernels")]
    blocks = {name.split(".")[1] for name, _ in users if name.startswith("layers.")}
    assert blocks == ({"0", "1", "2", "3"} if pp == 1 else {"0", "2"})
    assert [name for name, m in users if m.kernels is not npu] == []
