"""Documents from corpus files, streamed in chunks of about `chunk_bytes` of text.

Formats, by file name: `.txt` (documents separated by a blank line), `.jsonl` / `.json` (one
object per line, the text in `text_field`), either of them compressed as `.gz` (stdlib) or
`.zst` (zstandard, extra `data`), and `.parquet` (a string column, pyarrow, extra `data`).

The offline `prepare-data` tool and the trainer's small-file path both read through here, so
they see exactly the same documents. JSON is parsed where the chunk is tokenized (in the
worker processes of `prepare-data`), not in the reader.

No document is held or tokenized whole, so memory does not grow with a document's length:
the `.txt` reader emits a document longer than `hold_chars` in pieces (a chunk that ends
inside one has `open_end` set), and the encoder gives the tokenizer texts of at most
`PIECE_CHARS` characters (a long one in pieces), `CHUNK_BYTES` a call. The tokenizer's memory
is ~200x a long text it gets whole, ~75x the same characters as short texts. Where a
document is cut, and why its ids stay those of the whole document: `cut_index`. A JSONL
record is parsed whole (JSON has to be), so memory grows with the longest record, at a few
times its size, not with the tokenizer's 200x.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO


class DataError(Exception):
    """A data or tokenizer path/format problem (a user error, one line)."""


TEXT_SUFFIXES = (".txt", ".txt.gz", ".txt.zst")
JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")
PARQUET_SUFFIXES = (".parquet",)
SUFFIXES = TEXT_SUFFIXES + JSONL_SUFFIXES + PARQUET_SUFFIXES
EXTRA_HINT = "pip install 'titan-npu[data]'"
CHUNK_BYTES = 1 << 20  # text per chunk, and the most the tokenizer gets in one call
PIECE_CHARS = 1 << 14  # the longest text the tokenizer gets: at 16 KiB a long document costs what short ones do


@dataclass
class Chunk:
    """A run of consecutive items of one source file: raw JSON lines ("jsonl", blank lines
    kept so that `first + i` is the line number) or document texts ("text")."""

    source: int  # index into the list of source files
    kind: str  # "jsonl" | "text"
    first: int  # 1-based line (jsonl) or document/row (text) number of items[0]
    items: list[str]
    nbytes: int  # bytes of the source file consumed by this chunk (for progress)
    open_end: bool = False  # the last item is the start of a document the next chunk's first item goes on with


def suffix_of(path: Path) -> str | None:
    name = path.name.lower()
    return next((s for s in sorted(SUFFIXES, key=len, reverse=True) if name.endswith(s)), None)


def find_sources(specs: list[str]) -> list[Path]:
    """Files named, plus the supported files under named folders (sorted, hidden ones skipped).
    Each file comes once, at its first place, however often and under whatever spelling it
    was named (a file and its folder, `./a` and `a`, a symlink): it is read once."""
    files: list[Path] = []
    seen: set[str] = set()
    for spec in specs:
        for path in _files_of(Path(spec)):
            real = os.path.realpath(path)
            if real not in seen:
                seen.add(real)
                files.append(path)
    return files


def _files_of(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and suffix_of(p) and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if not found:
            raise DataError(f"{path}: no corpus files inside (looked for {', '.join(SUFFIXES)})")
        return found
    if path.is_file():
        if not suffix_of(path):
            raise DataError(f"{path}: unsupported file type; use one of {', '.join(SUFFIXES)}")
        return [path]
    raise DataError(f"{path} not found")


def file_state(path: Path) -> tuple[int, int, int]:
    """What tells that a file was written to or replaced: size, mtime in ns, inode."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def check_unchanged(path: Path, before: tuple[int, int, int]) -> None:
    """A file that changed while it was read gave documents of no one version of it (and
    an index would record its old size): refuse rather than write that."""
    if file_state(path) != before:
        raise DataError(f"{path} changed while it was read; rerun when it is no longer being written")


def read_chunks(
    files: list[Path],
    text_field: str = "text",
    chunk_bytes: int = CHUNK_BYTES,
    *,
    hold_chars: int = CHUNK_BYTES,
    states: list[tuple[int, int, int]] | None = None,
) -> Iterator[Chunk]:
    """Every document of every file, in order, as chunks; a `.txt` document longer than
    `hold_chars` in pieces (`Chunk.open_end`). Each file is checked once it is read: it must
    still be as `states` (`file_state` of each file, taken by the caller when it recorded
    their sizes; by default, when the file is opened) says."""
    for i, path in enumerate(files):
        before = states[i] if states is not None else file_state(path)
        yield from _file_chunks(i, path, text_field, chunk_bytes, hold_chars)
        check_unchanged(path, before)


