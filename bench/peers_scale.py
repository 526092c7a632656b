"""Peers at scale: how long Optuna takes to load a large study, and optuna-dashboard to list its trials.

    python bench/peers_scale.py [--trials 100000] [--intermediates 100] [--cache /tmp/nnix-peers]
    python bench/peers_scale.py --verify        # 200 trials built both ways, compared (see below)

Needs ``optuna`` (and, for the dashboard figure, ``optuna-dashboard``) importable by the Python that runs
it; nnix does not depend on them, so run it with a separate environment, e.g.::

    python3.11 -m venv /tmp/peers && /tmp/peers/bin/pip install optuna optuna-dashboard
    /tmp/peers/bin/python bench/peers_scale.py

The default study has the shape of nnix's figure in ``bench/scale_view.py``: 100,000 finished trials x 100
intermediate values (10M intermediate values), one float parameter ``x``, one final value (minimised), state
COMPLETE. It is built once per parameter set (and Optuna version) under ``--cache``, in both of Optuna's
storages, as a study that ran through ``study.optimize`` (``suggest_float``, ``report`` per step, a returned
value; concurrency 1) would have left them:

* RDB (SQLite file): Optuna creates the empty study (so the schema, version rows and study rows are its own),
  then the trials, their parameter (with its distribution JSON), value and intermediate values are
  bulk-inserted in Optuna's tables with ``executemany`` in one transaction, row for row what Optuna writes
  (ids, ``FINITE`` value types, SQLAlchemy's datetime text). The column lists Optuna created are checked
  first, so a schema change fails the build instead of writing wrong rows.
* journal (file backend): one trial is run through ``study.optimize`` into a scratch journal, its operation
  lines (create trial, set param, one per reported step, set state and values) become templates, and every
  trial's lines are produced from them; the generator must reproduce that trial's lines byte for byte.

Building through Optuna's API instead takes hours at this size on 2 cores; ``--verify`` shows the bulk build
is faithful: it builds ``--trials`` (default 200 there) trials both through ``study.optimize`` and in bulk, in
both storages, and checks that ``load_study`` returns equal trials (number, state, params, distributions,
values, intermediate values, attributes) from all four, that the RDB rows and the journal lines are equal
apart from datetimes and the worker id, and that the two bulk storages agree on the datetimes too.

Then it prints, per storage (each figure in a fresh process; a load that goes above ``--max-rss-gb`` is
stopped and printed as such):

* ``load``: seconds from ``optuna.load_study`` to ``study.trials`` holding every trial (what a dashboard or a
  resumed optimisation pays before its first answer), and the process' peak RSS;
* ``dashboard``: seconds from opening the storage and creating optuna-dashboard's WSGI app to the answer of
  its first ``GET /api/studies/<id>?after=0`` (its trial list, called in process, no network; the app reads
  every trial from the storage for it), and the peak RSS. Not run when the load alone went past the RSS limit
  (the dashboard reads the trials through the same storage class).

``bench/scale.py --peers-python PY`` prints these beside nnix's ``view``/``resume`` figures at the same size.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

FORMAT = 2  # bump when the bulk layout changes: part of the cache file names
STUDY = "scale"
LOW, HIGH = -5.0, 10.0
T0 = datetime(2026, 1, 1, 0, 0, 0)  # naive local time, as Optuna's RDB storage writes it
START_EVERY = timedelta(seconds=1)
RUN_FOR = timedelta(milliseconds=750)

MEASURE = r"""
import os, resource, sys, threading, time
what, kind, url, limit = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])  # argv[5]: study id
t0 = time.perf_counter()
page = os.sysconf("SC_PAGE_SIZE")

def guard():
    while True:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * page
        if rss > limit:
            print(f"RSS {rss / 2**30:.1f} {time.perf_counter() - t0:.1f}", flush=True)
            os._exit(3)
        time.sleep(0.05)

threading.Thread(target=guard, daemon=True).start()
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)

def storage():
    if kind == "journal":
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend
        return JournalStorage(JournalFileBackend(url))
    return url

