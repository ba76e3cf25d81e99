"""Decode the codes a torch_npu / CANN log prints (rules/error_codes.toml) by their
structure, so a code nobody listed still says which component failed and how badly:

  E-codes   EI0006, EH9999, E30006: component character + number (9000+ = internal)
  aclError  507033, 107002: class digit + module digits + number
  HcclResult the small number of "HCCL function error: ..., error code is 5"
  ERRxxyyy  torch_npu's submodule + error type, e.g. ERR02200 = DIST, call hccl api failed
  ncclResult NVIDIA NCCL's result, by number ("NCCL Error 2"), name (ncclSystemError) or text

An E-code error_codes.toml does not list is decoded from CANN's own catalogue
(rules/cann_error_codes.toml: its title, message, Possible Cause and Solution). Linux errno
values (rules/errno.toml) are decoded by number, name or strerror text for the messages that
quote one; torch_npu's SocVersion and aclrtMemcpyKind numbers by their tables.

`find_codes(line)` returns every code a line reports, each decoded into a `Code`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import titan_knowledge as knowledge
from titan_doctor.diagnose import families

INTERNAL_FROM = 9000  # E-codes 9000-9999 are internal errors (CANN error-code reference)
RANK_ECODE_USER = 35
RANK_ECODE_INTERNAL = 60
RANK_HCCL_DEFAULT = 70
RANK_PTA_WRAPPER = 85
RANK_PTA_OTHER = 75  # torch_npu raises these with the CANN text (E-code, aclnn detail) that says why

# An E-code stands alone: "EI0006: ...", "Get_Socket_Timeout(EI0006):", "EZ9999[PID: 1]",
# "detail:EZ1001:". Not inside a word, a hex number or a path.
_ECODE = re.compile(r"(?<![\w.\-/])(E[0-9A-Z]\d{4})(?=[\s:\[\]()]|$)")
# aclError codes after the phrases torch_npu and CANN print them with (the ACL samples and
# C++ apps: "acl set device 0 failed, errorCode = 507033").
_ACL = re.compile(
    r"(?:error code is:?|error code:|errorCode =|error no is|runtime result =|result =|ret =|failed:)"
    r"\s*(\d{6})\b",
    re.I,
)
# "HCCL function error: HcclAllreduce, error code is 6"; MindIE/ATB: "HcclCommInitRootInfo fail, error:2";
# a report quoting it as "HCCL error code 5："
_HCCL = re.compile(
    r"(?i)hccl\w*.*?error code(?: is)?:?\s*(\d{1,3})\b|\b(?P<call>hccl\w+) fail(?:ed)?, error:\s?(\d{1,3})\b"
)
_HCCL_CALL = re.compile(r"\b([Hh]ccl\w+)\(")
_NCCL = re.compile(
    r"\bNCCL Error (\d)\b|\b(nccl(?:UnhandledCuda|System|Internal|Remote)Error|ncclInvalid(?:Argument|Usage))\b"
    r"|\bNCCL (?:error|failure)\b.*?[:,]\s*(unhandled cuda error|unhandled system error|internal error"
    r"|invalid argument|invalid usage|remote process exited or there was a network error)"
)
_PTA = re.compile(r"\bERR(\d{2})(\d{3})\b")
# Text one of which a line that prints an aclError, HcclResult or ERR code contains.
NEEDLES = ("error code", "errorCode", "rror no is", "result =", "ret =", "failed:", "ERR", ", error:", "NCCL", "nccl")
_MESSAGE_NOISE = re.compile(r"^[\s:)\]]*(?:\[PID: ?\d+\]\s*)?(?:\d{4}-\d\d-\d\d-[\d:.]+\s*)?(?:\w*\(E\w\d{4}\):?\s*)?")


@dataclass(frozen=True)
class Code:
    id: str  # finding id suffix: ecode.EI0006, acl.507033, hccl.result, torch_npu.ERR02200
    code: str  # as printed: EI0006, 507033, 5, ERR02200
    title: str
    cause: str
    fix: str
    rank: int  # lower = closer to the root cause
    consequence: bool = False  # what a rank sees when ANOTHER rank failed (a timeout waiting for it)
    source: str = ""
    message: str = ""  # the text the log printed after an E-code
    catch_all: bool = False  # a generic code ("invalid argument", "inner error"): its message says why


@functools.cache
def _tables() -> dict[str, Any]:
    d = knowledge.load("error_codes")
    return {
        "ecode": {e["code"]: e for e in d.get("ecode", [])},
        "component": {e["char"]: e for e in d.get("component", [])},
        "acl": {int(e["code"]): e for e in d.get("acl", [])},
        "acl_class": {int(e["digit"]): e for e in d.get("acl_class", [])},
        "acl_module": {str(e["digits"]): e for e in d.get("acl_module", [])},
        "hccl": {int(e["code"]): e for e in d.get("hccl_result", [])},
        "pta_module": {str(e["digits"]): e for e in d.get("pta_module", [])},
        "pta_error": {int(e["code"]): e for e in d.get("pta_error", [])},
        "nccl": {k: e for e in d.get("nccl_result", []) for k in (int(e["code"]), e["name"], e["text"])},
        "soc": {int(e["code"]): e for e in d.get("soc_version", [])} | {e["name"]: e for e in d.get("soc_version", [])},
        "memcpy": {int(e["code"]): e["name"] for e in d.get("memcpy_kind", [])},
        "nccl_dtype": {int(e["code"]): e["name"] for e in d.get("nccl_datatype", [])},
    }


@functools.cache
def catalogue() -> dict[str, dict[str, Any]]:
    """CANN's error-message catalogue by code (rules/cann_error_codes.toml), read only when a
    log shows an E-code error_codes.toml does not list."""
    return {e["code"]: e for e in knowledge.load("cann_error_codes").get("ecode_ref", [])}


@functools.cache
def _errnos() -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    for e in knowledge.load("errno").get("errno", []):
        for key in (int(e["number"]), e["name"], *e.get("aliases", []), e["text"].lower()):
            out.setdefault(key, e)
    return out


def errno_info(key: int | str) -> dict[str, Any] | None:
    """The errno row (number, name, text, family, meaning, advice) for a number, a symbolic
    name (EADDRINUSE) or the strerror text a message quotes ("No route to host")."""
    if isinstance(key, str):
        key = key.strip().rstrip(".")
        if key.lstrip("-").isdigit():
            key = abs(int(key))
    table = _errnos()
    return table.get(key) if not isinstance(key, str) else table.get(key) or table.get(key.lower())


def soc_version(key: int | str) -> dict[str, Any] | None:
    """torch_npu's SocVersion row for its number (104) or name (Ascend910B1)."""
    return _tables()["soc"].get(int(key) if str(key).isdigit() else key)