def _file_chunks(i: int, path: Path, text_field: str, chunk_bytes: int, hold_chars: int) -> Iterator[Chunk]:
    suffix = suffix_of(path)
    if suffix in PARQUET_SUFFIXES:
        yield from _parquet_chunks(i, path, text_field, chunk_bytes)
        return
    try:
        with open(path, "rb") as raw:
            binary = _decompressed(raw, path, suffix)
            if suffix in JSONL_SUFFIXES:
                yield from _jsonl_chunks(i, _utf8_blocks(binary, path, chunk_bytes), raw, chunk_bytes)
            else:
                blocks = _utf8_blocks(binary, path, chunk_bytes, whole_lines=False)
                yield from _text_chunks(i, blocks, raw, chunk_bytes, hold_chars)
    except _read_errors() as e:  # truncated or corrupt compressed data, unreadable file
        raise DataError(f"{path}: cannot read ({type(e).__name__}: {e})") from None


def documents(chunk: Chunk, path: Path | str, text_field: str = "text") -> list[str]:
    """The document texts of a chunk (parses its JSON lines; errors name file:line)."""
    if chunk.kind == "text":
        return chunk.items
    out = []
    for lineno, line in enumerate(chunk.items, chunk.first):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{lineno} is not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get(text_field), str):
            raise DataError(f"{path}:{lineno} has no string field {text_field!r} (set data.text_field / --text-field)")
        out.append(obj[text_field])
    return out


def _read_errors() -> tuple[type[Exception], ...]:
    try:
        from zstandard import ZstdError
    except ImportError:
        return OSError, EOFError
    return OSError, EOFError, ZstdError


def _decompressed(raw: BinaryIO, path: Path, suffix: str) -> BinaryIO:
    if suffix.endswith(".gz"):
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb")
    if suffix.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            raise DataError(f"{path}: reading .zst needs the zstandard package: {EXTRA_HINT}") from None
        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    return raw


def _utf8_blocks(binary: BinaryIO, path: Path, block_bytes: int, whole_lines: bool = True) -> Iterator[str]:
    """The file's text in blocks of about `block_bytes`, with universal newlines. With
    `whole_lines` each block ends at a line end (the last may not), so a longer line comes
    whole in one block; without, a block ends anywhere but inside a character or a "\\r\\n",
    so a file without line ends is read in bounded blocks too. Bytes that are not UTF-8 are a
    DataError naming file:line and the byte offset, never a replacement character or a traceback."""
    carry, line, offset = b"", 1, 0
    while True:
        data = binary.read(block_bytes)
        buf = carry + data
        cut = _block_end(buf, whole_lines) if data else len(buf)
        part, carry = buf[:cut], buf[cut:]
        if part:
            yield _decode(part, path, line, offset)
            line, offset = line + part.count(b"\n"), offset + len(part)
        if not data:
            return


def _block_end(buf: bytes, whole_lines: bool) -> int:
    """After the last line end; or, not `whole_lines`, before the last (maybe incomplete)
    UTF-8 character and never between "\\r" and "\\n" (the decoder turns "\\r\\n" into one "\\n")."""
    if whole_lines:
        return buf.rfind(b"\n") + 1
    end = len(buf)
    while end > 0 and len(buf) - end < 3 and buf[end - 1] & 0xC0 == 0x80:  # continuation bytes
        end -= 1
    if end > 0 and buf[end - 1] >= 0xC0:  # the lead byte of a character that may go on
        end -= 1
    if end > 0 and buf[end - 1] == 0x0D:
        end -= 1
    return end


