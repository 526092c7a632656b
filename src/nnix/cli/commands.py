"""`nnix` (alias `nnictl`): NNI's verbs and flags, as typer commands (run by :mod:`nnix.cli.main`). Heavy modules
are imported inside commands so that quick verbs (list, status) start fast."""


import csv
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from nnix.cli import quick
from nnix.cli.quick import dump, err, fmt_time, note_real_nni, print_table, resolve_id, state_of
from nnix.errors import NnixError
from nnix.limits import MAX_TRIAL_CONCURRENCY, MAX_TRIAL_NUMBER
from nnix.version import __version__


class _Commands(TyperGroup):
    """Plain help that lists each command with the first sentence of its help in full, wrapped under itself
    (click would cut it at the end of the line with "...")."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:  # (typer's own click: Context, HelpFormatter)
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


app = typer.Typer(  # plain help and errors: rich (and its markdown) would double `nnix --help`'s start-up
    cls=_Commands,
    rich_markup_mode=None,
    name="nnix",
    help="Run NNI hyper-parameter tuning experiments (nnictl-compatible).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _group(help: str) -> typer.Typer:
    return typer.Typer(cls=_Commands, rich_markup_mode=None, help=help, no_args_is_help=True)


update_app = _group("Change a running experiment.")
trial_app = _group("List or kill trials.")
experiment_app = _group("List, show, export, import and delete experiments.")
log_app = _group("Show the manager's log and trials' output.")
app.add_typer(update_app, name="update")
app.add_typer(trial_app, name="trial")
app.add_typer(experiment_app, name="experiment")
app.add_typer(log_app, name="log")
algo_app = _group("Tuners and assessors installed (built-in and by entry point).")
app.add_typer(algo_app, name="algo")

IdArg = Annotated[str | None, typer.Argument(help="Experiment id (or unique prefix); default: the one running.")]
PortOpt = Annotated[int, typer.Option("--port", "-p", help="REST/web UI port (0 = any free port).")]
HostOpt = Annotated[
    str,
    typer.Option("--host", help="Address the REST API / web UI binds (default 127.0.0.1); any non-loopback "
                 "address requires the experiment's token, printed once as a ?token= link."),
]


def _version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        note_real_nni()
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", "-v", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """nnix: NNI experiments, unchanged, faster and crash-proof."""


# --- create / resume / view / stop ---------------------------------------------------------------


@app.command()
def create(
    config: Annotated[Path, typer.Option("--config", "-c", help="Experiment config (NNI v1 or v2 YAML).")],
    port: PortOpt = quick.DEFAULT_PORT,
    host: HostOpt = quick.DEFAULT_HOST,
    debug: Annotated[bool, typer.Option("--debug", "-d", help="Debug logging.")] = False,
    foreground: Annotated[
        bool, typer.Option("--foreground", "-f", help="Run in this terminal with live progress; exit when done.")
    ] = False,
    url_prefix: Annotated[str | None, typer.Option("--url_prefix", "--url-prefix", "-u", hidden=True)] = None,
    experiment_id: Annotated[str | None, typer.Option("--id", help="Use this experiment id.")] = None,
) -> None:
    """Create an experiment from a config file and start it (in the background unless --foreground).

    Exit codes with --foreground: 0 the experiment ended and at least one trial succeeded; 1 nnix
    could not do it (e.g. the port is busy); 2 invalid config or flags; 3 the experiment ended in
    ERROR (the reason is printed); 4 it ended but no trial succeeded; 130 Ctrl-C (resume it with
    `nnix resume ID`); 143 stopped from elsewhere (nnix stop, the web UI)."""
    quick.create(config, port, host, debug, foreground, url_prefix, experiment_id)


@app.command()
def resume(
    experiment_id: Annotated[str, typer.Argument(help="Experiment id to resume.")],
    port: PortOpt = quick.DEFAULT_PORT,
    host: HostOpt = quick.DEFAULT_HOST,
    debug: Annotated[bool, typer.Option("--debug", "-d")] = False,
    foreground: Annotated[bool, typer.Option("--foreground", "-f")] = False,
    experiment_dir: Annotated[Path | None, typer.Option("--experiment_dir", "--experiment-dir", "-e")] = None,
) -> None:
    """Resume a stopped (or crashed) experiment: ids, sequence numbers and tuner history continue.

    Exit codes with --foreground: as `nnix create --foreground` (0 success, 3 ERROR, 4 no trial
    succeeded, 130 Ctrl-C, 143 stopped from elsewhere)."""
    quick.resume(experiment_id, port, host, foreground, experiment_dir)


@app.command()
def view(
    experiment_id: Annotated[str, typer.Argument(help="Experiment id to view.")],
    port: PortOpt = quick.DEFAULT_PORT,
    host: HostOpt = quick.DEFAULT_HOST,
    experiment_dir: Annotated[Path | None, typer.Option("--experiment_dir", "--experiment-dir", "-e")] = None,
) -> None:
    """Serve a stopped experiment read-only."""
    quick.view(experiment_id, port, host, experiment_dir)


@app.command()
def stop(
    experiment_id: IdArg = None,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Stop every live experiment manager.")] = False,
    port: Annotated[int | None, typer.Option("--port", "-p", help="Stop the experiment on this port.")] = None,
) -> None:
    """Stop an experiment's manager, whatever its status: a running experiment's trials are canceled
    and its state is kept for resume; a finished (DONE, ERROR) or viewed one stops serving its web UI."""
    quick.stop(experiment_id, all_, port)


# --- update ------------------------------------------------------------------------------------


def _update(exp_id: str | None, kind: str, camel: str, value: Any) -> None:
    from nnix.client import manager_call

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


@trial_app.command("ls")
def trial_ls(
    experiment_id: IdArg = None,
    head: Annotated[int | None, typer.Option("--head", help="The N best trials (by the default metric and the "
                                             "experiment's optimize mode), best first.")] = None,
    tail: Annotated[int | None, typer.Option("--tail", help="The N worst trials, worst last.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="NNI's JSON shape (a list of trial jobs).")] = False,
) -> None:
    """List an experiment's trials (works on stopped experiments too), with why each one failed or
    stopped. Piped, the table is plain and nothing is cut."""
    quick.trial_ls(experiment_id, head, tail, as_json)


@trial_app.command("kill")
def trial_kill(
    experiment_id: IdArg = None,
    trial_id: Annotated[str, typer.Option("--trial_id", "--trial-id", "-T", help="Trial to kill.")] = ...,  # type: ignore[assignment]
) -> None:
    """Kill a trial (its whole process tree); it becomes USER_CANCELED."""
    from nnix.client import manager_call

    eid = resolve_id(experiment_id)
    manager_call(eid, f"/trial-jobs/{trial_id}", "DELETE")
    typer.echo(f"trial {trial_id} of experiment {eid}: kill requested")


# --- experiments -------------------------------------------------------------------------------


def _experiment_rows(all_: bool) -> list[dict[str, Any]]:
    from nnix.api.auth import read_token
    from nnix.home import Registry, manager_alive, read_state, shown_status, trial_count, ui_url

    out = []
    for e in sorted(Registry().all(), key=lambda e: e.created):
        try:
            st = read_state(Path(e.dir), summary=True)
            n_trials = trial_count(Path(e.dir))
        except NnixError as ex:
            if all_:
                typer.secho(f"warning: experiment {e.id}: {ex.message}", err=True, fg=typer.colors.YELLOW)
            continue
        alive = manager_alive(st)
        if not all_ and not alive:
            continue
        port = st.manager_port if alive else None
        url = ui_url(st.manager_host or "127.0.0.1", port, read_token(Path(e.dir)) if st.manager_host not in
                     ("127.0.0.1", "localhost", "::1") else None) if port else None
        out.append({
            "id": e.id, "name": e.name, "status": shown_status(st), "message": st.message,
            "port": port, "url": url, "pid": st.manager_pid if alive else None, "platform": e.platform,
            "trials": n_trials, "startTime": fmt_time(st.created_at), "endTime": fmt_time(st.end_time),
            "dir": e.dir,
        })
    return out


@experiment_app.command("list")
def experiment_list(
    all_: Annotated[bool, typer.Option("--all", help="Include experiments whose manager is not running.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list.")] = False,
) -> None:
    """List experiments whose manager is alive, whatever their status (a finished experiment's manager
    keeps serving its web UI and its port until `nnix stop`); --all lists every experiment."""
    rows = _experiment_rows(all_)
    if as_json:
        dump(rows)
        return
    if not rows:
        typer.echo("no experiments" + ("" if all_ else " running (--all lists every experiment)"))
        return
    if sys.stdout.isatty():  # what fits a terminal (the url carries the port); a pipe gets every column
        print_table(["id", "status", "trials", "url", "name", "message"],
                    [[r["id"], r["status"], str(r["trials"]), r["url"] or "-", r["name"] or "-", r["message"] or "-"]
                     for r in rows], squeeze=("name", "message"))
        return
    print_table(
        ["id", "name", "status", "port", "url", "platform", "trials", "start", "end", "message"],
        [[r["id"], r["name"] or "-", r["status"], str(r["port"] or "-"), r["url"] or "-", r["platform"],
          str(r["trials"]), r["startTime"], r["endTime"], r["message"] or "-"] for r in rows],
    )


@experiment_app.command("show")
def experiment_show(experiment_id: IdArg = None) -> None:
    """Show an experiment's profile (config, limits, times) as JSON."""
    eid, st = state_of(experiment_id)
    out = {
        "id": eid,
        "status": st.status.value,
        "params": st.config,
        "limits": st.limits,
        "execDuration": int(st.elapsed(time.time() if st.status.is_active else None)),
        "startTime": fmt_time(st.created_at),
        "endTime": fmt_time(st.end_time),
        "nextSequenceId": st.next_sequence_id,
        "seed": st.seed,
    }
    typer.echo(json.dumps(out, indent=2, default=str))


