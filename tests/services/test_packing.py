"""What is shipped to workers: the code archive (.nniignore, NNI's limits) and the wheels."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import nnix
from nnix.errors import ServiceError
from nnix.services.packing import build_wheels, pack_code


def _tree(root: Path, files: dict[str, int]) -> None:
    for rel, size in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * size)


def test_nniignore_has_gitignore_semantics(tmp_path: Path) -> None:
    code = tmp_path / "code"
    _tree(code, {"train.py": 10, "lib/util.py": 10, "data/a.bin": 10, "lib/data/keep.txt": 10, "x.ckpt": 10,
                 "sub/y.ckpt": 10, "logs/run1/out.txt": 10, "notes.md": 10})
    (code / ".nniignore").write_text("# comment\n/data/\n*.ckpt\nlogs/\n!notes.md\n")
    (code / "link").symlink_to("lib")
    archive = pack_code(code, tmp_path / "code.tar.gz")
    with tarfile.open(archive.path) as tar:
        names = sorted(tar.getnames())
    assert names == [".nniignore", "lib/data/keep.txt", "lib/util.py", "link", "notes.md", "train.py"]
    assert archive.files == 6 and len(archive.sha256) == 64
    again = pack_code(code, tmp_path / "again.tar.gz")
    assert again.sha256 == archive.sha256  # the same tree packs the same: an unchanged code dir is not re-uploaded


def test_limits_name_the_biggest_offenders(tmp_path: Path) -> None:
    code = tmp_path / "code"
    _tree(code, {"model.pt": 5000, "train.py": 10, **{f"cache/f{i}.npy": 1 for i in range(30)}})
    with pytest.raises(ServiceError) as too_big:
        pack_code(code, tmp_path / "a.tar.gz", max_bytes=4000)
    msg = str(too_big.value)
    assert "model.pt (4.9 KB)" in msg and "limits: 2000 files, 3.9 KB" in msg
    assert ".nniignore" in (too_big.value.hint or "")
    with pytest.raises(ServiceError) as too_many:
        pack_code(code, tmp_path / "b.tar.gz", max_files=20)
    assert "32 files" in str(too_many.value) and "cache/ (30 files)" in str(too_many.value)
    (code / ".nniignore").write_text("cache/\n*.pt\n")
    assert pack_code(code, tmp_path / "c.tar.gz", max_files=20, max_bytes=4000).files == 2


def test_wheels_install_offline_and_run_the_agent(tmp_path: Path) -> None:
    wheels, digest = build_wheels(tmp_path / "wheels")
    nnix_wheel = next(w for w in wheels if w.name.startswith("nnix-"))
    assert nnix_wheel.name == f"nnix-{nnix.__version__}-py3-none-any.whl" and len(digest) == 16
    with zipfile.ZipFile(nnix_wheel) as z:
        names = z.namelist()
    assert "nnix/agent/__main__.py" in names and not any("__pycache__" in n for n in names)
    assert build_wheels(tmp_path / "again")[1] == digest  # same code, same digest
    target = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--isolated", "--no-index", "--no-deps", "--target",
         str(target), "--find-links", str(tmp_path / "wheels"), f"nnix=={nnix.__version__}"],
        capture_output=True, text=True, env={"PIP_CONFIG_FILE": "/dev/null", "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    probe = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "from nnix.agent.client import main; main(['--probe'])", str(target)],
                           capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert f'"version": "{nnix.__version__}"' in probe.stdout
