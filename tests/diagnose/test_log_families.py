"""The classes issue 19 added to the explainer, each on lines in the formats their sources print
(NCCL's WARN/INFO lines across releases, c10d's endpoints, CANN's catch-all codes, Python's
tracebacks): extract before classifying, the most specific evidence wins, weak signals say
"likely", and an unknown error is named with its family's next step."""

from titan_doctor.diagnose import error_codes, logs


def explain(tmp_path, text, name="run.log"):
    p = tmp_path / name
    p.write_text(text)
    return logs.explain([p])


# ---- NCCL's own messages, by the errno they quote -------------------------------------------------


def test_nccl_connect_failures_in_three_releases_decode_the_errno(tmp_path):
    lines = {
        "host:1:2 [0] include/socket.h:409 NCCL WARN Connect to 10.0.0.2<43211> failed : Connection refused": "ECONNREFUSED",
        "host:1:2 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<5555> failed : No route to host": "EHOSTUNREACH",
        "host:1:2 [0] os/linux.cc:302 NCCL WARN ncclOsSocketConnect: connect to 10.0.0.2<5555> failed : Connection timed out": "ETIMEDOUT",
    }
    for line, name in lines.items():
        (f,) = explain(tmp_path, line + "\n")
        assert f.code == "log.nccl.connect_failed" and f.data["errno_name"] == name, line
        assert f.data["addr"] == "10.0.0.2" and f.data["addr_port"] in ("43211", "5555")


def test_an_ipv6_link_local_peer_is_named_as_such(tmp_path):
    (f,) = explain(
        tmp_path,
        "h:1:2 [0] include/socket.h:403 NCCL WARN Connect to fe80::1:2%6<57335> failed : Network is unreachable\n",
    )
    assert "link-local" in f.detail and "NCCL_SOCKET_FAMILY=AF_INET" in f.fix


def test_nccl_shm_failures_point_at_dev_shm(tmp_path):
    for line in (
        "[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
        "h:1:2 [6] misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-x to 5967876 bytes",
    ):
        (f,) = explain(tmp_path, line + "\n")
        assert "/dev/shm" in f.fix and "--shm-size" in f.fix, line


def test_virtual_interfaces_nccl_listed_are_named_with_the_one_to_pin(tmp_path):
    fs = explain(
        tmp_path,
        "h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.1.5<0> [1]docker0:172.17.0.1<0> [2]veth1a2b:fe80::1%veth1a2b<0>\n"
        "h:1:2 [0] include/socket.h:409 NCCL WARN Connect to 10.1.1.6<1234> failed : No route to host\n",
    )
    assert "docker0" in fs[0].detail and fs[0].fix.startswith("NCCL_SOCKET_IFNAME=eth0")


def test_ranks_in_different_collectives_are_found_from_nccls_trace(tmp_path):
    (f,) = explain(
        tmp_path,
        "a:10:10 [0] NCCL INFO AllReduce: opCount 2 sendbuff 0x1 recvbuff 0x1 count 1024 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x1\n"
        "a:11:11 [1] NCCL INFO AllReduce: opCount 2 sendbuff 0x2 recvbuff 0x2 count 512 datatype 9 op 0 root 0 comm 0xb [nranks=2] stream 0x2\n",
    )
    assert f.code == "log.nccl.collective_mismatch" and "float32" in f.detail and "bfloat16" in f.detail


def test_nccls_last_error_line_is_quoted_by_the_code_it_explains(tmp_path):
    fs = explain(
        tmp_path,
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: x.hpp:317, unhandled system error, NCCL version 2.21.5\n"
        "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
        "[rank1]: Last error:\n[rank1]: something nobody listed went wrong\n",
    )
    assert fs[0].code == "log.nccl.ncclSystemError" and "something nobody listed" in fs[0].detail


# ---- c10d endpoints and ports ----------------------------------------------------------------------


