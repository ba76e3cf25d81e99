"""Python / torch / torch_npu: what is installed, does it import, do the versions fit
together and with CANN (rules/versions.toml), and does torch have FSDP2.

Inputs are the probe's JSON (see _probe_script.py) and the CANN version found by
ascend.py; outputs are findings. Import failures are classified with the same
signatures the log explainer uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import titan_knowledge as knowledge
from titan_doctor.diagnose import signatures
from titan_doctor.diagnose.ascend import version_key
from titan_doctor.findings import Finding, Status

CPU_WHEEL_INDEX = "https://download.pytorch.org/whl/cpu"


def table() -> dict[str, Any]:
    return knowledge.load("versions")


def base(v: str | None) -> str:
    """'2.1.0.post10' / '2.13.0+cpu' / '2.10.0rc2' -> '2.1.0' / '2.13.0' / '2.10.0'."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", v or "")
    if not m:
        return ""
    return f"{m.group(1)}.{m.group(2)}.{m.group(3) or 0}"


def vtuple(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in base(v).split(".")) if base(v) else ()


def mm(v: str | None) -> str:
    return ".".join(base(v).split(".")[:2])


# ---- what to install: torch_npu for this torch AND this CANN --------------------------


def cann_matches(row_cann: str, installed: str | None) -> bool:
    """'8.0.RC3' of the table covers an installed '8.0.RC3' and '8.0.RC3.alpha002'."""
    return bool(installed) and (installed == row_cann or installed.startswith(row_cann + "."))


def pair_for_cann(cann: str | None, data: Mapping[str, Any], min_torch: str | None = None) -> dict | None:
    """The newest (torch, torch_npu) row released for this CANN, torch >= min_torch."""
    rows = [
        r
        for r in data.get("compat", [])
        if cann_matches(r["cann"], cann) and (not min_torch or vtuple(r["torch"]) >= vtuple(min_torch))
    ]
    return max(rows, key=lambda r: vtuple(r["torch"]), default=None)


def torch_npu_advice(torch: str | None, cann: str | None, data: Mapping[str, Any]) -> str:
    """The pip command for a torch_npu that fits both this torch and the installed CANN
    (rules/versions.toml [[compat]]); when no release pairs them, the pair that fits CANN."""
    t = base(torch)
    rows = data.get("compat", [])
    same_torch = [r for r in rows if r["torch"] == t]
    exact = [r for r in same_torch if cann_matches(r["cann"], cann)]
    if exact:
        return f"pip install torch-npu=={exact[0]['torch_npu']}   (built for torch {t} and CANN {exact[0]['cann']})"
    pair = pair_for_cann(cann, data)
    if cann and pair:
        return (
            f"pip install torch=={pair['torch']} torch-npu=={pair['torch_npu']}   (no torch_npu release pairs "
            f"torch {t or '?'} with CANN {cann}; this pair is built for CANN {pair['cann']})"
        )
    if same_torch:
        newest = max(same_torch, key=lambda r: version_key(r["cann"]))
        return f"pip install torch-npu=={newest['torch_npu']}   (built for CANN {newest['cann']}" + (
            f"; CANN {cann} is not in titan-npu's table: check the torch_npu release notes)"
            if cann
            else "; check it matches your CANN)"
        )
    return f"pip install torch-npu=={t or '<torch version>'}   (not in titan-npu's table: check the torch_npu release notes)"


# ---- python / torch -----------------------------------------------------------------


def check_python(probe: Mapping[str, Any]) -> list[Finding]:
    py = probe.get("python", {})
    ver = py.get("version", "?")
    if vtuple(ver) and vtuple(ver) < (3, 9):
        return [
            Finding(
                "versions.python",
                Status.FAIL,
                f"Python {ver} is too old ({py.get('executable')})",
                fix="Use Python 3.10 or 3.11 (what current torch_npu wheels are built for)",
            )
        ]
    return [Finding("versions.python", Status.OK, f"Python {ver} ({py.get('executable')})", data=dict(py))]


