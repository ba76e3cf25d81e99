"""CANN / driver discovery on directory trees shaped like real installs."""

from titan_doctor.diagnose import ascend
from titan_doctor.findings import Status

from .conftest import make_cann, make_driver


def test_reads_version_from_install_info(tmp_path):
    home = make_cann(tmp_path, "8.0.RC2")
    inst = ascend.discover({}, [tmp_path])
    cur = ascend.best(inst)
    assert cur.version == "8.0.RC2" and cur.arch == "x86_64"
    assert cur.set_env == tmp_path / "ascend-toolkit" / "set_env.sh"
    assert cur.home.resolve() == home.resolve()


def test_the_toolkit_latest_points_to_is_reported_not_the_newest(tmp_path):
    make_cann(tmp_path, "7.0.0")  # 'latest' points at the first one made
    newest = make_cann(tmp_path, "8.1.RC1")
    make_cann(tmp_path, "8.0.0")
    inst = ascend.discover({}, [tmp_path])
    assert sorted(c.version for c in inst.cann) == ["7.0.0", "8.0.0", "8.1.RC1"]
    f = ascend.check_cann(inst, "8.0", want_npu=True)[0]
    assert f.status is Status.FAIL and f.message.startswith("CANN 7.0.0 is older than 8.0")
    assert "ascend-toolkit/latest -> 7.0.0, what set_env.sh activates" in f.message
    assert "8.1.RC1" in f.detail and "8.0.0" in f.detail and f.data["newer_installed"] == ["8.1.RC1", "8.0.0"]
    assert f.fix.startswith(
        f"CANN 8.1.RC1 is installed but not active: ln -sfn {newest.resolve()} {tmp_path / 'ascend-toolkit' / 'latest'}"
    )


def test_latest_repointed_to_an_older_toolkit_is_what_runs(tmp_path):
    make_cann(tmp_path, "8.3.RC1")
    make_cann(tmp_path, "8.0.0")
    latest = tmp_path / "ascend-toolkit" / "latest"
    latest.unlink()
    latest.symlink_to("8.0.0")
    f = ascend.check_cann(ascend.discover({}, [tmp_path]), "8.0", want_npu=True)[0]
    assert f.status is Status.OK and f.message.startswith("CANN 8.0.0 (") and "8.3.RC1" in f.detail


def test_env_var_points_at_the_toolkit_in_use(tmp_path):
    make_cann(tmp_path, "8.3.RC1")
    old = make_cann(tmp_path, "8.0.RC1")
    inst = ascend.discover({"ASCEND_HOME_PATH": str(old)}, [tmp_path])
    assert ascend.best(inst).version == "8.0.RC1"


def test_cann_older_than_pin_fails_with_fix(tmp_path):
    make_cann(tmp_path, "7.0.RC1", arch="aarch64")
    f = ascend.check_cann(ascend.discover({}, [tmp_path]), "8.0", want_npu=True)[0]
    assert f.status is Status.FAIL and "7.0.RC1 is older than 8.0" in f.message
    assert f.data["arch"] == "aarch64" and "CANN >= 8.0" in f.fix


def test_missing_info_file_is_reported_not_raised(tmp_path):
    make_cann(tmp_path, None, info="<none>", name="8.2.RC1")
    inst = ascend.discover({}, [tmp_path])
    assert ascend.best(inst) is None
    assert "no */ascend_toolkit_install.info" in inst.cann[0].problem
    f = ascend.check_cann(inst, "8.0", want_npu=True)[0]
    assert f.status is Status.FAIL and "not found" in f.message and "ascend_toolkit_install.info" in f.detail


def test_malformed_info_file_beside_a_good_one_warns(tmp_path):
    make_cann(tmp_path, "8.1.RC1")
    make_cann(tmp_path, None, info="version\n\x00garbage=\n", name="8.2.RC1")
    inst = ascend.discover({}, [tmp_path])
    f = ascend.check_cann(inst, "8.0", want_npu=True)[0]
    assert f.status is Status.WARN and "8.1.RC1" in f.message
    assert "has no usable 'version=' line" in f.detail


