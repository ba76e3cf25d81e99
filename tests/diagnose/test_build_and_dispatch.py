"""Three classes read from their own text (titan_doctor/diagnose/build_and_dispatch.py): the
dispatcher's 'Could not run <op> with arguments from the <backend> backend', a torch feature that
lists the devices it runs on, and a C/C++ link that leaves a symbol undefined. Each case is a
spelling from the source its signature cites, in the contexts users meet it."""

import pytest

from titan_doctor.diagnose import logs

from .conftest import log_root as root

_DISPATCH = (
    "NotImplementedError: Could not run '{op}' with arguments from the '{backend}' backend. This could be "
    "because the operator doesn't exist for this backend, or was omitted during the selective/custom build "
    "process (if using custom build). '{op}' is only available for these backends: [{avail}]."
)


@pytest.mark.parametrize(
    "op,backend,avail,says,fix",
    [
        ("aten::_fused_rms_norm", "PrivateUse1", "CPU, CUDA, Meta", "torch_npu registers no kernel", "torch_npu.npu_*"),
        ("aten::_fused_rms_norm", "NPU", "CPU, CUDA", "torch_npu registers no kernel", "CPU"),
        (
            "xformers::efficient_attention_forward_cutlass",
            "PrivateUse1",
            "CUDA",
            "xformers extension",
            "scaled_dot_product_attention",
        ),
        ("npu::npu_fusion_attention", "CPU", "PrivateUse1, Meta", "inputs are on the CPU", ".to('npu')"),
        ("aten::_flash_attention_forward", "CPU", "CUDA, Meta", "cpu tensors", "CUDA"),
        ("aten::nonzero", "Meta", "CPU, CUDA, PrivateUse1", "meta (shape-only) kernel", "torch.compiler.disable"),
        ("aten::mm", "SparseCsrPrivateUse1", "CPU, CUDA", "SparseCsrPrivateUse1 kind", "dense"),
    ],
)
def test_dispatcher_errors_say_which_mistake_the_backend_shows(tmp_path, op, backend, avail, says, fix):
    f = root(tmp_path, "[rank0]: " + _DISPATCH.format(op=op, backend=backend, avail=avail) + "\n")
    assert f.code == "log.op.no_kernel_for_backend"
    assert op in f.detail and says in f.detail
    assert fix in f.fix


def test_dispatcher_error_lists_only_the_device_backends_it_has(tmp_path):
    f = root(
        tmp_path, _DISPATCH.format(op="aten::foo", backend="PrivateUse1", avail="CPU, AutogradCPU, Python, CUDA") + "\n"
    )
    assert "it has kernels only for: CPU, CUDA." in f.detail


@pytest.mark.parametrize(
    "line,feature,npu_fix",
    [
        (
            "ValueError: FlexAttention is only supported on CUDA, CPU, HPU, or MPS devices. Found input tensors on npu device.",
            "FlexAttention",
            True,
        ),
        ("RuntimeError: Jiterator is only supported on CUDA and ROCm GPUs, none are available.", "Jiterator", False),
        ("RuntimeError: out_dtype is only supported for CUDA or XPU", "out_dtype", False),
    ],
)
def test_a_feature_that_lists_its_devices_is_named_with_them(tmp_path, line, feature, npu_fix):
    f = root(tmp_path, line + "\n")
    assert f.code == "log.op.feature_not_on_device"
    assert f.detail.startswith(f"{feature} runs only on ")
    assert ("npu_fusion_attention" in f.fix) is npu_fix
    if npu_fix:
        assert "the inputs are on npu" in f.detail


def test_a_device_list_that_includes_no_device_is_not_this_class(tmp_path):
    f = root(tmp_path, "ValueError: reshape is only supported on NHWC tensors if the target size is [X, -1].\n")
    assert f.code != "log.op.feature_not_on_device"


@pytest.mark.parametrize(
    "line,says,fix",
    [
        (
            "main.cpp:(.text+0x2a): undefined reference to `torch_npu::init_npu(std::string const&)'",
            "C++ API of torch_npu",
            "build_libtorch_npu.py",
        ),
        (
            "op.cpp:(.text+0x1f): undefined reference to `c10::detail::torchCheckFail(char const*, char const*, unsigned int, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)'",
            "C++ string ABI",
            "_GLIBCXX_USE_CXX11_ABI",
        ),
        ("demo.cc:(.text+0x10): undefined reference to `aclrtSetDevice'", "CANN library", "-lascendcl"),
        (
            "model.cpp:(.text+0x88): undefined reference to `at::_ops::add_Tensor::call(at::Tensor const&)'",
            "defined by libtorch",
            "find_package(Torch)",
        ),
        ("/usr/bin/ld: cannot find -lhccl: No such file or directory", "libhccl.so", "set_env.sh"),
        ("x.c:(.text+0x5): undefined reference to `my_helper'", "no library on the link line", "nm -DC"),
        ("x.c:(.text+0x5): undefined reference to `oracle_connect'", "no library on the link line", "nm -DC"),
    ],
)
def test_link_errors_name_who_defines_the_symbol(tmp_path, line, says, fix):
    f = root(tmp_path, "[ 50%] Linking CXX executable demo\n" + line + "\ncollect2: error: ld returned 1 exit status\n")
    assert f.code == "log.build.undefined_reference"
    assert says in f.detail and fix in f.fix