def nccl_datatypes() -> dict[int, str]:
    """ncclDataType_t numbers -> names (the 'datatype N' of NCCL's collective trace)."""
    return _tables()["nccl_dtype"]


def memcpy_kind(n: int) -> str:
    return _tables()["memcpy"].get(n, f"kind {n}")


def decode_ecode(code: str, message: str = "") -> Code:
    t = _tables()
    comp = t["component"].get(code[1])
    module = comp["module"] if comp else f"component '{code[1]}' (not in CANN's published list)"
    internal = int(code[2:]) >= INTERNAL_FROM
    known = t["ecode"].get(code)
    if known:
        fix, cause = known["fix"], known["cause"]
        reason = message.partition("Reason:")[2]
        named = families.named_by(reason) if known.get("catch_all") else None
        if named:  # a catch-all code's Reason names the failure; its family says what to do
            fix = named["next_step"] + "; " + fix
            cause += f" Here the Reason points at: {named['title']}."
        return Code(
            f"ecode.{code}",
            code,
            f"{code}: {known['title']}",
            cause,
            fix,
            int(known.get("rank", RANK_ECODE_INTERNAL if internal else RANK_ECODE_USER)),
            bool(known.get("consequence", False)),
            known["source"],
            message,
            bool(known.get("catch_all", False)),
        )
    ref = catalogue().get(code)
    if ref:
        return _from_catalogue(code, ref, comp, internal, message)
    kind = "internal error" if internal else "error"
    cause = (
        f"{code} is a {module} {kind} (E + component '{code[1]}' = {module}; "
        f"{'9000-9999: internal, the message names the failing step' if internal else '0000-8999: a user-fixable error'})."
    )
    return Code(
        f"ecode.{code}",
        code,
        f"{code}: {module} {kind}",
        cause,
        comp["fix"] if comp else "Read the message after the code and the plog under $HOME/ascend/log",
        RANK_ECODE_INTERNAL if internal else RANK_ECODE_USER,
        False,
        comp["source"] if comp else "",
        message,
    )


