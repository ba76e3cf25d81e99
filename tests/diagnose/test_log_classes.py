"""Classes of crash-log structure the explainer reads, each on real error lines (the logs
they come from are in tests/diagnose/real_logs with their sources): who printed an error
(device-error reports, torch_npu's PID line, HCCL's rank:N), torchrun's failure summary,
NCCL/HCCL result codes in their several spellings, an exception behind a wrapper code,
and what a key list alone can and cannot say."""

from titan_doctor.diagnose import error_codes, log_lines, logs, state_dict_errors


def explain(tmp_path, text, name="run.log"):
    p = tmp_path / name
    p.write_text(text)
    return logs.explain([p])


# ---- who printed it ---------------------------------------------------------------------


def test_the_device_named_by_cann_device_error_reports():
    cases = {
        "EZ9999: [PID: 14897] The error from device(chipId:7, dieId:0), serial number is 2, there is an aivec "
        "error exception, core id is 5": 7,
        "        The error from device(2), serial number is 37, there is an aicore error, core id is 0": 2,
        "        open device 2 failed, runtime result = 507033.[FUNC:ReportCallError]": 2,
        "The argument is invalid.Reason: Set visible device failed, invalid device=1, input visible devices:1": 1,
        "Task execute failed, device_id=3, stream_id=122, task_id=790": 3,
        "[ERROR]  acl set device 1 failed, errorCode = 507033": 1,
        "there is an aicore error, core id is 0 (no device named)": None,
    }
    for text, dev in cases.items():
        assert log_lines.parse("x", 1, text).weak_device == dev, text


def test_a_kernel_fault_reported_twice_keeps_the_device_of_the_second_line(tmp_path):
    (f, *_) = explain(
        tmp_path,
        (
            "EZ9999: Inner Error!\n"
            "EZ9999  Kernel task happen error, retCode=0x26, [aicore exception].[FUNC:PreCheckTaskErr]\n"
            "        TraceBack (most recent call last):\n"
            "        The error from device(2), serial number is 37, there is an aicore error, core id is 0\n"
        ),
    )
    assert f.code == "log.device.kernel_fault" and f.data["device"] == 2


def test_torch_npu_pid_line_names_the_device_of_the_python_error_above(tmp_path):
    (f, *_) = explain(
        tmp_path,
        (
            "[rank0]:     torch_npu._npu_flash_attention(\n"
            "[rank0]: AttributeError: module 'torch_npu' has no attribute '_npu_flash_attention'\n"
            "[ERROR] 2025-03-16-11:32:36 (PID:80511, Device:0, RankID:-1) ERR99999 UNKNOWN applicaiton exception\n"
        ),
    )
    assert f.code == "log.version.torch_npu_api_missing"
    assert (f.data["rank"], f.data["device"]) == (0, 0)
    assert "_npu_flash_attention" in f.detail and "torch_npu" in f.fix


def test_hccl_result_and_rank_in_the_mindie_spelling(tmp_path):
    (f,) = explain(
        tmp_path,
        "[error] [36815] [hccl_runner.cpp:132] AllGatherHcclRunner:0 HcclCommInitRootInfo "
        "fail, error:2, rank:1, rankSize:4\n",
    )
    assert f.code == "log.hccl.result" and "HCCL_E_PTR" in f.message and f.data["rank"] == 1
    assert "hccl_test" in f.fix


# ---- torchrun's failure summary -----------------------------------------------------------

SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/root/scripts/train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-09-07_13:03:29
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 14689)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 14689
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-09-07_13:02:58
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 14690)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_torchrun_summary_blames_the_first_failure_not_a_later_sigkill(tmp_path):
    rows = explain(tmp_path, SUMMARY)
    assert rows[0].code == "log.dist.first_failure" and rows[0].data["rank"] == 1
    assert "exitcode  : 1 (pid: 14690)" in rows[0].detail and "torchrun --log-dir" in rows[0].fix
    killed = next(f for f in rows if f.code == "log.dist.worker_killed")
    assert killed.data["rank"] == 0 and "consequence" in killed.message