# ---- torch_npu's ERR codes whose message is the exception printed before them -------------

_PID = "[ERROR] 2024-11-28-11:37:15 (PID:6547, Device:0, RankID:-1) {code}\n"


def _traceback(msg):
    return f'Traceback (most recent call last):\n  File "train.py", line 4, in <module>\n    y = step(x)\n{msg}\n'


def test_an_err_code_behind_an_unlisted_exception_roots_on_the_exception(tmp_path):
    msg = "RuntimeError: grid_sampler_2d: bicubic mode needs align_corners on this backend"
    found = logs.explain([_write(tmp_path, _traceback(msg) + _PID.format(code="ERR01007 OPS feature not supported"))])
    assert found[0].code == "log.exception" and msg in found[0].message
    assert "names only the kind of failure" in found[0].detail
    assert found[1].code == "log.torch_npu.ERR01007"


@pytest.mark.parametrize(
    "msg,code,says,fix",
    [
        ("RuntimeError: Tensors must be contiguous", "ERR02002 DIST invalid type", "not contiguous", ".contiguous()"),
        (
            "RuntimeError: Expected all tensors to be on the same device. Expected NPU tensor, please check whether "
            "the input tensor device is correct.",
            "ERR01002 OPS invalid type",
            "left on the CPU",
            "v.to('npu')",
        ),
    ],
)
def test_an_err_code_behind_a_known_message_takes_the_messages_reading(tmp_path, msg, code, says, fix):
    f = logs.explain([_write(tmp_path, _traceback(msg) + _PID.format(code=code))])[0]
    assert says in f.detail and fix in f.fix
    assert f"torch_npu {code.split()[0]}" in f.detail


def test_a_cpu_fallback_warning_explains_the_error_after_it(tmp_path):
    warn = (
        "[W compiler_depend.ts:51] Warning: CAUTION: The operator 'aten::linalg_lstsq.out' is not currently supported "
        "on the NPU backend and will fall back to run on the CPU. This may have performance implications. "
        "(function npu_cpu_fallback)\n"
    )
    text = warn + _traceback("RuntimeError: _copy_from_and_resize now only support copy with same size!")
    f = logs.explain([_write(tmp_path, text + _PID.format(code="ERR01007 OPS feature not supported"))])[0]
    assert f.code == "log.op.npu_cpu_fallback" and f.message.startswith("root cause: likely:")
    assert "aten::linalg_lstsq.out" in f.detail and "aten::linalg_lstsq.out on the CPU" in f.fix


def _write(tmp_path, text):
    p = tmp_path / "run.log"
    p.write_text(text)
    return p


# ---- pip's resolver and Python's import system ----------------------------------------------


def test_a_pin_on_torchs_cpu_build_says_where_that_build_lives(tmp_path):
    text = (
        "The conflict is caused by:\n"
        "    The user request torch==2.5.1\n"
        "    torch-npu 2.5.1 depends on torch==2.5.1+cpu\n"
    )
    f = logs.explain([_write(tmp_path, text)])[0]
    assert f.code == "log.install.torch_cpu_build_pin"
    assert "torch==2.5.1+cpu" in f.detail and "download.pytorch.org/whl/cpu" in f.fix and "--no-deps" in f.fix
    assert "cann" not in f.detail.lower()  # nothing here is about CANN (not even in "cannot")


def test_any_pip_conflict_is_named_and_points_at_the_pins(tmp_path):
    for line in (
        "ERROR: Cannot install a==1.0 and b==2.0 because these package versions have conflicting dependencies.",
        "torchvision 0.18.1+cpu requires torch==2.3.1, but you have torch 2.1.0 which is incompatible.",
    ):
        f = logs.explain([_write(tmp_path, line + "\n")])[0]
        assert f.code == "log.install.pip_conflict", line
        assert "--no-deps" in f.fix


@pytest.mark.parametrize(
    "module,says,fix",
    [
        ("vllm_ascend.distributed.device_communicators", "vllm_ascend is installed", "pip show vllm-ascend"),
        ("megatron.bridge", "megatron is installed", "pip install megatron-bridge"),
    ],
)
def test_a_missing_submodule_of_an_imported_package_is_a_release_mismatch(tmp_path, module, says, fix):
    f = logs.explain([_write(tmp_path, _traceback(f"ModuleNotFoundError: No module named '{module}'"))])[0]
    assert f.code == "log.import.submodule_missing"
    assert says in f.detail and "another version" in f.detail and fix in f.fix


def test_a_missing_top_level_package_is_not_a_release_mismatch(tmp_path):
    f = logs.explain([_write(tmp_path, _traceback("ModuleNotFoundError: No module named 'einops'"))])[0]
    assert f.code != "log.import.submodule_missing"


