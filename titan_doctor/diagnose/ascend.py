"""CANN toolkit and NPU driver: where they are installed, which version, whether the
current environment has them sourced.

Every path is derived from `roots` (default /usr/local/Ascend and ~/Ascend,
`--ascend-root` replaces them) and the env, so the checks run on directory trees in
tests exactly as on a real host.

The CANN in use is the one this shell points at (ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME),
else the one set_env.sh activates: <root>/ascend-toolkit/latest (or <root>/cann). Not the
newest installed: a newer toolkit that `latest` does not point at is not used.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from titan_doctor.findings import Finding, Status

DEFAULT_ROOTS = ("/usr/local/Ascend", "~/Ascend")
INFO_NAME = "ascend_toolkit_install.info"
HOME_VARS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")


@dataclass(frozen=True)
class CannInstall:
    """One CANN toolkit directory and what its install.info says."""

    home: Path
    version: str | None = None
    arch: str | None = None
    info_file: Path | None = None
    problem: str | None = None  # why the version could not be read
    set_env: Path | None = None
    from_env: str | None = None  # the env var that pointed here, if any
    activated_by: str | None = None  # the link set_env.sh goes through (ascend-toolkit/latest, cann), if any


@dataclass(frozen=True)
class AscendInstall:
    cann: list[CannInstall] = field(default_factory=list)
    driver_version: str | None = None
    driver_file: Path | None = None
    driver_problem: str | None = None
    roots: tuple[Path, ...] = ()


def default_roots() -> list[Path]:
    return [Path(r).expanduser() for r in DEFAULT_ROOTS]


def read_kv(path: Path) -> dict[str, str]:
    """key=value lines (install.info / version.info); keys lower-cased."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip().lower()] = v.strip().strip('"')
    return out


ACTIVATED = (Path("ascend-toolkit") / "latest", Path("cann"))  # what set_env.sh of each layout uses


def _candidate_homes(env: Mapping[str, str], roots: Sequence[Path]) -> list[tuple[Path, str | None, str | None]]:
    """(home, env var naming it, layout link activating it) for every toolkit to look at."""
    cands: list[tuple[Path, str | None, str | None]] = []
    for var in HOME_VARS:
        if env.get(var):
            cands.append((Path(env[var]), var, None))
    for root in roots:
        for link in ACTIVATED:
            cands.append((root / link, None, str(root / link)))
        kit = root / "ascend-toolkit"
        if kit.is_dir():
            cands.extend((p, None, None) for p in sorted(kit.iterdir()) if p.is_dir() and p.name != "latest")
        if root.is_dir():
            cands.extend((p, None, None) for p in sorted(root.glob("cann-*")) if p.is_dir())
    return cands


def _set_env_for(home: Path) -> Path | None:
    for d in (home, home.parent, home.resolve().parent):
        if (d / "set_env.sh").is_file():
            return d / "set_env.sh"
    return None


def inspect_home(home: Path, from_env: str | None = None, activated_by: str | None = None) -> CannInstall:
    """Read one toolkit dir; a missing or malformed info file becomes `problem`, not an error."""
    infos = sorted(home.glob(f"*-linux/{INFO_NAME}"))
    set_env = _set_env_for(home)
    base = CannInstall(home, set_env=set_env, from_env=from_env, activated_by=activated_by)
    if not infos:
        return replace(base, problem=f"no */{INFO_NAME} under {home}")
    info = infos[0]
    try:
        kv = read_kv(info)
    except OSError as e:
        return replace(base, info_file=info, problem=f"cannot read {info}: {e.strerror}")
    version = kv.get("version")
    if not version or not re.match(r"^\d+\.\d+", version):
        return replace(base, info_file=info, problem=f"{info} has no usable 'version=' line")
    arch = kv.get("arch") or info.parent.name.split("-linux")[0]
    return replace(base, version=version, arch=arch, info_file=info)


def discover(env: Mapping[str, str], roots: Sequence[Path] | None = None) -> AscendInstall:
    """All CANN toolkits under the roots / env, and the driver version."""
    roots = tuple(default_roots() if roots is None else roots)
    seen: set[Path] = set()
    cann: list[CannInstall] = []
    for home, var, link in _candidate_homes(env, roots):
        if not home.is_dir():
            if var:  # the env points at nothing: that is worth reporting
                cann.append(CannInstall(home, problem=f"{var}={home} does not exist", from_env=var))
            continue
        key = home.resolve()
        if key in seen:
            if link:  # the env named it first: note that set_env.sh activates it too
                cann = [replace(c, activated_by=link) if c.home.resolve() == key else c for c in cann]
            continue
        seen.add(key)
        cann.append(inspect_home(home, var, link))
    dv, dfile, dprob = _driver(roots)
    return AscendInstall(cann, dv, dfile, dprob, roots)


