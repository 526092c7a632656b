"""Where experiments live on this machine: the registry, ids, and reading a stored experiment.

Kept light (no pydantic, numpy or tuners) so that quick CLI verbs like ``nnix stop`` start fast.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import string
import time
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nnix.core.manager_error import apply_manager_error
from nnix.core.state import SERIES_KINDS, ExperimentState, Metric, fold, series
from nnix.errors import ExperimentBusyError, ExperimentNotFoundError, NnixError
from nnix.model.status import ExperimentStatus
from nnix.paths import home as home
from nnix.query import open_state
from nnix.store.base import Stored
from nnix.store.sqlite import SqliteStore

ID_CHARS = string.ascii_lowercase + string.digits
STORE_NAME = "db/nnix.sqlite"


@dataclass
class Entry:
    id: str
    dir: str
    name: str | None = None
    platform: str = "local"
    created: float = 0.0
    pid: int | None = None
    port: int | None = None


class Registry:
    """``<home>/.nnix/experiments.json``: id → where the experiment lives. File-locked."""

    def __init__(self, root: Path | None = None) -> None:
        self.path = (root or home()) / ".nnix" / "experiments.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, Any]]]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # who runs what, where: the owner's
        with os.fdopen(os.open(self.path.with_suffix(".lock"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data: dict[str, dict[str, Any]] = json.loads(self.path.read_text()) if self.path.exists() else {}
            except json.JSONDecodeError:
                data = {}
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                tmp = self.path.with_suffix(".tmp")
                with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                    f.write(json.dumps(data, indent=1, sort_keys=True))
                os.chmod(tmp, 0o600)  # an older, looser file reused as the temporary
                os.replace(tmp, self.path)

    def add(self, entry: Entry) -> None:
        with self._locked() as data:
            data[entry.id] = asdict(entry)

    def update(self, exp_id: str, **fields: Any) -> None:
        with self._locked() as data:
            if exp_id in data:
                data[exp_id].update(fields)

    def remove(self, exp_id: str) -> None:
        with self._locked() as data:
            data.pop(exp_id, None)

    def all(self) -> list[Entry]:
        with self._locked() as data:
            return [Entry(**{k: v for k, v in e.items() if k in Entry.__dataclass_fields__}) for e in data.values()]

    def get(self, exp_id: str) -> Entry:
        entries = {e.id: e for e in self.all()}
        if exp_id in entries:
            return entries[exp_id]
        matches = [e for i, e in entries.items() if i.startswith(exp_id)]
        if len(matches) == 1:
            return matches[0]
        hint = "run `nnix experiment list --all` to see the known ids"
        if len(matches) > 1:
            raise ExperimentNotFoundError(f"experiment id prefix {exp_id!r} is ambiguous", hint)
        raise ExperimentNotFoundError(f"no experiment {exp_id!r}", hint)

    def new_id(self) -> str:
        import secrets  # (here: `trial ls` and the other readers of the registry need no OpenSSL)

        taken = {e.id for e in self.all()}
        while True:
            exp_id = "".join(secrets.SystemRandom().sample(ID_CHARS, 8))
            if exp_id not in taken:
                return exp_id


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not alive
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


LOCK_FILE = "manager.lock"
LOCK_PATIENCE = 10.0  # seconds a start waits for a lock whose holder is not known alive (see ManagerLock.acquire)


@dataclass(frozen=True)
class LockHolder:
    """Who holds an experiment's manager lock, as the holder wrote it (any field may be unknown: a holder
    that has just taken the lock has not written yet)."""

    pid: int | None = None
    action: str | None = None
    port: int | None = None
    host: str | None = None
    since: float | None = None

    def describe(self) -> str:
        what = {"create": "running it", "resume": "running it", "view": "serving it read-only"}.get(
            self.action or "", "managing it")
        parts = [f"pid {self.pid}" if self.pid else "", f"port {self.port}" if self.port else ""]
        where = ", ".join(p for p in parts if p)
        return f"another nnix manager is {what}" + (f" ({where})" if where else "")


class ManagerLock:
    """An experiment's ownership: an exclusive ``flock`` on ``<exp>/manager.lock``, taken by a manager process
    before it writes anything and held for the whole life of that process. The kernel releases it when the
    process ends, however it ends (``kill -9`` included), so a crashed manager never blocks a resume, and two
    managers can never run one experiment: of N concurrent ``resume``/``view``/``create`` starts, one gets it,
    the others fail with :class:`ExperimentBusyError` naming the holder. The file holds the holder's pid, action
    and port (JSON) for that message only; the lock itself is the ``flock``. The descriptor is close-on-exec,
    so trial processes never inherit it."""

    def __init__(self, exp_dir: Path, fd: int) -> None:
        self.exp_dir = exp_dir
        self._fd: int | None = fd
        self._holder = LockHolder(os.getpid())

    @classmethod
    def acquire(cls, exp_dir: Path, exp_id: str, action: str, patience: float = LOCK_PATIENCE) -> ManagerLock:
        """Take the lock, or raise :class:`ExperimentBusyError` naming a live holder at once. A holder that is not
        (or no longer) known alive is waited for, up to ``patience`` seconds: a manager killed with ``kill -9``
        reads as gone (a zombie) while its other threads still hold its files, and so the lock, for a moment
        (longer on a loaded machine); one that has just taken the lock has not written its pid yet."""
        deadline = time.monotonic() + patience
        while True:
            try:
                return cls._try(exp_dir, exp_id, action)
            except ExperimentBusyError:
                if read_lock_holder(exp_dir) is not None or time.monotonic() >= deadline:
                    raise
            time.sleep(0.02)

    @classmethod
    def _try(cls, exp_dir: Path, exp_id: str, action: str) -> ManagerLock:
        path = exp_dir / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise NnixError(f"cannot open the manager lock of experiment {exp_id} ({path}): {e.strerror or e}",
                            "check that the experiment's directory exists and is writable") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise NnixError(f"cannot open the manager lock of experiment {exp_id} ({path}): not a regular file",
                                f"remove {path}; nnix makes it anew")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise NnixError(f"cannot take the manager lock of experiment {exp_id} ({path}): {e.strerror or e}",
                                None) from None
            raise busy_error(exp_id, read_lock_holder(exp_dir) or LockHolder()) from None
        lock = cls(exp_dir, fd)
        lock.record(action=action, since=time.time())
        return lock

    def record(self, **fields: Any) -> None:
        """Rewrite who holds the lock (e.g. the port once it is bound). A full disk leaves it unwritten: the
        lock still holds, only the loser's message knows less."""
        if self._fd is None:
            return
        self._holder = LockHolder(**{**asdict(self._holder), **fields})
        data = json.dumps(asdict(self._holder)).encode()
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # (closing releases the flock)

    def __enter__(self) -> ManagerLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


