"""torch's errors on the model's own code (rules/log_torch.toml, programming_errors.py): each
named with what its figures mean, in the spellings torch's sources print. Before these rows
they were honest unknowns, and the autograd version counter ('is at version 3; expected
version 2') was read as a likely version mismatch of the installed packages."""

import re

import pytest

from titan_doctor.diagnose import logs, signatures


def root(tmp_path, line):
    p = tmp_path / "run.log"
    p.write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/work/train.py", line 10, in <module>\n'
        "[rank0]:     loss.backward()\n"
        f"[rank0]: {line}\n"
    )
    return logs.explain([p])[0]


@pytest.mark.parametrize(
    "line,code,says,fix",
    [
        (
            "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace "
            "operation: [torch.npu.FloatTensor [4096, 128]], which is output 0 of AsStridedBackward0, is at version 3; "
            "expected version 2 instead. Hint: enable anomaly detection",
            "autograd.inplace_modified",
            "(output 0 of AsStridedBackward0)",
            "out-of-place",
        ),
        (
            "RuntimeError: Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed).",
            "autograd.backward_twice",
            "second backward()",
            "detach",
        ),
        (
            "RuntimeError: Output 0 of SplitBackward0 is a view and is being modified inplace. This view is the output of a function that returns multiple views.",
            "autograd.view_inplace",
            "view",
            ".clone()",
        ),
        (
            "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn",
            "autograd.no_grad_fn",
            "frozen",
            "enable_input_require_grads",
        ),
        (
            "RuntimeError: Function 'SoftmaxBackward0' returned nan values in its 0th output.",
            "autograd.anomaly_nan",
            "SoftmaxBackward0",
            "float32",
        ),
        (
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8192x4096 and 5120x4096)",
            "shape.matmul",
            "last dimension is 4096 while its weight expects 5120",
            "in_features (5120)",
        ),
        (
            "RuntimeError: The size of tensor a (8192) must match the size of tensor b (4096) at non-singleton dimension 1",
            "shape.broadcast",
            "size 8192 and 4096 in dimension 1",
            "max_seq_len",
        ),
        (
            "RuntimeError: shape '[4, 2048, 32, 128]' is invalid for input of size 16777216",
            "shape.view_invalid",
            "2x the elements there are",
            "n_heads // tp",
        ),
        (
            "RuntimeError: shape '[-1, 3, 128]' is invalid for input of size 1000",
            "shape.view_invalid",
            "do not divide by the other dims' product 384",
            "-1",
        ),
        (
            "RuntimeError: expected scalar type BFloat16 but found Float",
            "dtype.operands_differ",
            "(bfloat16 and float32)",
            "autocast",
        ),
        (
            "RuntimeError: Found dtype Float but expected BFloat16",
            "dtype.operands_differ",
            "(bfloat16 and float32)",
            "target.to(output.dtype)",
        ),
        (
            "RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16",
            "dtype.operands_differ",
            "(float32 and bfloat16)",
            "autocast",
        ),
        (
            "RuntimeError: Input type (torch.npu.HalfTensor) and weight type (torch.npu.FloatTensor) should be the same",
            "dtype.operands_differ",
            "(float16 and float32)",
            "autocast",
        ),
        (
            "RuntimeError: expected scalar type Long but found Float",
            "dtype.operands_differ",
            "integer tensor",
            ".long()",
        ),
        (
            "RuntimeError: aten.add.Tensor: got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before calling distributed operators!",
            "dtensor.mixed_operands",
            "plain torch.Tensor",
            "use_local_output=True",
        ),
        (
            "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following reasons: 1) Use of a module parameter outside the `forward` function.",
            "ddp.ready_twice",
            "reentrant",
            "use_reentrant=False",
        ),
        (
            "RuntimeError: Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone to get a normal tensor before doing inplace update.",
            "autograd.inference_tensor",
            "inference_mode",
            "torch.no_grad()",
        ),
        (
            "ValueError: Must flatten tensors with uniform `requires_grad` when `use_orig_params=False`",
            "fsdp.mixed_requires_grad",
            "frozen and trainable",
            "use_orig_params=True",
        ),
    ],
)
def test_model_code_errors_are_named_with_their_figures(tmp_path, line, code, says, fix):
    f = root(tmp_path, line)
    assert f.code == f"log.{code}", (f.code, f.message)
    assert says in f.detail, f.detail
    assert fix in f.fix, f.fix
    assert "version" not in f.message.lower() or code != "autograd.inplace_modified"


def test_the_autograd_version_counter_is_not_read_as_a_package_version(tmp_path):
    f = root(
        tmp_path,
        "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation: [torch.FloatTensor [10]] is at version 1; expected version 0 instead.",
    )
    assert f.data.get("family") != "version_mismatch"
    assert "installed versions" not in f.message


def test_every_template_field_of_a_parser_free_signature_is_one_of_its_groups():
    """A field a template names must come from the pattern (blank when its alternative did not
    match) or from the row's parser; a typo would print '{field}' to the user."""
    bad = []
    code_fields = {"local_rank"}  # written as code in a fix: f'npu:{local_rank}'
    for sig in signatures.load():
        if sig.parse:
            continue
        for text in (sig.cause, sig.fix, sig.confirm):
            left = re.findall(r"\{(\w+)\}", signatures.fill(text, signatures.unmatched_blank(sig.id, {})))
            bad += [f"{sig.id}: {{{name}}}" for name in left if name not in code_fields]
    assert bad == []


def test_an_alternative_group_that_did_not_match_prints_nothing(tmp_path):
    f = root(tmp_path, "torch._dynamo.exc.Unsupported: Graph break due to unsupported builtin _operator.getitem")
    assert "{exc2}" not in f.detail and "(Unsupported)" in f.detail
