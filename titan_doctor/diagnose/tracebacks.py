"""Python tracebacks in a crash log: the exception each one ends with and the innermost frame of
the user's own code (not the standard library, site-packages or torch), so a finding can say
what was raised and where in the user's program it came from.

A traceback is "Traceback (most recent call last):", its "File ..., line N, in f" frames and the
exception line after them; chained exceptions ("During handling of the above exception ...")
are separate tracebacks. Logs pasted into issues often keep only the exception line, so a bare
"SomeError: message" line counts as a traceback without frames.

A log with no Python exception at all (a runtime's own error report, a launcher's message) still
has an error line: `first_error_line` finds it, with the advice a runtime prints under it
("Suggestion:", "Solution:", numbered steps), so the honest unknown can quote both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from titan_doctor.diagnose import log_prefilter
from titan_doctor.diagnose.log_lines import parse, raw_lines

# the name may follow a prefix, a space or prose in another script ("出现AttributeError: ...")
EXCEPTION = re.compile(
    r"(?:^|[\]:>]\s*|\s|[^\x00-\x7f])((?:[a-z_][\w]*\.)*[A-Z][A-Za-z0-9_]*(?:Error|Exception|Failed|Exit)): (.{1,300})"
)
# an exception raised without a message ends its traceback with its bare name
# ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError")
BARE_EXCEPTION = re.compile(r"^\s*(?:\[rank\d+\]:\s*)*((?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))\s*$")
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>[\w<>.]+)')
# what is not the user's code: the interpreter, installed packages, the frameworks
_LIBRARY = re.compile(
    r"site-packages|dist-packages|/lib/python\d|<frozen|/torch/|/torch_npu/|/runpy\.py|/multiprocessing/|/concurrent/"
    r"|/threading\.py|/importlib/|\\Lib\\"
)
# raised by the launcher when a child failed: the child's own exception is the one to report
LAUNCHER = re.compile(
    r"ChildFailedError|ProcessRaisedException|ProcessExitedException|CalledProcessError|SystemExit|WorkerExit"
)
MAX_FRAMES = 200  # frames kept per traceback (the innermost ones)
# the text a line scan() acts on holds one of (exception_of's, a frame's, a traceback's start)
SCAN_KEYS = (
    "Error",
    "Exception",
    "Failed",
    "Exit",
    'File "',
    "Traceback (most recent call last)",
)


@dataclass
class Raised:
    text: str  # "RuntimeError: message"
    path: str
    line: int
    frame: str = ""  # innermost user frame: 'train.py:107 in main'
    launcher: bool = False
    rank: int | None = None  # the rank the line's prefix names
    library: str = ""  # the installed package the innermost frame is in, when it is not torch's or the user's

    @property
    def where(self) -> str:
        return f" (raised from {self.frame})" if self.frame else ""


def exception_of(text: str) -> tuple[str, str] | None:
    """(name, message) of an exception line, if the line is one."""
    if "Error" not in text and "Exception" not in text and "Failed" not in text and "Exit" not in text:
        return None
    m = EXCEPTION.search(text)
    if m:
        return m.group(1), m.group(2).strip()
    m = BARE_EXCEPTION.match(text)
    return (m.group(1), "") if m else None


def user_frame(frames: Iterable[tuple[str, str, str]]) -> str:
    """The innermost frame whose file is the user's code: 'path:line in func'."""
    last = ""
    for path, line, func in frames:
        if not _LIBRARY.search(path):
            last = f"{path}:{line} in {func}"
    return last


_PACKAGE = re.compile(r"(?:site|dist)-packages/(?P<pkg>[A-Za-z_][\w.-]*?)/")
_NOT_NAMED = ("torch", "_pytest", "pluggy", "importlib", "runpy")  # their frames say nothing of who failed


def library_of(frames: list[tuple[str, str, str]]) -> str:
    """The installed package that raised: the innermost frame's, when it is a package's and
    not torch's (torch raising is mostly torch refusing what user code passed it)."""
    if not frames:
        return ""
    m = _PACKAGE.search(frames[-1][0])
    return m.group("pkg") if m and m.group("pkg") not in _NOT_NAMED else ""