def _decode(data: bytes, path: Path, first_line: int, offset: int) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + data.count(b"\n", 0, e.start)
        where = " of the decompressed text" if str(path).endswith((".gz", ".zst")) else ""
        raise DataError(
            f"{path}:{line}: not UTF-8 (byte 0x{data[e.start]:02x} at byte offset {offset + e.start:,}"
            f"{where}); re-encode the file as UTF-8, e.g. iconv -f latin1 -t utf-8 IN > OUT"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _jsonl_chunks(source: int, blocks: Iterator[str], raw: BinaryIO, chunk_bytes: int) -> Iterator[Chunk]:
    lines: list[str] = []
    size, first, lineno, pos = 0, 1, 0, 0
    for block in blocks:
        pieces = block.split("\n")
        last = pieces.pop()  # "" unless this is the file's last line without a newline
        for line in [p + "\n" for p in pieces] + ([last] if last else []):
            lineno += 1
            lines.append(line)
            size += len(line)
            if size >= chunk_bytes:
                yield Chunk(source, "jsonl", first, lines, raw.tell() - pos)
                pos, lines, size, first = raw.tell(), [], 0, lineno + 1
    if lines:
        yield Chunk(source, "jsonl", first, lines, raw.tell() - pos)


def _text_chunks(
    source: int, blocks: Iterator[str], raw: BinaryIO, chunk_bytes: int, hold_chars: int
) -> Iterator[Chunk]:
    """Split on blank lines exactly as `str.split("\\n\\n")` would on the whole file, without
    reading it whole: a piece is emitted only once a separator after it has been seen. A
    document that grows past `hold_chars` before its separator is emitted in pieces
    (`_cut_open_document`), each closing a chunk with `open_end`; joined, they are the document."""
    docs: list[str] = []
    size, number, pos, carry, open_doc = 0, 1, 0, "", False
    while True:
        block = next(blocks, "")
        pieces = (carry + block).split("\n\n")
        carry = pieces.pop() if block else ""  # the last piece may go on in the next block
        for piece in pieces:
            if piece.strip() or open_doc:  # the end of an open document counts even if blank
                docs.append(piece)
                size += len(piece)
            open_doc = False
        while (cut := _cut_open_document(carry, hold_chars, open_doc)) is not None:
            docs.append(carry[:cut])
            carry, open_doc = carry[cut:], True
            yield Chunk(source, "text", number, docs, raw.tell() - pos, open_end=True)
            number, pos, docs, size = number + len(docs) - 1, raw.tell(), [], 0
        if docs and (size >= chunk_bytes or not block):
            yield Chunk(source, "text", number, docs, raw.tell() - pos)
            number, pos, docs, size = number + len(docs), raw.tell(), [], 0
        if not block:
            return


def _cut_open_document(carry: str, limit: int, open_doc: bool) -> int | None:
    """Where to cut the unfinished document `carry` once it holds more than `limit`
    characters past its blank start, or None to hold it for now. The first piece holds the
    blank start whole and then up to `limit` more (until its first non-blank character it may
    yet be a blank "document", which is skipped), and a cut leaves at least the last
    character, so a "\\n" there can still meet one at the start of the next block."""
    lo = 0 if open_doc else len(carry) - len(carry.lstrip())
    if len(carry) - lo <= limit:
        return None
    return cut_index(carry, lo, min(lo + limit, len(carry) - 1))


# Where a pre-tokenizer begins a new pre-token whatever comes before (BPE never merges across
# one): a space between two non-blank characters (byte-level BPE as GPT-2 and Llama 3 have,
# and SentencePiece-style Metaspace), else a line end after a letter or digit and before a
# non-blank character (byte-level BPE only: Metaspace splits at spaces alone).
_SPACE_CUT = re.compile(r"(?<=\S) (?=\S)")
_LINE_CUT = re.compile(r"(?<=[^\W_])\n(?=\S)")


def cut_index(text: str, lo: int, hi: int) -> int:
    """Where to cut `text` into text[:i] and text[i:], lo < i <= hi, so that tokenizing the
    two apart gives the ids of tokenizing them together: the last place in (lo, hi] just
    before a space that `_SPACE_CUT` accepts, else before a line end that `_LINE_CUT` does.

    That is exact for the byte tokenizer (any cut is) and for byte-level BPE and Metaspace
    tokenizers (tests/train/test_prepare_long.py checks the shared GPT-2-style tokenizer, a
    Llama-3-style and a Metaspace one on real and adversarial text). It is not for a tokenizer
    that normalizes every input by prepending to it (a `Prepend` normalizer, no pre-tokenizer):
    such a long document's ids are those of its pieces, each tokenized apart. A run of more
    than hi - lo characters with no such place (no spaces, no line end after a letter) is cut
    at hi; only the ids around that cut may differ from tokenizing the run whole."""
    tail = max(lo + 1, hi - 4096)  # natural text has a place near hi: look there first
    for pattern in (_SPACE_CUT, _LINE_CUT):
        found = _last_match(pattern, text, tail, hi)
        if found is None and tail > lo + 1:
            found = _last_match(pattern, text, lo + 1, hi)
        if found is not None:
            return found
    return hi


def _last_match(pattern: re.Pattern, text: str, first: int, last: int) -> int | None:
    found = None
    for match in pattern.finditer(text, first, last + 2):  # + 2: the look-ahead of a cut at `last`
        found = match
    return None if found is None else found.start()


def pieces(text: str, limit: int) -> Iterator[str]:
    """`text` in pieces of at most `limit` characters, cut where `cut_index` says."""
    start = 0
    while len(text) - start > limit:
        cut = cut_index(text, start, start + limit)
        yield text[start:cut]
        start = cut
    yield text[start:]


def _parquet_chunks(source: int, path: Path, text_field: str, chunk_bytes: int) -> Iterator[Chunk]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading .parquet needs the pyarrow package: {EXTRA_HINT}") from None
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from None
    schema = pf.schema_arrow
    if text_field not in schema.names:
        raise DataError(
            f"{path}: no column {text_field!r} (columns: {', '.join(schema.names)}; set data.text_field / --text-field)"
        )
    kind = schema.field(text_field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise DataError(f"{path}: column {text_field!r} holds {kind}, not strings")
    rows, size = max(pf.metadata.num_rows, 1), path.stat().st_size
    row = 1
    for batch in pf.iter_batches(batch_size=1024, columns=[text_field]):
        column = batch.column(0)
        if column.null_count:
            bad = row + column.is_null().to_pylist().index(True)
            raise DataError(f"{path}: row {bad} has no text (column {text_field!r} is null)")
        texts = column.to_pylist()
        yield Chunk(source, "text", row, texts, size * len(texts) // rows)
        row += len(texts)