def test_a_sigkill_in_the_root_cause_block_is_still_the_root(tmp_path):
    text = SUMMARY.replace("exitcode  : -9 (pid: 14689)", "exitcode  : 1 (pid: 14689)").replace(
        "exitcode  : 1 (pid: 14690)", "exitcode  : -9 (pid: 14690)"
    )
    (f, *_) = explain(tmp_path, text)
    assert f.code == "log.dist.worker_killed" and f.data["rank"] == 1


def test_the_first_failure_with_its_traceback_names_the_exception(tmp_path):
    rows = explain(tmp_path, "[rank1]:     shard = spec[3]\n[rank1]: IndexError: list index out of range\n" + SUMMARY)
    assert rows[0].code == "log.exception" and rows[0].data["rank"] == 1
    assert "IndexError: list index out of range" in rows[0].message
    assert rows[1].code == "log.dist.first_failure"


def test_the_summary_rank_line_outside_a_summary_is_not_a_failure(tmp_path):
    assert explain(tmp_path, "  rank      : 1 (local_rank: 1)\n")[0].code == "log.none"


# ---- codes in their several spellings -----------------------------------------------------


def test_nccl_results_by_number_name_and_text():
    def ids(line):
        return [c.id for c in error_codes.find_codes(line)]

    assert ids("RuntimeError: NCCL Error 2: unhandled system error (run with NCCL_DEBUG=INFO for details)") == [
        "nccl.ncclSystemError"
    ]
    assert ids(
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
        "unhandled cuda error, NCCL version 2.14.3"
    ) == ["nccl.ncclUnhandledCudaError"]
    assert ids("ncclRemoteError: socketProgress: Connection closed by remote peer") == ["nccl.ncclRemoteError"]
    assert ids("NCCL error: remote process exited or there was a network error") == ["nccl.ncclRemoteError"]
    assert ids("NCCL INFO Channel 00/02 : 0 1") == [] and ids("libnccl.so.2 loaded") == []
    remote = error_codes.decode_nccl("ncclRemoteError")
    assert remote.consequence and not error_codes.decode_nccl(2).consequence
    assert "NCCL_SOCKET_IFNAME" in error_codes.decode_nccl(2).fix


def test_an_ecode_with_its_reason_beats_the_generic_acl_code_beside_it(tmp_path):
    (f, *rest) = explain(
        tmp_path,
        (
            "[ERROR] aclrtSetDevice(deviceId) failed: 507033 (main.cpp:72)\n"
            "[ERROR] RecentErrMsg: [PID: 1613532] 2026-03-24-12:14:45.885.234 Memory_Allocation_Failure(EL0004): "
            "Failed to allocate memory.\n"
            "        Possible Cause: Available memory is insufficient.\n"
            "        rtSetDevice execution failed, reason=device retain error[FUNC:FuncErrorReason]\n"
            "        open device 2 failed, runtime result = 507033.[FUNC:ReportCallError]\n"
        ),
    )
    assert f.code == "log.ecode.EL0004" and f.data["device"] == 2 and "npu-smi info" in f.fix
    assert any(r.code == "log.acl.507033" for r in rest)


def test_torch_npu_dtype_check_in_its_own_spelling(tmp_path):
    (f, *_) = explain(
        tmp_path,
        (
            "RuntimeError: self scalar_type:UInt64is not surpported.\n"
            "[ERROR] 2026-08-03-15:37:30 (PID:235311, Device:0, RankID:0) ERR01002 OPS invalid type\n"
        ),
    )
    assert f.code == "log.op.dtype_unsupported" and "uint64" in f.detail and f.data["device"] == 0


def test_the_cuda_error_inside_a_watchdog_message_is_the_root(tmp_path):
    (f,) = explain(
        tmp_path,
        "[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with "
        "exception: CUDA error: an illegal memory access was encountered\n",
    )
    assert f.code == "log.cuda.kernel_fault" and f.data["rank"] == 0 and "CUDA_LAUNCH_BLOCKING=1" in f.fix


