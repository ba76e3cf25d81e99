"""Which files are scripts and configs, and the formats that can be checked again after a
rewrite: the names the line rewriter (lines.py) reads, and JSON / TOML re-parsed."""

from __future__ import annotations

import json
import sys
from pathlib import PurePath

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TEXT_SUFFIXES = {".sh", ".bash", ".zsh", ".env", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".json", ".sbatch", ".slurm"}
TEXT_NAMES = {"Dockerfile", "Containerfile", ".env"}


def is_text_file(path: PurePath) -> bool:
    """A script or config the line rewriter reads: by suffix, by name, .env files and pip
    requirement lists."""
    name = path.name
    return (
        path.suffix in TEXT_SUFFIXES
        or name in TEXT_NAMES
        or name.startswith(".env")
        or name.endswith(".env")
        or is_requirements_file(path)
    )


def is_requirements_file(path: PurePath) -> bool:
    """pip requirement and constraint lists (requirements.txt, requirements-dev.txt,
    constraints.txt): where a project pins CUDA-only packages (flash-attn, pynvml)."""
    return path.suffix == ".txt" and path.name.startswith(("requirements", "constraints"))


def reparse_error(path: PurePath, old: bytes, new: bytes) -> str | None:
    """Why `new` no longer parses as its format (JSON, TOML) when `old` did; else None.
    Formats without a standard-library parser (YAML, shell) are not checked."""
    if path.suffix == ".json":
        load, errors = (lambda b: json.loads(b.decode("utf-8-sig"))), (ValueError,)
    elif path.suffix == ".toml":
        load, errors = (lambda b: tomllib.loads(b.decode("utf-8-sig"))), (tomllib.TOMLDecodeError,)
    else:
        return None
    try:
        load(old)
    except (*errors, UnicodeDecodeError):
        return None  # a template or a dialect (JSON with comments): nothing to compare
    try:
        load(new)
    except (*errors, UnicodeDecodeError) as e:
        return str(e)
    return None


CI_FOLDERS = (".github/workflows/", ".circleci/", ".buildkite/")
CI_NAMES = (".gitlab-ci.yml", "azure-pipelines.yml", ".travis.yml")
CI_REASON = "a CI workflow runs on the project's own runners: change it in the job that runs on Ascend"


def is_ci_config(path: str) -> bool:
    """A CI workflow (GitHub Actions, GitLab CI, CircleCI, ...): its jobs run on the
    project's own runners, so its settings are reported with their NPU form, not rewritten."""
    posix = path.replace("\\", "/")
    return any(f in "/" + posix for f in ("/" + c for c in CI_FOLDERS)) or posix.rsplit("/", 1)[-1] in CI_NAMES
