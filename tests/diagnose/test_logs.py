"""The crash-log explainer on logs made of real error lines (sources in
rules/log_signatures.toml)."""

import json

import pytest

from titan_doctor.diagnose import logs
from titan_doctor.findings import Status

from .conftest import run_cli

EJ0001_LOG = """\
[rank3]: Traceback (most recent call last):
[rank3]:   File "/home/u/train.py", line 14, in <module>
[rank3]:     dist.barrier()
[rank3]: RuntimeError: [ERROR] HCCL error in: torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:64
[rank3]: [ERROR] 2024-05-21-11:57:54 (PID:927000, Device:3, RankID:3) ERR02200 DIST call hccl api failed.
[rank3]: EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. Reason: Maybe the last training process is running.
[rank3]:         Solution: Wait for 10s after killing the last training process and try again.
"""

EI0006_LOG = """\
[rank1]:     work = group.allreduce([tensor], opts)
[rank1]: RuntimeError: InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 OPS function error: HcclAllreduce, error code is 6
[rank1]: [ERROR] 2025-04-08-18:07:20 (PID:1292363, Device:1, RankID:1) ERR01100 OPS call acl api failed.
[rank1]: EI0006: [PID: 1292363] 2025-04-08-18:07:20.444.436 Getting socket times out. Reason: Remote Rank did not send the data in time. Please check the reason for the rank being stuck
"""

EI0002_LOG = """\
[ERROR] 2025-10-11-15:09:34 (PID:2969, Device:0, RankID:101) ERR00100 PTA call acl api failed.
EI0002: [PID: 2969] 2025-10-11-15:09:34.713.335 The wait execution of the Notify register times out. Reason: The Notify register has not received the Notify record from remote rank: [24].
RuntimeError: ACL stream synchronize failed.
EI9999: Inner Error!
EI9999: 2024-10-21-10:42:00.358.410  The error from device(chipId:3, dieId:0), serial number is 9, hccl fftsplus task timeout occurred during task execution
"""

NPU_OOM = (
    "RuntimeError: NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB total capacity; "
    "49.47 GiB already allocated; 49.47 GiB current active; 1.32 GiB free; 57.55 GiB reserved in total "
    "by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation."
)
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity "
    "of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB "
    "memory in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved "
    "by PyTorch but unallocated."
)


def explain(tmp_path, text, name="train.log"):
    p = tmp_path / name
    p.write_text(text)
    return logs.explain([p])


def test_ej0001_is_root_cause_before_its_wrappers(tmp_path):
    fs = explain(tmp_path, EJ0001_LOG)
    ids = [f.data["signature"] for f in fs]
    assert ids == ["ecode.EJ0001", "torch_npu.ERR02200"]
    root = fs[0]
    assert root.message.startswith("root cause: EJ0001: HCCP process init failed") and root.line == 6
    assert root.data["rank"] == 3 and root.data["device"] == 3  # from torch_npu's (PID, Device:3, RankID:3)
    assert "train.log:6 (rank 3, device 3)" in root.message and "kill" in root.fix
    assert "DIST" in fs[1].message and "call hccl api failed" in fs[1].message


def test_ei0006_with_err01100(tmp_path):
    fs = explain(tmp_path, EI0006_LOG)
    assert fs[0].data["signature"] == "ecode.EI0006" and fs[0].data["rank"] == 1 and fs[0].line == 4
    assert fs[0].data["device"] == 1 and "HCCL_CONNECT_TIMEOUT" in fs[0].fix
    ids = [f.data["signature"] for f in fs]
    assert "torch_npu.ERR01100" in ids and "hccl.result" in ids  # "HcclAllreduce, error code is 6"


def test_hccl_error_code_is_named(tmp_path):
    line = (
        "[rank1]: RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:102 HCCL function "
        "error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 15\n"
    )
    (f,) = explain(tmp_path, line)
    assert f.data["code"] == "15" and "HCCL_E_RUNTIME" in f.message and f.data["rank"] == 1


