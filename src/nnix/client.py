"""The client of experiments on this machine, shared by the CLI, the Python APIs (:mod:`nnix.experiment`, NNI's
``nni.experiment``) and the REST compat layer: REST calls to a running manager, stopping it, importing data.
Kept light: nothing here imports the manager, the web stack or a training service at module level."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nnix.core.manager_error import manager_error_text, read_manager_error
from nnix.errors import ExperimentBusyError, ManagerUnreachableError, NnixError
from nnix.home import (
    STORE_NAME,
    Entry,
    LockHolder,
    ManagerLock,
    Registry,
    busy_error,
    home,
    live_managers,
    read_lock_holder,
    read_state,
    trial_count,
)
from nnix.home import effective_status as effective_status  # (these: what the CLI tells of a state read here)
from nnix.home import manager_alive as manager_alive
from nnix.home import pid_alive as pid_alive
from nnix.home import shown_status as shown_status
from nnix.home import trial_files_dir as trial_files_dir
from nnix.home import ui_url as ui_url
from nnix.limits import MAX_FILE_BYTES, MAX_REQUEST_BYTES
from nnix.model.events import StatusChanged
from nnix.model.imported import EXAMPLE, validate_import
from nnix.model.status import ExperimentStatus
from nnix.query import Query as Query  # (the CLI's reads of a state: counts, ids, a trial, without building them)
from nnix.store.sqlite import SqliteStore

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nnix.core.state import ExperimentState


def rest_call(
    port: int, path: str, method: str = "GET", body: Any = None, host: str = "127.0.0.1", timeout: float = 20.0,
    token: str | None = None,
) -> Any:
    import urllib.error  # (http.client and email: a third of `nnix stop`'s imports, which makes no REST call)
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    if data is not None and len(data) > MAX_REQUEST_BYTES:  # the manager would refuse it (413) before reading it all
        raise NnixError(f"{method} {path}: the request is {_size(len(data))}, more than the manager takes "
                        f"({_size(MAX_REQUEST_BYTES)})", "send less at a time")
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(f"http://{host}:{port}/api/v1/nni{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as e:
        if e.code == 413:
            raise NnixError(f"the manager refused {method} {path}: the request is too large (at most "
                            f"{_size(MAX_REQUEST_BYTES)})", "send less at a time") from e
        detail = e.read().decode(errors="replace")
        try:
            detail = json.loads(detail).get("error", detail)
        except (ValueError, AttributeError):
            pass
        raise NnixError(f"the manager refused {method} {path}: {detail}") from e
    except (urllib.error.URLError, OSError) as e:
        raise ManagerUnreachableError(
            f"the experiment manager on port {port} does not answer ({e})",
            "is the experiment running? `nnix experiment list`",
        ) from e
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def rest_get(port: int, path: str, host: str = "127.0.0.1", timeout: float = 20.0, token: str | None = None) -> Any:
    return rest_call(port, path, host=host, timeout=timeout, token=token)


def manager_call(exp_id: str, path: str, method: str = "GET", body: Any = None) -> Any:
    """A REST call to a running experiment's manager, at its bind address, with its token if it has one."""
    from nnix.api.auth import connect_host, read_token

    exp_dir = Path(Registry().get(exp_id).dir)
    state = read_state(exp_dir, summary=True)
    if not manager_alive(state) or state.manager_port is None:
        raise ManagerUnreachableError(f"experiment {exp_id} is not running", f"resume it first: nnix resume {exp_id}")
    return rest_call(state.manager_port, path, method, body, host=connect_host(state.manager_host),
                     token=read_token(exp_dir))