# ---- an exception behind a wrapper --------------------------------------------------------


def test_an_unknown_exception_behind_err99999_is_named_not_the_wrapper(tmp_path):
    rows = explain(
        tmp_path,
        (
            '[rank0]:   File "x.py", line 3, in f\n'
            "[rank0]: ValueError: bad shard spec for layer 3\n"
            "[ERROR] 2025-03-16-11:32:36 (PID:80511, Device:0, RankID:-1) ERR99999 UNKNOWN applicaiton exception\n"
        ),
    )
    assert rows[0].code == "log.exception" and "ValueError: bad shard spec for layer 3" in rows[0].message
    assert "Not in titan-doctor's list" in rows[0].detail and rows[0].data["device"] == 0
    assert rows[1].code == "log.torch_npu.ERR99999" and rows[1].message.startswith("also:")


def test_a_wrapper_alone_stays_the_root(tmp_path):
    (f,) = explain(
        tmp_path,
        "[ERROR] 2025-03-16-11:32:36 (PID:80511, Device:0, RankID:-1) ERR99999 UNKNOWN applicaiton exception\n",
    )
    assert f.code == "log.torch_npu.ERR99999"


# ---- what a key list alone says -----------------------------------------------------------


def test_missing_keys_alone_do_not_claim_another_model():
    v = state_dict_errors.judge_keys(["tok_emb.weight", "pos_emb.weight", "trf_blocks.0.att.qkv.weight"], [])
    assert v["prefixes"] == [] and "Only missing keys are shown" in v["prefix_note"]
    assert "different model" not in v["prefix_note"] and "print(list(sd)[:5])" in v["prefix_fix"]


def test_unexpected_keys_alone_point_at_extra_entries():
    v = state_dict_errors.judge_keys([], ["ema.decoder.weight", "ema.encoder.weight"])
    assert "Only unexpected keys" in v["prefix_note"] and "strict=False" in v["prefix_fix"]
    v = state_dict_errors.judge_keys([], ["_orig_mod.encoder.weight"])  # a prefix still names itself
    assert v["prefixes"] == ["_orig_mod."]


def test_missing_whole_layers_alone_still_mean_the_layer_count():
    v = state_dict_errors.judge_keys(["layers.31.attention.wq.weight", "layers.31.ffn.w1.weight"], [])
    assert "n_layers differs" in v["prefix_note"]


# ---- from the second blind batch ----------------------------------------------------------


def test_a_missing_op_binary_is_the_kernel_package_not_the_torch_npu_wrapper(tmp_path):
    (f, *rest) = explain(
        tmp_path,
        (
            "[E OpParamMaker.cpp:273] call aclnnCast failed, detail:EZ9999: Inner Error!\n"
            "EZ9999: 2024-05-17-01:30:26.960.959  Op Cast does not has any binary.\n"
            "        launch failed for Cast, errno:561000.\n"
            "[ERROR] 2024-05-17-01:30:26 (PID:41961, Device:0, RankID:-1) ERR01005 OPS internal error\n"
        ),
    )
    assert f.code == "log.cann.kernel_package" and f.data["device"] == 0
    assert [r.code for r in rest][-1] == "log.torch_npu.ERR01005"  # reported, ranked last


def test_the_device_in_the_message_lines_under_a_code(tmp_path):
    (f, *_) = explain(
        tmp_path,
        (
            "EZ9999: Inner Error!\n"
            "EZ9999  Kernel task happen error, retCode=0x2a, [aicpu exception].[FUNC:PreCheckTaskErr]\n"
            "        Aicpu kernel execute failed, device_id=0, stream_id=28, task_id=1726, errorCode=2a.\n"
        ),
    )
    assert f.code == "log.device.kernel_fault" and f.data["device"] == 0 and "aicpu unit" in f.detail