MANAGER_ACTIONS = ("create", "resume", "view")  # what a manager holds the lock for (stop/delete/load hold it briefly)


def busy_error(exp_id: str, holder: LockHolder) -> ExperimentBusyError:
    """The error for a start that found the experiment owned by another manager (or, for a moment, by a `stop`,
    `experiment delete` or `experiment load` ending what a dead manager left, or replacing it)."""
    if holder.action and holder.action not in MANAGER_ACTIONS:
        return ExperimentBusyError(
            f"experiment {exp_id} is busy: `nnix {'experiment ' if holder.action != 'stop' else ''}{holder.action}` "
            f"works on it" + (f" (pid {holder.pid})" if holder.pid else ""),
            "try again once it has finished")
    return ExperimentBusyError(
        f"experiment {exp_id} already has a manager: {holder.describe()}",
        f"only one manager runs an experiment; stop that one first (nnix stop {exp_id})"
        + (f", or open its web UI on port {holder.port}" if holder.port else ""),
    )


def read_lock_holder(exp_dir: Path) -> LockHolder | None:
    """What the lock file says of its holder, if that process is alive; None otherwise. For messages only:
    reading never takes the lock (a probe holding it for an instant could make a real start fail)."""
    try:
        fd = os.open(exp_dir / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None

    def num(key: str) -> Any:
        value = data.get(key)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    pid = num("pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        return None
    port = num("port")
    return LockHolder(pid, str(data.get("action") or "") or None, port if isinstance(port, int) else None,
                      str(data.get("host") or "") or None, num("since"))


# the events that make an experiment's status, limits, manager and elapsed time (no trials)
SUMMARY_KINDS = ("ExperimentCreated", "ManagerStarted", "ManagerHeartbeat", "StatusChanged", "LimitsUpdated")


class StoreSeries:
    """Serves the series of the ended trials of a state that :func:`read_state` folded (the fold keeps only
    their summary): opens the store at the first ask and keeps it open (for a short-lived reader: the CLI)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store: SqliteStore | None = None

    def __call__(self, trial_id: str) -> list[Metric]:
        return series(self.read_trial(trial_id, SERIES_KINDS))

    def read_trial(self, trial_id: str, kinds: Collection[str]) -> list[Stored]:
        """The trial's events of ``kinds`` (what :func:`nnix.query.open_state` rebuilds a damaged trial from)."""
        if self.store is None:
            self.store = SqliteStore(self.path, create=False)
        return self.store.read_trial(trial_id, kinds)


def read_state(exp_dir: Path, summary: bool = False) -> ExperimentState:
    """Fold an experiment's log; ``summary=True`` skips trial events (fast: status, pid, port).
    A reason the last manager left in ``manager.error`` (e.g. a full disk) is its message and an error."""
    store = SqliteStore(exp_dir / STORE_NAME, create=False)
    try:
        state = fold(store.read(kinds=SUMMARY_KINDS)) if summary else open_state(
            store, loader=StoreSeries(exp_dir / STORE_NAME))
    finally:
        store.close()
    apply_manager_error(state, exp_dir)
    return state


# --- modes: an experiment's files are its owner's ---------------------------------------------------

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def tighten_permissions(exp_dir: Path) -> list[str]:
    """Make the experiment directory 0700 and its store (and -wal/-shm) 0600 where they are looser
    (experiments created before nnix set these modes). Returns what was changed, for a warning."""
    changed: list[str] = []
    store = exp_dir / STORE_NAME
    targets = [(exp_dir, PRIVATE_DIR), (store.parent, PRIVATE_DIR)] + [
        (Path(f"{store}{suffix}"), PRIVATE_FILE) for suffix in ("", "-wal", "-shm")
    ]
    for path, mode in targets:
        try:
            current = path.stat().st_mode & 0o777
            if current & ~mode:
                os.chmod(path, current & mode)
                changed.append(f"{path}: {current:o} -> {current & mode:o}")
        except OSError:
            continue
    return changed


def process_started_at(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds, ~1 s precision), or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def manager_alive(state: ExperimentState) -> bool:
    """Whether the experiment's last manager process still runs, whatever the experiment's status
    (a finished background manager keeps serving, as NNI's does). A pid reused by a process that
    started after that manager recorded its start is not it."""
    pid = state.manager_pid
    if not pid_alive(pid):
        return False
    assert pid is not None
    started = process_started_at(pid)
    if started is None or state.manager_started_at is None:
        return True
    return started <= state.manager_started_at + 2.0


def effective_status(state: ExperimentState) -> ExperimentStatus:
    """The recorded status, except that an active status whose manager died reads STOPPED (as NNI)."""
    if state.status.is_active and not manager_alive(state):
        return ExperimentStatus.STOPPED
    return state.status


def shown_status(state: ExperimentState) -> str:
    """The status users see: :func:`effective_status`, VIEWED while a read-only manager serves it."""
    if state.manager_action == "view" and manager_alive(state):
        return ExperimentStatus.VIEWED.value
    return effective_status(state).value


def ui_url(host: str, port: int | str, token: str | None = None) -> str:
    """The web UI's address for a manager bound to ``host:port``."""
    import socket

    shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


@dataclass
class LiveManager:
    entry: Entry
    state: ExperimentState


def live_managers(registry: Registry | None = None) -> list[LiveManager]:
    """Every registered experiment whose manager process is alive (any status), oldest first."""
    out = []
    for e in sorted((registry or Registry()).all(), key=lambda e: e.created):
        try:
            st = read_state(Path(e.dir), summary=True)
        except Exception:  # a deleted, unreadable or foreign experiment: not a live manager
            continue
        if manager_alive(st):
            out.append(LiveManager(e, st))
    return out


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def _pids_holding(inodes: set[str]) -> list[int]:
    wanted = {f"socket:[{i}]" for i in inodes}
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in wanted for fd in (d / "fd").iterdir()):
                pids.append(int(d.name))
        except OSError:  # another user's process, or gone
            continue
    return sorted(pids)


def port_holder(port: int) -> str | None:
    """Who listens on ``port`` here, in words: an experiment's manager (from the registry), else a
    process (from /proc), else None when nothing can be told."""
    for m in live_managers():
        if m.state.manager_port == port:
            return (f"experiment {m.entry.id} ({shown_status(m.state)}, manager pid {m.state.manager_pid}); "
                    f"stop it with `nnix stop {m.entry.id}`")
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    for pid in _pids_holding(inodes):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = ""
        return f"process {pid}" + (f" ({cmd[:120]})" if cmd else "")
    return "a process of another user"



def trial_count(exp_dir: Path) -> int:
    store = SqliteStore(exp_dir / STORE_NAME, create=False)
    try:
        return store.count("TrialCreated")
    finally:
        store.close()


def trial_files_dir(exp_dir: Path, trial_id: str, output_dir: str | None) -> Path | None:
    """Where a trial's files (``trial.stdout``, ``trial.stderr``, ``trial.log``) can be read here: its own
    directory when that is a path on this machine, else the copy the manager keeps of a trial that ran
    elsewhere (``host:/path``; see :mod:`nnix.services.mirror`). None before it started."""
    if not output_dir:
        return None
    own = Path(output_dir)
    if own.is_absolute():
        return own
    return exp_dir / "trials" / trial_id