if what == "load":
    t0 = time.perf_counter()
    study = optuna.load_study(study_name="scale", storage=storage())
    n = len(study.trials)
    took = time.perf_counter() - t0
else:
    import io, json
    try:
        import optuna_dashboard
    except ImportError:
        print("NA", flush=True)
        raise SystemExit(0)
    t0 = time.perf_counter()
    app = optuna_dashboard.wsgi(storage())
    sid = int(sys.argv[5])
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": f"/api/studies/{sid}", "QUERY_STRING": "after=0",
               "SERVER_NAME": "localhost", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
               "wsgi.input": io.BytesIO(b""), "wsgi.errors": sys.stderr, "SERVER_PROTOCOL": "HTTP/1.1",
               "HTTP_HOST": "localhost"}
    status = []
    body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
    took = time.perf_counter() - t0
    if not status or not status[0].startswith("200"):
        print(f"dashboard answered {status} {body[:300]!r}", file=sys.stderr)
        raise SystemExit(1)
    n = len(json.loads(body)["trials"])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(f"OK {n} {took:.3f} {peak / 2**30:.2f}", flush=True)
"""


# ---------------------------------------------------------------- the study's contents (one source for both ways)


def x_of(number: int) -> float:
    return LOW + (HIGH - LOW) * ((number * 7919) % 10007) / 10007


def value_of(x: float) -> float:
    return (x - 1.0) ** 2


def intermediate_of(value: float, step: int) -> float:
    return value + 1.0 / (step + 1)


def times_of(number: int) -> tuple[datetime, datetime]:
    start = T0 + number * START_EVERY
    return start, start + RUN_FOR


def _quiet_optuna() -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _journal(path: Path) -> Any:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))


def run_through_api(storage: Any, trials: int, intermediates: int, first: int = 0) -> None:
    """What a user's ``study.optimize`` writes: a sampler that proposes ``x_of(number)``, a report per step."""
    optuna = _quiet_optuna()

    class Fixed(optuna.samplers.BaseSampler):  # type: ignore[misc, name-defined]
        def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
            return {}

        def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
            return {}

        def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> float:
            return x_of(first + trial.number)

    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", LOW, HIGH)
        value = value_of(x)
        for step in range(intermediates):
            trial.report(intermediate_of(value, step), step)
        return value

    study = optuna.create_study(study_name=STUDY, storage=storage, sampler=Fixed())
    study.optimize(objective, n_trials=trials)


# ---------------------------------------------------------------- RDB (SQLite) bulk build

EXPECTED_COLUMNS = {
    "trials": ["trial_id", "number", "study_id", "state", "datetime_start", "datetime_complete"],
    "trial_params": ["param_id", "trial_id", "param_name", "param_value", "distribution_json"],
    "trial_values": ["trial_value_id", "trial_id", "objective", "value", "value_type"],
    "trial_intermediate_values": [
        "trial_intermediate_value_id", "trial_id", "step", "intermediate_value", "intermediate_value_type",
    ],
}