def test_ei0002_ranks_above_ei9999_and_err00100(tmp_path):
    fs = explain(tmp_path, EI0002_LOG)
    assert [f.data["signature"] for f in fs] == ["ecode.EI0002", "ecode.EI9999", "torch_npu.ERR00100"]
    assert fs[0].data["rank"] == 101 and fs[0].data["device"] == 0  # from the ERR line of the same incident
    ei9999 = fs[1]
    assert ei9999.line == 4 and "fftsplus task timeout" in ei9999.detail


def test_npu_oom_figures(tmp_path):
    (f,) = explain(tmp_path, NPU_OOM + "\n")
    d = f.data
    assert d["dev"] == "3" and d["requested"] == pytest.approx(5.03 * 2**30)
    assert d["short_by"] == pytest.approx((5.03 - 1.32) * 2**30)
    assert "short by 3.71 GiB" in f.detail
    assert "49.47 GiB of 60.96 GiB already allocated (81%)" in f.detail
    assert "8.08 GiB reserved but unused" in f.detail


def test_cuda_oom_figures(tmp_path):
    (f,) = explain(tmp_path, CUDA_OOM + "\n")
    assert f.data["signature"] == "oom.cuda"
    assert "short by 10.94 MiB" in f.detail and f.data["reserved"] == pytest.approx((22.90 * 1024 + 194.87) * 2**20)


@pytest.mark.parametrize(
    "line,sig",
    [
        ("ImportError: libhccl.so: cannot open shared object file: No such file or directory", "import.cann_missing"),
        (
            "ImportError: /usr/local/python3.10.14/lib/python3.10/site-packages/torch_npu/lib/libtorch_npu.so: undefined "
            "symbol: _ZN3atb15CreateOperationINS_5infer14GroupTopkParamEEEiRKT_PPNS_9OperationE",
            "import.nnal",
        ),
        (
            "ImportError: /usr/local/lib/python3.11/site-packages/torch_npu/lib/libtorch_npu.so: undefined symbol: "
            "_ZNK3c1010TensorImpl20is_contiguous_customENS_12MemoryFormatE",
            "import.undefined_symbol",
        ),
        (
            "RuntimeError: Two accelerators cannot be used at the same time in PyTorch: npu and cuda. You can install the "
            "cpu version of PyTorch to use your npu device",
            "import.two_accelerators",
        ),
        (
            "RuntimeError: Failed to load the backend extension: torch_npu. You can disable extension auto-loading with "
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0.",
            "import.autoload",
        ),
        (
            "RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If you "
            "are running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map your "
            "storages to the CPU.",
            "ckpt.cuda_deserialize",
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
            "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
            "dist.address_in_use",
        ),
        ("RuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo", "dist.premul_sum_gloo"),
        ("RuntimeError: Distributed package doesn't have NCCL built in", "dist.no_nccl"),
    ],
)
def test_single_line_signatures(tmp_path, line, sig):
    fs = explain(tmp_path, "some preamble\n" + line + "\n")
    assert fs[0].data["signature"] == sig and fs[0].line == 2 and fs[0].status is Status.FAIL


@pytest.mark.parametrize(
    "line,prefix,origin",
    [
        (
            "RuntimeError: Error(s) in loading state_dict for Transformer:\n\tMissing key(s) in state_dict: "
            '"layers.0.attention.wq.weight", "layers.0.attention.wk.weight". Unexpected key(s) in state_dict: '
            '"_orig_mod.layers.0.attention.wq.weight", "_orig_mod.layers.0.attention.wk.weight".',
            "_orig_mod.",
            "torch.compile",
        ),
        (
            '\tUnexpected key(s) in state_dict: "module.layers.0.feed_forward.w1.weight".',
            "module.",
            "DistributedDataParallel",
        ),
        ("KeyError: '_fsdp_wrapped_module.layers.0.attention_norm.weight'", "_fsdp_wrapped_module.", "FSDP1"),
    ],
)
def test_state_dict_prefixes(tmp_path, line, prefix, origin):
    fs = explain(tmp_path, line + "\n")
    f = fs[0]
    assert prefix in f.data["prefixes"] and origin in f.detail
    assert "consume_prefix_in_state_dict_if_present" in f.fix and prefix in f.fix


def test_missing_keys_without_prefix_blames_the_layer_count(tmp_path):
    (f,) = explain(tmp_path, '\tMissing key(s) in state_dict: "layers.31.attention.wq.weight".\n')
    assert f.data["prefixes"] == [] and "n_layers differs" in f.detail and "model expects layer 31" in f.detail


