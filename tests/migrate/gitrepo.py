"""Real git repositories and file trees for the migrate tests (no mocks of git)."""

from __future__ import annotations

import os
import subprocess

# No user or system git configuration: a machine's global excludes file must not change
# what the tests see (conftest.py sets the same for migrate's own git calls).
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(cwd, *args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=GIT_ENV, **kw)


def make(root, files: dict[str, str]) -> None:
    """Write {relative path: text} under root."""
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def commit_all(repo) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "x")
