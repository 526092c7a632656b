"""What a remote environment needs from the manager's machine, packed for upload.

* :func:`pack_code` — the trial code directory as a ``.tar.gz``, honouring a ``.nniignore`` at its root
  (gitignore semantics, via ``pathspec``) and NNI's limits (2,000 files, 300 MB), with an error that
  names the biggest offenders.
* :func:`build_wheels` — a wheel of the nnix the manager runs (the same code, not merely the same
  version) and of ``nvidia-ml-py`` when it is installed, so that workers install with
  ``pip install --no-index --no-deps`` and never touch the network. The agent path (``python -m
  nnix.agent``) imports only the standard library and nnix's pure-Python modules (``pynvml`` is optional),
  so nnix installed without its dependencies is enough on a worker. The wheels are built directly from
  the installed files (a pure-Python wheel is a zip with a ``.dist-info``): no build backend, no sdist,
  the same result for an editable install and a wheel install, in milliseconds.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from nnix.errors import ServiceError
from nnix.version import __version__

__all__ = ["MAX_BYTES", "MAX_FILES", "CodeArchive", "build_wheels", "pack_code", "shared_bootstrap", "stage_shared"]

MAX_FILES = 2000
MAX_BYTES = 300 * 1024 * 1024
IGNORE_FILE = ".nniignore"


@dataclass(frozen=True)
class CodeArchive:
    path: Path
    files: int
    bytes: int
    sha256: str


def _ignore_spec(code_dir: Path) -> object | None:
    ignore = code_dir / IGNORE_FILE
    if not ignore.is_file():
        return None
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(ignore.read_text(encoding="utf-8", errors="replace").splitlines())


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _walk(code_dir: Path) -> list[tuple[str, Path]]:
    """``(relative posix path, absolute path)`` of every file and symlink kept, sorted."""
    spec = _ignore_spec(code_dir)
    kept: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(code_dir, followlinks=False):
        rel_root = Path(root).relative_to(code_dir).as_posix()
        prefix = "" if rel_root == "." else rel_root + "/"
        if spec is not None:
            dirs[:] = [d for d in dirs if not spec.match_file(prefix + d + "/")]  # type: ignore[attr-defined]
        dirs.sort()
        for name in sorted(files):
            rel = prefix + name
            if spec is not None and spec.match_file(rel):  # type: ignore[attr-defined]
                continue
            kept.append((rel, Path(root) / name))
        for d in list(dirs):
            if (Path(root) / d).is_symlink():  # a link to a directory is archived as a link
                dirs.remove(d)
                kept.append((prefix + d, Path(root) / d))
    return sorted(kept)


def pack_code(code_dir: Path, dest: Path, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> CodeArchive:
    """Archive ``code_dir`` into ``dest`` (``.tar.gz``); :class:`ServiceError` when over the limits."""
    code_dir = Path(code_dir)
    entries = _walk(code_dir)
    sizes: list[tuple[int, str]] = []
    total = 0
    for rel, path in entries:
        try:
            st = path.lstat()
        except OSError:
            continue
        size = 0 if path.is_symlink() else st.st_size
        total += size
        sizes.append((size, rel))
    if len(entries) > max_files or total > max_bytes:
        sizes.sort(reverse=True)
        biggest = ", ".join(f"{rel} ({_size(n)})" for n, rel in sizes[:5])
        per_dir: dict[str, int] = {}
        for rel, _ in entries:
            top = rel.split("/", 1)[0] + ("/" if "/" in rel else "")
            per_dir[top] = per_dir.get(top, 0) + 1
        crowded = ", ".join(f"{d} ({n} files)" for d, n in sorted(per_dir.items(), key=lambda x: -x[1])[:5])
        raise ServiceError(
            f"trialCodeDirectory {code_dir} is too big to upload: {len(entries)} files, {_size(total)} "
            f"(limits: {max_files} files, {_size(max_bytes)}). Biggest files: {biggest}. Most files in: {crowded}",
            f"list what trials do not need (data sets, checkpoints, .git, virtual environments) in "
            f"{code_dir / IGNORE_FILE} (gitignore syntax)",
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()  # of the content (names, modes, bytes): the same tree gives the same digest
    with tarfile.open(dest, "w:gz", compresslevel=6) as tar:
        for rel, path in entries:
            info = tar.gettarinfo(str(path), arcname=rel)
            digest.update(f"{rel}\0{info.mode}\0{info.linkname}\0".encode())
            if info.isfile():
                with open(path, "rb") as f:
                    data = f.read()
                digest.update(hashlib.sha256(data).digest())
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return CodeArchive(dest, len(entries), total, digest.hexdigest())


# --- wheels ----------------------------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _write_wheel(dest_dir: Path, name: str, version: str, files: list[tuple[str, bytes]], metadata_text: str) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    wheel_meta = "Wheel-Version: 1.0\nGenerator: nnix\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    all_files = [*files, (f"{info}/METADATA", metadata_text.encode()), (f"{info}/WHEEL", wheel_meta.encode())]
    record = io.StringIO()
    for arc, data in all_files:
        record.write(f"{arc},{_record_hash(data)},{len(data)}\n")
    record.write(f"{info}/RECORD,,\n")
    path = dest_dir / f"{dist}-py3-none-any.whl"
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in all_files:
            z.writestr(zipfile.ZipInfo(arc, (2020, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
        z.writestr(zipfile.ZipInfo(f"{info}/RECORD", (2020, 1, 1, 0, 0, 0)), record.getvalue())
    os.replace(tmp, path)
    return path


def _nnix_files() -> list[tuple[str, bytes]]:
    root = Path(__file__).resolve().parents[1]  # the nnix package
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith((".pyc", ".pyo")):
                continue
            p = Path(dirpath) / f
            out.append(("nnix/" + p.relative_to(root).as_posix(), p.read_bytes()))
    return out


def _metadata(name: str, version: str) -> str:
    try:
        return metadata.distribution(name).read_text("METADATA") or ""
    except metadata.PackageNotFoundError:
        return ""


def build_wheels(dest_dir: Path) -> tuple[list[Path], str]:
    """Wheels of the running nnix (and of nvidia-ml-py when installed) in ``dest_dir``; also a digest of
    their contents (it changes when the code does, so a worker's install can be checked for freshness)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    files = _nnix_files()
    for arc, data in files:
        digest.update(arc.encode() + b"\0" + hashlib.sha256(data).digest())
    meta = _metadata("nnix", __version__) or f"Metadata-Version: 2.1\nName: nnix\nVersion: {__version__}\n"
    wheels = [_write_wheel(dest_dir, "nnix", __version__, files, meta)]
    try:
        dist = metadata.distribution("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        nv_files = []
        for f in dist.files or []:
            if not f.parts or not f.parts[0].startswith("pynvml") or str(f).endswith(".pyc"):
                continue  # only the module itself (the distribution also ships an example.py)
            src = Path(str(dist.locate_file(f)))
            if src.is_file():
                nv_files.append((f.as_posix(), src.read_bytes()))
        if nv_files:
            meta = dist.read_text("METADATA") or ""
            wheels.append(_write_wheel(dest_dir, "nvidia-ml-py", dist.version, nv_files, meta))
            digest.update(dist.version.encode())
    return wheels, digest.hexdigest()[:16]


# --- shared storage (OpenPAI, Kubernetes): code and nnix staged where every environment mounts them ---------

# nnix's wheels unpacked into <dir>/site once; environments starting together race safely (unpack aside, rename)
_UNPACK = ("import os, shutil, sys, tempfile, zipfile\n"
           "site = sys.argv[1]\n"
           "if not os.path.isdir(site):\n"
           "    tmp = tempfile.mkdtemp(dir=os.path.dirname(site), prefix='.site-')\n"
           "    for w in sys.argv[2:]:\n        zipfile.ZipFile(w).extractall(tmp)\n"
           "    try:\n        os.rename(tmp, site)\n"
           "    except OSError:\n        shutil.rmtree(tmp)\n")


def stage_shared(local: Path, code_dir: Path) -> list[str]:
    """Put under ``local`` (a directory on storage the environments mount): ``code/`` (the trial code, honouring
    ``.nniignore`` and the limits; once), ``wheels/`` (this nnix), and empty ``envs/`` and ``trials/``.
    Returns the wheels' file names."""
    (local / "envs").mkdir(parents=True, exist_ok=True)
    (local / "trials").mkdir(parents=True, exist_ok=True)
    wheels, _ = build_wheels(local / "wheels")
    code = local / "code"
    if not code.is_dir():
        archive = pack_code(code_dir, local / "code.tar.gz")
        tmp = local / "code.tmp"
        tmp.mkdir(exist_ok=True)
        with tarfile.open(archive.path) as tar:
            tar.extractall(tmp, filter="data")
        tmp.rename(code)
        archive.path.unlink(missing_ok=True)
    return [w.name for w in wheels]


def shared_bootstrap(remote: str, wheels: list[str], python: str = "python3") -> tuple[str, str]:
    """Shell for an environment that sees :func:`stage_shared`'s directory at ``remote``: the command that
    unpacks nnix (once per experiment), and the ``PYTHONPATH=...`` assignment that makes it importable."""
    import shlex

    q = shlex.quote
    site = f"{remote}/site"
    unpack = f"{q(python)} -c {q(_UNPACK)} {q(site)} " + " ".join(q(f"{remote}/wheels/{w}") for w in wheels)
    return unpack, f"PYTHONPATH={q(site)}${{PYTHONPATH:+:$PYTHONPATH}}"
