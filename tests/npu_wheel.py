"""The torch_npu wheel, read statically (it cannot be imported without CANN): fetched once
from the package registry into ~/.cache/titan-npu ($TITAN_NPU_CACHE), shared by the tests
that check our NPU-side names and calls against it. Skips only when the registry is
unreachable."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

VERSION = "2.13.0"
CACHE = Path(os.environ.get("TITAN_NPU_CACHE", Path.home() / ".cache" / "titan-npu"))
SCHEMA_FILE = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
DOCS_FILE = "torch_npu/_op_plugin_docs.py"


def torch_npu_wheel() -> Path:
    wheels = sorted(CACHE.glob(f"torch_npu-{VERSION}-*.whl"))
    if not wheels:
        CACHE.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--quiet",
                    f"torch-npu=={VERSION}",
                    "-d",
                    str(CACHE),
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            pytest.skip("package registry unreachable (pip download timed out)")
        wheels = sorted(CACHE.glob(f"torch_npu-{VERSION}-*.whl"))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"could not fetch torch-npu=={VERSION} from the package registry: {last}")
    return wheels[0]


def read_member(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(name).decode("utf-8", "replace")


# ---------------------------------------------------------------- op schemas


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: str | None
    keyword_only: bool


@dataclass(frozen=True)
class Schema:
    name: str
    params: tuple[Param, ...]
    returns: tuple[str, ...]
    returns_tuple: bool


_FUNC = re.compile(r"^\s*(?:-\s*)?func:\s*(\w+)\((.*)\)\s*->\s*(.+?)\s*$")


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return parts + ([current.strip()] if current.strip() else [])


def op_schemas(yaml_text: str) -> dict[str, Schema]:
    """`func:` lines of the codegen yaml, by op name (overloads such as `.out` are skipped)."""
    out = {}
    for line in yaml_text.splitlines():
        m = _FUNC.match(line)
        if not m:
            continue
        name, args, ret = m.groups()
        params, keyword_only = [], False
        for arg in _split_top_level(args):
            if arg == "*":
                keyword_only = True
                continue
            decl, _, default = arg.partition("=")
            type_, pname = decl.rsplit(None, 1)
            params.append(Param(pname, type_, default or None, keyword_only))
        is_tuple = ret.startswith("(")
        returns = tuple(_split_top_level(ret[1:-1])) if is_tuple else (ret,)
        out[name] = Schema(name, tuple(params), returns, is_tuple)
    return out
