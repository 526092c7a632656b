"""The verbs that must start fast (``trial ls``, ``stop``, ``create``, ``resume``, ``view``, ``--version``), and what
every verb shares: resolving an experiment id, tables, JSON. Nothing here imports typer, pydantic or numpy; the
registry and the stores are read through :mod:`nnix.client` only."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from nnix.cli.out import echo, secho, style
from nnix.errors import NnixError

DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"


def err(message: str) -> None:
    secho(message, err=True, fg="red")


def note_real_nni() -> None:
    """Say so when a real NNI is installed here: `nni.experiment` and maybe `nnictl` are then NNI's."""
    from nnix.compat.nni_presence import real_nni_note

    note = real_nni_note()
    if note:
        secho(f"note: {note}", err=True, fg="yellow")


def resolve_id(exp_id: str | None) -> str:
    """NNI's rule (:func:`nnix.client.resolve_experiment`): an id or unique prefix, else the one running."""
    from nnix.client import resolve_experiment

    return resolve_experiment(exp_id)


def state_of(exp_id: str | None) -> tuple[str, Any]:
    from nnix.client import experiment_state

    eid = resolve_id(exp_id)
    return eid, experiment_state(eid)


def warn_halted(eid: str) -> None:
    """Say (on stderr, so that --json output stays NNI's) why the last manager stopped, if it left a reason."""
    from nnix.client import halt_reason

    reason = halt_reason(eid)
    if reason is not None:
        secho(f"warning: experiment {eid}: {reason}", err=True, fg="yellow")


def show_version() -> None:
    """`nnix --version`."""
    from nnix.version import __version__

    echo(__version__)
    note_real_nni()


