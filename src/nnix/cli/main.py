"""`nnix` (alias `nnictl`): NNI's verbs and flags. Heavy modules are imported inside commands so
that quick verbs (stop, list, status) start fast."""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from nnix import __version__
from nnix.errors import NnixError
from nnix.limits import MAX_TRIAL_CONCURRENCY, MAX_TRIAL_NUMBER

app = typer.Typer(
    name="nnix",
    help="Run NNI hyper-parameter tuning experiments (nnictl-compatible).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
update_app = typer.Typer(help="Change a running experiment.", no_args_is_help=True)
trial_app = typer.Typer(help="List or kill trials.", no_args_is_help=True)
experiment_app = typer.Typer(help="List, show, export, import and delete experiments.", no_args_is_help=True)
log_app = typer.Typer(help="Show manager logs and trial log paths.", no_args_is_help=True)
app.add_typer(update_app, name="update")
app.add_typer(trial_app, name="trial")
app.add_typer(experiment_app, name="experiment")
app.add_typer(log_app, name="log")
algo_app = typer.Typer(help="Tuners and assessors installed (built-in and by entry point).", no_args_is_help=True)
app.add_typer(algo_app, name="algo")

IdArg = Annotated[str | None, typer.Argument(help="Experiment id (or unique prefix); default: the one running.")]
PortOpt = Annotated[int, typer.Option("--port", "-p", help="REST/web UI port (0 = any free port).")]
HostOpt = Annotated[
    str,
    typer.Option("--host", help="Address the REST API / web UI binds (default 127.0.0.1); any non-loopback "
                 "address requires the experiment's token, printed once as a ?token= link."),
]


def err(message: str) -> None:
    typer.secho(message, err=True, fg=typer.colors.RED)


def _version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", "-v", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """nnix: NNI experiments, unchanged, faster and crash-proof."""


def resolve_id(exp_id: str | None) -> str:
    """NNI's rule: an id or unique prefix; if omitted, the single running experiment."""
    from nnix.home import Registry, effective_status, read_state

    reg = Registry()
    if exp_id:
        return reg.get(exp_id).id
    running = []
    for e in reg.all():
        try:
            if effective_status(read_state(Path(e.dir), summary=True)).is_active:
                running.append(e.id)
        except NnixError:
            continue
    if len(running) == 1:
        return running[0]
    if not running:
        raise NnixError("no experiment is running", "give an experiment id; `nnix experiment list --all` lists them")
    raise NnixError(f"several experiments are running: {', '.join(running)}", "give one of these ids")


# --- create / resume / view / stop ---------------------------------------------------------------


def _ui_url(host: str, port: int | str, token: str | None) -> str:
    import socket

    shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def _start(exp_id: str, action: str, port: int, foreground: bool, host: str = "127.0.0.1") -> None:
    from nnix.api.auth import TOKEN_FILE, token_for_bind
    from nnix.home import Registry

    exp_dir = Path(Registry().get(exp_id).dir)
    token = token_for_bind(exp_dir, host)
    if token:
        typer.echo(f"Listening on {host}: every REST call needs the experiment's token (the link below carries it; "
                   f"the nnix CLI reads it from {exp_dir / TOKEN_FILE}).")
    if foreground:
        if token:
            typer.echo(f"  Web UI: {_ui_url(host, port, token)}" if port else f"  Token: {token}")
        from nnix.cli.run import run_manager
        from nnix.core.status import ExperimentStatus

        status = run_manager(exp_id, action, port=port, live=True, host=host)
        typer.echo(f"experiment {exp_id}: {status.value}")
        if status is ExperimentStatus.ERROR:
            raise typer.Exit(1)
        return
    from nnix.cli.run import spawn_daemon
    from nnix.home import read_state

    spawn_daemon(exp_id, action, port, host=host, fork=True)
    entry = Registry().get(exp_id)
    state = read_state(Path(entry.dir), summary=True)
    typer.echo(f"Experiment {exp_id} {'started' if action != 'view' else 'is viewable'}.")
    typer.echo(f"  Web UI / REST:  {_ui_url(host, state.manager_port or port, token)}")
    typer.echo(f"  Status:         nnix experiment status {exp_id}")
    typer.echo(f"  Stop:           nnix stop {exp_id}")


@app.command()
def create(
    config: Annotated[Path, typer.Option("--config", "-c", help="Experiment config (NNI v1 or v2 YAML).")],
    port: PortOpt = 8080,
    host: HostOpt = "127.0.0.1",
    debug: Annotated[bool, typer.Option("--debug", "-d", help="Debug logging.")] = False,
    foreground: Annotated[
        bool, typer.Option("--foreground", "-f", help="Run in this terminal with live progress; exit when done.")
    ] = False,
    url_prefix: Annotated[str | None, typer.Option("--url_prefix", "--url-prefix", "-u", hidden=True)] = None,
    experiment_id: Annotated[str | None, typer.Option("--id", help="Use this experiment id.")] = None,
) -> None:
    """Create an experiment from a config file and start it."""
    from nnix.config import load_config
    from nnix.experiment import create as create_experiment

    loaded = load_config(config)
    for w in loaded.warnings:
        typer.secho(f"warning: {w}", err=True, fg=typer.colors.YELLOW)
    if debug:
        loaded.config.log_level = "debug"
        loaded.config.debug = True
    if url_prefix:
        typer.secho("warning: --url_prefix is ignored by nnix", err=True, fg=typer.colors.YELLOW)
    exp_id, _ = create_experiment(loaded, experiment_id)
    _start(exp_id, "create", port, foreground, host)


def _ensure_not_running(exp_id: str) -> None:
    from nnix.home import Registry, pid_alive, read_state

    state = read_state(Path(Registry().get(exp_id).dir), summary=True)
    if pid_alive(state.manager_pid) and state.manager_action != "view":
        raise NnixError(f"experiment {exp_id} is already running (pid {state.manager_pid})", f"nnix stop {exp_id}")


@app.command()
def resume(
    experiment_id: Annotated[str, typer.Argument(help="Experiment id to resume.")],
    port: PortOpt = 8080,
    host: HostOpt = "127.0.0.1",
    debug: Annotated[bool, typer.Option("--debug", "-d")] = False,
    foreground: Annotated[bool, typer.Option("--foreground", "-f")] = False,
    experiment_dir: Annotated[Path | None, typer.Option("--experiment_dir", "--experiment-dir", "-e")] = None,
) -> None:
    """Resume a stopped (or crashed) experiment: ids, sequence numbers and tuner history continue."""
    exp_id = _adopt(experiment_id, experiment_dir)
    _ensure_not_running(exp_id)
    _start(exp_id, "resume", port, foreground, host)


def _adopt(exp_id: str, experiment_dir: Path | None) -> str:
    """Register an experiment found under ``experiment_dir`` (NNI's ``-e``) if it is not known yet."""
    from nnix.home import STORE_NAME, Entry, Registry

    reg = Registry()
    if experiment_dir is not None:
        d = experiment_dir.expanduser().resolve() / exp_id
        if not (d / STORE_NAME).exists():
            raise NnixError(f"no experiment {exp_id} under {experiment_dir}", "check --experiment_dir")
        reg.add(Entry(exp_id, str(d), created=time.time()))
        return exp_id
    return reg.get(exp_id).id


@app.command()
def view(
    experiment_id: Annotated[str, typer.Argument(help="Experiment id to view.")],
    port: PortOpt = 8080,
    host: HostOpt = "127.0.0.1",
    experiment_dir: Annotated[Path | None, typer.Option("--experiment_dir", "--experiment-dir", "-e")] = None,
) -> None:
    """Serve a stopped experiment read-only."""
    exp_id = _adopt(experiment_id, experiment_dir)
    _ensure_not_running(exp_id)
    _start(exp_id, "view", port, False, host)


@app.command()
def stop(
    experiment_id: IdArg = None,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Stop every running experiment.")] = False,
    port: Annotated[int | None, typer.Option("--port", "-p", help="Stop the experiment on this port.")] = None,
) -> None:
    """Stop an experiment: its trials are canceled, its state is kept for resume."""
    from nnix.cli.control import stop_experiment
    from nnix.home import Registry, effective_status, pid_alive, read_state

    if experiment_id == "all":
        raise NnixError("`nnix stop all` is ambiguous", "use `nnix stop --all`")
    if all_ or port is not None:
        ids = []
        for e in Registry().all():
            st = read_state(Path(e.dir), summary=True)
            running = effective_status(st).is_active or (st.manager_action == "view" and pid_alive(st.manager_pid))
            if running and (port is None or st.manager_port == port):
                ids.append(e.id)
        if not ids:
            typer.echo("no experiment is running" + (f" on port {port}" if port else ""))
            return
    else:
        ids = [resolve_id(experiment_id)]
    for exp_id in ids:
        typer.echo(stop_experiment(exp_id))


# --- update ------------------------------------------------------------------------------------


def _update(exp_id: str | None, kind: str, camel: str, value: Any) -> None:
    from nnix.cli.control import manager_call

    eid = resolve_id(exp_id)
    manager_call(eid, f"/experiment?update_type={kind}", "PUT", {"params": {camel: value}})
    typer.echo(f"experiment {eid}: {camel} updated to {value if kind != 'SEARCH_SPACE' else '(new search space)'}")


@update_app.command("concurrency")
def update_concurrency(
    experiment_id: IdArg = None,
    value: Annotated[int, typer.Option("--value", "-v", min=1, max=MAX_TRIAL_CONCURRENCY)] = ...,  # type: ignore[assignment]
) -> None:
    """Change trialConcurrency (running trials are never killed for a decrease)."""
    _update(experiment_id, "TRIAL_CONCURRENCY", "trialConcurrency", value)


@update_app.command("trialnum")
def update_trialnum(
    experiment_id: IdArg = None,
    value: Annotated[int, typer.Option("--value", "-v", min=1, max=MAX_TRIAL_NUMBER)] = ...,  # type: ignore[assignment]
) -> None:
    """Change maxTrialNumber."""
    _update(experiment_id, "MAX_TRIAL_NUM", "maxTrialNumber", value)


@update_app.command("duration")
def update_duration(
    experiment_id: IdArg = None,
    value: Annotated[str, typer.Option("--value", "-v", help="e.g. 30m, 2h, 1d")] = ...,  # type: ignore[assignment]
) -> None:
    """Change maxExperimentDuration."""
    from nnix.config import parse_duration
    from nnix.errors import FieldIssue, InputError
    from nnix.limits import BOUNDS

    bound = BOUNDS["max_experiment_duration"]
    try:
        problem = bound.problem(parse_duration(value))
    except ValueError as e:
        raise InputError([FieldIssue("--value", str(e), "a number plus one of s, m, h, d, e.g. 2h")]) from None
    if problem is not None:
        raise InputError([FieldIssue("--value", problem, bound.hint)])
    _update(experiment_id, "MAX_EXEC_DURATION", "maxExperimentDuration", value)


@update_app.command("searchspace")
def update_searchspace(
    experiment_id: IdArg = None,
    filename: Annotated[Path, typer.Option("--filename", "-f", help="Search space JSON file.")] = ...,  # type: ignore[assignment]
) -> None:
    """Replace the search space (the tuner sees it for its next proposals)."""
    from nnix.documents import DocumentError, load_json, read_text
    from nnix.errors import FieldIssue, SearchSpaceError
    from nnix.space import validate

    try:
        space = load_json(read_text(filename, "search space file"))
    except DocumentError as e:
        line = f"at line {e.line}: " if e.line is not None else ""
        raise SearchSpaceError([FieldIssue(e.path, line + e.message, e.hint)], source=str(filename)) from None
    except ValueError as e:
        example = 'e.g. {"lr": {"_type": "uniform", "_value": [0, 1]}}'
        raise SearchSpaceError([FieldIssue("", f"not JSON: {e}", example)], source=str(filename)) from None
    issues = validate(space)
    if issues:
        raise SearchSpaceError(issues, source=str(filename))
    _update(experiment_id, "SEARCH_SPACE", "searchSpace", space)


# --- trials ------------------------------------------------------------------------------------


def _state(exp_id: str | None) -> tuple[str, Any]:
    from nnix.home import Registry, read_state

    eid = resolve_id(exp_id)
    return eid, read_state(Path(Registry().get(eid).dir))


def _fmt_time(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


@trial_app.command("ls")
def trial_ls(
    experiment_id: IdArg = None,
    head: Annotated[int | None, typer.Option("--head", help="Top N by the default metric.")] = None,
    tail: Annotated[int | None, typer.Option("--tail", help="Bottom N by the default metric.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="NNI's JSON shape.")] = False,
) -> None:
    """List an experiment's trials (works on stopped experiments too)."""
    if head is not None and tail is not None:
        raise NnixError("--head and --tail are mutually exclusive")
    eid, state = _state(experiment_id)
    trials = list(state.trials.values())
    if head is not None or tail is not None:
        scored = sorted((t for t in trials if t.final_value is not None), key=lambda t: t.final_value, reverse=True)
        trials = scored[:head] if head is not None else scored[-(tail or 0) :]
    if as_json:
        from nnix.api.app import trial_info

        typer.echo(json.dumps([trial_info(t) for t in trials], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"experiment {eid}")
    for col in ("trial", "no.", "status", "start", "end", "final", "parameters"):
        table.add_column(col)
    for t in trials:
        final = t.final
        table.add_row(
            t.trial_id, str(t.sequence_id), t.status.value, _fmt_time(t.started_at), _fmt_time(t.ended_at),
            "-" if final is None else json.dumps(final.value), json.dumps(t.params),
        )
    Console().print(table)


@trial_app.command("kill")
def trial_kill(
    experiment_id: IdArg = None,
    trial_id: Annotated[str, typer.Option("--trial_id", "--trial-id", "-T", help="Trial to kill.")] = ...,  # type: ignore[assignment]
) -> None:
    """Kill a trial (its whole process tree); it becomes USER_CANCELED."""
    from nnix.cli.control import manager_call

    eid = resolve_id(experiment_id)
    manager_call(eid, f"/trial-jobs/{trial_id}", "DELETE")
    typer.echo(f"trial {trial_id} of experiment {eid}: kill requested")


# --- experiments -------------------------------------------------------------------------------


@experiment_app.command("list")
def experiment_list(all_: Annotated[bool, typer.Option("--all", help="Include stopped experiments.")] = False) -> None:
    """List experiments on this machine."""
    from rich.console import Console
    from rich.table import Table

    from nnix.home import Registry, effective_status, read_state, trial_count

    table = Table()
    for col in ("id", "name", "status", "port", "platform", "trials", "start", "end"):
        table.add_column(col)
    shown = 0
    for e in sorted(Registry().all(), key=lambda e: e.created):
        try:
            st = read_state(Path(e.dir), summary=True)
            n_trials = trial_count(Path(e.dir))
        except NnixError:
            continue
        status = effective_status(st)
        if not all_ and not status.is_active:
            continue
        shown += 1
        table.add_row(
            e.id, e.name or "-", status.value, str(st.manager_port or "-") if status.is_active else "-", e.platform,
            str(n_trials), _fmt_time(st.created_at), _fmt_time(st.end_time),
        )
    if shown == 0:
        typer.echo("no experiments" + ("" if all_ else " running (--all shows stopped ones)"))
        return
    Console().print(table)


@experiment_app.command("show")
def experiment_show(experiment_id: IdArg = None) -> None:
    """Show an experiment's profile (config, limits, times) as JSON."""
    eid, st = _state(experiment_id)
    out = {
        "id": eid,
        "status": st.status.value,
        "params": st.config,
        "limits": st.limits,
        "execDuration": int(st.elapsed(time.time() if st.status.is_active else None)),
        "startTime": _fmt_time(st.created_at),
        "endTime": _fmt_time(st.end_time),
        "nextSequenceId": st.next_sequence_id,
        "seed": st.seed,
    }
    typer.echo(json.dumps(out, indent=2, default=str))


@experiment_app.command("status")
def experiment_status(experiment_id: IdArg = None) -> None:
    """Show an experiment's status and progress."""
    from nnix.cli.run import summary_line
    from nnix.home import effective_status

    _, st = _state(experiment_id)
    typer.echo(json.dumps({"status": effective_status(st).value, "errors": st.errors, "message": st.message}))
    typer.echo(summary_line(st, time.time()))


@experiment_app.command("delete")
def experiment_delete(
    experiment_id: IdArg = None,
    all_: Annotated[bool, typer.Option("--all", help="Delete every stopped experiment.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete stopped experiments: their directory and registry entry."""
    import shutil

    from nnix.home import Registry, effective_status, read_state

    reg = Registry()
    if all_:
        entries = reg.all()
    elif experiment_id:
        entries = [reg.get(experiment_id)]
    else:
        raise NnixError("give an experiment id or --all")
    targets = []
    for e in entries:
        try:
            status = effective_status(read_state(Path(e.dir), summary=True))
        except NnixError:
            status = None
        if status is not None and status.is_active:
            if not all_:
                raise NnixError(f"experiment {e.id} is running", f"stop it first: nnix stop {e.id}")
            continue
        targets.append(e)
    if not targets:
        typer.echo("nothing to delete")
        return
    if not yes and not typer.confirm(f"delete {len(targets)} experiment(s): {', '.join(e.id for e in targets)}?"):
        raise typer.Exit(1)
    for e in targets:
        shutil.rmtree(e.dir, ignore_errors=True)
        reg.remove(e.id)
        typer.echo(f"deleted {e.id}")


@experiment_app.command("export")
def experiment_export(
    experiment_id: IdArg = None,
    type_: Annotated[str, typer.Option("--type", "-t", help="csv or json")] = ...,  # type: ignore[assignment]
    filename: Annotated[Path, typer.Option("--filename", "-f")] = ...,  # type: ignore[assignment]
    intermediate: Annotated[bool, typer.Option("--intermediate", "-i", help="Add intermediate results.")] = False,
) -> None:
    """Export trials that have a final result: parameters, value, trial id."""
    if type_ not in ("csv", "json"):
        raise NnixError(f"--type must be csv or json, got {type_!r}")
    eid, st = _state(experiment_id)
    rows = []
    for t in st.trials.values():
        final = t.final
        if final is None:
            continue
        row: dict[str, Any] = {"parameter": t.params, "value": final.value, "trialJobId": t.trial_id}
        if intermediate:
            row["intermediate"] = [m.value for m in t.intermediate]
        rows.append(row)
    if type_ == "json":
        filename.write_text(json.dumps(rows, indent=2))
    else:
        pkeys: list[str] = []
        mkeys: list[str] = []
        for r in rows:
            pkeys += [k for k in r["parameter"] if k not in pkeys]
            v = r["value"]
            mkeys += [k for k in (v if isinstance(v, dict) else {"reward": v}) if k not in mkeys]
        cols = pkeys + mkeys + ["trialJobId"] + (["intermediate"] if intermediate else [])
        with open(filename, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            for r in rows:
                v = r["value"]
                metric = v if isinstance(v, dict) else {"reward": v}
                flat = {**r["parameter"], **metric, "trialJobId": r["trialJobId"]}
                if intermediate:
                    flat["intermediate"] = json.dumps(r["intermediate"])
                w.writerow({k: (json.dumps(x) if isinstance(x, (dict, list)) else x) for k, x in flat.items()})
    typer.echo(f"exported {len(rows)} trials of {eid} to {filename}")


@experiment_app.command("import")
def experiment_import(
    experiment_id: IdArg = None,
    filename: Annotated[Path, typer.Option("--filename", "-f", help="JSON list of {parameter, value}.")] = ...,  # type: ignore[assignment]
) -> None:
    """Feed prior results to the experiment's tuner."""
    from nnix.cli.control import import_records

    eid = resolve_id(experiment_id)
    try:
        data = json.loads(filename.read_text())
    except (OSError, ValueError) as e:
        raise NnixError(f"cannot read {filename}: {e}", "a JSON list of {\"parameter\": {...}, \"value\": ...}") from e
    n = import_records(eid, data)
    typer.echo(f"imported {n} records into {eid}")


# --- logs and top ------------------------------------------------------------------------------


def _log(exp_id: str | None, name: str, tail: int | None, head: int | None, path: bool) -> None:
    from nnix.home import Registry

    eid = resolve_id(exp_id)
    file = Path(Registry().get(eid).dir) / "log" / name
    if path:
        typer.echo(str(file))
        return
    if not file.exists():
        typer.echo(f"{file} does not exist (the experiment ran in the foreground?)")
        return
    lines = file.read_text(errors="replace").splitlines()
    if head is not None:
        lines = lines[:head]
    elif tail is not None:
        lines = lines[-tail:]
    typer.echo("\n".join(lines))


TailOpt = Annotated[int | None, typer.Option("--tail", "-T")]
HeadOpt = Annotated[int | None, typer.Option("--head", "-H")]
PathOpt = Annotated[bool, typer.Option("--path", help="Only print the file's path.")]


@log_app.command("stdout")
def log_stdout(experiment_id: IdArg = None, tail: TailOpt = None, head: HeadOpt = None, path: PathOpt = False) -> None:
    """The manager daemon's stdout."""
    _log(experiment_id, "nnictl_stdout.log", tail, head, path)


@log_app.command("stderr")
def log_stderr(experiment_id: IdArg = None, tail: TailOpt = None, head: HeadOpt = None, path: PathOpt = False) -> None:
    """The manager daemon's stderr."""
    _log(experiment_id, "nnictl_stderr.log", tail, head, path)


@log_app.command("trial")
def log_trial(
    experiment_id: IdArg = None,
    trial_id: Annotated[str | None, typer.Option("--trial_id", "--trial-id", "-T")] = None,
) -> None:
    """Where a trial's files are (trial.stdout, trial.stderr, trial.log); for a trial that ran on another
    machine, also where this machine keeps a copy of its stdout and stderr."""
    from nnix.home import Registry, trial_files_dir

    eid, st = _state(experiment_id)
    exp_dir = Path(Registry().get(eid).dir)
    for t in st.trials.values():
        if trial_id is None or t.trial_id == trial_id:
            here = trial_files_dir(exp_dir, t.trial_id, t.output_dir)
            copy = f" (copy here: {here})" if here is not None and str(here) != t.output_dir else ""
            typer.echo(f"{t.trial_id}: {t.output_dir or '(not started)'}{copy}")
    if trial_id is not None and trial_id not in st.trials:
        raise NnixError(f"experiment {eid} has no trial {trial_id}")


@app.command()
def top(interval: Annotated[float, typer.Option("--time", "-t", help="Refresh seconds.")] = 3.0) -> None:
    """Watch running experiments and their trials (Ctrl-C to quit)."""
    from rich.console import Group
    from rich.live import Live
    from rich.table import Table

    from nnix.cli.run import summary_line
    from nnix.home import Registry, effective_status, read_state

    def render() -> Group:
        parts: list[Any] = []
        for e in Registry().all():
            try:
                st = read_state(Path(e.dir))
            except NnixError:
                continue
            if not effective_status(st).is_active:
                continue
            table = Table(title=f"{e.id}  {summary_line(st, time.time())}")
            for col in ("trial", "status", "start", "end", "final"):
                table.add_column(col)
            for t in list(st.trials.values())[-20:]:
                f = t.final
                table.add_row(t.trial_id, t.status.value, _fmt_time(t.started_at), _fmt_time(t.ended_at),
                              "-" if f is None else json.dumps(f.value))
            parts.append(table)
        return Group(*(parts or ["no experiment is running"]))

    try:
        with Live(render(), refresh_per_second=1) as live:
            while True:
                time.sleep(interval)
                live.update(render())
    except KeyboardInterrupt:
        pass


@algo_app.command("list")
def algo_list() -> None:
    """List the tuners and assessors that configs can name (entry points nnix.tuners / nnix.assessors)."""
    from rich.console import Console
    from rich.table import Table

    from nnix.registry import available

    table = Table()
    for col in ("name", "type", "source", "class"):
        table.add_column(col)
    for kind in ("tuner", "assessor"):
        for name, value in sorted(available(kind).items()):
            source = "nnix" if value.startswith("nnix.") else "user"
            table.add_row(name, kind, source, value)
    Console().print(table)


def main() -> None:
    try:
        app()
    except NnixError as e:
        err(f"error: {e.message}")
        if e.hint:
            typer.secho(f"  hint: {e.hint}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