def _driver(roots: Sequence[Path]) -> tuple[str | None, Path | None, str | None]:
    for root in roots:
        f = root / "driver" / "version.info"
        if f.is_file():
            try:
                v = read_kv(f).get("version")
            except OSError as e:
                return None, f, f"cannot read {f}: {e.strerror}"
            return (v, f, None) if v else (None, f, f"{f} has no 'Version=' line")
    return None, None, None


def version_key(v: str) -> tuple[int, int]:
    """'8.0.RC2' -> (8, 0): enough to compare against the major.minor pins."""
    m = re.match(r"(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def best(inst: AscendInstall) -> CannInstall | None:
    """The toolkit in use: the one this shell's env points at, else the one set_env.sh
    activates (ascend-toolkit/latest, cann), else the newest readable one."""
    usable = [c for c in inst.cann if c.version]
    for pick in (lambda c: c.from_env, lambda c: c.activated_by):
        for c in usable:
            if pick(c):
                return c
    return max(usable, key=lambda c: version_key(c.version or ""), default=None)


def owner(path: str, inst: AscendInstall) -> CannInstall | None:
    """The discovered toolkit a path lies in, compared by path components (so
    .../latest-old/lib64 is not in .../latest) and through symlinks."""
    p = Path(path)
    for c in inst.cann:
        for home in {c.home, c.home.resolve()}:
            for q in {p, p.resolve()}:
                if q == home or home in q.parents:
                    return c
    return None


def set_env_paths(inst: AscendInstall) -> list[Path]:
    return sorted({c.set_env for c in inst.cann if c.set_env})


# ---- checks -------------------------------------------------------------------------


def check_cann(inst: AscendInstall, min_cann: str, want_npu: bool) -> list[Finding]:
    """Is a CANN toolkit installed, readable, and new enough for our pins?"""
    cur = best(inst)
    roots = ", ".join(str(r) for r in inst.roots)
    broken = [c for c in inst.cann if c.problem]
    detail = "\n".join(f"{c.home}: {c.problem}" for c in broken)
    if cur is None:
        status = Status.FAIL if want_npu else Status.INFO
        return [
            Finding(
                "ascend.cann",
                status,
                f"CANN toolkit not found (looked in {roots} and $ASCEND_HOME_PATH)",
                detail=detail,
                fix=f"Install the CANN toolkit (>= {min_cann}) from https://www.hiascend.com/cann, or pass "
                "--ascend-root DIR if it lives elsewhere"
                if want_npu
                else "",
                data={"installs": [str(c.home) for c in inst.cann]},
            )
        ]
    others = [c for c in inst.cann if c.version and c is not cur]
    why = (
        f"{cur.from_env} points at it"
        if cur.from_env
        else f"{cur.activated_by} -> {cur.home.resolve().name}, what set_env.sh activates"
        if cur.activated_by
        else "newest found; no ascend-toolkit/latest link"
    )
    newer = sorted(
        (c for c in others if version_key(c.version or "") > version_key(cur.version or "")),
        key=lambda c: version_key(c.version or ""),
        reverse=True,
    )
    if others:
        detail = "\n".join(
            filter(
                None, [detail, "also installed, not in use: " + ", ".join(f"{c.version} ({c.home})" for c in others)]
            )
        )
    data = {
        "version": cur.version,
        "home": str(cur.home),
        "arch": cur.arch,
        "active_because": why,
        "info_file": str(cur.info_file),
        "set_env": str(cur.set_env) if cur.set_env else None,
        "newer_installed": [c.version for c in newer],
    }
    if version_key(cur.version or "") < version_key(min_cann):
        good = max(
            (c for c in newer if version_key(c.version or "") >= version_key(min_cann)),
            key=lambda c: version_key(c.version or ""),
            default=None,
        )
        fix = (
            f"CANN {good.version} is installed but not active: ln -sfn {good.home.resolve()} "
            f"{cur.activated_by or cur.home}   (then source set_env.sh again)"
            if good and (cur.activated_by or not cur.from_env)
            else f"export ASCEND_HOME_PATH={good.home.resolve()} (or source its set_env.sh)"
            if good
            else f"Install CANN >= {min_cann} (titan-npu needs its HCCL and ops)"
        )
        return [
            Finding(
                "ascend.cann",
                Status.FAIL,
                f"CANN {cur.version} is older than {min_cann} ({cur.home}; {why})",
                detail=detail,
                fix=fix,
                data=data,
            )
        ]
    status = Status.WARN if broken else Status.OK
    return [
        Finding(
            "ascend.cann",
            status,
            f"CANN {cur.version} ({cur.home}; {why})",
            detail=detail,
            fix="Remove or repair the broken install(s) listed above" if broken else "",
            data=data,
        )
    ]


def check_cann_env(inst: AscendInstall, env: Mapping[str, str]) -> list[Finding]:
    """Was set_env.sh sourced? torch_npu needs CANN's lib64 on LD_LIBRARY_PATH."""
    cur = best(inst)
    if cur is None:
        return [Finding("ascend.env", Status.SKIP, "CANN environment: no toolkit to source")]
    ld = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    homes = [v for v in (env.get(k) for k in HOME_VARS) if v]
    owners = [(p, owner(p, inst)) for p in ld]
    lib_on_path = any(o is cur for _, o in owners)
    script = cur.set_env or (set_env_paths(inst) or [None])[0]
    fix = f"source {script}" if script else f"export LD_LIBRARY_PATH={cur.home}/lib64:$LD_LIBRARY_PATH"
    first = next(((p, o) for p, o in owners if o is not None), None)
    if first and first[1] is not cur:
        p, other = first
        older = version_key(other.version or "") < version_key(cur.version or "")
        return [
            Finding(
                "ascend.env",
                Status.FAIL,
                f"LD_LIBRARY_PATH lists {'an older ' if older else 'another '}CANN ({other.version or '?'}) "
                f"before the one in use ({cur.version})",
                detail=f"{p} comes first, so the loader takes libhccl / libascendcl from CANN "
                f"{other.version or other.home} while the rest of CANN {cur.version} is used "
                "(undefined symbols, or HCCL/runtime errors that make no sense).",
                fix=f"Remove {other.home}'s entries from LD_LIBRARY_PATH (start from a clean shell), then: {fix}",
                data={"first": p, "first_version": other.version, "in_use": cur.version},
            )
        ]
    if homes and lib_on_path:
        return [
            Finding(
                "ascend.env",
                Status.OK,
                f"CANN environment sourced (ASCEND_HOME_PATH={homes[0]})",
                data={"set_env": str(script) if script else None},
            )
        ]
    missing = []
    if not homes:
        missing.append("ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME unset")
    if not lib_on_path:
        missing.append(f"{cur.home}/lib64 not on LD_LIBRARY_PATH")
    return [
        Finding(
            "ascend.env",
            Status.FAIL,
            "CANN installed but set_env.sh not sourced in this shell",
            detail="; ".join(missing) + ". torch_npu will fail with 'libhccl.so: cannot open shared object file'.",
            fix=fix + "   (add it to your job script / ~/.bashrc)",
            data={"set_env": str(script) if script else None},
        )
    ]


def check_driver(inst: AscendInstall, want_npu: bool) -> list[Finding]:
    """NPU driver version from <root>/driver/version.info."""
    if inst.driver_problem:
        return [
            Finding(
                "ascend.driver",
                Status.WARN,
                f"NPU driver version unreadable: {inst.driver_problem}",
                fix="Reinstall the Ascend driver package (Ascend-hdk-*-npu-driver)",
            )
        ]
    if inst.driver_version:
        return [
            Finding(
                "ascend.driver",
                Status.OK,
                f"NPU driver {inst.driver_version}",
                data={"version": inst.driver_version, "file": str(inst.driver_file)},
            )
        ]
    status = Status.FAIL if want_npu else Status.INFO
    return [
        Finding(
            "ascend.driver",
            status,
            "NPU driver not found (no driver/version.info under the Ascend roots)",
            fix="Install the Ascend NPU driver and firmware (Ascend-hdk-*-npu-driver) on the host; "
            "in a container mount /usr/local/Ascend/driver"
            if want_npu
            else "",
        )
    ]
