"""Runs inside the interpreter being diagnosed (any Python >= 3.8, no titan imports).

Prints one JSON object describing python / torch / torch_npu. Never raises: an import
that fails is captured with its traceback text so the doctor can classify it. torch is
imported unless --no-import-torch asks for its files only (and even then when torch_npu
is installed or torch is a CUDA build: those need the import to be judged).
"""

import json
import os
import platform
import re
import subprocess
import sys
import traceback

TAIL = 40  # traceback lines kept


def _dist_version(name):
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return metadata.version(name)
    except Exception:
        return None


def _spec_origin(name):
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return os.path.dirname(spec.origin or "")


def _read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return ""


def _torch_static(torch_dir):
    """What torch is, read from its files without importing it."""
    text = _read(os.path.join(torch_dir, "version.py"))
    ver = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    cuda = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)", text, re.M)
    hip = re.search(r"^hip\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)", text, re.M)
    fsdp = _read(os.path.join(torch_dir, "distributed", "fsdp", "__init__.py"))
    return {
        "version": ver.group(1) if ver else None,
        "cuda": cuda.group(1) if cuda else None,
        "hip": hip.group(1) if hip else None,
        "fsdp2_public": bool(re.search(r"['\"]fully_shard['\"]", fsdp)),
    }


def _autoload_entry():
    try:
        from importlib import metadata

        eps = metadata.entry_points()
        group = eps.select(group="torch.backends") if hasattr(eps, "select") else eps.get("torch.backends", [])
        return [ep.name for ep in group]
    except Exception:
        return []


def _error(exc_text):
    lines = [ln for ln in exc_text.strip().splitlines() if ln.strip()]
    return {"error": lines[-1] if lines else "unknown error", "error_text": "\n".join(lines[-TAIL:])}


def main():
    files_only = "--no-import-torch" in sys.argv
    out = {
        "python": {
            "version": platform.python_version(),
            "executable": sys.executable,
            "implementation": platform.python_implementation(),
        },
        "torch": {"installed": False},
        "torch_npu": {"installed": False},
    }
    torch_dir = _spec_origin("torch")
    npu_dir = _spec_origin("torch_npu")
    if torch_dir:
        out["torch"].update(installed=True, location=torch_dir, dist_version=_dist_version("torch"))
        out["torch"].update(_torch_static(torch_dir))
    if npu_dir:
        out["torch_npu"].update(
            installed=True, location=npu_dir, dist_version=_dist_version("torch_npu"), autoload_entry=_autoload_entry()
        )
    plain = _start_plain_import(out) if torch_dir else None
    if torch_dir and (npu_dir or out["torch"].get("cuda") or out["torch"].get("hip") or not files_only):
        _import_and_count(out)
    _finish_plain_import(out, plain)
    print(json.dumps(out))


def _import_and_count(out):
    try:
        import torch
    except BaseException:  # noqa: BLE001 - anything, even SystemExit, is a finding
        out["torch"].update(imported=False, **_error(traceback.format_exc()))
        return
    out["torch"].update(imported=True, version=torch.__version__, cuda=getattr(torch.version, "cuda", None))
    try:
        out["torch"]["cuda_count"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        out["torch"]["cuda_count"] = 0
    if not out["torch_npu"]["installed"]:
        return
    try:
        import torch_npu  # noqa: F401

        out["torch_npu"].update(imported=True, version=getattr(torch_npu, "__version__", None))
        try:
            out["torch_npu"]["npu_count"] = int(torch.npu.device_count())
        except Exception as e:  # driver present but broken
            out["torch_npu"].update(npu_count=0, count_error=str(e).splitlines()[0] if str(e) else type(e).__name__)
    except BaseException:  # noqa: BLE001
        out["torch_npu"].update(imported=False, **_error(traceback.format_exc()))


def _start_plain_import(out):
    """If `import torch` would auto-load torch_npu, try that import alongside ours: when
    torch_npu turns out broken we already know whether plain `import torch` dies too."""
    if not out["torch_npu"].get("autoload_entry") or os.environ.get("TD_USER_AUTOLOAD") == "0":
        return None
    env = dict(os.environ)
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    try:
        return subprocess.Popen(
            [sys.executable, "-c", "import torch"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError:
        return None


def _finish_plain_import(out, proc):
    if proc is None:
        return
    if out["torch_npu"].get("imported") is not False:  # torch_npu is fine: nothing to learn
        proc.kill()
        proc.communicate()
        return
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        out["torch"]["plain_import_error"] = "plain `import torch` did not finish within 60 s"
        return
    if proc.returncode != 0:
        out["torch"]["plain_import_error"] = _error(err)["error"]


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # noqa: BLE001 - the doctor must always get JSON back
        print(json.dumps({"probe_error": traceback.format_exc()}))
