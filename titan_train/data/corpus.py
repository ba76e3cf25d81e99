"""Documents from corpus files, streamed in chunks of about `chunk_bytes` of text.

Formats, by file name: `.txt` (documents separated by a blank line), `.jsonl` / `.json` (one
object per line, the text in `text_field`), either of them compressed as `.gz` (stdlib) or
`.zst` (zstandard, extra `data`), and `.parquet` (a string column, pyarrow, extra `data`).

The offline `prepare-data` tool and the trainer's small-file path both read through here, so
they see exactly the same documents. JSON is parsed where the chunk is tokenized (in the
worker processes of `prepare-data`), not in the reader.
"""

from __future__ import annotations

import json
import os
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


@dataclass
class Chunk:
    """A run of consecutive items of one source file: raw JSON lines ("jsonl", blank lines
    kept so that `first + i` is the line number) or document texts ("text")."""

    source: int  # index into the list of source files
    kind: str  # "jsonl" | "text"
    first: int  # 1-based line (jsonl) or document/row (text) number of items[0]
    items: list[str]
    nbytes: int  # bytes of the source file consumed by this chunk (for progress)


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
    chunk_bytes: int = 1 << 20,
    *,
    states: list[tuple[int, int, int]] | None = None,
) -> Iterator[Chunk]:
    """Every document of every file, in order, as chunks. Each file is checked once it is
    read: it must still be as `states` (`file_state` of each file, taken by the caller when
    it recorded their sizes; by default, when the file is opened) says."""
    for i, path in enumerate(files):
        before = states[i] if states is not None else file_state(path)
        yield from _file_chunks(i, path, text_field, chunk_bytes)
        check_unchanged(path, before)


def _file_chunks(i: int, path: Path, text_field: str, chunk_bytes: int) -> Iterator[Chunk]:
    suffix = suffix_of(path)
    if suffix in PARQUET_SUFFIXES:
        yield from _parquet_chunks(i, path, text_field, chunk_bytes)
        return
    try:
        with open(path, "rb") as raw:
            blocks = _utf8_blocks(_decompressed(raw, path, suffix), path, chunk_bytes)
            if suffix in JSONL_SUFFIXES:
                yield from _jsonl_chunks(i, blocks, raw, chunk_bytes)
            else:
                yield from _text_chunks(i, blocks, raw, chunk_bytes)
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


def _utf8_blocks(binary: BinaryIO, path: Path, block_bytes: int) -> Iterator[str]:
    """The file's text in blocks of about `block_bytes`, each ending at a line end (the last
    may not), with universal newlines. Bytes that are not UTF-8 are a DataError naming
    file:line and the byte offset, never a replacement character or a traceback."""
    carry, line, offset = b"", 1, 0
    while True:
        data = binary.read(block_bytes)
        buf = carry + data
        cut = buf.rfind(b"\n") + 1 if data else len(buf)
        part, carry = buf[:cut], buf[cut:]
        if part:
            yield _decode(part, path, line, offset)
            line, offset = line + part.count(b"\n"), offset + len(part)
        if not data:
            return


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


def _text_chunks(source: int, blocks: Iterator[str], raw: BinaryIO, chunk_bytes: int) -> Iterator[Chunk]:
    """Split on blank lines exactly as `str.split("\\n\\n")` would on the whole file, without
    reading it whole: a piece is emitted only once a separator after it has been seen."""
    docs: list[str] = []
    size, number, pos, carry = 0, 1, 0, ""
    while True:
        block = next(blocks, "")
        pieces = (carry + block).split("\n\n")
        carry = pieces.pop() if block else ""  # the last piece may go on in the next block
        for piece in pieces:
            if piece.strip():
                docs.append(piece)
                size += len(piece)
        if docs and (size >= chunk_bytes or not block):
            yield Chunk(source, "text", number, docs, raw.tell() - pos)
            number, pos, docs, size = number + len(docs), raw.tell(), [], 0
        if not block:
            return


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