def test_store_endpoints_in_every_spelling(tmp_path):
    for text, host, port in (
        (
            "[c10d] The client socket has timed out after 60s while trying to connect to (10.0.0.1, 29500).",
            "10.0.0.1",
            "29500",
        ),
        (
            "[c10d] The client socket has timed out after 60s while trying to connect to 10.0.0.1:1234",
            "10.0.0.1",
            "1234",
        ),
        ("[c10d] The client socket has timed out after 60s while trying to connect to [::1]:29400", "::1", "29400"),
        (
            "[E socket.cpp:922] [c10d] The client socket has timed out after 1800s while trying to connect to (172.17.0.2\n, 44737).",
            "172.17.0.2",
            "44737",
        ),
    ):
        (f,) = explain(tmp_path, text + "\n")
        assert (f.data["host"], f.data["port"]) == (host, port), text
        assert f"nc -zv {host} {port}" in f.fix
    assert "--net=host" in f.fix  # the docker bridge address of the last one


def test_a_privileged_port_is_named_and_a_taken_one_too(tmp_path):
    (f,) = explain(tmp_path, "The server socket has failed to bind to [::]:98 (errno: 13 - Permission denied).\n")
    assert f.code == "log.dist.port_permission" and "below 1024" in f.detail and "above 1024" in f.fix
    (f,) = explain(
        tmp_path, "The server socket has failed to bind to 0.0.0.0:22 (errno: 98 - Address already in use).\n"
    )
    assert f.code == "log.dist.address_in_use" and "sshd" in f.detail


# ---- CANN: the reason beats the generic code --------------------------------------------------------


def test_a_catch_all_codes_reason_beats_the_acl_number_beside_it(tmp_path):
    fs = explain(
        tmp_path,
        "RuntimeError: x NPU function error: aclrtFoo(&y), error code is 207004\n"
        "EE1001: [PID: 1] 2025-07-17-08:06:53.296.370 The argument is invalid.Reason: the frobnicator was given a "
        "negative width\n",
    )
    assert fs[0].code == "log.ecode.EE1001" and "frobnicator" in fs[0].message
    assert "aclError 207004) only says that the call failed; this message says why" in fs[0].detail
    # a Reason that only echoes a failed call does not
    fs = explain(
        tmp_path,
        "RuntimeError: x NPU function error: aclrtFoo(&y), error code is 207004\n"
        "EE1001: The argument is invalid.Reason: rtGetDevMsg execute failed, reason=[driver error]\n",
    )
    assert fs[0].code == "log.acl.207004"


def test_an_unlisted_e_code_is_explained_by_canns_catalogue(tmp_path):
    (f,) = explain(
        tmp_path, "EI0016: [PID: 1] Value 9 for config hccl_buffer_size is invalid. Expected value: 1-2048.\n"
    )
    assert f.code == "log.ecode.EI0016" and "Config Error" in f.message and "error_code.json" in f.data["source"]


def test_an_hccl_result_while_creating_a_communicator_gets_the_init_advice(tmp_path):
    (f,) = explain(
        tmp_path,
        "RuntimeError: create_config:x.ts:148 HCCL function error: hcclCommInitRootInfoConfig(numRanks, "
        "&rootInfo, rank, config, &(comm->hcclComm_)), error code is 4\n",
    )
    assert "hccn_tool" in f.fix and "hcclCommInitRootInfoConfig" in f.message
    (f,) = explain(
        tmp_path, "HCCL error code 5：RuntimeError: HCCL function error: hcclCommInitRootInfoConfig(numRanks\n"
    )
    assert "HCCL_E_NOT_SUPPORT" in f.message


def test_memcpy_direction_is_read_both_ways():
    assert error_codes.memcpy_kind(3) == "device-to-device"
    assert logs._memcpy(_event("src loc type=0, dst loc type=1, kind=3", src="0", dst="1", kind="3"))[
        "memcpy_fix"
    ].startswith("The source is a host tensor")
    assert "already in device memory" in logs._memcpy(_event("", src="1", dst="1", kind="1"))["memcpy_note"]


def _event(text, **groups):
    from titan_doctor.diagnose.incidents import Event
    from titan_doctor.diagnose.log_lines import parse

    return Event("x", "", "", "", 50, False, "", parse("p", 1, text), groups)


# ---- the job the log comes from; weak signals --------------------------------------------------------


