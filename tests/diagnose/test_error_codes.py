"""Decoding torch_npu / CANN error codes by their structure (rules/error_codes.toml)."""

import pytest

import titan_knowledge as knowledge
from titan_doctor.diagnose import error_codes as ec


def codes(line):
    return {c.code: c for c in ec.find_codes(line)}


def test_every_code_in_the_issue_has_meaning_cause_and_fix():
    for n in (107002, 107020, 507001, 507014, 507033, 507046, 507048, 507899, 500001):
        c = ec.decode_acl(n)
        assert c.title.startswith(f"{n} ACL_ERROR_") and c.cause and c.fix and c.source, n
    assert "set_device" in ec.decode_acl(107002).fix
    assert ec.decode_acl(507046).consequence and not ec.decode_acl(507015).consequence


def test_an_unlisted_acl_code_is_decoded_by_class_and_module():
    c = ec.decode_acl(207999)  # class 2 (resource), module 07 (runtime), not in any header
    assert c.title == "207999 unlisted code: a runtime error"
    assert "2xxxxx = resource error" in c.cause and c.rank == 30
    c = ec.decode_acl(545001)  # a GE code from the headers
    assert c.title.startswith("545001 ACL_ERROR_GE_LOAD_MODEL") and "5xxxxx = internal" in c.cause


@pytest.mark.parametrize(
    "code,module,internal",
    [
        ("EK1234", "profiling", False),
        ("EE9999", "runtime", True),
        ("E19999", "GE (graph engine)", True),
        ("EP0001", "dump", False),
        ("E90003", "component '9'", False),
    ],
)
def test_e_codes_decode_by_component(code, module, internal):
    c = ec.decode_ecode(code)
    assert c.id == f"ecode.{code}" and module in c.title + c.cause
    assert ("internal" in c.title) == internal


def test_the_code_a_line_shows_is_the_code_reported():
    got = codes("EH9999: [PID: 961] 2025-09-07-01:11:09.333.567 synchronize stream failed, runtime result = 507048")
    assert set(got) == {"EH9999", "507048"} and "EI9999" not in str(got)
    assert got["EH9999"].message == "synchronize stream failed, runtime result = 507048"
    assert got["EH9999"].title == "EH9999: ACL internal error"


@pytest.mark.parametrize(
    "line,expect",
    [
        ("Get_Socket_Timeout(EI0006): Getting socket times out.", {"EI0006"}),
        ("detail:EZ1001: The param dtype not implemented for DT_BFLOAT16", {"EZ1001"}),
        ("EZ9999[PID: 1] 2025-12-10-10:52:09.632.838 AclNN_Inner_Error(EZ9999): x", {"EZ9999"}),
        ("[rank1]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog", set()),  # glog, not a code
        ("pc start: 0xE12345 at /path/E123456/x", set()),
        (
            "[ERROR] 2025-04-29-18:46:11 (PID:1066924, Device:1, RankID:-1) ERR00100 PTA call acl api failed",
            {"ERR00100"},
        ),
        ("OPS function error: HcclAllreduce, error code is 6", {"6"}),
        ("[ERROR] aclrtSetDevice(deviceId) failed: 507033 (/x/main.cpp:98)", {"507033"}),
        ("[ERROR]  acl set device 0 failed, errorCode = 507033", {"507033"}),  # the ACL samples' spelling
        ("step 10 loss 2.3 error 0.5", set()),
    ],
)
def test_find_codes(line, expect):
    assert set(codes(line)) == expect


def test_torch_npu_err_codes_decode_submodule_and_type():
    c = ec.decode_pta("02", 5)
    assert c.code == "ERR02005" and c.title == "ERR02005: torch_npu DIST internal error" and c.rank == ec.RANK_PTA_OTHER
    w = ec.decode_pta("02", 200)
    assert w.title.endswith("DIST call hccl api failed") and w.rank == ec.RANK_PTA_WRAPPER
    assert "code printed with it" in w.cause


def test_hccl_results_name_the_enum():
    assert "HCCL_E_TCP_CONNECT" in ec.decode_hccl(11).title and "HCCL_IF_IP" in ec.decode_hccl(11).fix
    assert ec.decode_hccl(9).consequence


def test_error_codes_file_entries_need_their_keys(tmp_path, monkeypatch):
    (tmp_path / "error_codes.toml").write_text('[[ecode]]\ncode = "EI0001"\ntitle = "x"\nsource = "y"\n')
    monkeypatch.setattr(knowledge, "rules_dir", lambda: tmp_path)
    knowledge.load.cache_clear()
    try:
        with pytest.raises(
            knowledge.KnowledgeError,
            match=r"error_codes.toml \[\[ecode\]\]: entry 0 \(EI0001\) "
            r"lacks cause, fix",
        ):
            knowledge.load("error_codes")
    finally:
        knowledge.load.cache_clear()


def test_source_keys_expand_to_their_citation():
    assert knowledge.expand_source("acl-rt; https://x/1", {"acl-rt": "the header"}) == "the header; https://x/1"
    assert knowledge.expand_source("https://x/2", {"acl-rt": "the header"}) == "https://x/2"
    assert (
        "rt_error_codes.h" in ec.decode_acl(507033).source and "vllm-ascend/issues/4284" in ec.decode_acl(507033).source
    )