def check_torch(probe: Mapping[str, Any], pins: Mapping[str, Any], cann: str | None = None) -> list[Finding]:
    t = probe.get("torch", {})
    if not t.get("installed"):
        pair = pair_for_cann(cann, table())
        fix = (
            f"pip install 'torch=={pair['torch']}' --index-url {CPU_WHEEL_INDEX} && pip install "
            f"torch-npu=={pair['torch_npu']}   (CPU build of torch; the pair released for CANN {pair['cann']})"
            if pair
            else f"pip install 'torch==2.13.0' --index-url {CPU_WHEEL_INDEX}   (CPU build; on Ascend pair "
            "it with the torch_npu built for your CANN, see versions.matrix)"
        )
        return [
            Finding(
                "versions.torch",
                Status.FAIL,
                "torch is not installed in this interpreter",
                detail=f"Looked with {probe.get('python', {}).get('executable')}.",
                fix=fix,
            )
        ]
    ver = t.get("version") or t.get("dist_version") or "?"
    build = "cuda " + t["cuda"] if t.get("cuda") else ("rocm " + t["hip"] if t.get("hip") else "cpu")
    data = {"version": ver, "build": build, "location": t.get("location"), "imported": t.get("imported")}
    if t.get("imported") is False:
        m = signatures.classify(t.get("error_text", ""))
        return [
            Finding(
                "versions.torch",
                Status.FAIL,
                f"torch {ver} fails to import: {t.get('error')}",
                detail=(m.sig.cause if m else "") + "\n" + t.get("error_text", "")[-800:],
                fix=m.sig.fix if m else "Reinstall torch: pip install --force-reinstall torch==<version>",
                data=data,
            )
        ]
    out = []
    if vtuple(ver) < vtuple(pins["min_torch"]):
        out.append(
            Finding(
                "versions.torch",
                Status.FAIL,
                f"torch {ver} is older than {pins['min_torch']} "
                f"({'2.0.x has known bugs' if mm(ver) == '2.0' else 'unsupported'})",
                fix="pip install 'torch==2.13.0' --index-url " + CPU_WHEEL_INDEX,
                data=data,
            )
        )
    else:
        how = (
            "imported in a subprocess"
            if t.get("imported")
            else "read from torch/version.py without importing (--no-import-torch)"
        )
        out.append(Finding("versions.torch", Status.OK, f"torch {ver} ({build} build)", detail=how, data=data))
    return out


def _autoload(t: Mapping[str, Any]) -> list[Finding]:
    """The consequence, reported after its cause: torch >= 2.5 auto-loads torch_npu."""
    if not t.get("plain_import_error"):
        return []
    return [
        Finding(
            "versions.torch_npu.autoload",
            Status.FAIL,
            "so plain `import torch` fails too: it auto-loads the broken torch_npu",
            detail=t["plain_import_error"],
            fix="Fix torch_npu (above), or export TORCH_DEVICE_BACKEND_AUTOLOAD=0 meanwhile",
            data={"error": t["plain_import_error"]},
        )
    ]


def check_fsdp2(probe: Mapping[str, Any], pins: Mapping[str, Any], cann: str | None = None) -> list[Finding]:
    """The trainer shards with FSDP2: torch.distributed.fsdp.fully_shard must be public."""
    t = probe.get("torch", {})
    if not t.get("installed"):
        return [Finding("versions.fsdp2", Status.SKIP, "FSDP2: torch not installed")]
    ver = t.get("version") or t.get("dist_version")
    need = pins["fsdp2_min_torch"]
    if t.get("fsdp2_public") and vtuple(ver) >= vtuple(need):
        return [Finding("versions.fsdp2", Status.OK, "FSDP2 available (torch.distributed.fsdp.fully_shard)")]
    return [
        Finding(
            "versions.fsdp2",
            Status.FAIL,
            f"FSDP2 missing: torch {ver} does not export torch.distributed.fsdp.fully_shard",
            detail=f"titan-train shards with FSDP2, public from torch {need}.",
            fix=_upgrade_advice(need, cann),
        )
    ]