def test_a_serving_engines_oom_gets_serving_advice_and_a_trainers_training_advice(tmp_path):
    oom = (
        "RuntimeError: NPU out of memory. Tried to allocate 11.50 GiB (NPU 0; 60.97 GiB total capacity; 54.10 GiB "
        "already allocated; 54.10 GiB current active; 4.64 GiB free; 54.27 GiB reserved in total by PyTorch)"
    )
    (f,) = explain(tmp_path, f"(Worker_TP0 pid=1162) ERROR 10-10 11:32:51 [multiproc_executor.py:671] {oom}\n")
    assert "--gpu-memory-utilization" in f.fix
    (f,) = explain(tmp_path, f"[rank0]: {oom}\n")
    assert "--gpu-memory-utilization" not in f.fix and "batch size" in f.fix


def test_a_weak_signal_says_likely_and_what_confirms_it(tmp_path):
    (f,) = explain(tmp_path, "RuntimeError: DataLoader worker (pid(s) 123, 124) exited unexpectedly\n")
    assert "likely:" in f.message and "To confirm:" in f.detail


def test_a_cuda_only_package_is_blamed_only_on_an_npu_host(tmp_path):
    frame = '  File "/x/site-packages/transformer_engine/common/__init__.py", line 304, in <module>\n'
    fs = explain(tmp_path, "import torch_npu\n" + frame)
    assert fs[0].code == "log.host.cuda_package_on_npu" and "pip uninstall transformer-engine" in fs[0].fix
    assert all(f.code != "log.host.cuda_package_on_npu" for f in explain(tmp_path, frame))


# ---- the honest unknown -------------------------------------------------------------------------------


def test_an_unknown_exception_names_the_users_frame_and_its_family(tmp_path):
    (f,) = explain(
        tmp_path,
        "Traceback (most recent call last):\n"
        '  File "/home/me/train.py", line 41, in main\n    run()\n'
        '  File "/usr/lib/python3.10/site-packages/lib/x.py", line 9, in run\n    go()\n'
        "PermissionError: [Errno 13] Permission denied: '/data/ckpt/step-100'\n",
    )
    assert "/home/me/train.py:41 in main" in f.detail and f.data["family"] == "permission"


def test_a_log_without_exceptions_is_explained_by_its_error_line_and_advice(tmp_path):
    (f,) = explain(
        tmp_path,
        "[WARNING] DEVICE(1,f,python):2023 [x.cc:776] Dump] Frob error may be caused by a slow widget.\n"
        "[WARNING] DEVICE(1,f,python):2023 [x.cc:778] Dump] Suggestion:\n"
        "[WARNING] DEVICE(1,f,python):2023 [x.cc:779] Dump]     1) Set widget_speed=fast and try again.\n",
    )
    assert f.code == "log.exception" and "slow widget" in f.message
    assert f.fix.startswith("What the log itself suggests: Set widget_speed=fast and try again.")


# ---- torchtitan / torchtitan-npu runs --------------------------------------------------------------------


def test_torchtitan_logger_lines_name_rank_and_time(tmp_path):
    (f, *_) = explain(
        tmp_path,
        "[rank0]:[titan] 2025-06-01 10:00:00,001 - root - INFO - step:  10  loss:  7.1\n"
        "[rank1]:[titan] 2025-06-01 10:00:05,002 - root - ERROR - training failed\n"
        "[rank1]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity "
        "of 79.10 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.00 GiB memory in "
        "use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 7.00 GiB is reserved by PyTorch but "
        "unallocated.\n",
    )
    assert f.code == "log.oom.cuda" and f.data["rank"] == 1 and f.data["device"] == 1


# ---- classes from the fourth fresh batch (stop 25), on lines written the way each source prints ----


def test_an_exception_raised_without_a_message_is_the_root(tmp_path):
    text = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/dist-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 634, in run\n'
        "    raise RendezvousClosedError()\n"
        "torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n"
    )
    (f,) = explain(tmp_path, text)
    assert f.code == "log.dist.rendezvous_closed" and f.data["family"] == "rendezvous"
    assert "--rdzv-id" in f.fix


def test_an_exception_quoted_in_prose_of_another_script_is_extracted(tmp_path):
    (f,) = explain(tmp_path, "训练时出现AttributeError: 'Parameter' object has no attribute 'main_grad'的报错\n")
    assert f.code == "log.megatron.main_grad_missing" and "gradient-accumulation-fusion" in f.fix


