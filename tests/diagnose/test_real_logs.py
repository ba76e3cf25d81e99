"""Every real crash log of tests/diagnose/real_logs (each posted on a public tracker; the
source is in expected.toml) gets the right root cause, rank, device and fix."""

import json

import pytest

from titan_doctor.diagnose import logs

from .conftest import run_cli
from .corpus import CORPUS, cases, judge

CASES = cases()


def _rows(target):
    return [
        {"id": f.code, "title": f.message, "detail": f.detail, "fix": f.fix, "data": f.data}
        for f in logs.explain([target])
    ]


@pytest.mark.parametrize("case", CASES, ids=[c["path"] for c in CASES])
def test_real_log_is_explained(case):
    assert judge(case, _rows(CORPUS / case["path"])) == []


def test_the_corpus_is_large_diverse_and_sourced():
    roots = {c["root"] for c in CASES}
    assert len(CASES) >= 35 and len(roots) >= 20
    assert all(c["source"].startswith("https://") for c in CASES)
    for path in CORPUS.glob("*.log"):
        assert path.read_text().startswith("# source: https://"), path


def test_judge_can_fail():
    """The checker itself: a wrong root, rank or fix is reported."""
    case = {"root": "ecode.EI0006", "cause_has": "EI0006", "fix_has": "HCCL_CONNECT_TIMEOUT", "rank": 1}
    good = [
        {"id": "log.ecode.EI0006", "title": "EI0006", "detail": "", "fix": "HCCL_CONNECT_TIMEOUT", "data": {"rank": 1}}
    ]
    assert judge(case, good) == []
    bad = [dict(good[0], data={"rank": 0}, fix="retry")]
    assert judge(case, bad) == ["fix lacks 'HCCL_CONNECT_TIMEOUT'", "rank 0, expected 1"]


def test_cli_json_on_a_folder_of_rank_logs():
    p = run_cli("--log", str(CORPUS / "folders" / "funasr_2006_per_rank"), "--format", "json")
    assert p.returncode == 1, p.stderr
    rows = json.loads(p.stdout)["checks"]
    assert rows[0]["id"] == "log.oom.cuda" and rows[0]["data"]["rank"] == 2
    assert rows[0]["location"].endswith("rank2.log:2")
    watchdog = next(r for r in rows if r["id"] == "log.dist.watchdog_timeout")
    assert "consequence of the root cause" in watchdog["title"] and watchdog["data"]["rank"] == 5