def _from_catalogue(code: str, ref: dict[str, Any], comp: dict[str, Any] | None, internal: bool, message: str) -> Code:
    """A code CANN's catalogue describes: its title, its message template and its own
    Possible Cause / Solution."""
    title = (ref.get("title") or "").replace("_", " ").strip() or (comp["module"] if comp else "error")
    where = ref.get("class") or (comp["module"] if comp else f"component '{code[1]}'")
    # a fixed generic sentence ("The argument is invalid.", "Inner Error") or a bare "%s": the code
    # itself says nothing specific, the lines around it do
    generic = ref.get("message", "").strip() in ("%s", "") or (
        "%s" not in ref.get("message", "") and ref.get("title", "").startswith(("Invalid_Argument", "Inner_Error"))
    )
    cause = f"{code} is CANN's '{ref.get('title', title)}' ({where}): {ref.get('message', '')}"
    if ref.get("possible_cause"):
        cause += f" Possible cause (CANN): {ref['possible_cause']}"
    # the catalogue's message template names the kind of failure ("Failed to bind the IP
    # port. Reason: %s"); the text the log filled in says which family it is
    named = families.named_by(message)
    fix = "; ".join(
        x
        for x in (
            ref.get("solution", "").rstrip("."),
            named["next_step"] if named else "",
            comp["fix"] if comp else "Read the message after the code and the plog",
        )
        if x
    )
    module = comp["module"] if comp else f"component '{code[1]}'"
    return Code(
        f"ecode.{code}",
        code,
        f"{code}: {module} {'internal error' if internal else 'error'}, {title}",
        cause,
        fix,
        RANK_ECODE_INTERNAL + 5
        if generic and "Reason:" not in message
        else RANK_ECODE_INTERNAL
        if internal
        else RANK_ECODE_USER,
        False,
        ref["source"],
        message,
        generic,
    )


