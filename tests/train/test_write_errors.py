"""A full disk, anywhere, is one line (issue 18): the classifier on the errors torch really
raises (its zip writer's inline_container.cc assertion, DCP's per-rank CheckpointException),
the launcher's summary of a rank that died of it, an export and prepare-data into a full
disk or under a file. The same through real ranks: test_disk_full.py."""

from __future__ import annotations

import errno
import os
import re
import traceback
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from titan_train.runtime import faults, launch, write_errors
from titan_train.runtime.write_errors import WriteError

from ..checkpoints import TINY
from ..disk import FullDisk, small_tmpfs, torch_save_on_a_full_disk
from .conftest import TINYSHAKESPEARE

LINE = re.compile(
    r"^no space left on device writing (\S+): [\d.]+ (B|KiB|MiB|GiB|TiB) free on (/\S*), (about [\d.]+ \S+ needed|"
    r"how much is needed is unknown)$"
)


def _torch_save_error(path: Path) -> BaseException:
    """What torch.save raises on a disk that fills up after 512 bytes, for real."""
    try:
        with FullDisk(path, 512) as fh:
            torch.save({"w": torch.zeros(10_000)}, fh)
    except BaseException as e:  # noqa: BLE001
        return e
    raise AssertionError("torch.save did not fail")


def test_torchs_zip_writer_on_a_full_disk_is_named_with_free_space_and_the_need(tmp_path):
    err = _torch_save_error(tmp_path / "model.pt")
    assert "inline_container.cc" in str(err)  # what a user saw before: torch's internal assertion
    line = str(write_errors.explain(err, tmp_path / "model.pt", needed=40_000))
    m = LINE.match(line)
    assert m, line
    assert m.group(1) == str(tmp_path / "model.pt") and m.group(4) == "about 39.1 KiB needed"
    assert Path(m.group(3)) == write_errors.mount_point(tmp_path)


def test_older_torchs_writer_text_and_a_quota_are_full_disks_too(tmp_path):
    older = RuntimeError(
        "[enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing file data/0: file write failed"
    )
    quota = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), str(tmp_path / "x"))
    for err in (older, quota):
        assert LINE.match(str(write_errors.explain(err, tmp_path / "x"))).group(4) == "how much is needed is unknown"


def test_dcps_per_rank_failure_is_looked_into(tmp_path):
    """DCP re-raises a rank's write error inside CheckpointException({rank: (error, traceback)})."""
    import torch.distributed.checkpoint as dcp

    class FullWriter(dcp.FileSystemWriter):
        def write_data(self, plan, planner):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "ckpt" / "__0_0.distcp"))

    with pytest.raises(BaseException) as caught:
        dcp.save({"w": torch.zeros(4)}, storage_writer=FullWriter(str(tmp_path / "ckpt")), no_dist=True)
    assert type(caught.value).__name__ == "CheckpointException"
    assert write_errors.disk_full(caught.value).errno == errno.ENOSPC


def test_other_errors_are_not_called_a_full_disk(tmp_path):
    (tmp_path / "exists").mkdir()
    for err in (
        RuntimeError("CUDA out of memory"),
        OSError(errno.ENOENT, "No such file or directory", "x"),
        FileExistsError(errno.EEXIST, "File exists", str(tmp_path / "exists")),
    ):
        assert write_errors.explain(err, tmp_path / "exists") is None, err


def test_a_parent_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(WriteError, match=r"^cannot write .*/f/out/x: .*/f is a file, not a folder$"):
        write_errors.check_writable(tmp_path / "f" / "out" / "x")
    write_errors.check_writable(tmp_path / "new" / "deeper" / "x")  # absent folders are created later: fine


def test_sizes_read_like_df():
    assert [write_errors.size_text(n) for n in (0, 1023, 1536, 3 * 2**30)] == ["0 B", "1023 B", "1.5 KiB", "3.0 GiB"]


def test_the_enospc_fault_raises_the_real_error_at_the_save_site(monkeypatch):
    assert faults.parse("enospc@1:4") == ("enospc", 1, 4, 3600.0)
    monkeypatch.setenv(faults.ENV, "enospc@1:4")
    faults.maybe_inject(4, 1, site="step")  # not at the start of a step
    faults.maybe_inject(4, 0, site="save", where="/x/__0_0.distcp")  # not on another rank
    with pytest.raises(OSError) as caught:
        faults.maybe_inject(4, 1, site="save", where="/x/__1_0.distcp")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == "/x/__1_0.distcp"


# ---- the launcher's summary of a rank that died of a full disk ----


def _summary_of(tmp_path: Path, log: str, returncode: int = 1) -> list[str]:
    (tmp_path / "rank0.log").write_text(log)
    rank = launch.RankOutcome(0, tmp_path / "rank0.log", returncode=returncode, ended_s=2.5)
    result = launch.LaunchResult([rank], "127.0.0.1", 1, first_failure=rank, log_dir=tmp_path)
    return launch.summary(result, tmp_path).splitlines()