def _upgrade_advice(need: str, cann: str | None) -> str:
    pair = pair_for_cann(cann, table(), need)
    if pair:
        return (
            f"Upgrade torch and torch_npu together: pip install torch=={pair['torch']} "
            f"torch-npu=={pair['torch_npu']}   (released for CANN {pair['cann']})"
        )
    newest = max(
        (r for r in table().get("compat", []) if vtuple(r["torch"]) >= vtuple(need)),
        key=lambda r: (version_key(r["cann"]), vtuple(r["torch"])),
        default=None,
    )
    return f"Upgrade torch and torch_npu together to >= {need}" + (
        f"; CANN {cann} has no torch_npu release with torch >= {need}: install CANN {newest['cann']} and "
        f"pip install torch=={newest['torch']} torch-npu=={newest['torch_npu']}"
        if cann and newest
        else f", e.g. pip install torch=={newest['torch']} torch-npu=={newest['torch_npu']} (CANN {newest['cann']})"
        if newest
        else ""
    )


# ---- torch_npu ----------------------------------------------------------------------


def check_torch_npu(
    probe: Mapping[str, Any], want_npu: bool, set_env: list[str], cann: str | None = None
) -> list[Finding]:
    """Installed? Importable? If not, say why in words, from the real error text."""
    n = probe.get("torch_npu", {})
    tver = (probe.get("torch") or {}).get("version") or (probe.get("torch") or {}).get("dist_version")
    advice = torch_npu_advice(tver, cann, table())
    if not n.get("installed"):
        status = Status.WARN if want_npu else Status.INFO
        why = "Ascend hardware/CANN found, but " if want_npu else ""
        fix = advice if want_npu else ""
        if want_npu and (probe.get("torch") or {}).get("cuda"):  # torch_npu refuses a CUDA torch
            fix = (
                f"pip install --force-reinstall 'torch=={base(tver)}+cpu' --index-url {CPU_WHEEL_INDEX} && "
                f"{advice}   (torch_npu needs the CPU build of torch)"
            )
        return [
            Finding("versions.torch_npu", status, f"{why}torch_npu is not installed (no Ascend NPU support)", fix=fix)
        ]
    ver = n.get("version") or n.get("dist_version") or "?"
    data = {"version": ver, "location": n.get("location"), "imported": n.get("imported")}
    if n.get("imported") is False:
        m = signatures.classify(n.get("error_text", ""))
        if m is None:
            return [
                Finding(
                    "versions.torch_npu",
                    Status.FAIL,
                    f"torch_npu {ver} fails to import: {n.get('error')}",
                    detail=n.get("error_text", "")[-1500:],
                    fix="Check torch/torch_npu/CANN versions below; reinstall torch_npu",
                    data=data,
                )
            ] + _autoload(probe.get("torch", {}))
        data.update(cause=m.sig.id, **m.groups)
        fix = signatures.fill(m.sig.fix, m.groups)
        title = m.sig.title
        if m.sig.id == "import.cann_missing":
            title = "CANN missing / set_env.sh not sourced"
            fix = (
                f"source {set_env[0]}"
                if set_env
                else "Install the CANN toolkit, then: source /usr/local/Ascend/ascend-toolkit/set_env.sh"
            )
            data["set_env"] = set_env[0] if set_env else None
        elif m.sig.id == "import.undefined_symbol" and tver:
            fix = advice
        return [
            Finding(
                "versions.torch_npu",
                Status.FAIL,
                f"torch_npu {ver} fails to import: {title}",
                detail=signatures.fill(m.sig.cause, m.groups) + f"\nerror: {n.get('error')}",
                fix=fix,
                data=data,
            )
        ] + _autoload(probe.get("torch", {}))
    count = n.get("npu_count")
    msg = f"torch_npu {ver} imports" + (f", sees {count} NPU(s)" if count is not None else "")
    status = Status.OK if count else Status.WARN
    return [
        Finding(
            "versions.torch_npu",
            status,
            msg,
            detail=n.get("count_error", ""),
            fix="" if count else "Check the driver: npu-smi info; ls /dev/davinci*",
            data=data,
        )
    ]


# ---- the matrix ---------------------------------------------------------------------