def stop_experiment(exp_id: str, timeout: float = 60.0) -> str:
    """Stop an experiment's manager, whatever its status (SIGTERM, as NNI): a running experiment's
    trials are canceled; a finished (DONE, ERROR) or viewed one's manager stops serving. A manager
    that died while its experiment was active is recorded STOPPED. Whatever a dead manager left running on its
    engines (jobs, actors, pods, agents, trials) is ended, and its trials shown RUNNING are recorded canceled."""
    entry = Registry().get(exp_id)
    exp_dir = Path(entry.dir)
    state = read_state(exp_dir, summary=True)
    pid = state.manager_pid
    # trials shown RUNNING are possible only where a manager died (a live one cancels its own, a viewer runs none)
    orphans = state.status.is_active or state.status is ExperimentStatus.ERROR or state.manager_action == "view"
    if manager_alive(state):
        assert pid is not None
        was = shown_status(state)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        if pid_alive(pid):
            raise NnixError(f"experiment {entry.id} did not stop within {timeout:.0f} s", f"kill -9 {pid}")
        with _owning(exp_dir, entry.id) as other:
            extra = _stop_engines(exp_dir, state.experiment_id, state.manager_action == "view") if other is None \
                else f"; a manager started on it again meanwhile (pid {other.pid}): its engine work is left to it"
        if state.status.is_active:
            return f"experiment {entry.id} stopped{extra}"
        port = f" on port {state.manager_port}" if state.manager_port else ""
        return f"experiment {entry.id} ({was}): its manager{port} stopped{extra}"
    with _owning(exp_dir, entry.id) as other:  # no resume starts while a dead manager's work is ended
        if other is not None:
            raise busy_error(entry.id, other)  # (a manager that started after the look above: stop that one)
        extra = _stop_engines(exp_dir, state.experiment_id, orphans)
        if state.status.is_active:
            error = read_manager_error(exp_dir)
            why = manager_error_text(error) if error is not None else "the manager was no longer running"
            store = SqliteStore(exp_dir / STORE_NAME, create=False)
            try:
                store.append([StatusChanged(ExperimentStatus.STOPPED, why)])
            finally:
                store.close()
            return f"experiment {entry.id} was not running (its manager had died); marked STOPPED{extra}"
    return f"experiment {entry.id} is not running ({state.status.value}; no manager serves it){extra}"


@contextlib.contextmanager
def _owning(exp_dir: Path, exp_id: str, action: str = "stop") -> Iterator[LockHolder | None]:
    """Hold the experiment's manager lock while `stop` / `experiment delete` end what a dead manager left, so that
    no manager starts on it meanwhile (a resume would adopt environments being ended, or find its directory gone).
    Yields None while held, or the holder where another process has it. A directory where no lock file can be made
    (read-only, vanished) has no manager either: the work goes on without it."""
    try:
        lock = ManagerLock.acquire(exp_dir, exp_id, action)
    except ExperimentBusyError:
        yield read_lock_holder(exp_dir) or LockHolder()
        return
    except NnixError:
        yield None
        return
    try:
        yield None
    finally:
        lock.release()


RAY_HEAD_RECORD = "ray-head.json"  # nnix.services.rayhead.RECORD (a test checks): without it, no import of rayhead
ENGINE_RECORD = "cluster.json"  # nnix.services.cluster.RECORD (a test checks): without one, no engine is imported


def _stop_engines(exp_dir: Path, experiment_id: str, orphans: bool = True) -> str:
    """What an experiment keeps running outside its manager for a resume, ended: its private Ray head (with the
    actors, agents and trials in it), its environments on every engine its records name (nnix.services.reclaim),
    its local trials; the trials the store shows RUNNING (looked for where ``orphans``) are then recorded
    USER_CANCELED. What was done, as a suffix of the CLI's message. Called only once no manager runs it, holding the
    experiment's manager lock (:func:`_owning`). (Without a record of a head or an engine, no engine module is
    imported: `nnix stop` stays quick.)"""
    done: list[str] = []
    if (exp_dir / RAY_HEAD_RECORD).exists():
        from nnix.services.rayhead import stop_recorded

        head = stop_recorded(exp_dir)
        if head:
            done.append(head)
    running = _running_trials(exp_dir) if orphans else {}
    records = [exp_dir / ENGINE_RECORD, *exp_dir.glob(f"services/*/{ENGINE_RECORD}")]
    if running or any(_left(p) for p in records):
        from nnix.services.reclaim import reclaim

        store = SqliteStore(exp_dir / STORE_NAME, create=False)
        try:
            created = store.read(kinds=("ExperimentCreated",))
        finally:
            store.close()
        config = getattr(created[0].event, "config", {}) if created else {}
        done += reclaim(exp_dir, experiment_id, config, list(running.values()))
    if running:
        from nnix.model.events import TrialEnded
        from nnix.model.status import TrialStatus

        store = SqliteStore(exp_dir / STORE_NAME, create=False)
        try:
            store.append([TrialEnded(tid, TrialStatus.USER_CANCELED, None,
                                     "canceled: the experiment was stopped while no manager ran it")
                          for tid in running])
        finally:
            store.close()
        done.append(f"{len(running)} trial(s) left running recorded USER_CANCELED")
    return "".join(f"; {d}" for d in done)