@pytest.mark.parametrize(
    "lib,pkg",
    [
        ("/env/lib/python3.11/site-packages/_XLAC.cpython-311-x86_64-linux-gnu.so", "torch_xla"),
        ("/env/lib/python3.10/site-packages/vllm/_C.abi3.so", "vllm"),
        ("/env/lib/python3.10/site-packages/torchvision/_C.so", "torchvision"),
    ],
)
def test_an_undefined_symbol_names_the_package_whose_extension_it_is(tmp_path, lib, pkg):
    line = f"ImportError: {lib}: undefined symbol: _ZN5torch8autograd12VariableInfoC1ERKN2at6TensorE"
    f = logs.explain([_write(tmp_path, line + "\n")])[0]
    assert f.code == "log.import.undefined_symbol"
    assert f"{pkg}'s compiled extension" in f.detail and f"Install the {pkg} release" in f.fix
    assert "torch_npu" not in f.fix


def test_an_undefined_symbol_in_torch_npu_keeps_the_torch_npu_fix(tmp_path):
    lib = "/env/lib/python3.10/site-packages/torch_npu/lib/libtorch_npu.so"
    f = logs.explain([_write(tmp_path, f"ImportError: {lib}: undefined symbol: _ZN5torch10ValueErrorC1EPKcz\n")])[0]
    assert "torch and torch_npu versions do not match" in f.detail and "pip install torch-npu==" in f.fix


def test_an_injected_nccl_graph_for_another_machine_is_named_before_the_system_error(tmp_path):
    text = (
        "host:1:2 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /opt/vm/graph.xml\n"
        "host:1:2 [0] graph/search.cc:719 NCCL WARN XML Import Channel : dev 3 not found.\n"
        "host:1:2 [0] NCCL INFO graph/search.cc:749 -> 2\n"
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO "
        "for details), NCCL version 2.19.3\n"
    )
    f = logs.explain([_write(tmp_path, text)])[0]
    assert f.code == "log.nccl.injected_graph_mismatch"
    assert "dev 3" in f.detail and "Unset NCCL_GRAPH_FILE" in f.fix
    assert "InfiniBand" not in f.detail


def test_a_checkpoint_file_that_cannot_be_created_names_folder_rights_and_space(tmp_path):
    f = logs.explain([_write(tmp_path, _traceback("RuntimeError: File out/ckpt/step_10.pt cannot be opened."))])[0]
    assert f.code == "log.ckpt.file_not_created" and f.data["family"] == "host_disk"
    assert "out/ckpt/step_10.pt" in f.detail and "df -h" in f.fix and "os.makedirs" in f.fix


def test_an_op_store_without_the_dtype_beats_the_build_failure_it_causes(tmp_path):
    text = (
        "EZ3002: Optype [Conv3D] of Ops kernel [AIcoreEngine] is unsupported. Reason: [tbe-custom]:op type Conv3D is "
        "not found in this op store.[Dynamic shape check]: data type DT_BFLOAT16 of input [x] is not supported. All "
        "supported data type and format of tensor input0.x is: Data Type: {DT_FLOAT16,DT_INT8}\n"
        "        build op model failed, result = 500002[FUNC:ReportInnerError][FILE:log_inner.cpp][LINE:145]\n"
    )
    f = logs.explain([_write(tmp_path, text)])[0]
    assert f.code == "log.op.dtype_unsupported"
    assert "(Conv3D) does not support bfloat16" in f.detail and "CANN" in f.fix


def test_a_build_failure_after_the_compile_environment_failed_stays_the_environment(tmp_path):
    text = "EH9999: [Init][Env]init env failed!\n        build op model failed, result = 500001\n"
    f = logs.explain([_write(tmp_path, text)])[0]
    assert f.code == "log.cann.op_env" and "decorator" in f.fix


def test_a_bare_build_failure_does_not_claim_missing_python_packages(tmp_path):
    found = logs.explain([_write(tmp_path, "build op model failed, result = 500002[FUNC:ReportInnerError]\n")])
    assert "log.cann.op_env" not in [f.code for f in found]
    (build,) = [f for f in found if f.code == "log.cann.op_build_failed"]
    assert "lines above" in build.fix


def test_an_unknown_error_raised_inside_a_package_names_that_package(tmp_path):
    text = (
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 40, in <module>\n'
        "    engine.step()\n"
        '  File "/env/lib/python3.11/site-packages/deepspeed/runtime/zero/partitioned_param_coordinator.py", line 204, '
        "in reset_step\n"
        '    raise RuntimeError(f"still have inflight params "\n'
        "RuntimeError: still have inflight params [{'id': 723, 'status': 'AVAILABLE'}]\n"
    )
    f = logs.explain([_write(tmp_path, text)])[0]
    assert f.code == "log.exception"
    assert "inside the installed package deepspeed" in f.detail and "pip show deepspeed" in f.fix
    assert f.fix.count("Read the traceback") == 1


def test_an_unknown_error_raised_by_torch_or_user_code_names_no_package(tmp_path):
    for inner in (
        '/env/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1, in f',
        '/work/model.py", line 9, in g',
    ):
        text = f'Traceback (most recent call last):\n  File "{inner}\n    x()\nValueError: odd value 7\n'
        f = logs.explain([_write(tmp_path, text)])[0]
        assert "inside the installed package" not in f.detail
