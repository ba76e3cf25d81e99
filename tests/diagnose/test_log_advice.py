"""What a runtime prints about its own failure: the advice under the root line joins the fix
(CANN's Solution, HCCL's numbered reasons with the command under them), and a plog line's
message is read past its whole prefix of bracketed fields."""

from titan_doctor.diagnose import logs, tracebacks

from .conftest import log_root


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


def test_a_remedy_stated_in_the_error_messages_own_sentence_is_kept_whole():
    said = tracebacks.remedy
    # a clause after a comma is itself the remedy; the exception's name is not part of it
    assert (
        said(
            "torch.distributed.DistStoreError: use_libuv was requested but PyTorch was built without libuv support, "
            "run with USE_LIBUV=0 to disable it."
        )
        == "run with USE_LIBUV=0 to disable it."
    )
    # the sentence that holds the remedy, not the ones before or after it
    assert (
        said("RuntimeError: X was called with fusion set. To use fusion you must install APEX. For example: pip x")
        == "To use fusion you must install APEX."
    )
    assert said("The easiest method is to set these DeepSpeed config values to 'auto'.").endswith("to 'auto'.")
    # a tip for more output is not a remedy; nor is a message that states none
    assert said("NCCL error in: NCCLUtils.cpp:93, unhandled cuda error (run with NCCL_DEBUG=INFO for details)") == ""
    assert said("RuntimeError: CUDA error: invalid device ordinal") == ""
    assert said("you must not call this twice") == ""


def test_the_remedy_under_an_unknown_error_joins_its_fix_and_a_warning_line_does_not(tmp_path):
    f = log_root(
        tmp_path,
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "ValueError: Please correct the following frobnicator values that mismatch the widget values:\n"
        "- frob size=32 vs widget size=4\n"
        "The easiest method is to set these frobnicator values to 'auto'.\n"
        "FutureWarning: please use widget.v2 instead\n",
    )
    assert f.code == "log.exception"
    assert f.fix.startswith(
        "What the log itself suggests: Please correct the following frobnicator values that mismatch the widget "
        "values; The easiest method is to set these frobnicator values to 'auto'. Read the traceback"
    )
    assert "widget.v2" not in f.fix