def end_engine_work(exp_dir: Path, experiment_id: str) -> str:
    """``nnix experiment delete``: what the experiment left running on its engines, ended (see _stop_engines)."""
    return _stop_engines(exp_dir, experiment_id, orphans=True)


def _left(record: Path) -> bool:
    """Whether an engine record says something may be left there (see nnix.services.reclaim.left_records)."""
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and bool(data.get("left", True) or data.get("envs"))


def _running_trials(exp_dir: Path) -> dict[str, Any]:
    """The trials the store shows RUNNING (started, not ended nor requeued since), as
    :class:`nnix.services.base.LeftTrial` (what the last manager recorded of each)."""
    from nnix.model.events import TrialStarted
    from nnix.services.base import LeftTrial

    store = SqliteStore(exp_dir / STORE_NAME, create=False)
    try:
        events = store.read(kinds=("TrialStarted", "TrialEnded", "TrialRequeued"))
    finally:
        store.close()
    running: dict[str, Any] = {}
    for stored in events:
        ev = stored.event
        tid = getattr(ev, "trial_id", "")
        if isinstance(ev, TrialStarted):
            running[tid] = LeftTrial(tid, ev.output_dir, ev.pid, ev.pid_start)
        else:
            running.pop(tid, None)
    return running


def running_port(exp_id: str) -> int:
    """The REST port of a running experiment's manager, or a clear error."""
    state = read_state(Path(Registry().get(exp_id).dir), summary=True)
    if not pid_alive(state.manager_pid) or state.manager_port is None:
        raise ManagerUnreachableError(
            f"experiment {exp_id} is not running", f"resume it first: nnix resume {exp_id}"
        )
    return state.manager_port


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB" if n >= 1024 * 1024 else f"{n:,} bytes"


IMPORT_HINT = f"a JSON list of records, e.g. {EXAMPLE}"
SPLIT_HINT = "split the records into several files and import each"


def read_import_file(path: Path) -> Any:
    """The JSON of an import file (``nnix experiment import -f``), or a clear NnixError: a file too large to be
    imported is refused before it is read; bad JSON, nesting too deep and duplicate keys are named."""
    from nnix.documents import DocumentError, load_json, read_text

    try:
        size = path.stat().st_size
    except OSError as e:
        raise NnixError(f"cannot read {path}: {e.strerror or e}", IMPORT_HINT) from None
    if size > MAX_FILE_BYTES:
        raise NnixError(f"{path} is {_size(size)}: too large to import (one import is at most "
                        f"{_size(MAX_REQUEST_BYTES)} of records as JSON)", SPLIT_HINT)
    try:
        return load_json(read_text(path, "import file"))
    except DocumentError as e:
        raise NnixError(f"cannot read {path}: {e}", e.hint or IMPORT_HINT) from None
    except ValueError as e:  # not JSON at all
        raise NnixError(f"cannot read {path}: it is not JSON ({e})", IMPORT_HINT) from None


def import_records(exp_id: str, data: Any) -> int:
    """Feed prior results to an experiment: through its manager if it runs, else into its store. Checked first
    as the manager checks them (one schema: see :mod:`nnix.model.imported`), with the experiment's nanPolicy;
    at most :data:`~nnix.limits.MAX_REQUEST_BYTES` of JSON (what the manager reads in one request)."""
    from nnix.agent.channel import metric_problem
    from nnix.model.events import DataImported

    entry = Registry().get(exp_id)
    state = read_state(Path(entry.dir), summary=True)
    records = validate_import(data, metric_problem, allow_nan=state.config.get("nan_policy") == "allow")
    size = len(json.dumps(records).encode())
    if size > MAX_REQUEST_BYTES:
        raise NnixError(f"the {len(records):,} records are {_size(size)} as JSON: one import is at most "
                        f"{_size(MAX_REQUEST_BYTES)}", SPLIT_HINT)
    if pid_alive(state.manager_pid) and state.manager_port and state.manager_action != "view":
        manager_call(entry.id, "/experiment/import-data", "POST", records)
    else:
        store = SqliteStore(Path(entry.dir) / STORE_NAME, create=False)
        try:
            store.append([DataImported(records)])
        finally:
            store.close()
    return len(records)


