"""The two doctor helpers added to findings.py: the summary line and the checks JSON."""

import json

from titan_doctor.findings import Finding, Status, summary_line, to_checks_json


def test_summary_line_counts_each_status():
    fs = [
        Finding("a", Status.OK, "x"),
        Finding("b", Status.WARN, "y"),
        Finding("c", Status.FAIL, "z"),
        Finding("d", Status.SKIP, "w"),
        Finding("e", Status.INFO, "v"),
    ]
    assert summary_line(fs) == "5 checks: 1 ok, 1 info, 1 warning, 1 problem, 1 skipped"
    assert summary_line(fs[:1]) == "1 check: 1 ok, 0 warnings, 0 problems"


def test_checks_json_shape():
    fs = [
        Finding("log.x", Status.FAIL, "title", detail="d", fix="f", path="a.log", line=3, data={"k": 1}),
        Finding("versions.torch", Status.OK, "torch 2.13.0"),
    ]
    doc = json.loads(to_checks_json(fs, summary="s"))
    assert doc["summary"] == "s"
    assert doc["checks"][0] == {
        "id": "log.x",
        "status": "fail",
        "title": "title",
        "detail": "d",
        "fix": "f",
        "data": {"k": 1},
        "location": "a.log:3",
    }
    assert "location" not in doc["checks"][1]