@experiment_app.command("status")
def experiment_status(
    experiment_id: IdArg = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object (status, reason, manager, counts, best).")]
    = False,
) -> None:
    """Show an experiment's status, why it is in ERROR (if it is), its manager and progress."""
    from collections import Counter

    from nnix.home import manager_alive, shown_status
    from nnix.host.progress import summary_line

    eid, st = state_of(experiment_id)
    status = shown_status(st)
    alive = manager_alive(st)
    now = time.time() if alive and st.counting else None  # (a manager gone: up to the last event it recorded)
    if as_json:
        best = st.best_trial()
        dump({
            "id": eid, "status": status, "message": st.message, "errors": st.errors,
            "manager": {"alive": alive, "pid": st.manager_pid if alive else None,
                        "port": st.manager_port if alive else None},
            "trials": dict(Counter(t.status.value for t in st.trials.values())),
            "best": None if best is None else {"trialJobId": best.trial_id, "sequenceId": best.sequence_id,
                                               "value": best.final_value, "parameters": best.params},
            "optimizeMode": st.direction, "elapsed": round(st.elapsed(now), 1),
        })
        return
    # stdout: NNI's check-status JSON alone (scripts parse it); what a person reads goes to stderr
    typer.echo(json.dumps({"status": status, "errors": st.errors, "message": st.message}))
    left = not alive and bool(st.live)  # no manager: its RUNNING/WAITING trials are as it left them
    typer.echo(summary_line(st, now, status, left), err=True)
    if left:
        typer.echo(f"no manager runs experiment {eid}: nothing records the trials it left running or waiting; "
                   f"`nnix resume {eid}` re-attaches the running ones and starts the waiting ones", err=True)
    if status == "ERROR":
        typer.echo(f"reason: {st.message}", err=True)
    if alive:
        typer.echo(f"manager: pid {st.manager_pid}, port {st.manager_port} (stop it: nnix stop {eid})", err=True)