# --- the experiments of this machine, as the CLI reads them: it opens neither the registry nor a store itself -------


def experiment_dir(exp_id: str) -> Path:
    """Where a known experiment lives, by its id or a unique prefix of it (an NnixError naming the ids otherwise)."""
    return Path(Registry().get(exp_id).dir)


def experiment_state(exp_id: str, summary: bool = False) -> ExperimentState:
    """A known experiment's state; ``summary``: its head only (status, manager, limits), cheap at any size."""
    return read_state(experiment_dir(exp_id), summary=summary)


def resolve_experiment(exp_id: str | None) -> str:
    """NNI's rule: an id or unique prefix; if omitted, the single running experiment (else the single
    experiment whose manager is alive, e.g. a finished one still serving its web UI)."""
    reg = Registry()
    if exp_id:
        return reg.get(exp_id).id
    live = live_managers(reg)
    running = [m.entry.id for m in live if effective_status(m.state).is_active] or [m.entry.id for m in live]
    if len(running) == 1:
        return running[0]
    if not running:
        raise NnixError("no experiment is running", "give an experiment id; `nnix experiment list --all` lists them")
    raise NnixError(f"several experiments are running: {', '.join(running)}", "give one of these ids")


def live_experiments(port: int | None = None) -> list[str]:
    """The ids of the experiments whose manager is alive (any status), oldest first; with ``port``, on that port."""
    return [m.entry.id for m in live_managers() if port is None or m.state.manager_port == port]


def active_experiments() -> list[tuple[str, ExperimentState]]:
    """Every experiment running now (an active status and a live manager), with its whole state."""
    out = []
    for e in Registry().all():
        try:
            st = read_state(Path(e.dir))
        except NnixError:
            continue
        if effective_status(st).is_active:
            out.append((e.id, st))
    return out


def halt_reason(exp_id: str) -> str | None:
    """Why the experiment's last manager stopped, in words, if it left a reason (``manager.error``)."""
    error = read_manager_error(experiment_dir(exp_id))
    return None if error is None else manager_error_text(error)


def manager_running(exp_dir: Path) -> bool:
    """Whether the last manager of the experiment in ``exp_dir`` still runs (read again at each call)."""
    return pid_alive(read_state(exp_dir, summary=True).manager_pid)


def check_startable(exp_id: str) -> None:
    """Raise unless a manager may start for the experiment (``resume``, ``view``): none holds its lock, and none
    recorded is alive, but a read-only one."""
    exp_dir = experiment_dir(exp_id)
    holder = read_lock_holder(exp_dir)  # a manager that has just started may not be in the store yet
    if holder is not None:  # running, or serving it read-only: one manager per experiment
        raise busy_error(exp_id, holder)
    state = read_state(exp_dir, summary=True)
    if manager_alive(state) and state.manager_action != "view":
        raise NnixError(
            f"experiment {exp_id} has a live manager ({shown_status(state)}, pid {state.manager_pid}, "
            f"port {state.manager_port})", f"stop it first: nnix stop {exp_id}",
        )


def adopt_experiment(exp_id: str, root: Path | None) -> str:
    """The full id of a known experiment; with ``root`` (NNI's ``--experiment_dir``), the experiment ``exp_id`` found
    under it, registered here first if it is not known yet."""
    if root is None:
        return Registry().get(exp_id).id
    found = root.expanduser().resolve() / exp_id
    if not (found / STORE_NAME).exists():
        raise NnixError(f"no experiment {exp_id} under {root}", "check --experiment_dir")
    Registry().add(Entry(exp_id, str(found), created=time.time()))
    return exp_id