def fmt_time(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def fmt_duration(start: float | None, end: float | None) -> str:
    if start is None:
        return "-"
    s = int((end or time.time()) - start)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def cell(value: str) -> str:
    return " ".join(value.split())  # one line per row, whatever a trial wrote


def print_table(columns: list[str], rows: list[list[str]], title: str | None = None,
                squeeze: tuple[str, ...] = ()) -> None:
    """A table on stdout, columns two spaces apart. On a terminal it fits the terminal's width: the
    ``squeeze`` columns share what the others leave and are cut with an ellipsis. Otherwise (a pipe,
    a file) nothing is cut, so that scripts see every value."""
    rows = [[cell(c) for c in row] for row in rows]
    widths = [max([len(col)] + [len(r[i]) for r in rows]) for i, col in enumerate(columns)]
    tty = sys.stdout.isatty()
    if tty and squeeze:
        import shutil  # (only here: a pipe's table is not cut)

        room = shutil.get_terminal_size().columns - 1 - 2 * (len(columns) - 1) - sum(
            w for c, w in zip(columns, widths, strict=True) if c not in squeeze)
        shares = share(room, [w for c, w in zip(columns, widths, strict=True) if c in squeeze])
        widths = [max(len(c), shares.pop(0)) if c in squeeze else w for c, w in zip(columns, widths, strict=True)]

    def line(cells: list[str]) -> str:
        out = []
        for c, w in zip(cells, widths, strict=True):
            out.append(c if len(c) <= w else c[: max(0, w - 1)] + "…")
        return "  ".join(c.ljust(w) for c, w in zip(out, widths, strict=True)).rstrip()

    if title is not None:
        echo(title)
    header = line(columns)
    echo(style(header, bold=True) if tty else header)
    for row in rows:
        echo(line(row))


def share(room: int, wanted: list[int]) -> list[int]:
    """Split ``room`` columns among cells that want ``wanted``: small ones get what they want, the rest
    is split evenly among the larger ones."""
    out = list(wanted)
    left = sorted(range(len(wanted)), key=lambda i: wanted[i])
    while left:
        fair = max(0, room) // len(left)
        i = left[0]
        if wanted[i] <= fair:
            out[i] = wanted[i]
            room -= wanted[i]
            left.pop(0)
            continue
        for j in left:
            out[j] = fair
        break
    return out


def dump(data: Any) -> None:
    echo(json.dumps(data, indent=2, default=str))


def trial_ls(experiment_id: str | None, head: int | None, tail: int | None, as_json: bool) -> None:
    """`nnix trial ls`."""
    if head is not None and tail is not None:
        raise NnixError("--head and --tail are mutually exclusive")
    eid, state = state_of(experiment_id)
    warn_halted(eid)
    if head is not None or tail is not None:  # only those trials are read from the snapshot
        trials = state.ranked(max(0, head if head is not None else tail or 0), worst=head is None)
    else:
        trials = list(state.trials.values())
    if as_json:
        from nnix.api.app import trial_info
        from nnix.client import experiment_dir

        exp_dir = experiment_dir(eid)
        dump([trial_info(t, exp_dir=exp_dir) for t in trials])
        return
    # a terminal gets a duration instead of the start and end dates, to leave room for the reason
    tty = sys.stdout.isatty()
    warned = any(t.warning_count for t in trials)
    rows = []
    for t in trials:
        final = t.final
        reason = "" if t.status.value in ("SUCCEEDED", "RUNNING", "WAITING") else t.message
        when = [fmt_duration(t.started_at, t.ended_at)] if tty else [fmt_time(t.started_at), fmt_time(t.ended_at)]
        row = [
            t.trial_id, str(t.sequence_id), t.status.value, *when,
            "-" if final is None else json.dumps(final.value), json.dumps(t.params), reason or "-",
        ]
        if warned:  # bad metric lines skipped, leftover processes killed: the latest message and how many
            row.append("-" if not t.warning_count else f"{t.warning_count}: {t.warnings[-1]}")
        rows.append(row)
    times = ["time"] if tty else ["start", "end"]
    print_table(["trial", "no.", "status", *times, "final", "parameters", "reason", *(("warnings",) if warned else ())],
                rows, title=f"experiment {eid} ({state.direction})",
                squeeze=("parameters", "reason", *(("warnings",) if warned else ())))


def stop(experiment_id: str | None, all_: bool, port: int | None) -> None:
    """`nnix stop`."""
    from nnix.client import live_experiments, stop_experiment

    if experiment_id == "all":
        raise NnixError("`nnix stop all` is ambiguous", "use `nnix stop --all`")
    if all_ or port is not None:
        ids = live_experiments(port)
        if not ids:
            echo("no experiment manager is running" + (f" on port {port}" if port else ""))
            return
    else:
        ids = [resolve_id(experiment_id)]
    for exp_id in ids:
        echo(stop_experiment(exp_id))


def start(exp_id: str, action: str, port: int, foreground: bool, host: str = DEFAULT_HOST,
          exp_dir: Path | None = None) -> None:
    """Start an experiment's manager (`nnix create`, `resume`, `view`): here with --foreground, else as a daemon.
    (``exp_dir``: where the experiment is, when the caller knows; a foreground create reaches its first trial without
    importing the client.)"""
    from nnix.api.auth import TOKEN_FILE, token_for_bind

    if exp_dir is None:
        from nnix.client import experiment_dir

        exp_dir = experiment_dir(exp_id)
    token = token_for_bind(exp_dir, host)
    if foreground:
        from nnix.host.run import run_manager

        try:
            outcome = run_manager(exp_id, action, port=port, live=True, host=host)
        except KeyboardInterrupt:  # before the manager took over the signals
            echo(f"\nInterrupted. Resume with: nnix resume {exp_id}")
            raise SystemExit(130) from None
        raise SystemExit(outcome.exit_code)
    if token:
        echo(f"Listening on {host}: every REST call needs the experiment's token (the link below carries it; "
             f"the nnix CLI reads it from {exp_dir / TOKEN_FILE}).")
    from nnix.client import experiment_state, ui_url
    from nnix.host.progress import EXIT_ERROR
    from nnix.host.run import spawn_daemon

    spawn_daemon(exp_id, action, port, host=host, fork=True)
    state = experiment_state(exp_id, summary=True)
    url = ui_url(host, state.manager_port or port, token)
    echo(f"Experiment {exp_id} {'started' if action != 'view' else 'is viewable'}.")
    echo(f"  Web UI / REST:  {url}")
    echo(f"  Status:         nnix experiment status {exp_id}")
    echo(f"  Stop:           nnix stop {exp_id}")
    if state.status.value == "ERROR" and action != "view":
        err(f"error: experiment {exp_id} is in ERROR: {state.message}")
        secho(f"  its manager still serves {url} until `nnix stop {exp_id}`", err=True)
        raise SystemExit(EXIT_ERROR)


def create(config: Path, port: int, host: str, debug: bool, foreground: bool, url_prefix: str | None,
           experiment_id: str | None) -> None:
    """`nnix create`."""
    from nnix.config import load_config
    from nnix.host.build import create as create_experiment

    loaded = load_config(config)
    for w in loaded.warnings:
        secho(f"warning: {w}", err=True, fg="yellow")
    if Path(sys.argv[0]).name != "nnictl":  # nnictl has said it already
        note_real_nni()
    if debug:
        loaded.config.log_level = "debug"
        loaded.config.debug = True
    if url_prefix:
        secho("warning: --url_prefix is ignored by nnix", err=True, fg="yellow")
    exp_id, exp_dir = create_experiment(loaded, experiment_id)
    from nnix.host.logs import note_created

    note_created(Path(exp_dir), exp_id, config, loaded.warnings)
    try:
        start(exp_id, "create", port, foreground, host, Path(exp_dir))
    except NnixError:
        from nnix.host.build import discard_unstarted

        discard_unstarted(exp_id)  # a failed create leaves nothing behind
        raise


def resume(experiment_id: str, port: int, host: str, debug: bool, foreground: bool,
           experiment_dir: Path | None) -> None:
    """`nnix resume` (``debug``: taken for nnictl; the experiment keeps its log level)."""
    from nnix.client import adopt_experiment, check_startable

    exp_id = adopt_experiment(experiment_id, experiment_dir)
    check_startable(exp_id)
    start(exp_id, "resume", port, foreground, host)


def view(experiment_id: str, port: int, host: str, experiment_dir: Path | None) -> None:
    """`nnix view`."""
    from nnix.client import adopt_experiment, check_startable

    exp_id = adopt_experiment(experiment_id, experiment_dir)
    check_startable(exp_id)
    start(exp_id, "view", port, False, host)