def test_store_ping_answered_by_another_service(tmp_path):
    (f,) = explain(
        tmp_path,
        "torch.distributed.DistNetworkError: Ping failed, invalid value returned from server. "
        "Expected: 9168, Got: 1347703880\n",
    )
    assert f.data["signature"] == "dist.not_a_store" and f.data["answer"] == "HTTP"
    assert "it answered 'HTTP'" in f.detail


def test_several_rank_files_first_occurrence_and_ranks(tmp_path):
    a = tmp_path / "rank0.log"
    b = tmp_path / "rank1.log"
    a.write_text(
        "step 10 loss 2.1\n" + EI0006_LOG.replace("rank1", "rank0").replace("Device:1, RankID:1", "Device:0, RankID:0")
    )
    b.write_text(EI0006_LOG)
    fs = logs.explain([a, b])
    ei = fs[0]
    assert ei.data["signature"] == "ecode.EI0006" and ei.data["ranks"] == [0, 1] and ei.data["count"] == 2
    assert ei.path == str(a) and ei.line == 5 and ei.data["rank"] == 0  # same time on both: file order


def test_torchrun_error_json(tmp_path):
    d = tmp_path / "attempt_0" / "2"
    d.mkdir(parents=True)
    err = {
        "message": {
            "message": "RuntimeError: Distributed package doesn't have NCCL built in",
            "extraInfo": {
                "py_callstack": 'Traceback (most recent call last):\n  File "train.py", line 3\n'
                "RuntimeError: Distributed package doesn't have NCCL built in",
                "timestamp": "1700000000",
            },
        }
    }
    (d / "error.json").write_text(json.dumps(err))
    fs = logs.explain([d / "error.json"])
    assert fs[0].data["signature"] == "dist.no_nccl" and fs[0].data["rank"] == 2
    assert fs[0].data["count"] == 1  # message and stack print one error


def test_a_log_folder_is_scanned_for_every_rank(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "rank0.log").write_text("step 1\n" + NPU_OOM.replace("NPU 3", "NPU 0") + "\n")
    (tmp_path / "job" / "rank1.log").write_text(EJ0001_LOG.replace("rank3", "rank1"))
    (tmp_path / "job" / "model.bin").write_bytes(b"\x00EJ0001")  # not a log: ignored
    fs = logs.explain([tmp_path / "job"])
    assert [f.data["signature"] for f in fs][:2] == ["ecode.EJ0001", "oom.npu"]
    assert fs[0].path.endswith("rank1.log") and fs[0].data["rank"] == 1


def test_an_unknown_error_is_named_with_the_next_step_of_its_family(tmp_path):
    """Nothing known matches: the root is the exception itself (what, where, which rank), never a
    bare 'no known error' with an empty fix."""
    (f,) = explain(
        tmp_path,
        'step 1\n[rank1]: Traceback (most recent call last):\n[rank1]:   File "t.py", line 3, in main\n'
        "[rank1]: ValueError: too many values to unpack (expected 2)\n",
    )
    assert f.code == "log.exception" and f.status is Status.FAIL and f.line == 4
    assert "ValueError: too many values to unpack (expected 2)" in f.message and f.data["rank"] == 1
    assert f.data["first_exception"] == "ValueError: too many values to unpack (expected 2)"
    assert "t.py:3 in main" in f.detail and f.fix.startswith("Read the traceback")


def test_an_unknown_error_gets_the_family_its_text_suggests(tmp_path):
    (f,) = explain(
        tmp_path, "Traceback (most recent call last):\nRuntimeError: failed to connect to the parameter server\n"
    )
    assert f.data["family"] == "connection" and "likely: processes cannot reach" in f.message
    assert "nc -zv" in f.fix


def test_unknown_log_says_so(tmp_path):
    (f,) = explain(tmp_path, "step 1 loss 3.2\nstep 2 loss 3.1\nstep 3 loss 3.0\n")
    assert f.status is Status.WARN and f.message == "no known error in 1 file(s) (3 lines)"
    assert f.fix  # the generic next step, never an empty fix


