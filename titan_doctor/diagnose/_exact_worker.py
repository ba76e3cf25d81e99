"""Subprocess entry for `diagnose --config ... --exact`: prints one JSON line, the peaks of
memory_exact.exact_peaks (torch is imported here, never in the doctor's own process)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="titan_doctor.diagnose._exact_worker")
    parser.add_argument("--config", required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--full-depth", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    warnings.filterwarnings("ignore")

    from titan_train.config.job import ConfigError
    from titan_train.config.paths import resolve_config
    from titan_train.config.torchtitan import load_either

    try:
        cfg, _ = load_either(resolve_config(args.config), args.overrides, args.world_size)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from titan_doctor.diagnose.memory_exact import exact_peaks, to_json

    peaks = exact_peaks(cfg, args.world_size, extrapolate=not args.full_depth)
    print(json.dumps(to_json(peaks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