def _sqlite_datetime(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%d %H:%M:%S.%f")  # SQLAlchemy's DATETIME text on SQLite (always microseconds)


def build_rdb(path: Path, trials: int, intermediates: int) -> None:
    optuna = _quiet_optuna()
    from optuna.distributions import FloatDistribution, distribution_to_json

    storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
    optuna.create_study(study_name=STUDY, storage=storage)
    storage.engine.dispose()
    del storage
    dist = distribution_to_json(FloatDistribution(LOW, HIGH))
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for table, cols in EXPECTED_COLUMNS.items():
            got = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
            if got != cols:
                raise SystemExit(f"Optuna's {table} table has columns {got}, this builder writes {cols}")
            if con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]:
                raise SystemExit(f"Optuna's new study already has rows in {table}")
        (study_id,) = con.execute("SELECT study_id FROM studies WHERE study_name = ?", (STUDY,)).fetchone()
        con.execute("PRAGMA synchronous = OFF")  # this connection only; the file stays in Optuna's journal mode
        con.execute("PRAGMA cache_size = -262144")
        con.execute("BEGIN")
        trial_rows, param_rows, value_rows, inter_rows = [], [], [], []
        iv_id = 0

        def flush() -> None:
            con.executemany("INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?)", trial_rows)
            con.executemany("INSERT INTO trial_params VALUES (?, ?, ?, ?, ?)", param_rows)
            con.executemany("INSERT INTO trial_values VALUES (?, ?, ?, ?, ?)", value_rows)
            con.executemany("INSERT INTO trial_intermediate_values VALUES (?, ?, ?, ?, ?)", inter_rows)
            for rows in (trial_rows, param_rows, value_rows, inter_rows):
                rows.clear()

        for number in range(trials):
            trial_id = number + 1
            x = x_of(number)
            value = value_of(x)
            start, complete = times_of(number)
            trial_rows.append(
                (trial_id, number, study_id, "COMPLETE", _sqlite_datetime(start), _sqlite_datetime(complete))
            )
            param_rows.append((trial_id, trial_id, "x", x, dist))
            value_rows.append((trial_id, trial_id, 0, value, "FINITE"))
            for step in range(intermediates):
                iv_id += 1
                inter_rows.append((iv_id, trial_id, step, intermediate_of(value, step), "FINITE"))
            if len(inter_rows) >= 200_000 or len(trial_rows) >= 10_000:
                flush()
                _progress("rdb", number + 1, trials)
        flush()
        con.execute("COMMIT")
    finally:
        con.close()


# ---------------------------------------------------------------- journal bulk build


def _template(line: str, fields: dict[str, str]) -> tuple[str, list[str]]:
    """``line`` as a %-format string with the values of ``fields`` (key -> name) as ``%s`` holes, in order."""
    log = json.loads(line)
    if json.dumps(log, separators=(",", ":")) != line:
        raise SystemExit(f"Optuna's journal line does not re-serialise identically: {line}")
    for key, name in fields.items():
        if key == "values":
            log[key] = [f"@{name}@"]
        else:
            log[key] = f"@{name}@"
    text = json.dumps(log, separators=(",", ":")).replace("%", "%%")
    marks = sorted((text.index(f'"@{name}@"'), name) for name in fields.values())
    for _, name in marks:
        text = text.replace(f'"@{name}@"', "%s")
    return text, [name for _, name in marks]


def _iso(dt: datetime) -> str:
    return json.dumps(dt.astimezone(timezone.utc).isoformat(timespec="microseconds"))


def journal_lines(template: list[str], trials: int, intermediates: int) -> Iterator[str]:
    """Every line of the study, made from the lines Optuna wrote for one trial (``template``)."""
    ops = [json.loads(line)["op_code"] for line in template]
    if ops[:3] != [0, 4, 5] or ops[-1] != 6 or set(ops[3:-1]) != {7}:
        raise SystemExit(f"unexpected journal operations for one trial: {ops}")
    create, ocreate = _template(template[1], {"datetime_start": "start"})
    param, oparam = _template(template[2], {"trial_id": "tid", "param_value_internal": "x"})
    report, oreport = _template(template[3], {"trial_id": "tid", "step": "step", "intermediate_value": "iv"})
    finish, ofinish = _template(template[-1], {"trial_id": "tid", "values": "value", "datetime_complete": "end"})
    yield template[0]
    for number in range(trials):
        x = x_of(number)
        value = value_of(x)
        start, complete = times_of(number)
        v = {"tid": str(number), "x": repr(x), "value": repr(value), "start": _iso(start), "end": _iso(complete)}
        yield create % tuple(v[k] for k in ocreate)
        yield param % tuple(v[k] for k in oparam)
        tid = v["tid"]
        if oreport == ["tid", "step", "iv"]:
            for step in range(intermediates):
                yield report % (tid, step, repr(intermediate_of(value, step)))
        else:
            for step in range(intermediates):
                w = {"tid": tid, "step": str(step), "iv": repr(intermediate_of(value, step))}
                yield report % tuple(w[k] for k in oreport)
        yield finish % tuple(v[k] for k in ofinish)


