"""The verbs of `nnix` that need not start in milliseconds (declared in :mod:`nnix.cli.spec`, run by
:mod:`nnix.cli.main`). Plain functions, one keyword per declared argument and option; heavy modules are imported
inside them. The registry and the stores are read through :mod:`nnix.client` only."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nnix.cli.out import confirm, echo, secho
from nnix.cli.quick import dump, err, fmt_time, print_table, resolve_id, state_of
from nnix.errors import NnixError

# --- update ------------------------------------------------------------------------------------


def _update(exp_id: str | None, kind: str, camel: str, value: Any) -> None:
    from nnix.client import manager_call

    eid = resolve_id(exp_id)
    manager_call(eid, f"/experiment?update_type={kind}", "PUT", {"params": {camel: value}})
    echo(f"experiment {eid}: {camel} updated to {value if kind != 'SEARCH_SPACE' else '(new search space)'}")


def update_concurrency(experiment_id: str | None, value: int) -> None:
    """`nnix update concurrency`."""
    _update(experiment_id, "TRIAL_CONCURRENCY", "trialConcurrency", value)


def update_trialnum(experiment_id: str | None, value: int) -> None:
    """`nnix update trialnum`."""
    _update(experiment_id, "MAX_TRIAL_NUM", "maxTrialNumber", value)


def update_duration(experiment_id: str | None, value: str) -> None:
    """`nnix update duration`."""
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


def update_searchspace(experiment_id: str | None, filename: Path) -> None:
    """`nnix update searchspace`."""
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


def trial_kill(experiment_id: str | None, trial_id: str) -> None:
    """`nnix trial kill`."""
    from nnix.client import manager_call

    eid = resolve_id(experiment_id)
    manager_call(eid, f"/trial-jobs/{trial_id}", "DELETE")
    echo(f"trial {trial_id} of experiment {eid}: kill requested")


# --- experiments -------------------------------------------------------------------------------


def experiment_list(all_: bool, as_json: bool) -> None:
    """`nnix experiment list`."""
    from nnix.client import experiment_rows

    found, warnings = experiment_rows(all_)
    for warning in warnings:
        secho(f"warning: {warning}", err=True, fg="yellow")
    keys = ("id", "name", "status", "message", "port", "url", "pid", "platform", "trials")
    rows = [{**{k: r[k] for k in keys}, "startTime": fmt_time(r["created"]), "endTime": fmt_time(r["ended"]),
             "dir": r["dir"]} for r in found]
    if as_json:
        dump(rows)
        return
    if not rows:
        echo("no experiments" + ("" if all_ else " running (--all lists every experiment)"))
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


def experiment_show(experiment_id: str | None) -> None:
    """`nnix experiment show`."""
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
    echo(json.dumps(out, indent=2, default=str))


def experiment_status(experiment_id: str | None, as_json: bool) -> None:
    """`nnix experiment status`."""

    from nnix.client import Query, manager_alive, shown_status
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
            "trials": {k: n for k, n in Query(st).counts().items() if n},
            "best": None if best is None else {"trialJobId": best.trial_id, "sequenceId": best.sequence_id,
                                               "value": best.final_value, "parameters": best.params},
            "optimizeMode": st.direction, "elapsed": round(st.elapsed(now), 1),
        })
        return
    # stdout: NNI's check-status JSON alone (scripts parse it); what a person reads goes to stderr
    echo(json.dumps({"status": status, "errors": st.errors, "message": st.message}))
    left = not alive and bool(st.live)  # no manager: its RUNNING/WAITING trials are as it left them
    echo(summary_line(st, now, status, left), err=True)
    if left:
        echo(f"no manager runs experiment {eid}: nothing records the trials it left running or waiting; "
             f"`nnix resume {eid}` re-attaches the running ones and starts the waiting ones", err=True)
    if status == "ERROR":
        echo(f"reason: {st.message}", err=True)
    if alive:
        echo(f"manager: pid {st.manager_pid}, port {st.manager_port} (stop it: nnix stop {eid})", err=True)


def experiment_delete(experiment_id: str | None, all_: bool, yes: bool) -> None:
    """`nnix experiment delete`."""
    from nnix.client import deletable_experiments, delete_experiment

    targets = deletable_experiments(experiment_id, all_)
    if not targets:
        echo("nothing to delete")
        return
    if not yes and not confirm(f"delete {len(targets)} experiment(s): {', '.join(eid for eid, _ in targets)}?"):
        raise SystemExit(1)
    for eid, exp_dir in targets:
        echo(f"deleted {eid}{delete_experiment(eid, exp_dir)}")


def experiment_export(experiment_id: str | None, type_: str, filename: Path, intermediate: bool) -> None:
    """`nnix experiment export`."""
    import csv

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
    echo(f"exported {n} trials of {eid} to {filename}")


def experiment_import(experiment_id: str | None, filename: Path) -> None:
    """`nnix experiment import`."""
    from nnix.client import import_records, read_import_file

    eid = resolve_id(experiment_id)
    n = import_records(eid, read_import_file(filename))
    echo(f"imported {n} records into {eid}")


# --- logs and top ------------------------------------------------------------------------------


def _log(exp_id: str | None, name: str, tail: int | None, head: int | None, path: bool) -> None:
    from nnix.client import experiment_dir

    eid = resolve_id(exp_id)
    file = experiment_dir(eid) / "log" / name
    if path:
        echo(str(file))
        return
    if not file.exists():
        echo(f"{file} does not exist (the experiment ran in the foreground?)")
        return
    lines = file.read_text(errors="replace").splitlines()
    if all(not ln.strip() or ln.startswith(("---", "Experiment ")) for ln in lines):
        secho(f"(only start headers here: the manager's own log is `nnix log manager {eid}`)", err=True, dim=True)
    if head is not None:
        lines = lines[:head]
    elif tail is not None:
        lines = lines[-tail:]
    echo("\n".join(lines))


def log_stdout(experiment_id: str | None, tail: int | None, head: int | None, path: bool) -> None:
    """`nnix log stdout`."""
    _log(experiment_id, "nnictl_stdout.log", tail, head, path)


def log_stderr(experiment_id: str | None, tail: int | None, head: int | None, path: bool) -> None:
    """`nnix log stderr`."""
    _log(experiment_id, "nnictl_stderr.log", tail, head, path)


def log_manager(experiment_id: str | None, tail: int | None, follow: bool, path: bool) -> None:
    """`nnix log manager`."""
    from nnix.cli.logs import print_file
    from nnix.client import experiment_dir, manager_running
    from nnix.host.logs import MANAGER_LOG

    eid = resolve_id(experiment_id)
    exp_dir = experiment_dir(eid)
    file = exp_dir / "log" / MANAGER_LOG
    if path:
        echo(str(file))
        return
    if not file.exists() and not follow:
        raise NnixError(f"experiment {eid} has no manager log yet ({file})")
    print_file(file, tail, follow, lambda: manager_running(exp_dir))


def log_trial(experiment_id: str | None, trial_id: str | None, stdout: bool, tail: int | None, follow: bool,
              path: bool) -> None:
    """`nnix log trial`."""
    from nnix.cli.logs import print_file
    from nnix.client import experiment_dir, trial_files_dir

    eid, st = state_of(experiment_id)
    exp_dir = experiment_dir(eid)
    if trial_id is not None and trial_id not in st.trials:
        raise NnixError(f"experiment {eid} has no trial {trial_id}", f"nnix trial ls {eid} lists them")
    if trial_id is None or path:
        for t in st.trials.values():
            if trial_id is None or t.trial_id == trial_id:
                here = trial_files_dir(exp_dir, t.trial_id, t.output_dir)
                copy = f" (copy here: {here})" if here is not None and str(here) != t.output_dir else ""
                why = f"  {t.message}" if t.message else ""
                echo(f"{t.trial_id}: {t.status.value}  {t.output_dir or '(not started)'}{copy}{why}")
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
    secho(f"==> {file} (trial {trial_id} {t.status.value}{reason})", err=True, dim=True)
    print_file(file, 100 if tail is None else tail, follow, watch.active)


def _not_started(eid: str, exp_dir: Path, st: Any, t: Any) -> NnixError:
    """The error for a trial that has no output: one that may still start (its experiment's manager runs and
    starts trials) says why it waits; one that never will (it ended before starting, or its experiment ended
    or lost its manager) says that it never started, and why."""
    import contextlib

    from nnix.client import effective_status, manager_alive, manager_call
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

    def __init__(self, exp_dir: Path, trial_id: str) -> None:
        self.exp_dir, self.trial_id = exp_dir, trial_id
        self.trial: Any = None
        self._checked = 0.0
        self._active = True

    def _read(self) -> None:
        from nnix.client import lifecycle_state, pid_alive
        from nnix.model.status import TrialStatus

        st = lifecycle_state(self.exp_dir)
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


def top(interval: float) -> None:
    """`nnix top`."""
    from rich.console import Group
    from rich.live import Live
    from rich.table import Table

    from nnix.client import Query, active_experiments
    from nnix.host.progress import summary_line

    def render() -> Group:
        parts: list[Any] = []
        for eid, st in active_experiments():
            table = Table(title=f"{eid}  {summary_line(st, time.time())}")
            for col in ("trial", "status", "start", "end", "final"):
                table.add_column(col)
            q = Query(st)
            for t in (x for x in map(q.peek, q.ids()[-20:]) if x is not None):  # (the last 20: no other read)
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


def algo_list(as_json: bool) -> None:
    """`nnix algo list`."""
    from nnix.cli.algo import algo_list as algorithms
    from nnix.cli.algo import source_of

    found = algorithms()
    if as_json:
        dump([{"name": n, "type": k, "source": source_of(v), "class": v} for n, k, v in found])
        return
    print_table(["name", "type", "source", "class"], [[n, k, source_of(v), v] for n, k, v in found])


def algo_register(meta_path: Path) -> None:
    """`nnix algo register` (and NNI's `algo reg`)."""
    from nnix.cli.algo import register

    for line in register(meta_path):
        echo(line)


def algo_unregister(name: str) -> None:
    """`nnix algo unregister` (and NNI's `algo unreg`)."""
    from nnix.cli.algo import unregister

    echo(unregister(name))


def algo_show(name: str) -> None:
    """`nnix algo show`."""
    from nnix.cli.algo import show

    dump(show(name))


# --- experiment save / load --------------------------------------------------------------------------


def experiment_save(experiment_id: str | None, path: Path, save_code: bool) -> None:
    """`nnix experiment save`."""
    from nnix.archive import save
    from nnix.client import experiment_dir

    eid, st = state_of(experiment_id)
    exp_dir = experiment_dir(eid)
    code = Path(str(st.config.get("trial_code_directory") or "")) if save_code else None
    if code is not None and not code.is_dir():
        raise NnixError(f"the trial code directory {code} does not exist", "save without -s")
    result = save(eid, exp_dir, path.expanduser(), code)
    echo(f"saved experiment {eid} to {result.path} ({result.files} files"
         + (f", {result.code_files} code files)" if code is not None else ", without the code)"))
    if result.secrets_left_out:
        secho("note: the config's secrets (passwords, passphrases) are not saved: a loaded experiment needs "
              "them again to resume on remote machines", err=True, fg="yellow")
    for p in result.skipped[:5]:
        secho(f"warning: not saved (a link or not a regular file): {p}", err=True, fg="yellow")


def experiment_load(path: Path, code_dir: Path, log_dir: Path | None, search_space_path: Path | None,
                    force: bool) -> None:
    """`nnix experiment load`."""
    from nnix.archive import load
    from nnix.client import experiments_root

    result = load(path.expanduser(), code_dir, log_dir or experiments_root(), search_space_path, force=force)
    eid = result.experiment_id
    echo(f"loaded experiment {eid} into {result.exp_dir}")
    echo(f"  code:   {result.code_dir}" + (f" ({result.code_extracted} files extracted)"
                                          if result.code_extracted else " (the archive had no code)"))
    echo(f"  view:   nnix view {eid}     resume: nnix resume {eid}")


# --- webui / config / platform -----------------------------------------------------------------------


def webui_url(experiment_id: str | None) -> None:
    """`nnix webui url`."""
    from nnix.client import web_ui_url

    echo(web_ui_url(resolve_id(experiment_id)))


def _camel_config(value: Any, key: str = "") -> Any:
    from pydantic.alias_generators import to_camel

    if isinstance(value, dict):
        if key in ("search_space", "class_args"):
            return value  # user keys, as written
        return {to_camel(k): _camel_config(v, k) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_camel_config(v, key) for v in value]
    return value


def config_show(experiment_id: str | None) -> None:
    """`nnix config show`."""
    import yaml

    eid, st = state_of(experiment_id)
    config = dict(st.config)
    for field, value in st.limits.items():
        if field in config or value is not None:
            config[field] = value
    echo(f"# experiment {eid}")
    echo(yaml.safe_dump(_camel_config(config), sort_keys=False, allow_unicode=True).rstrip())


def platform_clean(config: Path, yes: bool) -> None:
    """`nnix platform clean`."""
    from nnix.config import load_config
    from nnix.services.clean import find, remove

    loaded = load_config(config)
    places = find(loaded.config)
    targets = [p for p in places if p.paths or p.agents]
    for p in places:
        for path in p.paths:
            echo(f"{p.platform} {p.where}: {path}")
        for agent in p.agents:  # (a killed manager's, or one cut off from it: it retries for a day)
            echo(f"{p.platform} {p.where}: live agent {agent}")
        if not p.paths and not p.agents:
            echo(f"{p.platform} {p.where}: " + (f"error: {p.problem}" if p.problem else p.note))
    if not targets:
        if any(p.problem for p in places):
            raise SystemExit(1)
        return
    n = sum(len(p.paths) for p in targets)
    agents = sum(len(p.agents) for p in targets)
    what = f"kill these {agents} agents and their trials, and " if agents else ""
    if not yes and not confirm(f"{what}remove these {n} directories (stop experiments that use them first)?"):
        raise SystemExit(1)
    failed = False
    for p in remove(loaded.config, targets):
        if p.problem:
            failed = True
            err(f"error: {p.platform} {p.where}: {p.problem}")
        elif p.paths or p.agents:
            killed = f"killed {len(p.agents)} agent(s), " if p.agents else ""
            echo(f"{killed}removed {len(p.paths)} from {p.where}")
    if failed:
        raise SystemExit(1)


# --- run one trial by hand -----------------------------------------------------------------------------


def trial_run_local(experiment_id: str | None, trial_id: str, dry_run: bool) -> None:
    """`nnix trial run-local`."""
    import os
    import shlex
    import subprocess

    from nnix.client import trial_command
    from nnix.trial import PARAMETERS_ENV, shim_path

    eid, st = state_of(experiment_id)
    t = st.trials.get(trial_id)
    if t is None:
        raise NnixError(f"experiment {eid} has no trial {trial_id}", f"nnix trial ls {eid} lists them")
    cfg = st.config
    command = trial_command(cfg, t.params)
    code = str(cfg.get("trial_code_directory") or ".")
    params = json.dumps(t.params)
    secho(f"# trial {trial_id} (#{t.sequence_id}) of experiment {eid}", err=True, dim=True)
    secho(f"cd {shlex.quote(code)} && {PARAMETERS_ENV}={shlex.quote(params)} {command}", err=True)
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
    raise SystemExit(code_rc)


# --- tensorboard ---------------------------------------------------------------------------------------


def tensorboard_start(experiment_id: str | None, trial_id: str | None, port: int | None) -> None:
    """`nnix tensorboard start`."""
    from nnix.client import manager_call

    eid, st = state_of(experiment_id)
    ids = trial_id or ",".join(t.trial_id for t in st.trials.values() if t.output_dir)
    if not ids:
        raise NnixError(f"experiment {eid} has no started trial yet")
    body: dict[str, Any] = {"trials": ids}
    if port is not None:
        body["port"] = port
    info = manager_call(eid, "/tensorboard", "POST", body)
    echo(f"TensorBoard {info['id']} ({info['status']}) for trials {','.join(info['trialJobIdList'])}: "
         f"{info['url']}")


def tensorboard_stop(experiment_id: str | None, task: str | None) -> None:
    """`nnix tensorboard stop`."""
    from nnix.client import manager_call

    eid = resolve_id(experiment_id)
    infos = [manager_call(eid, f"/tensorboard/{task}", "DELETE")] if task else manager_call(
        eid, "/tensorboard-tasks", "DELETE")
    if not infos:
        echo(f"experiment {eid} has no TensorBoard")
    for info in infos:
        echo(f"TensorBoard {info['id']}: {info['status']}")

