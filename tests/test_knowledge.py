"""titan_knowledge: one check for every rules/ entry, whether it is read as a typed rule
(migrate) or as a dict (diagnose, the trainer's device table)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import titan_knowledge as knowledge


@pytest.fixture
def rules_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(knowledge, "rules_dir", lambda: tmp_path)
    knowledge.load.cache_clear()
    yield tmp_path
    knowledge.load.cache_clear()


def test_every_problem_of_a_dict_table_is_one_line_and_all_are_reported(rules_dir):
    (rules_dir / "devices.toml").write_text(
        '[[device]]\nname = "Ascend 910B3"\nmatch = ["910B3"]\nmemory_gib = 64\nsource = "spec"\n'
        '[[device]]\nname = "A100"\nmatch = ["A100"]\nmemory_gib = 80\npeak_tflops = 312\nsource = ""\n'
    )
    with pytest.raises(knowledge.KnowledgeError) as e:
        knowledge.devices()
    assert str(e.value).splitlines() == [
        "devices.toml [[device]]: entry 0 (Ascend 910B3) lacks peak_tflops",
        "devices.toml [[device]]: entry 1 (A100): 'source' must be a non-empty string, not ''",
    ]


def test_dict_tables_allow_keys_beyond_their_schema_and_expand_sources(rules_dir):
    (rules_dir / "hccl_env.toml").write_text(
        '[sources]\ncann = "CANN env reference"\n'
        '[[range]]\nname = "HCCL_X"\nmin = 1\nmax = 2\ndefault = 1\nunit = "s"\nwhy = "w"\n'
        'warn_above = 2\nsource = "cann; page 7"\n'
        '[[other]]\nanything = 1\nsource = "s"\n'
    )
    data = knowledge.load("hccl_env")
    assert data["range"][0]["warn_above"] == 2
    assert data["range"][0]["source"] == "CANN env reference; page 7"
    (rules_dir / "versions.toml").write_text('[[note]]\ntext = "no source here"\n')
    with pytest.raises(knowledge.KnowledgeError, match=r"versions.toml \[\[note\]\]: entry 0 \(\?\) lacks source"):
        knowledge.load("versions")


@dataclass(frozen=True, kw_only=True)
class _Rule:
    code: str
    source: str
    words: tuple[str, ...] = ()
    strict: bool = False


def test_typed_tables_use_the_same_check_and_refuse_unknown_keys():
    rule, errors = knowledge.typed_entry(
        {"code": "X1", "words": ["a"], "strict": "yes", "wrods": []}, _Rule, "mine.toml: rule 0"
    )
    assert rule is None
    assert errors == [
        "mine.toml: rule 0 lacks source",
        "mine.toml: rule 0: unknown key 'wrods' (known: code, source, strict, words)",
        "mine.toml: rule 0: 'strict' must be true or false, not 'yes'",
    ]
    rule, errors = knowledge.typed_entry({"code": "X1", "source": "s", "words": ["a"]}, _Rule, "w")
    assert errors == [] and rule == _Rule(code="X1", source="s", words=("a",))


def test_shipped_rules_pass_their_schemas():
    knowledge.load.cache_clear()
    for name in ("devices", "error_codes", "hccl_env", "log_signatures", "versions"):
        assert knowledge.load(name)
    assert all(isinstance(d["peak_tflops"], (int, float, dict)) for d in knowledge.devices())