def matrix_verdicts(
    torch: str | None, torch_npu: str | None, cann: str | None, python: str | None, data: Mapping[str, Any]
) -> list[Finding]:
    """Verdicts for one (torch, torch_npu, CANN, Python) combination against the pins and
    the published torch_npu compatibility table. Pure: versions in, findings out."""
    pins = data["pins"]
    code = "versions.matrix"
    out: list[Finding] = []
    if torch and vtuple(torch) < vtuple(pins["min_torch"]):
        pair = pair_for_cann(cann, data, pins["min_torch"])
        out.append(
            Finding(
                code,
                Status.FAIL,
                f"torch {torch} < {pins['min_torch']} (our pin; 2.0.x has known bugs)",
                fix=f"pip install torch=={pair['torch']} torch-npu=={pair['torch_npu']}   (released for "
                f"CANN {pair['cann']})"
                if pair
                else "pip install torch==2.6.0 torch-npu==2.6.0 (or newer, same version for both)",
            )
        )
    if torch and torch_npu and base(torch) != base(torch_npu):
        out.append(
            Finding(
                code,
                Status.FAIL,
                f"torch_npu {torch_npu} is built for torch {base(torch_npu)}, but torch is {torch}",
                detail="torch_npu must carry exactly the torch version it sits on (else: undefined symbol at import).",
                fix=torch_npu_advice(torch, cann, data) + f"   or   pip install torch=={base(torch_npu)}",
                data={"torch": torch, "torch_npu": torch_npu},
            )
        )
    if cann and version_key(cann) < version_key(pins["min_cann"]):
        out.append(
            Finding(
                code,
                Status.FAIL,
                f"CANN {cann} < {pins['min_cann']} (our pin)",
                fix=f"Install CANN >= {pins['min_cann']} and the torch_npu built for it",
            )
        )
    if torch_npu and not cann:
        out.append(
            Finding(
                code,
                Status.INFO,
                f"CANN not found: cannot match torch_npu {torch_npu} to a CANN version (see ascend.cann)",
            )
        )
    rows = [r for r in data.get("compat", []) if torch_npu and r["torch_npu"] == torch_npu]
    if torch_npu and cann:
        if not rows:
            out.append(
                Finding(
                    code,
                    Status.INFO,
                    f"torch_npu {torch_npu} is not in our compatibility table; cannot confirm it fits CANN {cann}",
                    detail="Check the torch_npu release notes for its CANN version.",
                )
            )
        elif cann not in {r["cann"] for r in rows}:
            wants = ", ".join(sorted({r["cann"] for r in rows}))
            same_cann = sorted({r["torch_npu"] for r in data.get("compat", []) if r["cann"] == cann})
            alt = f"; with CANN {cann} use torch_npu {' / '.join(same_cann)}" if same_cann else ""
            out.append(
                Finding(
                    code,
                    Status.WARN,
                    f"torch_npu {torch_npu} was released for CANN {wants}, found CANN {cann}",
                    fix=f"Install CANN {wants}{alt}",
                    data={"sources": [r["source"] for r in rows]},
                )
            )
    py_rows = [r for r in data.get("python", []) if torch and r["torch"] == base(torch)]
    if python and py_rows and mm(python) not in py_rows[0]["python"]:
        out.append(
            Finding(
                code,
                Status.WARN,
                f"Python {mm(python)} is not among the Pythons torch_npu ships "
                f"for torch {base(torch)} ({', '.join(py_rows[0]['python'])})",
                fix=f"Use Python {py_rows[0]['python'][-1]}",
                data={"source": py_rows[0]["source"]},
            )
        )
    if not out:
        what = ", ".join(
            x
            for x in (
                torch and f"torch {torch}",
                torch_npu and f"torch_npu {torch_npu}",
                cann and f"CANN {cann}",
                python and f"Python {mm(python)}",
            )
            if x
        )
        listed = " (listed together in the torch_npu table)" if rows and cann else ""
        out.append(Finding(code, Status.OK, f"versions fit: {what}{listed}"))
    return out


def check_matrix(probe: Mapping[str, Any], cann: str | None) -> list[Finding]:
    n = probe.get("torch_npu", {})
    if not n.get("installed") and not cann:
        return [Finding("versions.matrix", Status.SKIP, "version matrix: no torch_npu and no CANN to match")]
    t = probe.get("torch", {})
    return matrix_verdicts(
        t.get("version") or t.get("dist_version"),
        n.get("version") or n.get("dist_version"),
        cann,
        probe.get("python", {}).get("version"),
        table(),
    )