def test_cann_layout_and_env_pointing_nowhere(tmp_path):
    make_cann(tmp_path, "8.5.0", layout="cann")
    inst = ascend.discover({"ASCEND_TOOLKIT_HOME": str(tmp_path / "gone")}, [tmp_path])
    assert [c.version for c in inst.cann if c.version] == ["8.5.0"]
    assert any("ASCEND_TOOLKIT_HOME=" in (c.problem or "") and "does not exist" in c.problem for c in inst.cann)
    assert ascend.best(inst).set_env == tmp_path / "cann" / "set_env.sh"


def test_nothing_installed_is_info_off_ascend_and_fail_on_it(tmp_path):
    inst = ascend.discover({}, [tmp_path])
    assert ascend.check_cann(inst, "8.0", want_npu=False)[0].status is Status.INFO
    assert ascend.check_cann(inst, "8.0", want_npu=True)[0].status is Status.FAIL


def test_set_env_not_sourced_names_the_script(tmp_path):
    make_cann(tmp_path, "8.0.0")
    inst = ascend.discover({}, [tmp_path])
    f = ascend.check_cann_env(inst, {"LD_LIBRARY_PATH": "/usr/lib"})[0]
    assert f.status is Status.FAIL and "set_env.sh not sourced" in f.message
    assert f.fix.startswith(f"source {tmp_path / 'ascend-toolkit' / 'set_env.sh'}")


def test_set_env_sourced(tmp_path):
    home = make_cann(tmp_path, "8.0.0")
    env = {"ASCEND_HOME_PATH": str(home), "LD_LIBRARY_PATH": f"{home}/lib64:/usr/lib"}
    f = ascend.check_cann_env(ascend.discover(env, [tmp_path]), env)[0]
    assert f.status is Status.OK


def test_ld_library_path_is_matched_by_path_not_substring(tmp_path):
    home = make_cann(tmp_path, "8.0.0")
    latest = tmp_path / "ascend-toolkit" / "latest"
    env = {"ASCEND_HOME_PATH": str(latest), "LD_LIBRARY_PATH": f"{latest}-old/lib64:/usr/lib"}
    f = ascend.check_cann_env(ascend.discover(env, [tmp_path]), env)[0]
    assert f.status is Status.FAIL and f"{latest}/lib64 not on LD_LIBRARY_PATH" in f.detail
    env["LD_LIBRARY_PATH"] = f"{home}/lib64:/usr/lib"  # the real dir behind 'latest' counts
    assert ascend.check_cann_env(ascend.discover(env, [tmp_path]), env)[0].status is Status.OK


def test_an_older_cann_first_on_ld_library_path_is_flagged(tmp_path):
    make_cann(tmp_path, "8.2.RC1")
    old = make_cann(tmp_path, "7.0.0")
    latest = tmp_path / "ascend-toolkit" / "latest"
    env = {
        "ASCEND_HOME_PATH": str(latest),
        "LD_LIBRARY_PATH": f"{old}/lib64:{latest}/lib64:{latest}/lib64/plugin/opskernel",
    }
    f = ascend.check_cann_env(ascend.discover(env, [tmp_path]), env)[0]
    assert f.status is Status.FAIL and f.message == (
        "LD_LIBRARY_PATH lists an older CANN (7.0.0) before the one in use (8.2.RC1)"
    )
    assert f.data["first"] == f"{old}/lib64" and f.fix.endswith(f"source {tmp_path / 'ascend-toolkit' / 'set_env.sh'}")
    env["LD_LIBRARY_PATH"] = f"{latest}/lib64:{old}/lib64"  # the active one first: it wins
    assert ascend.check_cann_env(ascend.discover(env, [tmp_path]), env)[0].status is Status.OK


def test_driver_version(tmp_path):
    make_driver(tmp_path, "24.1.rc2")
    f = ascend.check_driver(ascend.discover({}, [tmp_path]), want_npu=True)[0]
    assert f.status is Status.OK and f.data["version"] == "24.1.rc2"
    (tmp_path / "driver" / "version.info").write_text("ascendhal_version=7\n")
    f = ascend.check_driver(ascend.discover({}, [tmp_path]), want_npu=True)[0]
    assert f.status is Status.WARN and "no 'Version=' line" in f.message


def test_version_key_orders_rc_lines():
    assert ascend.version_key("8.0.RC2") == (8, 0) < ascend.version_key("8.1.RC1")
    assert ascend.version_key("garbage") == (0, 0)