def experiment_rows(include_stopped: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """``nnix experiment list``: one row per experiment whose manager is alive (every one with
    ``include_stopped``), oldest first, and a warning for each unreadable one (only with ``include_stopped``)."""
    from nnix.api.auth import is_loopback, read_token

    rows, warnings = [], []
    for e in sorted(Registry().all(), key=lambda e: e.created):
        try:
            st = read_state(Path(e.dir), summary=True)
            n_trials = trial_count(Path(e.dir))
        except NnixError as ex:
            if include_stopped:
                warnings.append(f"experiment {e.id}: {ex.message}")
            continue
        alive = manager_alive(st)
        if not include_stopped and not alive:
            continue
        port = st.manager_port if alive else None
        host = st.manager_host or "127.0.0.1"
        url = ui_url(host, port, None if is_loopback(host) else read_token(Path(e.dir))) if port else None
        rows.append({
            "id": e.id, "name": e.name, "status": shown_status(st), "message": st.message, "port": port, "url": url,
            "pid": st.manager_pid if alive else None, "platform": e.platform, "trials": n_trials,
            "created": st.created_at, "ended": st.end_time, "dir": e.dir,
        })
    return rows, warnings


def deletable_experiments(exp_id: str | None, every: bool) -> list[tuple[str, Path]]:
    """What ``nnix experiment delete`` removes: the experiment (an error if its manager is alive), or ``every``
    one whose manager is not alive."""
    reg = Registry()
    if every:
        entries = reg.all()
    elif exp_id:
        entries = [reg.get(exp_id)]
    else:
        raise NnixError("give an experiment id or --all")
    out = []
    for e in entries:
        try:
            st = read_state(Path(e.dir), summary=True)
        except NnixError:
            st = None
        if st is not None and manager_alive(st):  # running, or finished and still serving its web UI
            if not every:
                raise NnixError(f"experiment {e.id} has a live manager ({shown_status(st)})",
                                f"stop it first: nnix stop {e.id}")
            continue
        out.append((e.id, Path(e.dir)))
    return out


def delete_experiment(exp_id: str, exp_dir: Path) -> str:
    """Remove an experiment whose manager is not alive: what it left running on its engines is ended (jobs, actors,
    pods, agents, trials, a private Ray head), then its directory and registry entry. What was ended, as a suffix."""
    import shutil

    with _owning(exp_dir, exp_id, "delete") as other:
        if other is not None:
            raise busy_error(exp_id, other)
        ended = end_engine_work(exp_dir, exp_id) if exp_dir.is_dir() else ""
        shutil.rmtree(exp_dir, ignore_errors=True)
        Registry().remove(exp_id)
    return ended


LIFECYCLE_KINDS = ("ExperimentCreated", "ManagerStarted", "StatusChanged", "TrialCreated", "TrialStarted",
                   "TrialCancelRequested", "TrialEnded", "TrialRequeued")


def lifecycle_state(exp_dir: Path) -> ExperimentState:
    """The experiment's state folded from its lifecycle events only (no metrics): cheap to read again and again."""
    from nnix.core.state import fold

    store = SqliteStore(exp_dir / STORE_NAME, create=False)
    try:
        return fold(store.read(kinds=LIFECYCLE_KINDS))
    finally:
        store.close()


def web_ui_url(exp_id: str) -> str:
    """The web UI's address of an experiment whose manager serves it (with its token beyond loopback)."""
    from nnix.api.auth import is_loopback, read_token

    exp_dir = experiment_dir(exp_id)
    st = read_state(exp_dir, summary=True)
    if not manager_alive(st) or not st.manager_port:
        raise NnixError(f"experiment {exp_id} is not served ({shown_status(st)}: no manager runs)",
                        f"serve it read-only with `nnix view {exp_id}`, or continue it with `nnix resume {exp_id}`")
    host = st.manager_host or "127.0.0.1"
    return ui_url(host, st.manager_port, None if is_loopback(host) else read_token(exp_dir))


def experiments_root() -> Path:
    """Where new experiments go by default ($NNIX_HOME)."""
    return home()


def trial_command(config: dict[str, Any], params: Any) -> str:
    """The command line the manager runs for a trial of an experiment with this (stored) config."""
    command = str(config["trial_command"])
    if config.get("trial_params_as_args") and isinstance(params, dict):
        from nnix.core.manager import params_as_args

        command = f"{command} {params_as_args(params)}"
    return command