def scan(paths: Iterable[Path]) -> list[Raised]:
    """Every exception the logs raise, in file order, each with the innermost user frame of
    the traceback it ends (streamed: only the frames of the traceback being read are kept)."""
    out: list[Raised] = []
    for path in paths:
        frames: list[tuple[str, str, str]] = []
        lines = log_prefilter.Skim(path, SCAN_KEYS, reports=False) if log_prefilter.skimmed(path) else raw_lines(path)
        for item in lines:
            if isinstance(item, log_prefilter.Skipped):  # no frame, exception or traceback start
                continue
            no, text, _ = item
            if 'File "' in text:
                f = _FRAME.search(text)
                if f:
                    frames.append((f.group("path"), f.group("line"), f.group("func")))
                    del frames[:-MAX_FRAMES]
                    continue
            exc = exception_of(text)
            if exc:
                name, message = exc
                rank = parse(str(path), no, text).rank
                out.append(
                    Raised(
                        f"{name}: {message}" if message else name,
                        str(path),
                        no,
                        user_frame(frames),
                        bool(LAUNCHER.search(name)),
                        rank,
                        library_of(frames),
                    )
                )
                frames = []
            elif "Traceback (most recent call last)" in text:
                frames = []
    return out


def pick(raised: list[Raised]) -> Raised | None:
    """The exception that explains a failure with nothing better to go on: the last exception
    of the first traceback that is not the launcher's own (a traceback ends at its last chained
    exception; torchrun's ChildFailedError only reports a child's)."""
    own = [r for r in raised if not r.launcher]
    if not own:
        return raised[0] if raised else None
    first = own[0]
    # exceptions chained to the first one follow it closely in the same file
    chain = [first]
    for r in own[1:]:
        if r.path != first.path or r.line - chain[-1].line > 40:
            break
        chain.append(r)
    return chain[-1]