def test_a_rank_whose_torch_save_hit_a_full_disk_is_summarized_as_that(tmp_path):
    err = _torch_save_error(tmp_path / "model.pt")
    log = "step 3/6\n" + "".join(traceback.format_exception(err))
    assert log.rstrip().splitlines()[-1].startswith("RuntimeError: [enforce fail at inline_container.cc")
    lines = _summary_of(tmp_path, log)
    assert lines[0] == "titan-train: rank 0 failed first (out of disk space, exit 1) after 2.5 s"
    assert (
        lines[1]
        == f"  error: no space left on device (OSError: [Errno 28] No space left on device: '{tmp_path}/model.pt')"
    )


def test_a_rank_that_said_it_in_one_line_is_quoted(tmp_path):
    own = "no space left on device writing ck/step-4: 1.0 MiB free on /data, about 73.0 MiB needed"
    lines = _summary_of(tmp_path, f"step 4/6\ntitan-train: error: {own}\n", returncode=2)
    assert lines[:2] == ["titan-train: rank 0 failed first (out of disk space, exit 2) after 2.5 s", f"  error: {own}"]


def test_other_failures_keep_their_summary(tmp_path):
    lines = _summary_of(tmp_path, 'Traceback (most recent call last):\n  File "x"\nValueError: bad\n')
    assert lines[:2] == ["titan-train: rank 0 failed first (exit 1) after 2.5 s", "  error: ValueError: bad"]


# ---- export_final and prepare-data ----


def _tiny_model():
    from titan_train.models.llama import Transformer

    model = Transformer(TINY)
    model.init_weights(3)
    return model


def test_an_export_into_a_full_disk_keeps_the_previous_export(tmp_path, monkeypatch):
    from titan_train.checkpoint.formats import writers
    from titan_train.checkpoint.formats.export import export_final

    model = _tiny_model()
    first = export_final([model], tmp_path, "torch", args=TINY, step=3)
    before = (first / "model.pt").read_bytes()
    monkeypatch.setattr(writers, "write_torch", torch_save_on_a_full_disk())
    with pytest.raises(WriteError) as caught:
        export_final([model], tmp_path, "torch", args=TINY, step=3)
    m = LINE.match(str(caught.value))
    assert m and m.group(1) == str(first), caught.value
    needed = sum(p.numel() * 4 for p in model.parameters())  # fp32
    assert m.group(4) == f"about {write_errors.size_text(needed)} needed"
    assert (first / "model.pt").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export-step-3"]  # no partial left beside it


def _prepare(*args) -> tuple[int, str]:
    from titan_train.cli import main

    result = CliRunner().invoke(main, ["prepare-data", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stderr


def test_prepare_data_under_a_file_is_one_line(tmp_path):
    (tmp_path / "a.txt").write_text("one document\n\nanother\n")
    (tmp_path / "data").write_text("a file\n")
    code, err = _prepare(tmp_path / "a.txt", "--tokenizer", "byte", "--out", tmp_path / "data" / "tok")
    assert code == 2
    assert err.splitlines() == [
        f"titan-train: error: cannot write {tmp_path / 'data' / 'tok'}: {tmp_path / 'data'} is a file, not a folder"
    ]


def test_prepare_data_on_a_full_disk_is_one_line(tmp_path, monkeypatch):
    """The command maps what prepare raises (here the OSError a shard write meets)."""
    (tmp_path / "a.txt").write_text("one document\n")
    out = tmp_path / "tok"

    def full(sources, tokenizer, out_dir, **kw):
        raise OSError(
            errno.ENOSPC, os.strerror(errno.ENOSPC), str(out_dir.parent / ".tok.partial-1" / "tokens-00000.npy")
        )

    monkeypatch.setattr("titan_train.data.prepare.prepare", full)
    code, err = _prepare(tmp_path / "a.txt", "--tokenizer", "byte", "--out", out)
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("titan-train: error: ")
    m = LINE.match(lines[0].removeprefix("titan-train: error: "))
    assert m and m.group(1) == str(out) and m.group(4) == "how much is needed is unknown", lines


@pytest.mark.skipif(not TINYSHAKESPEARE.is_file(), reason="shared test assets absent")
def test_prepare_data_into_a_real_full_tmpfs(tmp_path):
    """root only: 1 MB of text as byte tokens (uint16: 2 MB) into a 1 MiB tmpfs."""
    with small_tmpfs(tmp_path / "small", "1m") as small:
        code, err = _prepare(TINYSHAKESPEARE, "--tokenizer", "byte", "--out", small / "tok", "--workers", "1")
        assert code == 2, err
        last = err.strip().splitlines()[-1]  # after the progress lines
        assert LINE.match(last.removeprefix("titan-train: error: ")), err
        assert "Traceback" not in err
        assert list(small.iterdir()) == []  # prepare removed its partial folder