def test_cli_log_exit_codes_and_json(tmp_path):
    bad = tmp_path / "bad.log"
    bad.write_text(EJ0001_LOG)
    p = run_cli("--log", str(bad), "--format", "json")
    assert p.returncode == 1, p.stderr
    rows = json.loads(p.stdout)["checks"]
    assert rows[0]["id"] == "log.ecode.EJ0001" and rows[0]["location"] == f"{bad}:6"
    assert set(rows[0]) >= {"id", "status", "title", "detail", "fix", "data"}
    good = tmp_path / "good.log"
    good.write_text("all fine\n")
    p = run_cli("--log", str(good))
    assert p.returncode == 0 and "no known error" in p.stdout
    p = run_cli("--log", str(tmp_path / "missing.log"))
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr


# ---- incidents: rank, device, time, consequence ------------------------------------------

WATCHDOG = (
    "[rank{r}]:[E{md} 10:00:0{s}.100 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
    "600020 milliseconds before timing out.\n"
)


def test_folder_of_rank_logs_names_the_rank_that_failed_first_by_time(tmp_path):
    (tmp_path / "rank0.log").write_text("step 1\n" + WATCHDOG.format(r=0, md="1206", s=5))
    (tmp_path / "rank1.log").write_text(WATCHDOG.format(r=1, md="1206", s=2))  # 3 s earlier
    (tmp_path / "rank2.log").write_text(WATCHDOG.format(r=2, md="1206", s=7))
    fs = logs.explain([tmp_path])
    assert fs[0].data["signature"] == "dist.watchdog_timeout" and fs[0].data["rank"] == 1
    assert fs[0].data["ranks"] == [0, 1, 2] and "SeqNum=8" in fs[0].detail


def test_a_peer_timeout_is_not_the_root_even_when_it_comes_first(tmp_path):
    (tmp_path / "rank0.log").write_text(EI0006_LOG.replace("rank1", "rank0").replace("RankID:1", "RankID:0"))
    (tmp_path / "rank1.log").write_text("step 3\n" + NPU_OOM.replace("NPU 3", "NPU 1") + "\n")
    fs = logs.explain([tmp_path])
    assert fs[0].data["signature"] == "oom.npu" and fs[0].data["rank"] == 1 and fs[0].data["device"] == 1
    ei = next(f for f in fs if f.data["signature"] == "ecode.EI0006")
    assert ei.data["consequence"] and "consequence of the root cause" in ei.message


def test_an_escaped_error_body_is_read_line_by_line(tmp_path):
    body = (
        'ERROR | Dispatch error: 500: {"detail":"SetDevice error code is 507033\\n[ERROR] 2025-11-19-11:14:58 '
        "(PID:356, Device:2, RankID:-1) ERR00100 PTA call acl api failed\\nE30006: 2025-11-19-11:14:58.516.606 "
        'Failed to verify the OPP\\n        Possible Cause: 1.The OPP is incorrect."}\n'
    )
    fs = explain(tmp_path, "starting\n" + body)
    assert fs[0].data["signature"] == "ecode.E30006" and fs[0].line == 2 and fs[0].data["device"] == 2
    assert "Possible Cause: 1.The OPP is incorrect." in fs[0].detail


def test_the_rank_prefix_of_a_neighbouring_line_names_an_unprefixed_cann_block(tmp_path):
    text = (
        "[ERROR] 2026-05-08-03:20:31 (PID:758, Device:4, RankID:-1) ERR00100 PTA call acl api failed\n"
        "        The error from device(chipId:4, dieId:1), serial number is 3, there is an aicore error exception\n"
        "[rank4]:[E508 03:20:31.678676591 compiler_depend.ts:1693] [Rank 4] HCCL watchdog thread terminated\n"
    )
    fs = explain(tmp_path, text)
    assert fs[0].data["signature"] == "device.kernel_fault" and fs[0].data["rank"] == 4 and fs[0].data["device"] == 4


# ---- multi-line messages --------------------------------------------------------------------