def test_an_errno_text_names_the_family_and_an_io_error_on_write_is_the_disk(tmp_path):
    (f,) = explain(tmp_path, "RuntimeError: write(): fd 29 failed with Input/output error\n")
    assert f.data["family"] == "host_disk" and "df -h" in f.fix
    (g,) = explain(tmp_path, "OSError: read of /dev/davinci0 failed with Input/output error\n")
    assert g.data["family"] == "hardware"


def test_an_e_code_with_its_own_reason_outranks_the_hccl_return_code(tmp_path):
    text = (
        "[rank0]: RuntimeError: createHCCLComm:compiler_depend.ts:1479 HCCL function error: HcclGetRootInfo(&hcclID), error code is 11\n"
        "[rank0]: EJ0003: [PID: 159] 2025-03-26-17:01:02.816.428 Failed to bind the IP port. Reason: The IP address and port have been bound already.\n"
    )
    found = explain(tmp_path, text)
    # the Reason's own words are HCCL's port-bound row, more specific than EJ0003's generic meaning
    assert found[0].code == "log.ascend.hccl_port_bound" and found[0].data["family"] == "port_in_use"
    assert "E-code EJ0003" in found[0].detail
    assert "ss -ltnp" in found[0].fix and "HCCL_IF_BASE_PORT" in found[0].fix
    assert "HCCL_NPU_SOCKET_PORT_RANGE=auto" in found[0].fix
    assert any(f.code == "log.hccl.result" for f in found[1:])


def test_a_parameter_check_leads_the_fix_with_the_rule_it_printed(tmp_path):
    line = (
        "[PID: 379] 2026-06-12-08:41:39.800.815 AclNN_Parameter_Error(EZ1001): when weight's dtype is [int4], "
        "antiquantGroupSize should be 128 or 64, but actual antiquantGroupSize is [256].\n"
    )
    (f,) = explain(tmp_path, line)
    assert f.fix.startswith(
        "The check that failed says: when weight's dtype is [int4], antiquantGroupSize should be 128 or 64"
    )
    assert "(but actual antiquantGroupSize is [256])" in f.fix


def test_a_dcp_key_that_is_a_buffer_or_a_compiled_model_gets_its_own_fix(tmp_path):
    (f,) = explain(tmp_path, "RuntimeError: Missing key in checkpoint state_dict: model.freqs_cis.\n")
    assert "persistent=False" in f.fix and "'freqs_cis' is a buffer" in f.detail
    text = "# ./run_train.sh --training.compile=True\nRuntimeError: Missing key in checkpoint state_dict: model.layers.0.attention.wq.weight.\n"
    (g,) = explain(tmp_path, text)
    assert g.fix.startswith("With torch.compile") and "_orig_mod" in g.detail
    (h,) = explain(
        tmp_path, "RuntimeError: Missing key in checkpoint state_dict: model.layers.0.attention.wq.weight.\n"
    )
    assert "torch.compile" not in h.fix  # no compile in the log: no compile advice


