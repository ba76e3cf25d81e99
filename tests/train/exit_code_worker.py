"""A rank of `python -m titan_train` that also writes its exit code to
$TITAN_TEST_EXIT_DIR/rank<RANK>: what a test of the ranks' exit codes under torchrun reads
(torchrun reports no rank's code once it was signalled itself)."""

import os
import sys
from pathlib import Path

from titan_train.cli import main


def _code(e: SystemExit) -> int:
    return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


if __name__ == "__main__":
    target = Path(os.environ["TITAN_TEST_EXIT_DIR"]) / f"rank{os.environ['RANK']}"
    try:
        main()
    except SystemExit as e:
        target.write_text(str(_code(e)))
        raise
    except BaseException:
        target.write_text("1")
        raise
    sys.exit(0)
