"""What a runtime prints about its own failure: the advice under the root line joins the fix
(CANN's Solution, HCCL's numbered reasons with the command under them), and a plog line's
message is read past its whole prefix of bracketed fields."""

from titan_doctor.diagnose import logs, tracebacks


def test_the_runtimes_own_advice_ends_the_fix_without_repeating_it(tmp_path):
    p = tmp_path / "plog.log"
    p.write_text(
        "[OpRetryConnection][RecvAckTag] Recv unmatched ack  [1381978191] expect [64]\n"
        "There maybe some reasons to cause this error:\n"
        "   1. The port may have been used so we will bind error. OpRetry used port range [60000-60015]\n"
        "You may can set system reserved port to avoid this error by\n"
        "    sysctl -w net.ipv4.ip_local_reserved_ports=60000-60015\n"
        "INFO step 1 loss 2.0\n"
    )
    (f, *_) = logs.explain([p])
    ours, _, theirs = f.fix.partition(" What the log itself says to do: ")
    assert f.code == "log.ascend.hccl_op_retry_port" and ours.endswith(".")
    assert theirs.split("; ") == [
        "There maybe some reasons to cause this error",
        "The port may have been used so we will bind error. OpRetry used port range [60000-60015]",
        "You may can set system reserved port to avoid this error by.",
    ]  # its command line is left out: our fix already gives it
    assert "sysctl -w net.ipv4.ip_local_reserved_ports=60000-60015" in ours
    q = tmp_path / "none.log"
    q.write_text("Recv unmatched ack\nnothing more\n")
    assert "What the log itself" not in logs.explain([q])[0].fix


def test_a_plog_lines_message_follows_its_whole_prefix():
    cases = {
        "[ERROR] HCCL(925892,alltoall_test):2025-10-28-16:34:59.634.432 [sal.cc:501] [925892][InitGroupStage]"
        "[EnvConfig]set ifname to [abc] by HCCL_SOCKET_IFNAME, but not found": "set ifname to [abc] by "
        "HCCL_SOCKET_IFNAME, but not found",
        "[rank0]:[W609 06:57:47.8 compiler_depend.ts:877] Warning: The HCCL execution timeout": "Warning: The HCCL "
        "execution timeout",
        "[2025-03-10 20:26:36.604+08:00] [324] [mindie-server] [ERROR] [share_memory.cpp:172] : [MIE04E120407] "
        "Shared memory available is not enough.": "Shared memory available is not enough.",
        "RuntimeError: [x] is bad": "RuntimeError: [x] is bad",
        "[abc]": "[abc]",
    }
    for line, message in cases.items():
        assert tracebacks._after_prefix(line) == message, line