def test_an_out_of_memory_message_in_a_short_form_and_an_impossible_size(tmp_path):
    (f,) = explain(tmp_path, "RuntimeError: NPU out of memory. Tried to allocate more than 1EB memory\n")
    assert f.code == "log.oom.device" and "more than any NPU has" in f.detail and "shapes" in f.fix
    (g,) = explain(tmp_path, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert g.code == "log.oom.device" and "2.00 GiB" in g.detail and "batch size" in g.fix


def test_a_missing_compiled_extension_points_at_the_source_tree(tmp_path):
    (f,) = explain(tmp_path, "ModuleNotFoundError: No module named 'torch_npu._C'\n")
    assert f.code == "log.import.compiled_extension_missing" and "another directory" in f.fix
    assert "torch_npu._C" in f.detail


def test_aclnn_tiling_is_the_root_only_when_no_e_code_says_more(tmp_path):
    chain = "       Check NnopbaseExecutorTilingAndUpdateBinInfo(executor) failed\n"
    (f, *_) = explain(
        tmp_path,
        "EZ9999[PID: 1] 2026-01-16-12:48:43.268.275 AclNN_Inner_Error(EZ9999):  Op MoeDistributeDispatchV2 not support "
        "soc version ascend910b.\n        TraceBack (most recent call last):\n       Check soc version failed!\n"
        + chain,
    )
    assert f.code == "log.ecode.EZ9999"
    (g, *_) = explain(
        tmp_path, "ERROR [executor.py:880]        Check NnopbaseExecutorDoTiling(executor) failed\n" + chain
    )
    assert g.code == "log.aclnn.tiling_failed" and "expert parallel" in g.fix


# ---- classes from the fifth and sixth fresh batches (stop 25) ----------------------------------------


def test_a_missing_cann_symbol_is_a_cann_mismatch_and_a_torch_symbol_is_not(tmp_path):
    (f,) = explain(tmp_path, "undefined symbol: MsprofSysCycleTime\n")
    assert f.code == "log.import.undefined_cann_symbol" and "CANN" in f.detail and "torch_npu" in f.fix
    (g,) = explain(tmp_path, "ImportError: /x/libtorch_npu.so: undefined symbol: _ZN5torch10ValueErrorC1EPKcz\n")
    assert g.code == "log.import.undefined_symbol"


def test_a_cann_dtype_name_is_decoded_with_the_cast_to_make(tmp_path):
    (f,) = explain(tmp_path, "RuntimeError: Tensor self not implemented for DT_UINT64\n")
    assert f.code == "log.dtype.cann_dt_unsupported" and "torch.uint64" in f.detail and "int64" in f.fix
    (g,) = explain(tmp_path, "RuntimeError: Tensor x not implemented for DT_DOUBLE\n")
    assert "float32" in g.fix


def test_a_shared_memory_object_that_cannot_be_opened_is_the_open_files_limit_first(tmp_path):
    (f,) = explain(tmp_path, "RuntimeError: unable to open shared memory object </torch_1_2> in read-write mode\n")
    assert f.code == "log.host.shm_open" and "limit of open files" in f.detail
    assert "ulimit -n" in f.fix and "file_system" in f.fix and f.message.startswith("root cause: likely:")


def test_the_kernel_oom_killer_line_is_host_ram(tmp_path):
    line = "[856341.770960] Out of memory: Killed process 410126 (python) total-vm:79905000kB, anon-rss:22957108kB, file-rss:72036kB\n"
    (f,) = explain(tmp_path, line)
    assert f.code == "log.host.oom_killer_line" and f.data["family"] == "host_ram"
    assert "410126 (python)" in f.detail and "21.89 GiB" in f.detail and "swap" in f.fix


def test_a_catch_all_code_takes_the_family_of_its_reason(tmp_path):
    line = "EE1001: [PID: 1] 2025-04-29-08:20:47.065.474 The argument is invalid.Reason: Set visible device failed, invalid device=1, input visible devices:1\n"
    (f,) = explain(tmp_path, line)
    assert f.code == "log.ecode.EE1001" and "ASCEND_RT_VISIBLE_DEVICES" in f.detail
    assert "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1" in f.fix


def test_a_setting_named_under_the_code_leads_the_fix(tmp_path):
    text = (
        "[PID: 1035] 2026-09-16-11:00:43.191.752 Execution_Error(EZ1008): Failed to execute operator MoeDistributeDispatchV2_4507. "
        "Reason: Failed to execute tiling function.\n"
        "        TraceBack (most recent call last):\n"
        "        HCCL_BUFFSIZE_EP is too SMALL, maxBs = 64, h = 6144, NEEDED = 600MB, HCCL_BUFFSIZE=256MB.\n"
    )
    (f,) = explain(tmp_path, text)
    assert f.fix.startswith("The check names HCCL_BUFFSIZE_EP: set HCCL_BUFFSIZE as it asks")
    assert "name the setting at fault: HCCL_BUFFSIZE_EP is too SMALL" in f.detail


def test_graph_mode_in_the_log_turns_a_generic_launch_failure_into_an_eager_check(tmp_path):
    text = (
        '  File "/env/lib/python3.11/site-packages/torch_npu/npu/graphs.py", line 75, in graph_task_update_end\n'
        "EZ9903: [PID: 67556] 2025-09-02-15:23:31.178.230 rtKernelLaunchWithHandleV2 failed: 207000\n"
    )
    (f, *_) = explain(tmp_path, text)
    assert "--enforce-eager" in f.fix and "contiguous" in f.fix and "graph mode in use" in f.detail
    (g, *_) = explain(tmp_path, text.splitlines(True)[1])
    assert "--enforce-eager" not in g.fix


def test_nccl_cuda_failure_texts_and_remote_errors_say_what_to_change(tmp_path):
    (f,) = explain(
        tmp_path, "host:1:2 [0] NCCL WARN Cuda failure 217 'peer access is not supported between these two devices'\n"
    )
    assert f.fix.startswith("export NCCL_P2P_DISABLE=1")
    (g,) = explain(tmp_path, "host:1:2 [0] NCCL WARN Cuda failure 'something else'\n")
    assert "{cuda" not in g.fix + g.detail and g.fix.startswith("Rerun with CUDA_LAUNCH_BLOCKING=1")


def test_ray_resources_zero_world_size_and_moved_npu_apis(tmp_path):
    (f,) = explain(
        tmp_path, "ValueError: Current node has no NPU available. current_node_resource={'CPU': 192.0, 'GPU': 8.0}\n"
    )
    assert f.code == "log.ray.no_accelerator_resource" and "--resources" in f.fix and "'GPU'" in f.detail
    line = "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a DP world size of 32 but the current world size is 128.\n"
    (g,) = explain(tmp_path, line)
    assert g.code == "log.deepspeed.zero_world_size_changed" and "zero_to_fp32" in g.fix and "32" in g.detail
    (h, *_) = explain(tmp_path, "AttributeError: module 'torch_npu.npu' has no attribute 'profile'\n")
    assert "torch_npu.profiler.profile" in h.fix


def test_an_op_the_chip_lacks_is_named_in_the_fix(tmp_path):
    line = "EZ9999[PID: 1] 2026-01-16-12:48:43.268.275 AclNN_Inner_Error(EZ9999):  Op MoeDistributeDispatchV2 not support soc version ascend910b.\n"
    (f, *_) = explain(tmp_path, line)
    assert f.fix.startswith("MoeDistributeDispatchV2 has no kernel for ascend910b")


# ---- classes from the seventh fresh batch (stop 25) -----------------------------------------------


def test_a_line_that_names_a_family_in_words_beats_no_finding(tmp_path):
    text = (
        "(raylet) store_runner.cc:83: System memory request exceeds memory available in /dev/shm. The request is "
        "for 10200547328 bytes, and the amount available is 9663676416 bytes.\n"
    )
    (f,) = explain(tmp_path, "starting\n" + text)
    assert f.code == "log.exception" and f.data["family"] == "host_shm" and f.line == 2
    assert "--shm-size" in f.fix and "likely" in f.message
    (g,) = explain(tmp_path, "all good\nstep 3 loss 2.1\n")
    assert g.code == "log.none"


def test_sigkill_spelled_by_other_launchers_is_host_ram(tmp_path):
    for line in ("exits with return code = -9", "subprocess died with <Signals.SIGKILL: 9>"):
        (f,) = explain(tmp_path, line + "\n")
        assert f.code == "log.dist.worker_killed" and "offload" in f.fix, line


def test_runtime_lookups_and_builds_that_name_two_versions(tmp_path):
    (f,) = explain(tmp_path, "RuntimeError: Failed to find function HcclCommInitRootInfoConfig\n")
    assert f.code == "log.torch_npu.cann_function_missing" and "CANN" in f.detail
    line = (
        "Exception: >- DeepSpeed Op Builder: Installed CUDA version 12.0 does not match the version torch was "
        "compiled with 11.8, unable to compile cuda/cpp extensions without a matching cuda version.\n"
    )
    (g,) = explain(tmp_path, line)
    assert g.code == "log.deepspeed.cuda_version_mismatch" and "CUDA 11.8 toolkit" in g.fix


def test_gloo_connect_to_a_loopback_address_and_hccl_device_ip(tmp_path):
    line = "  what():  [/work/third_party/gloo/gloo/transport/tcp/pair.cc:724] connect [127.0.1.1]:3210: Connection refused\n"
    (f,) = explain(tmp_path, line)
    assert f.code == "log.gloo.connect_failed" and "127.0.1.1:3210" in f.detail and "GLOO_SOCKET_IFNAME" in f.fix
    (g,) = explain(tmp_path, "[RanktablCheck] 'device ip' is not set correctly, must be set when multi Server\n")
    assert g.code == "log.hccl.device_ip_not_set" and "/etc/hccn.conf" in g.fix


def test_torchrun_error_files_root_the_rank_that_raised_not_the_peer_that_saw_it(tmp_path):
    """torchrun's per-rank error.json: rank 0 only saw rank 1 go (gloo's 'Connection closed by
    peer'); rank 1 raised its own error, which no signature knows. Rank 1's error is the root."""
    import json

    def write(rank, message):
        d = tmp_path / "logs" / "run_x" / "attempt_0" / str(rank)
        d.mkdir(parents=True)
        stack = (
            f'Traceback (most recent call last):\n  File "/work/train.py", line 160, in _train\n    step()\n{message}\n'
        )
        body = {"message": {"message": message, "extraInfo": {"py_callstack": stack, "timestamp": "1796187787"}}}
        (d / "error.json").write_text(json.dumps(body))

    write(
        0,
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:55978",
    )
    write(1, "RuntimeError: the loss went negative in my own check at step 2")
    found = logs.explain([tmp_path / "logs"])
    assert found[0].code == "log.exception" and found[0].data["rank"] == 1
    assert "loss went negative" in found[0].message and "failing rank raised" in found[0].detail
    assert any("consequence" in f.message and f.data["rank"] == 0 for f in found[1:])


# ---- classes from the eighth fresh batch (stop 25) -------------------------------------------------


def test_signal_exit_codes_sigbus_is_shared_memory_and_sigkill_without_a_colon(tmp_path):
    (f,) = explain(tmp_path, "[launch.py:315:sigkill_handler] exits with return code = -7\n")
    assert f.code == "log.dist.worker_bus_error" and "--shm-size" in f.fix
    (g,) = explain(tmp_path, "ERROR:torch.distributed.elastic: failed (exitcode -9) local_rank: 0\n")
    assert g.code == "log.dist.worker_killed"


def test_mismatched_collectives_tp_divisibility_and_the_driver_library(tmp_path):
    line = "init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and around rank 39.\n"
    (f,) = explain(tmp_path, line)
    assert f.code == "log.nccl.mismatched_collective" and "rank 39" in f.detail and "same collectives" in f.fix
    (g,) = explain(
        tmp_path, "ValueError: Total number of attention heads (40) must be divisible by tensor parallel size (6).\n"
    )
    assert g.code == "log.config.heads_not_divisible_by_tp" and "divides 40" in g.fix
    (h,) = explain(tmp_path, "gpustack_runtime.detector.pydcmi.DCMIError_LibraryNotFound: Library Not Found\n")
    assert h.code == "log.ascend.dcmi_library_missing" and "/usr/local/dcmi" in h.fix


def test_shm_open_refused_is_permissions_not_size(tmp_path):
    (f, *_) = explain(
        tmp_path, "node08:1:2 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : Permission denied\n"
    )
    assert "ls -ld /dev/shm" in f.fix and "refused, not out of room" in f.detail
    (g, *_) = explain(
        tmp_path, "node08:1:2 [0] include/shm.h:27 NCCL WARN Call to posix_fallocate failed : No space left on device\n"
    )
    assert "--shm-size=16g" in g.fix and "ls -ld" not in g.fix


def test_a_serving_engine_anywhere_in_the_log_gets_the_serving_oom_advice(tmp_path):
    oom = (
        "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.96 GiB total capacity; 55.91 GiB "
        "already allocated; 55.91 GiB current active; 1.80 GiB free; 58.73 GiB reserved in total by PyTorch)\n"
    )
    (f, *_) = explain(tmp_path, "INFO vllm serve Qwen/Qwen3 --gpu-memory-utilization 0.95\n" + "x\n" * 60 + oom)
    assert "--gpu-memory-utilization" in f.fix
    (g, *_) = explain(tmp_path, oom)
    assert "--gpu-memory-utilization" not in g.fix