def test_npu_device_string_without_torch_npu(tmp_path):
    (f,) = explain(
        tmp_path,
        "RuntimeError: Expected one of cpu, cuda, ipu, xpu, mkldnn, opengl, opencl, ideep, hip, ve, "
        "fpga, ort, xla, lazy, vulkan, mps, meta, hpu, mtia, privateuseone device type at start of "
        "device string: npu\n",
    )
    assert f.code == "log.import.torch_npu_not_loaded" and "import torch_npu" in f.fix and f.data["device"] is None


def test_a_cuda_device_assert_names_its_condition(tmp_path):
    (f,) = explain(
        tmp_path,
        "/work/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [31,0,0], "
        "thread: [29,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n",
    )
    assert f.code == "log.cuda.device_assert" and "srcIndex < srcSelectDimSize" in f.detail
    assert "resize_token_embeddings" in f.fix


def test_waiting_for_rank_0s_communicator_id_names_both_ranks(tmp_path):
    (f,) = explain(
        tmp_path,
        "torch.distributed.DistBackendError: [4] is setting up NCCL communicator and retrieving "
        "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: "
        "Socket Timeout\n",
    )
    assert f.code == "log.dist.unique_id_timeout" and f.data["rank"] == 4
    assert "Read rank 0's log" in f.fix and f.data["consequence"]


def test_cuda_oom_with_cuda_graph_private_pools(tmp_path):
    (f,) = explain(
        tmp_path,
        "CUDA out of memory. Tried to allocate 1.96 GiB. GPU 1 has a total capacity of 63.29 GiB of "
        "which 1.82 GiB is free. Including non-PyTorch memory, this process has 61.46 GiB memory in "
        "use. Of the allocated memory 22.97 GiB is allocated by PyTorch, with 2.14 GiB allocated in "
        "private pools (e.g., CUDA Graphs), and 37.00 GiB is reserved by PyTorch but unallocated.\n",
    )
    assert f.code == "log.oom.cuda" and f.data["device"] == 1 and "fragmentation" in f.detail


def test_a_signature_group_named_dev_that_is_not_a_number_is_no_device():
    from titan_doctor.diagnose import incidents

    line = log_lines.parse("x", 1, "some error on npu")
    e = incidents.Event("x", "t", "c", "f", 10, False, "s", line, {"dev": "npu"}, [line])
    assert incidents.Incident("x", "", [e]).device is None


# ---- held-out classes (field-logs pass): mpirun prefixes, DCP keys, CANN's own symbols --------


def test_open_mpi_tag_output_prefix_names_the_rank():
    line = log_lines.parse("x", 1, "[1,3]<stdout>:host:29881:30401 [0] NCCL INFO init.cc:903 -> 5")
    assert line.rank == 3 and line.stream == "[1,3]<stdout>:"
    assert log_lines.parse("x", 1, "[1,12]<stderr>:Traceback (most recent call last):").rank == 12


def test_duplicate_gpu_names_both_ranks_and_beats_the_generic_invalid_usage(tmp_path):
    fs = explain(
        tmp_path,
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, invalid usage, NCCL version 2.19.3\n"
            "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
            "Last error:\n"
            "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 2000\n"
        ),
    )
    assert fs[0].code == "log.nccl.duplicate_gpu" and "rank 0 and rank 1" in fs[0].detail
    assert "2000" in fs[0].detail and "log.nccl.ncclInvalidUsage" in [f.code for f in fs[1:]]


def test_dcp_missing_key_reads_the_key_not_the_source_line(tmp_path):
    """The traceback shows torch's own raise with '{fqn}'; the key is on the error line."""
    (f, *_) = explain(
        tmp_path,
        (
            '[rank2]:     raise RuntimeError(f"Missing key in checkpoint state_dict: {fqn}.")\n'
            "[rank2]: RuntimeError: Missing key in checkpoint state_dict: model.layers.3.attention.wq.weight.\n"
        ),
    )
    assert f.code == "log.ckpt.dcp_missing_key" and f.line == 2 and f.data["rank"] == 2
    assert f.data["key"] == "model.layers.3.attention.wq.weight" and "allow_partial_load=True" in f.fix