def decode_acl(n: int) -> Code:
    """A six-digit aclError: listed codes carry their own cause and fix; any other is
    decoded by its class digit and module digits."""
    t = _tables()
    cls = t["acl_class"].get(n // 100000)
    mod = t["acl_module"].get(f"{n // 1000 % 100:02d}")
    known = t["acl"].get(n)
    where = mod["module"] if mod else f"module {n // 1000 % 100:02d}"
    klass = cls["meaning"] if cls else "unknown class"
    name = known["name"] if known else "unlisted code"
    meaning = known["meaning"] if known else f"a {where} error"
    cause = (known or {}).get("cause") or f"{meaning} ({n // 100000}xxxxx = {klass}; {where})."
    fix = (known or {}).get("fix") or (cls["fix"] if cls else "Read the lines next to it and the plog")
    rank = int((known or {}).get("rank", cls["rank"] if cls else 50))
    return Code(
        f"acl.{n}",
        str(n),
        f"{n} {name}: {meaning}",
        cause,
        fix,
        rank,
        bool((known or {}).get("consequence", False)),
        (known or cls or {}).get("source", ""),
    )


def decode_hccl(n: int, call: str = "") -> Code:
    """An HcclResult; `call` is the HCCL API that returned it, when the line names it. A
    failure while creating a communicator (HcclCommInitRootInfo*) has its own advice."""
    e = _tables()["hccl"].get(n)
    name = e["name"] if e else f"HcclResult {n}"
    init = "CommInit" in call or "comm_init" in call.lower()
    fix = (e or {}).get("init_fix") if init else None
    return Code(
        "hccl.result",
        str(n),
        f"HCCL call failed with error code {n}: {name}" + (f" in {call}" if call else ""),
        f"An HCCL API call{' (' + call + ', which creates the communicator)' if init else ''} returned {name}; "
        "an EI/EJ code printed with it says more.",
        fix or (e["fix"] if e else "Read the EIxxxx/EJxxxx lines after it and the other ranks' logs"),
        int((e or {}).get("rank", RANK_HCCL_DEFAULT)),
        bool((e or {}).get("consequence", False)),
        (e or {}).get("source", ""),
    )


def decode_nccl(key: int | str) -> Code | None:
    """An ncclResult_t by number, name or the text ncclGetErrorString gives it."""
    e = _tables()["nccl"].get(key)
    if e is None:
        return None
    return Code(
        f"nccl.{e['name']}",
        str(e["code"]),
        f"NCCL error {e['code']} {e['name']}: {e['text']}",
        e["cause"],
        e["fix"],
        int(e.get("rank", RANK_HCCL_DEFAULT)),
        bool(e.get("consequence", False)),
        e["source"],
    )


def decode_pta(module: str, err: int) -> Code:
    t = _tables()
    m = t["pta_module"].get(module)
    e = t["pta_error"].get(err)
    mname = m["name"] if m else f"submodule {module}"
    meaning = e["meaning"] if e else f"error {err}"
    wrapper = bool(e and e.get("wrapper"))
    code = f"ERR{module}{err:03d}"
    cause = (
        f"torch_npu's {m['meaning'] if m else mname} reported '{meaning}' (ERR + submodule {module} {mname} "
        f"+ error {err:03d})."
        + (
            " It only says that a call failed: the code printed with it (E-code, aclError or HCCL "
            "error code) is the reason."
            if wrapper
            else " The message before it says what failed."
        )
    )
    return Code(
        f"torch_npu.{code}",
        code,
        f"{code}: torch_npu {mname} {meaning}",
        cause,
        "Read the codes printed with it (decoded in the other findings)"
        if wrapper
        else "Read the error message printed just before it",
        RANK_PTA_WRAPPER + (5 if err == 999 else 0) if wrapper else RANK_PTA_OTHER,
        False,
        (m or {}).get("source", ""),
    )


def _message_after(line: str, end: int) -> str:
    return _MESSAGE_NOISE.sub("", line[end:], count=1).strip()[:240]


def has_ecode(line: str) -> bool:
    return "E" in line and _ECODE.search(line) is not None


def find_codes(line: str) -> list[Code]:
    """Every code `line` reports, decoded; one Code per distinct code."""
    out: dict[str, Code] = {}
    if "E" in line:
        for m in _ECODE.finditer(line):
            c = m.group(1)
            if c not in out or not out[c].message:
                out[c] = decode_ecode(c, _message_after(line, m.end()))
    if "rror" in line or "esult" in line or "ret =" in line or "failed:" in line:
        for m in _ACL.finditer(line):
            out.setdefault(m.group(1), decode_acl(int(m.group(1))))
        h = _HCCL.search(line) if ("rror" in line or ", error:" in line) else None
        n = h and (h.group(1) or h.group(3))
        if n:
            call = h.group("call") or next(iter(_HCCL_CALL.findall(line)), "")
            out.setdefault("hccl." + n, decode_hccl(int(n), call))
    if "NCCL" in line or "nccl" in line:
        for m in _NCCL.finditer(line):
            key = m.group(1) or m.group(2) or m.group(3)
            c = decode_nccl(int(key) if key.isdigit() else key)
            if c:
                out.setdefault(c.id, c)
    if "ERR" in line:
        for m in _PTA.finditer(line):
            code = decode_pta(m.group(1), int(m.group(2)))
            out.setdefault(code.code, code)
    return list(out.values())
