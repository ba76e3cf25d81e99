"""The prefilter and the skimmer of large logs change no explanation: every signature has
needles derived from its pattern, every line of the corpora a signature matches holds one,
the texts the per-line code looks for are all keys of the skimmer, and explain() says the same
of every corpus log read line by line and skimmed (in chunks small enough to cut lines)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from titan_doctor.diagnose import incidents, log_facts, log_lines, log_prefilter, logs, signatures, tracebacks

HERE = Path(__file__).parent
CORPORA = [HERE / "real_logs", HERE / "fresh_logs"]
LOGS = [p for d in CORPORA for p in log_lines.expand([d])]


def _corpus_lines() -> list[str]:
    return [text for p in LOGS for _, text, _ in log_lines.raw_lines(p)]


def test_every_signature_has_needles():
    lacking = [s.id for s in signatures.load() if not s.needles]
    assert not lacking, f"no literal of 3+ characters every match must contain: {lacking}"


@pytest.mark.parametrize(
    "pattern,want",
    [
        ("Inplace update to x|Inference tensors y", ("ference tensors y", "place update to x")),
        (r"(?:foo|bar)baz\d+", ("baz",)),
        (r"(?:alpha|beta)+ \d", ("alpha", "beta")),
        (r"(?i:shout) quietly", (" quietly",)),
        (r"ab|c\d", None),  # one alternative has no literal of 3 characters
    ],
)
def test_needles_of_a_pattern(pattern, want):
    assert signatures.needles(pattern) == want


def test_corpus_matches_hold_needles_and_pass_the_prefilter():
    sigs = signatures.load()
    checked = 0
    for line in _corpus_lines():
        matched = [s for s in sigs if s.regex.search(line)]
        for s in matched:
            assert any(n in line for n in s.needles), (s.id, line)
        if matched or logs.error_codes.find_codes(line):
            assert log_prefilter.might_report(line), line
            checked += 1
        want, got = signatures.best_match(line), log_prefilter.best_match(line)
        assert (want and (want.sig.id, want.groups)) == (got and (got.sig.id, got.groups)), line
    assert checked > 100


def _in_text_constants(fn) -> set[str]:
    """Every string constant `fn` tests with `"..." in text`."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {
        node.left.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Constant)
        and isinstance(node.left.value, str)
        and isinstance(node.ops[0], (ast.In, ast.NotIn))
        and isinstance(node.comparators[0], ast.Name)
        and node.comparators[0].id == "text"
    }


@pytest.mark.parametrize(
    "fn,keys",
    [
        (log_facts.Facts.feed, log_facts.KEYS),
        (incidents.incidents, incidents.KEYS),
        (incidents.launcher_section, incidents.KEYS),
        (tracebacks.scan, tracebacks.SCAN_KEYS),
        (tracebacks.exception_of, tracebacks.SCAN_KEYS),
    ],
)
def test_the_per_line_tests_look_only_for_skim_keys(fn, keys):
    """A line the skimmer passes over holds no key: each text the per-line code looks for
    must contain one, or a new test would be skipped on large logs."""
    found = _in_text_constants(fn)
    assert found
    assert not [c for c in found if not any(k in c for k in keys)]
    assert set(log_facts._NPU) <= set(log_facts.KEYS)


def _explained(paths: list[Path]) -> list[dict]:
    return [f.to_dict() for f in logs.explain(paths)]


def test_skimmed_logs_explained_the_same(monkeypatch, tmp_path):
    read = {p: _explained([p]) for p in LOGS}
    whole = {d: _explained([d]) for d in CORPORA}
    # a training log's chatter around a real error, so runs are skipped and tails kept
    chatter = tmp_path / "chatter.log"
    with open(chatter, "w") as fh:
        for i in range(3000):
            fh.write(f"  1%|          | {i}/175200 [00:29<1:22:01,  2.83s/it] worker {i:x} handled request\n")
            # a line a needle and a fact's key are on, that reports nothing: read once, then passed over
            fh.write(
                f"[rank{i % 8}]:[W609 06:57:47.8 compiler_depend.ts:877] Warning: The HCCL execution timeout "
                "was set to never timeout (function ProcessGroupHCCL)\n"
            )
        fh.write((HERE / "real_logs" / "vllm_ascend_486_ei0006_rank1.log").read_text())
        for i in range(500):
            fh.write(f"INFO step {i} loss {i / 7:.3f}\n")
    chatter_read = _explained([chatter])
    monkeypatch.setattr(log_prefilter, "SKIM_BYTES", 0)
    monkeypatch.setattr(log_prefilter, "CHUNK", 997)  # chunks that cut lines
    assert log_prefilter.skimmed(chatter)
    for p, want in read.items():
        assert _explained([p]) == want, p
    for d, want in whole.items():
        assert _explained([d]) == want, d
    assert _explained([chatter]) == chatter_read


def test_skim_gives_raw_lines(monkeypatch, tmp_path):
    """Every line a key is on comes as raw_lines gives it, the others counted in order."""
    monkeypatch.setattr(log_prefilter, "CHUNK", 64)
    log = tmp_path / "x.log"
    log.write_text(
        "plain one\nError: boom\nwrapped (172.17.0.2\n, 44737).\nbody a\\nb\nplain two\n"
        "plain three\nExit code 1\nno newline at the end (",
        encoding="utf-8",
    )
    got, n = [], 0
    for item in log_prefilter.Skim(log, ("Error", "Exit"), reports=False):
        if isinstance(item, log_prefilter.Skipped):
            n += item.count
            got += item.tail
        else:
            got.append(item)
            n += 1
    assert got == list(log_lines.raw_lines(log))
    assert n == len(got)