# An error reported in words: an error level or an error / failure word, not a line that only
# logs progress (INFO, DEBUG) or mentions an error counter
_ERROR_WORD = re.compile(
    r"\[(?:ERROR|FATAL|CRITICAL)\]|\bERROR\b|(?i:\b(?:error|failed|failure|fatal|abort(?:ed)?|killed|timed out|"
    r"exception|disappeared|not supported|cannot|could not|unable to)\b)"
)
_QUIET = re.compile(r"^\s*(?:\[?(?:INFO|DEBUG|I\d{4})\b|#)|\b(?:errors?|failures?)[=:]\s*0\b")
_ADVICE_HEAD = re.compile(
    r"\b(?:Suggestion|Solution|Possible Cause|HINT|Hint)\s*:|\b(?:You may|You can|You should|There maybe some reasons)\b"
)
# a command line the runtime prints under its advice ("    sysctl -w net.ipv4.ip_local_reserved_ports=...")
_COMMAND = re.compile(r"^\s+(?:sysctl|export|ulimit|echo|pip|npu-smi|hccn_tool|sudo|docker|ip|ss)\s+\S")
_ADVICE_STEP = re.compile(r"(?:^|\]\s+|\s)(\d\)|\d\.|[-*])\s*(?P<step>\S.{4,})$")
MAX_ADVICE = 6
# A remedy an error message states in its own sentence, on its line or just under it (c10d's
# "run with USE_LIBUV=0 to disable it", transformers' "The easiest method is to set these DeepSpeed
# config values to 'auto'", NCCL's "Disable NVLS (NCCL_NVLS_ENABLE=0) if you wish ...", Megatron's
# "To use gradient_accumulation_fusion you must install APEX ..."): the sentence is kept whole.
_REMEDY = re.compile(
    r"\b(?:[Pp]lease (?:set|use|install|upgrade|update|reinstall|run|check|make sure|ensure|add|pass|specify|"
    r"increase|decrease|reduce|lower|disable|enable|export|source|try|consider|correct|remove|rebuild|refer)|"
    r"[Rr]un with \S|[Tt]ry (?:setting|using|running|increasing|reducing|lowering|passing|adding|to)\b|"
    r"[Cc]onsider (?:setting|using|increasing|reducing|lowering|passing|adding|upgrading)\b|"
    r"[Yy]ou (?:must|need to|should) (?!not\b)\w|[Tt]he easiest (?:method|way|fix) is|"
    r"[Dd]isable \S+ \([A-Z][A-Z0-9_]{3,}=|[Ss]et (?:the environment variable )?[A-Z][A-Z0-9_]{3,}=)"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
REMEDY_LINES = 5  # how far under the error line a remedy sentence still belongs to it
# a tip for more output, not a remedy ("run with NCCL_DEBUG=INFO for details")
_DEBUG_TIP = re.compile(r"for (?:more )?(?:details|information)|_DEBUG=|LAUNCH_BLOCKING=|SHOW_CPP_STACKTRACES=")
_EXCEPTION_HEAD = re.compile(r"^(?:[\w.]+(?:Error|Exception|Warning)|[\w.]*Error\w*):\s+")


def remedy(text: str) -> str:
    """The sentence of `text` that states a remedy ('' if none), without the exception's name."""
    for m in _REMEDY.finditer(text):
        if _DEBUG_TIP.search(text, m.start(), m.start() + 80):
            continue
        end = _SENTENCE_END.search(text, m.end())
        stop = end.start() if end else len(text)
        if text[max(0, m.start() - 2) : m.start()] == ", ":  # "... without libuv support, run with X": the clause
            return text[m.start() : stop].strip()[:300]
        start = max((b.end() for b in _SENTENCE_END.finditer(text, 0, m.start())), default=0)
        return _EXCEPTION_HEAD.sub("", _after_prefix(text[start:stop]).strip())[:300]
    return ""


# one token of a runtime line's prefix: a bracketed field ("[ERROR]", "[sal.cc:501]", "[rank0]:",
# "[InitGroupStage]") or CANN's "HCCL(pid,process):date-time"
_PREFIX_TOKEN = re.compile(r"(?::(?=\s)|\[[^\]]*\]:?|[A-Z][A-Z_]*\(\d+,[^)]*\):\S+)\s*")


def _after_prefix(text: str) -> str:
    """The message of a glog / runtime log line: the text after its prefix of bracketed fields
    (HCCL's plog ends it with its stage and check tags: "[InitGroupStage][EnvConfig]set ifname
    to [abc] by ...", so a bracket inside the message stays)."""
    rest = text.strip()
    while (m := _PREFIX_TOKEN.match(rest)) and len(rest) - m.end() > 3:
        rest = rest[m.end() :]
    return rest


MAX_FAMILY_SCAN = 20000  # lines read for a family line when nothing else matched


def first_line_where(paths: Iterable[Path], says: Callable[[str], bool]) -> Raised | None:
    """The first line (not a comment or an INFO/DEBUG line) for which `says` is true: the line
    in a log with no error line and no known error that names a family of failure in words
    ("System memory request exceeds memory available in /dev/shm")."""
    for path in paths:
        for no, text, _ in raw_lines(path):
            if no > MAX_FAMILY_SCAN:
                break
            if len(text.strip()) > 8 and not _QUIET.search(text) and says(text):
                return Raised(_after_prefix(text)[:300], str(path), no, rank=parse(str(path), no, text).rank)
    return None


def first_error_line(paths: Iterable[Path]) -> tuple[Raised, list[str]] | None:
    """The first line that reports an error in words, and the advice printed under it (one pass:
    the advice is read from the same lines)."""
    for path in paths:
        lines = iter(raw_lines(path))
        for no, text, _ in lines:
            if _ERROR_WORD.search(text) and not _QUIET.search(text) and len(text.strip()) > 8:
                found = Raised(_after_prefix(text)[:300], str(path), no, rank=parse(str(path), no, text).rank)
                return found, _advice(lines, no, text)
    return None


def advice_after(path: Path | str, line: int, text: str | None = None) -> list[str]:
    """What the runtime itself advises under line `line` of a log (CANN's Solution / Possible
    Cause, NCCL's HINT, a numbered list of reasons or steps, 'You may ... by' with its command on
    the next line), within 12 lines of it."""
    rows = iter(raw_lines(Path(path)))
    if text is None:  # the line's own text, read whole (a Raised holds it cut at 300 characters)
        text = next((t for no, t, _ in rows if no == line), None)
    return _advice(((no, t, x) for no, t, x in rows if no > line), line, text)


def _advice(following: Iterable[tuple[int, str, Any]], line: int, text: str | None) -> list[str]:
    """The advice in the lines that follow the error line `line` (whose own text is `text`)."""
    advice: list[str] = [said] if text and (said := remedy(text)) else []
    in_advice = bool(text and _ADVICE_HEAD.search(text))
    for no, text, _ in following:
        if no - line > 12 or len(advice) >= MAX_ADVICE:
            break
        if (
            no - line <= REMEDY_LINES
            and not in_advice
            and not _QUIET.search(text)
            and "warn" not in text.lower()
            and (said := remedy(text))
        ):
            advice.append(said)
            continue
        head = _ADVICE_HEAD.search(text)
        if head:
            in_advice = True
            # "Solution: <it>" keeps what follows the label; "You may ... by" is itself the advice
            tail = text[head.end() :].strip() if head.group().endswith(":") else text.strip()
            if len(tail) > 4:
                advice.append(tail)
            continue
        if in_advice and _COMMAND.match(text):
            advice.append(text.strip())
            continue
        step = _ADVICE_STEP.search(text) if in_advice else None
        if step:
            advice.append(step.group("step").strip())
    return advice