def test_dcp_missing_key_by_the_shape_of_the_key(tmp_path):
    wrapped = explain(
        tmp_path, "RuntimeError: Missing key in checkpoint state_dict: model._orig_mod.tok_embeddings.weight.\n"
    )
    assert "torch.compile" in wrapped[0].detail and "get_model_state_dict" in wrapped[0].fix
    extra = explain(
        tmp_path,
        "RuntimeError: Missing key in checkpoint state_dict: decoder.layers.mlp.linear_fc1._extra_state/shard_0_2.\n",
    )
    assert "TransformerEngine" in extra[0].detail and "--dist-ckpt-strictness" in extra[0].fix


def test_dcp_failed_rank_list_names_the_rank_of_the_error_above_it(tmp_path):
    fs = explain(
        tmp_path,
        (
            '  File "train.py", line 9, in <module>\n'
            "    load()  # RuntimeError: Missing key in checkpoint state_dict: head.weight\n"
            "torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([3])\n"
        ),
    )
    assert fs[0].code == "log.ckpt.dcp_missing_key" and fs[0].data["rank"] == 3
    many = explain(
        tmp_path,
        "torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([0, 1, 2, 3])\n",
    )
    assert many[0].data["rank"] is None  # several ranks failed: none of them is "the" rank


def test_undefined_symbol_inside_cann_is_a_cann_mix_not_a_torch_mismatch(tmp_path):
    cann = explain(
        tmp_path,
        "error = /usr/local/Ascend/ascend-toolkit/8.0.RC1/opp/built-in/op_impl/host_cpu/"
        "libops_host_cpu.so: undefined symbol: _ZN2ge14GetShapeErrMsgEjRKSsS1_\n",
    )
    assert cann[0].code == "log.cann.undefined_symbol" and "two CANN versions" in cann[0].detail
    torch_side = explain(
        tmp_path,
        "ImportError: /opt/venv/lib/python3.10/site-packages/torch_npu/lib/libtorch_npu.so: "
        "undefined symbol: _ZN5torch10ValueErrorC1EPKcz\n",
    )
    assert torch_side[0].code == "log.import.undefined_symbol"
    nnal = explain(
        tmp_path,
        "OSError: /usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1/lib/libatb.so: undefined symbol: _ZN3Mki2Dl4OpenEv\n",
    )
    assert nnal[0].code == "log.import.nnal"


def test_a_device_fault_report_brings_its_errorstr_to_the_root_cause(tmp_path):
    """The errorStr under the E-code that printed the fault report says what the kernel did."""
    (f, *_) = explain(
        tmp_path,
        (
            "[ERROR] aclrtSynchronizeStream(stream) failed: 507015 (main.cpp:108)\n"
            "[ERROR] RecentErrMsg: EZ9999: Inner Error!\n"
            "EZ9999[PID: 1] (EZ9999):  The error from device(chipId:4, dieId:0), serial number is 8, there is an aicore "
            "error exception, core id is 0, error code = 95\n"
            "        TraceBack (most recent call last):\n"
            "       The extend info: errcode:(95) errorStr: The DDR address of the MTE instruction is out of range.\n"
        ),
    )
    assert f.code == "log.device.kernel_fault" and f.data["device"] == 4
    assert "The DDR address of the MTE instruction is out of range" in f.detail


def test_graph_capture_names_what_could_not_be_captured(tmp_path):
    (f, *_) = explain(
        tmp_path,
        "RuntimeError: Cannot run aclop operators during NPU graph capture. Current working "
        "aclop is Cast. If you need this call to be captured, please try to set ...\n",
    )
    assert f.code == "log.graph.capture_unsupported" and f.data["op"] == "Cast"
    assert "the operator Cast runs through aclop" in f.detail and "--enforce-eager" in f.fix
    (g, *_) = explain(
        tmp_path,
        "Exception: Capture cuda graph failed: capture_end:x.cpp:1 NPU function error: "
        "c10_npu::acl::AclmdlRICaptureEnd(capture_stream_, &model_ri), error code is 107025\n",
    )
    assert g.code == "log.graph.capture_unsupported" and "capture end failed with 107025" in g.detail