def journal_template() -> list[str]:
    """Optuna's own lines for trial 0 of the study (2 reported steps), with that trial's datetimes set."""
    with tempfile.TemporaryDirectory(prefix="nnix-peers-") as tmp:
        path = Path(tmp) / "one.log"
        run_through_api(_journal(path), 1, 2)
        lines = path.read_text().splitlines()
    start, complete = times_of(0)
    out = []
    for line in lines:
        log = json.loads(line)
        if "datetime_start" in log:
            log["datetime_start"] = start.astimezone(timezone.utc).isoformat(timespec="microseconds")
        if "datetime_complete" in log:
            log["datetime_complete"] = complete.astimezone(timezone.utc).isoformat(timespec="microseconds")
        out.append(json.dumps(log, separators=(",", ":")))
    return out


def build_journal(path: Path, trials: int, intermediates: int) -> None:
    template = journal_template()
    mine = list(journal_lines(template, 1, 2))
    if mine != template:
        raise SystemExit("the journal generator does not reproduce Optuna's own lines for one trial:\n"
                         + "\n".join(a + "\n" + b for a, b in zip(template, mine, strict=False) if a != b))
    per_trial = intermediates + 3
    with open(path, "w", encoding="utf-8") as f:
        chunk: list[str] = []
        for i, line in enumerate(journal_lines(template, trials, intermediates)):
            chunk.append(line)
            if len(chunk) >= 100_000:
                f.write("\n".join(chunk) + "\n")
                chunk.clear()
                _progress("journal", i // per_trial, trials)
        if chunk:
            f.write("\n".join(chunk) + "\n")


def _progress(kind: str, done: int, total: int) -> None:
    if sys.stderr.isatty():
        print(f"\r  building {kind}: {done}/{total}", end="", file=sys.stderr, flush=True)


BUILDERS = {"rdb": build_rdb, "journal": build_journal}


def url_of(kind: str, path: Path) -> str:
    return f"sqlite:///{path}" if kind == "rdb" else str(path)


# ---------------------------------------------------------------- --verify


def _trial_key(t: Any) -> tuple[Any, ...]:
    return (t.number, t.state, t.params, t.distributions, t.values, t.intermediate_values, t.user_attrs,
            t.system_attrs)


def _load(kind: str, path: Path) -> list[Any]:
    optuna = _quiet_optuna()
    storage = _journal(path) if kind == "journal" else url_of(kind, path)
    return list(optuna.load_study(study_name=STUDY, storage=storage).trials)


def _rdb_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        out = {}
        for table in tables:
            if table == "trials":
                out[table] = list(con.execute("SELECT trial_id, number, study_id, state FROM trials ORDER BY 1"))
            elif table == "version_info":
                out[table] = list(con.execute("SELECT * FROM version_info"))
            else:
                out[table] = list(con.execute(f"SELECT * FROM {table} ORDER BY 1"))
        out["schema"] = list(con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name"))
        return out
    finally:
        con.close()


def _journal_ops(path: Path) -> list[dict[str, Any]]:
    ops = []
    for line in path.read_text().splitlines():
        log = json.loads(line)
        log.pop("worker_id")
        for key in ("datetime_start", "datetime_complete"):
            if key in log:
                log[key] = "<time>"
        ops.append(log)
    return ops


def _first_diff(a: list[Any], b: list[Any]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def verify(trials: int, intermediates: int) -> int:
    optuna = _quiet_optuna()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # Optuna's API pays a commit per report: keep it off disk
    with tempfile.TemporaryDirectory(prefix="nnix-peers-verify-", dir=shm) as tmp:
        d = Path(tmp)
        t0 = time.perf_counter()
        run_through_api(f"sqlite:///{d / 'api.db'}", trials, intermediates)
        run_through_api(_journal(d / "api.log"), trials, intermediates)
        api_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        build_rdb(d / "bulk.db", trials, intermediates)
        build_journal(d / "bulk.log", trials, intermediates)
        bulk_s = time.perf_counter() - t0
        problems = []
        loaded = {}
        for name, kind, file in (("api rdb", "rdb", "api.db"), ("api journal", "journal", "api.log"),
                                 ("bulk rdb", "rdb", "bulk.db"), ("bulk journal", "journal", "bulk.log")):
            try:
                loaded[name] = _load(kind, d / file)
            except Exception as e:  # a storage Optuna cannot read is a failed check, said as such
                problems.append(f"{name}: load_study failed: {type(e).__name__}: {e}")
                loaded[name] = []
        ref = [_trial_key(t) for t in loaded["api rdb"]]
        if len(ref) != trials or any(k[1] != optuna.trial.TrialState.COMPLETE for k in ref):
            problems.append(f"the API-built study has {len(ref)} trials, not {trials} COMPLETE ones")
        if any(len(k[5]) != intermediates for k in ref):
            problems.append(f"the API-built study's trials do not all have {intermediates} intermediate values")
        for name, ts in loaded.items():
            keys = [_trial_key(t) for t in ts]
            if keys != ref:
                bad = _first_diff(keys, ref)
                problems.append(f"{name}: trials differ from api rdb's (first at index {bad}, "
                                f"{len(keys)} vs {len(ref)} trials)")
            for t in ts:
                if t.datetime_start is None or t.datetime_complete is None or t.datetime_start > t.datetime_complete:
                    problems.append(f"{name}: trial {t.number} has datetimes {t.datetime_start}, "
                                    f"{t.datetime_complete}")
                    break
        times = [[(t.datetime_start, t.datetime_complete) for t in loaded[n]] for n in ("bulk rdb", "bulk journal")]
        if times[0] != times[1] or times[0][:1] != [times_of(0)]:
            problems.append("the bulk RDB and journal storages load different datetimes")
        api_rows, bulk_rows = _rdb_rows(d / "api.db"), _rdb_rows(d / "bulk.db")
        for table in sorted(set(api_rows) | set(bulk_rows)):
            if api_rows.get(table) != bulk_rows.get(table):
                problems.append(f"RDB table {table}: rows differ between the API-built and the bulk-built file")
        api_ops, bulk_ops = _journal_ops(d / "api.log"), _journal_ops(d / "bulk.log")
        if api_ops != bulk_ops:
            bad = _first_diff(api_ops, bulk_ops)
            problems.append(f"journal: operation lines differ (first at line {bad + 1}; "
                            f"{len(api_ops)} vs {len(bulk_ops)} lines)")
        print(f"verify: {trials} trials x {intermediates} intermediates, Optuna {optuna.__version__}: "
              f"through study.optimize {api_s:.1f} s, bulk {bulk_s:.2f} s (both storages)")
        print(f"  load_study trials compared (number, state, params, distributions, values, intermediates, attrs): "
              f"{', '.join(f'{n} {len(ts)}' for n, ts in loaded.items())}")
        print(f"  RDB rows compared in {len(api_rows) - 1} tables (trials without datetimes) and the schema; "
              f"journal lines compared without worker id and datetimes: {len(api_ops)} lines")
        for p in problems:
            print(f"  MISMATCH {p}")
        print("verify: OK, the bulk-built storages load the same study" if not problems else "verify: FAILED")
        return 1 if problems else 0


# ---------------------------------------------------------------- measuring


def study_id_of(kind: str, path: Path) -> int:
    """The study's id as the storage numbers it, read without Optuna (which would read every trial first)."""
    if kind == "journal":
        with open(path, encoding="utf-8") as f:
            first = json.loads(f.readline())
        if first["op_code"] != 0 or first["study_name"] != STUDY:
            raise SystemExit(f"{path}: the first line does not create study {STUDY!r}")
        return 0  # the journal numbers studies in the order they are created
    con = sqlite3.connect(path)
    try:
        return int(con.execute("SELECT study_id FROM studies WHERE study_name = ?", (STUDY,)).fetchone()[0])
    finally:
        con.close()


def measure(what: str, kind: str, path: Path, limit_gb: float, timeout: float) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", MEASURE, what, kind, url_of(kind, path), str(limit_gb * 2**30),
             str(study_id_of(kind, path))],
            capture_output=True, text=True, timeout=timeout, env=dict(os.environ),
        )
    except subprocess.TimeoutExpired:
        return {"stopped": f"timeout after {timeout:.0f} s", "s": None}
    out = proc.stdout.split()
    if out[:1] == ["RSS"]:
        return {"stopped": f"RSS {out[1]} GB after {out[2]} s", "s": None, "rss_gb": float(out[1])}
    if out[:1] == ["NA"]:
        return {"stopped": "optuna-dashboard is not installed", "s": None}
    if proc.returncode or out[:1] != ["OK"]:
        sys.stderr.write(proc.stderr[-3000:])
        return {"stopped": f"failed (exit {proc.returncode}) after {time.monotonic() - t0:.0f} s", "s": None}
    return {"n": int(out[1]), "s": float(out[2]), "rss_gb": float(out[3])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, help="finished trials (default 100000; 200 with --verify)")
    ap.add_argument("--intermediates", type=int, default=100, help="intermediate values per trial (default 100)")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/nnix-peers"))
    ap.add_argument("--verify", action="store_true", help="build small studies both ways and compare, then exit")
    ap.add_argument("--max-rss-gb", type=float, default=10.0, help="stop a load above this RSS (default 10)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="stop a load after this many seconds")
    ap.add_argument("--only", choices=sorted(BUILDERS), help="one storage only")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    args = ap.parse_args()
    try:
        optuna = _quiet_optuna()
    except ImportError:
        print("optuna is not importable by this Python: see this script's docstring", file=sys.stderr)
        return 2
    if args.intermediates < 1:
        ap.error("--intermediates must be at least 1")
    if args.verify:
        return verify(args.trials or 200, args.intermediates)
    trials = args.trials or 100_000
    args.cache.mkdir(parents=True, exist_ok=True)
    tag = f"optuna-{optuna.__version__}-{trials}x{args.intermediates}-f{FORMAT}"
    result: dict[str, Any] = {}
    for kind in [args.only] if args.only else list(BUILDERS):
        path = args.cache / f"{tag}.{'db' if kind == 'rdb' else 'log'}"
        done = Path(f"{path}.done")
        if not (done.exists() and path.exists()):
            part = Path(f"{path}.part")
            part.unlink(missing_ok=True)
            t0 = time.perf_counter()
            BUILDERS[kind](part, trials, args.intermediates)
            if sys.stderr.isatty():
                print(file=sys.stderr)
            os.replace(part, path)
            done.write_text(f"{time.perf_counter() - t0:.1f}\n")
        r: dict[str, Any] = {"build_s": float(done.read_text()), "size_gb": path.stat().st_size / 2**30}
        for what in ("load", "dashboard"):
            if what == "dashboard" and str(r["load"].get("stopped", "")).startswith("RSS"):
                # the dashboard reads the trials through the same storage class: it needs at least as much
                r[what] = {"stopped": "not run: the load alone went past the RSS limit", "s": None,
                           "loadavg": [os.getloadavg()[0]] * 2}
                continue
            before = os.getloadavg()[0]
            m = measure(what, kind, path, args.max_rss_gb, args.timeout)
            m["loadavg"] = [before, os.getloadavg()[0]]
            if m.get("n") not in (None, trials):
                print(f"{kind} {what}: got {m['n']} trials, expected {trials}", file=sys.stderr)
                return 1
            r[what] = m
        result[kind] = r
    if args.json:
        print(json.dumps({"optuna": optuna.__version__, "trials": trials, "intermediates": args.intermediates,
                          "cpus": os.cpu_count(), **result}))
        return 0
    print(f"Optuna {optuna.__version__}: {trials} trials x {args.intermediates} intermediates "
          f"({trials * args.intermediates:,} intermediate values), {os.cpu_count()} CPUs")
    for kind, r in result.items():
        print(f"  {kind:8s} (built in {r['build_s']:.0f} s, {r['size_gb']:.2f} GB on disk)")
        for what, label in (("load", "load_study + trials"), ("dashboard", "dashboard trial list")):
            m = r[what]
            if m["s"] is not None:
                fig = f"{m['s']:8.2f} s, peak RSS {m['rss_gb']:.2f} GB"
            else:
                fig = f"  stopped: {m['stopped']}"
            print(f"    {label:22s}{fig}   (load average {m['loadavg'][0]:.1f} -> {m['loadavg'][1]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