@experiment_app.command("delete")
def experiment_delete(
    experiment_id: IdArg = None,
    all_: Annotated[bool, typer.Option("--all", help="Delete every stopped experiment.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete stopped experiments: their directory and registry entry."""
    import shutil

    from nnix.home import Registry, manager_alive, read_state, shown_status

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
            st = read_state(Path(e.dir), summary=True)
        except NnixError:
            st = None
        if st is not None and manager_alive(st):  # running, or finished and still serving its web UI
            if not all_:
                raise NnixError(f"experiment {e.id} has a live manager ({shown_status(st)})",
                                f"stop it first: nnix stop {e.id}")
            continue
        targets.append(e)
    if not targets:
        typer.echo("nothing to delete")
        return
    if not yes and not typer.confirm(f"delete {len(targets)} experiment(s): {', '.join(e.id for e in targets)}?"):
        raise typer.Exit(1)
    from nnix.client import end_engine_work

    for e in targets:
        # what a killed manager left on its engines (jobs, actors, pods, agents, trials, a private Ray head)
        ended = end_engine_work(Path(e.dir), e.id) if Path(e.dir).is_dir() else ""
        shutil.rmtree(e.dir, ignore_errors=True)
        reg.remove(e.id)
        typer.echo(f"deleted {e.id}{ended}")


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
    eid, st = state_of(experiment_id)

    def rows(with_intermediate: bool) -> Iterator[dict[str, Any]]:  # one at a time: constant memory
        for t in list(st.trials.values()):
            final = t.final
            if final is None:
                continue
            row: dict[str, Any] = {"parameter": t.params, "value": final.value, "trialJobId": t.trial_id}
            if with_intermediate:  # (an ended trial's series is read from the store here)
                row["intermediate"] = [m.value for m in t.intermediate]
            yield row

    n = 0
    if type_ == "json":  # the bytes of json.dumps(list, indent=2), written a row at a time
        with open(filename, "w") as f:
            for r in rows(intermediate):
                f.write(("[\n" if n == 0 else ",\n") + "\n".join("  " + line for line in
                                                                 json.dumps(r, indent=2).split("\n")))
                n += 1
            f.write("\n]" if n else "[]")
    else:
        pkeys: list[str] = []
        mkeys: list[str] = []
        for r in rows(False):
            pkeys += [k for k in r["parameter"] if k not in pkeys]
            v = r["value"]
            mkeys += [k for k in (v if isinstance(v, dict) else {"reward": v}) if k not in mkeys]
        cols = pkeys + mkeys + ["trialJobId"] + (["intermediate"] if intermediate else [])
        with open(filename, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            for r in rows(intermediate):
                v = r["value"]
                metric = v if isinstance(v, dict) else {"reward": v}
                flat = {**r["parameter"], **metric, "trialJobId": r["trialJobId"]}
                if intermediate:
                    flat["intermediate"] = json.dumps(r["intermediate"])
                w.writerow({k: (json.dumps(x) if isinstance(x, (dict, list)) else x) for k, x in flat.items()})
                n += 1
    typer.echo(f"exported {n} trials of {eid} to {filename}")


@experiment_app.command("import")
def experiment_import(
    experiment_id: IdArg = None,
    filename: Annotated[Path, typer.Option("--filename", "-f", help="JSON list of {parameter, value}.")] = ...,  # type: ignore[assignment]
) -> None:
    """Feed prior results to the experiment's tuner."""
    from nnix.client import import_records, read_import_file

    eid = resolve_id(experiment_id)
    n = import_records(eid, read_import_file(filename))
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
    if all(not ln.strip() or ln.startswith(("---", "Experiment ")) for ln in lines):
        typer.secho(f"(only start headers here: the manager's own log is `nnix log manager {eid}`)", err=True,
                    dim=True)
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


LinesOpt = Annotated[int | None, typer.Option("--tail", "-n", help="Only the last N lines.")]
FollowOpt = Annotated[bool, typer.Option("--follow", "-f", help="Keep printing what is appended, until it ends.")]


@log_app.command("manager")
def log_manager(
    experiment_id: IdArg = None, tail: LinesOpt = None, follow: FollowOpt = False, path: PathOpt = False
) -> None:
    """The experiment manager's log (log/manager.log): start, limits, each trial's start and end with its
    reason, assessor decisions, warnings and errors. --follow: until the manager exits."""
    from nnix.cli.logs import print_file
    from nnix.home import Registry, pid_alive, read_state
    from nnix.host.logs import MANAGER_LOG

    eid = resolve_id(experiment_id)
    exp_dir = Path(Registry().get(eid).dir)
    file = exp_dir / "log" / MANAGER_LOG
    if path:
        typer.echo(str(file))
        return
    if not file.exists() and not follow:
        raise NnixError(f"experiment {eid} has no manager log yet ({file})")

    def alive() -> bool:
        return pid_alive(read_state(exp_dir, summary=True).manager_pid)

    print_file(file, tail, follow, alive)


@log_app.command("trial")
def log_trial(
    experiment_id: IdArg = None,
    trial_id: Annotated[str | None, typer.Option("--trial_id", "--trial-id", "-T", help="The trial.")] = None,
    stdout: Annotated[bool, typer.Option("--stdout", help="Its stdout instead of its stderr.")] = False,
    tail: Annotated[int | None, typer.Option("--tail", "-n", help="The last N lines (default 100).")] = None,
    follow: FollowOpt = False,
    path: PathOpt = False,
) -> None:
    """A trial's stderr (or --stdout): its last lines, or --follow it until the trial ends. Local, remote and
    cluster trials alike (for a trial that ran elsewhere, the copy this machine keeps). Without -T (or with
    --path): where each trial's files are, with its status and reason."""
    from nnix.cli.logs import print_file
    from nnix.home import Registry, trial_files_dir

    eid, st = state_of(experiment_id)
    exp_dir = Path(Registry().get(eid).dir)
    if trial_id is not None and trial_id not in st.trials:
        raise NnixError(f"experiment {eid} has no trial {trial_id}", f"nnix trial ls {eid} lists them")
    if trial_id is None or path:
        for t in st.trials.values():
            if trial_id is None or t.trial_id == trial_id:
                here = trial_files_dir(exp_dir, t.trial_id, t.output_dir)
                copy = f" (copy here: {here})" if here is not None and str(here) != t.output_dir else ""
                why = f"  {t.message}" if t.message else ""
                typer.echo(f"{t.trial_id}: {t.status.value}  {t.output_dir or '(not started)'}{copy}{why}")
        return
    name = "trial.stdout" if stdout else "trial.stderr"
    t = st.trials[trial_id]
    watch = _TrialWatch(exp_dir, trial_id)
    if follow:
        watch.wait_started()
        t = watch.trial or t
    folder = trial_files_dir(exp_dir, trial_id, t.output_dir)
    if folder is None:
        raise _not_started(eid, exp_dir, st, t)
    file = folder / name
    reason = f": {t.message}" if t.message else ""
    typer.secho(f"==> {file} (trial {trial_id} {t.status.value}{reason})", err=True, dim=True)
    print_file(file, 100 if tail is None else tail, follow, watch.active)


def _not_started(eid: str, exp_dir: Path, st: Any, t: Any) -> NnixError:
    """The error for a trial that has no output: one that may still start (its experiment's manager runs and
    starts trials) says why it waits; one that never will (it ended before starting, or its experiment ended
    or lost its manager) says that it never started, and why."""
    import contextlib

    from nnix.client import manager_call
    from nnix.home import effective_status, manager_alive
    from nnix.model.status import ExperimentStatus, TrialStatus

    if t.status is TrialStatus.WAITING and effective_status(st).is_active and manager_alive(st):
        why = ""
        with contextlib.suppress(NnixError, KeyError, TypeError):
            why = str(manager_call(eid, "/check-status").get("waitingReason") or "")
        return NnixError(f"trial {t.trial_id} has not started yet" + (f": {why}" if why else ": it has no output yet"),
                         "try again later, or use --follow")
    status = effective_status(st)
    if t.message:  # it ended before it started (canceled, or its service refused it): its own reason
        why = t.message
    elif status is ExperimentStatus.ERROR and st.message:
        why = f"experiment {eid} is in ERROR: {st.message}"
    else:
        waited = _last_waiting_reason(exp_dir)
        why = f"experiment {eid} is {status.value}" + (f"; it was waiting: {waited}" if waited else "")
    hint = (f"fix the cause, then `nnix resume {eid}` starts it" if t.status is TrialStatus.WAITING
            else f"nnix trial ls {eid} lists the trials that ran")
    return NnixError(f"trial {t.trial_id} never started ({t.status.value}): {why}", hint)


def _last_waiting_reason(exp_dir: Path) -> str:
    """The last reason the manager logged for trials waiting (``trials wait: ...`` in log/manager.log), or ""."""
    from nnix.cli.logs import tail_lines
    from nnix.host.logs import MANAGER_LOG

    try:
        text, _ = tail_lines(exp_dir / "log" / MANAGER_LOG, 5000)
    except OSError:
        return ""
    for line in reversed(text.splitlines()):
        _, found, reason = line.partition(" trials wait: ")
        if found:
            return reason.strip()
    return ""


class _TrialWatch:
    """Whether a trial is still going, read from the experiment's log at most once a second (metrics skipped)."""

    KINDS = ("ExperimentCreated", "ManagerStarted", "StatusChanged", "TrialCreated", "TrialStarted",
             "TrialCancelRequested", "TrialEnded", "TrialRequeued")

    def __init__(self, exp_dir: Path, trial_id: str) -> None:
        self.exp_dir, self.trial_id = exp_dir, trial_id
        self.trial: Any = None
        self._checked = 0.0
        self._active = True

    def _read(self) -> None:
        from nnix.core.state import fold
        from nnix.home import STORE_NAME, pid_alive
        from nnix.model.status import TrialStatus
        from nnix.store.sqlite import SqliteStore

        store = SqliteStore(self.exp_dir / STORE_NAME, create=False)
        try:
            st = fold(store.read(kinds=self.KINDS))
        finally:
            store.close()
        self.trial = st.trials.get(self.trial_id)
        # no manager: nobody records its end, but a local trial may still run and write; follow while it lives.
        # A trial still waiting is followed only while its experiment starts trials (not one in ERROR or DONE).
        t = self.trial
        self._active = (t is not None and t.is_active
                        and ((pid_alive(st.manager_pid) and (t.status is not TrialStatus.WAITING
                                                             or st.status.is_active))
                             or pid_alive(t.pid)))
        self._checked = time.monotonic()

    def active(self) -> bool:
        if time.monotonic() - self._checked >= 1.0:
            self._read()
        return self._active

    def wait_started(self) -> None:
        self._read()
        while self._active and (self.trial is None or not self.trial.output_dir):
            time.sleep(0.5)
            self._read()


@app.command()
def top(interval: Annotated[float, typer.Option("--time", "-t", help="Refresh seconds.")] = 3.0) -> None:
    """Watch running experiments and their trials (Ctrl-C to quit)."""
    from rich.console import Group
    from rich.live import Live
    from rich.table import Table

    from nnix.home import Registry, effective_status, read_state
    from nnix.host.progress import summary_line

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
                table.add_row(t.trial_id, t.status.value, fmt_time(t.started_at), fmt_time(t.ended_at),
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
def algo_list(as_json: Annotated[bool, typer.Option("--json", help="A JSON list.")] = False) -> None:
    """List the tuners and assessors that configs can name (entry points nnix.tuners / nnix.assessors)."""
    from nnix.cli.algo import algo_list as algorithms
    from nnix.cli.algo import source_of

    found = algorithms()
    if as_json:
        dump([{"name": n, "type": k, "source": source_of(v), "class": v} for n, k, v in found])
        return
    print_table(["name", "type", "source", "class"], [[n, k, source_of(v), v] for n, k, v in found])


@algo_app.command("register")
def algo_register(
    meta_path: Annotated[Path, typer.Option("--meta_path", "--meta-path", "-m", help="NNI meta file (YAML).")],
) -> None:
    """Register the tuners/assessors of an NNI meta file (builtinName, className, algoType...): configs can
    then name them. Each class is imported to check it; built-in names are never overwritten."""
    from nnix.cli.algo import register

    for line in register(meta_path):
        typer.echo(line)


@algo_app.command("reg", hidden=True)
def algo_reg(meta_path: Annotated[Path, typer.Option("--meta_path", "--meta-path", "-m")]) -> None:
    """NNI's short spelling of `algo register`."""
    algo_register(meta_path)


@algo_app.command("unregister")
def algo_unregister(name: Annotated[str, typer.Argument(help="A registered algorithm's name.")]) -> None:
    """Remove an algorithm registered with `nnix algo register` (built-ins cannot be removed)."""
    from nnix.cli.algo import unregister

    typer.echo(unregister(name))


@algo_app.command("unreg", hidden=True)
def algo_unreg(name: Annotated[str, typer.Argument()]) -> None:
    """NNI's short spelling of `algo unregister`."""
    algo_unregister(name)


@algo_app.command("show")
def algo_show(name: Annotated[str, typer.Argument(help="An algorithm's name.")]) -> None:
    """Show one algorithm as JSON: its meta record (registered) or its class (built-in)."""
    from nnix.cli.algo import show

    dump(show(name))


# --- experiment save / load --------------------------------------------------------------------------


@experiment_app.command("save")
def experiment_save(
    experiment_id: IdArg = None,
    path: Annotated[Path, typer.Option("--path", "-p", help="Directory to write the archive to.")] = Path("."),
    save_code: Annotated[bool, typer.Option("--saveCodeDir", "--save-code-dir", "-s",
                                            help="Put the trial code directory in the archive too.")] = False,
) -> None:
    """Save an experiment as a portable zip archive (store, config, logs, trial outputs; the code with -s),
    to load on another machine with `nnix experiment load`."""
    from nnix.archive import save
    from nnix.home import Registry

    eid, st = state_of(experiment_id)
    exp_dir = Path(Registry().get(eid).dir)
    code = Path(str(st.config.get("trial_code_directory") or "")) if save_code else None
    if code is not None and not code.is_dir():
        raise NnixError(f"the trial code directory {code} does not exist", "save without -s")
    result = save(eid, exp_dir, path.expanduser(), code)
    typer.echo(f"saved experiment {eid} to {result.path} ({result.files} files"
               + (f", {result.code_files} code files)" if code is not None else ", without the code)"))
    if result.secrets_left_out:
        typer.secho("note: the config's secrets (passwords, passphrases) are not saved: a loaded experiment needs "
                    "them again to resume on remote machines", err=True, fg=typer.colors.YELLOW)
    for p in result.skipped[:5]:
        typer.secho(f"warning: not saved (a link or not a regular file): {p}", err=True, fg=typer.colors.YELLOW)


@experiment_app.command("load")
def experiment_load(
    path: Annotated[Path, typer.Option("--path", "-p", help="The archive (.zip) to load.")],
    code_dir: Annotated[Path, typer.Option("--codeDir", "--code-dir", "-c",
                                           help="Trial code directory: where the archive's code goes (it must be "
                                                "new or empty), or where the code already is.")],
    log_dir: Annotated[Path | None, typer.Option("--logDir", "--log-dir", "-l",
                                                 help="Experiment root directory (default: $NNIX_HOME).")] = None,
    search_space_path: Annotated[Path | None, typer.Option(
        "--searchSpacePath", "--search-space-path", "-s",
        help="Write the search space to this file and use it as the config's searchSpaceFile.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an experiment with the same id.")] = False,
) -> None:
    """Load an archive written by `nnix experiment save`, under a new location: the paths it recorded
    (experiment directory, code directory, trial outputs) are rewritten. Then `nnix view ID` or `nnix resume ID`."""
    from nnix.archive import load
    from nnix.home import home

    result = load(path.expanduser(), code_dir, log_dir or home(), search_space_path, force=force)
    eid = result.experiment_id
    typer.echo(f"loaded experiment {eid} into {result.exp_dir}")
    typer.echo(f"  code:   {result.code_dir}" + (f" ({result.code_extracted} files extracted)"
                                                 if result.code_extracted else " (the archive had no code)"))
    typer.echo(f"  view:   nnix view {eid}     resume: nnix resume {eid}")


# --- webui / config / platform -----------------------------------------------------------------------

webui_app = _group("The web UI of an experiment.")
config_app = _group("An experiment's config.")
platform_app = _group("What nnix left on remote machines and cluster storage.")
tensorboard_app = _group("TensorBoard for trials (needs TensorBoard: the tensorboard extra of nnix).")
app.add_typer(webui_app, name="webui")
app.add_typer(config_app, name="config")
app.add_typer(platform_app, name="platform")
app.add_typer(tensorboard_app, name="tensorboard")


@webui_app.command("url")
def webui_url(experiment_id: IdArg = None) -> None:
    """Print the web UI's address of an experiment whose manager serves it."""
    from nnix.api.auth import is_loopback, read_token
    from nnix.home import Registry, manager_alive, shown_status, ui_url

    eid, st = state_of(experiment_id)
    if not manager_alive(st) or not st.manager_port:
        raise NnixError(f"experiment {eid} is not served ({shown_status(st)}: no manager runs)",
                        f"serve it read-only with `nnix view {eid}`, or continue it with `nnix resume {eid}`")
    host = st.manager_host or "127.0.0.1"
    token = None if is_loopback(host) else read_token(Path(Registry().get(eid).dir))
    typer.echo(ui_url(host, st.manager_port, token))


def _camel_config(value: Any, key: str = "") -> Any:
    from pydantic.alias_generators import to_camel

    if isinstance(value, dict):
        if key in ("search_space", "class_args"):
            return value  # user keys, as written
        return {to_camel(k): _camel_config(v, k) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_camel_config(v, key) for v in value]
    return value


@config_app.command("show")
def config_show(experiment_id: IdArg = None) -> None:
    """Print the experiment's config as stored (YAML, NNI's camelCase keys; runtime updates of concurrency,
    limits and search space applied; secrets masked)."""
    import yaml

    eid, st = state_of(experiment_id)
    config = dict(st.config)
    for field, value in st.limits.items():
        if field in config or value is not None:
            config[field] = value
    typer.echo(f"# experiment {eid}")
    typer.echo(yaml.safe_dump(_camel_config(config), sort_keys=False, allow_unicode=True).rstrip())


@platform_app.command("clean")
def platform_clean(
    config: Annotated[Path, typer.Option("--config", "-c", help="The experiment config whose platform to clean.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Remove what nnix left outside the experiment directories for a config's platform: on remote machines
    (over SSH) the agent venvs and experiment folders under remoteWorkDir; on cluster platforms the nnix
    folders of the shared storage. Lists what it removes and asks first (unless -y)."""
    from nnix.config import load_config
    from nnix.services.clean import find, remove

    loaded = load_config(config)
    places = find(loaded.config)
    targets = [p for p in places if p.paths or p.agents]
    for p in places:
        for path in p.paths:
            typer.echo(f"{p.platform} {p.where}: {path}")
        for agent in p.agents:  # (a killed manager's, or one cut off from it: it retries for a day)
            typer.echo(f"{p.platform} {p.where}: live agent {agent}")
        if not p.paths and not p.agents:
            typer.echo(f"{p.platform} {p.where}: " + (f"error: {p.problem}" if p.problem else p.note))
    if not targets:
        if any(p.problem for p in places):
            raise typer.Exit(1)
        return
    n = sum(len(p.paths) for p in targets)
    agents = sum(len(p.agents) for p in targets)
    what = f"kill these {agents} agents and their trials, and " if agents else ""
    if not yes and not typer.confirm(f"{what}remove these {n} directories (stop experiments that use them first)?"):
        raise typer.Exit(1)
    failed = False
    for p in remove(loaded.config, targets):
        if p.problem:
            failed = True
            err(f"error: {p.platform} {p.where}: {p.problem}")
        elif p.paths or p.agents:
            killed = f"killed {len(p.agents)} agent(s), " if p.agents else ""
            typer.echo(f"{killed}removed {len(p.paths)} from {p.where}")
    if failed:
        raise typer.Exit(1)


# --- run one trial by hand -----------------------------------------------------------------------------


@trial_app.command("run-local")
def trial_run_local(
    experiment_id: IdArg = None,
    trial_id: Annotated[str, typer.Option("--trial_id", "--trial-id", "-T", help="The trial to run again.")] = ...,  # type: ignore[assignment]
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only print what would run.")] = False,
) -> None:
    """Run one trial's command here, standalone (no experiment), in its code directory with its parameters
    (NNIX_PARAMETERS, which `import nni` reads when no experiment runs): to debug a trial. Results are printed,
    not recorded. Exits with the trial's exit code."""
    import os
    import shlex
    import subprocess

    from nnix.core.manager import params_as_args
    from nnix.trial import PARAMETERS_ENV, shim_path

    eid, st = state_of(experiment_id)
    t = st.trials.get(trial_id)
    if t is None:
        raise NnixError(f"experiment {eid} has no trial {trial_id}", f"nnix trial ls {eid} lists them")
    cfg = st.config
    command = str(cfg["trial_command"])
    if cfg.get("trial_params_as_args") and isinstance(t.params, dict):
        command = f"{command} {params_as_args(t.params)}"
    code = str(cfg.get("trial_code_directory") or ".")
    params = json.dumps(t.params)
    typer.secho(f"# trial {trial_id} (#{t.sequence_id}) of experiment {eid}", err=True, dim=True)
    typer.secho(f"cd {shlex.quote(code)} && {PARAMETERS_ENV}={shlex.quote(params)} {command}", err=True)
    if dry_run:
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NNIX_TRIAL", "NNI_"))}
    env[PARAMETERS_ENV] = params
    env.pop("NNIX_PARAMETERS_FILE", None)
    env["PYTHONPATH"] = shim_path() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        code_rc = subprocess.call(["/bin/bash", "-c", command], cwd=code, env=env)
    except OSError as e:
        raise NnixError(f"cannot run the trial command in {code}: {e}", "is the code directory there?") from e
    raise typer.Exit(code_rc)


# --- tensorboard ---------------------------------------------------------------------------------------


@tensorboard_app.command("start")
def tensorboard_start(
    experiment_id: IdArg = None,
    trial_id: Annotated[str | None, typer.Option("--trial_id", "--trial-id", "-T",
                                                 help="Trial ids, comma-separated (default: every started trial).")]
    = None,
    port: Annotated[int | None, typer.Option("--port", help="TensorBoard's port (default: any free one).")] = None,
) -> None:
    """Start TensorBoard on trials' NNI_OUTPUT_DIR/tensorboard (or their output directories), through the
    experiment's manager (running or viewed); it stops with the manager or with `nnix tensorboard stop`."""
    from nnix.client import manager_call

    eid, st = state_of(experiment_id)
    ids = trial_id or ",".join(t.trial_id for t in st.trials.values() if t.output_dir)
    if not ids:
        raise NnixError(f"experiment {eid} has no started trial yet")
    body: dict[str, Any] = {"trials": ids}
    if port is not None:
        body["port"] = port
    info = manager_call(eid, "/tensorboard", "POST", body)
    typer.echo(f"TensorBoard {info['id']} ({info['status']}) for trials {','.join(info['trialJobIdList'])}: "
               f"{info['url']}")


@tensorboard_app.command("stop")
def tensorboard_stop(
    experiment_id: IdArg = None,
    task: Annotated[str | None, typer.Option("--id", help="Stop only this TensorBoard task.")] = None,
) -> None:
    """Stop the experiment's TensorBoard processes."""
    from nnix.client import manager_call

    eid = resolve_id(experiment_id)
    infos = [manager_call(eid, f"/tensorboard/{task}", "DELETE")] if task else manager_call(
        eid, "/tensorboard-tasks", "DELETE")
    if not infos:
        typer.echo(f"experiment {eid} has no TensorBoard")
    for info in infos:
        typer.echo(f"TensorBoard {info['id']}: {info['status']}")

