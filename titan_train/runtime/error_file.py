"""torchrun's per-rank error file, for the outcomes the CLI says in one line.

torchrun (and its elastic agent) gives every rank a path in TORCHELASTIC_ERROR_FILE; its
failure summary prints what the failed rank wrote there (`error_file:`, `traceback :`), and
`titan-doctor diagnose --log` reads the same `attempt_*/<rank>/error.json` tree. An uncaught
exception reaches it through torch's `@record` on `train.train` (with its stack). A refusal
(exit 2), a NaN / inf stop (exit 3) or a signal stop (143 / 130) is not a crash: the CLI
writes its own line here instead, without a stack, so torchrun's summary shows the reason.

The layout is the one torch's ErrorHandler.record_exception writes (message, extraInfo
timestamp); torch is not imported, since the CLI may meet a refusal before it imports torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

ENV = "TORCHELASTIC_ERROR_FILE"


def note(message: str) -> bool:
    """Write `message` as this rank's error; False when no error file is set (not under
    torchrun) or it cannot be written (the exit code still says what happened)."""
    path = os.environ.get(ENV)
    if not path:
        return False
    data = {"message": {"message": message, "extraInfo": {"timestamp": str(int(time.time()))}}}
    with contextlib.suppress(OSError):
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        return True
    return False