def test_missing_and_unexpected_keys_on_two_lines_are_one_verdict(tmp_path):
    text = (
        "RuntimeError: Error(s) in loading state_dict for Transformer:\n"
        '\tMissing key(s) in state_dict: "tok_embeddings.weight", "layers.0.attention.wq.weight".\n'
        '\tUnexpected key(s) in state_dict: "module.tok_embeddings.weight", "module.layers.0.attention.wq.weight".\n'
    )
    fs = explain(tmp_path, text)
    assert [f.data["signature"] for f in fs] == ["ckpt.key_mismatch"]  # one error, one finding
    (f,) = fs
    assert f.data["prefixes"] == ["module."] and "2 missing key(s) and 2 unexpected key(s)" in f.detail
    assert "'module.tok_embeddings.weight' in the checkpoint is 'tok_embeddings.weight' in the model" in f.detail
    assert (
        "No wrapper prefix" not in f.detail
        and "consume_prefix_in_state_dict_if_present(state_dict, 'module.')" in f.fix
    )


def test_size_mismatch_names_the_config_fields(tmp_path):
    rows = [
        ("tok_embeddings.weight", "32000, 4096", "32000, 5120"),
        ("layers.0.attention_norm.weight", "4096", "5120"),
        ("layers.0.attention.wq.weight", "4096, 4096", "5120, 5120"),
        ("layers.0.attention.wk.weight", "1024, 4096", "5120, 5120"),
        ("layers.0.feed_forward.w1.weight", "11008, 4096", "13824, 5120"),
    ]
    text = "".join(
        f"\tsize mismatch for {p}: copying a param with shape torch.Size([{a}]) from checkpoint, the "
        f"shape in current model is torch.Size([{b}]).\n"
        for p, a, b in rows
    )
    (f,) = explain(tmp_path, text)
    assert f.data["fields"] == {
        "d_model": {"checkpoint": 4096, "model": 5120},
        "n_kv_heads": {"checkpoint": 1024, "model": 5120},
        "ffn_hidden": {"checkpoint": 11008, "model": 13824},
    }
    assert f.data["n_params"] == 5 and "d_model=4096, n_kv_heads=1024, ffn_hidden=11008" in f.fix


def test_renamed_submodule_is_named(tmp_path):
    text = (
        'Missing key(s) in state_dict: "head.0.weight", "head.0.bias".\n'
        'Unexpected key(s) in state_dict: "classifier.0.weight", "classifier.0.bias".\n'
    )
    (f,) = explain(tmp_path, text)
    assert "'classifier' (checkpoint) -> 'head' (model)" in f.detail
    assert "k.replace('classifier.', 'head.', 1)" in f.fix


# ---- library and environment errors ---------------------------------------------------------


def test_nnal_fix_points_at_the_nnal_install_in_the_log(tmp_path):
    line = (
        "OSError: /home/u/Ascend/nnal/atb/latest/atb/cxx_abi_1/lib/libtbe_adapter.so: undefined symbol: "
        "_ZN3Mki2DlC1ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEb\n"
    )
    (f,) = explain(tmp_path, line)
    assert f.data["signature"] == "import.nnal" and f.fix.endswith("source /home/u/Ascend/nnal/atb/set_env.sh")
    assert "not a torch" not in f.detail and "Reinstalling torch or torch_npu does not fix it" in f.detail


@pytest.mark.parametrize("module,package", [("decorator", "decorator"), ("attr", "attrs"), ("yaml", "pyyaml")])
def test_missing_cann_python_dependency(tmp_path, module, package):
    (f,) = explain(tmp_path, f"ModuleNotFoundError: No module named '{module}'\n")
    assert f.data["signature"] == "import.cann_python_deps" and f.fix.startswith(f"pip install {package} ")


def test_static_tls_is_fixed_by_preloading_that_library(tmp_path):
    (f,) = explain(
        tmp_path, "OSError: /usr/lib/aarch64-linux-gnu/libgomp.so.1: cannot allocate memory in static TLS block\n"
    )
    assert f.fix.startswith("Load it first: export LD_PRELOAD=/usr/lib/aarch64-linux-gnu/libgomp.so.1:$LD_PRELOAD")


def test_cli_text_names_rank_and_device(tmp_path):
    bad = tmp_path / "bad.log"
    bad.write_text(EJ0001_LOG)
    p = run_cli("--log", str(bad))
    assert p.returncode == 1
    first = p.stdout.splitlines()[0]
    assert "root cause: EJ0001: HCCP process init failed" in first and "(rank 3, device 3)" in first
