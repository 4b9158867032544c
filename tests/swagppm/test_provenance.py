"""What results depend on besides data and settings: the code digest covers every source file of the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import swagppm
from tests import PATIENCE

PACKAGE = Path(swagppm.__file__).parent


def _digest(root: Path) -> str:
    script = "from swagppm.provenance import code_digest; print(code_digest())"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


@pytest.mark.fits
def test_an_edit_in_a_subpackage_or_a_moved_file_changes_the_code_digest(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(PACKAGE, copy / "swagppm", ignore=shutil.ignore_patterns("__pycache__"))
    original = _digest(copy)
    engine = copy / "swagppm" / "train" / "engine.py"
    engine.write_text(engine.read_text() + "\n# an edit\n")
    edited = _digest(copy)
    engine.rename(copy / "swagppm" / "train" / "moved.py")
    assert len({original, edited, _digest(copy)}) == 3


def test_processes_starting_together_on_a_fresh_cache_all_read_one_whole_key(tmp_path: Path) -> None:
    """The key is linked into place whole: a process that comes second never reads it empty or half written (and
    making it loads no torch)."""
    script = ("import sys; from pathlib import Path; from swagppm.provenance import fingerprint_key; "
              "print(fingerprint_key(Path(sys.argv[1])).hex()); assert 'torch' not in sys.modules")
    runs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(6)]
    keys = set()
    for run in runs:
        out, err = run.communicate(timeout=PATIENCE)
        assert run.returncode == 0, err[-2000:]
        keys.add(out.strip())
    assert len(keys) == 1 and bytes.fromhex(keys.pop()) == (tmp_path / "fingerprint.key").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fingerprint.key"]  # no temporary file left
