"""Runs trial commands in an environment: the part of the agent that touches processes.

A trial runs as ``bash -c`` in its own session (its own process group), so that

* killing it kills the whole tree: SIGTERM to the group, SIGKILL after a grace period;
* it survives the death of the process that started it: stdout/stderr go to files, metrics go to
  the file channel, and a tiny wrapper writes the exit status to ``<channel>/exitcode``, so a
  resumed manager can re-attach to a running trial or learn how a finished one ended;
* no process of it outlives it (:mod:`nnix.agent.containment`): in a cgroup where the machine allows it,
  else found by a marker in its environment; what is left when the command ends is killed and counted
  (``Exited.leftovers``).

The runner reports what happens through ``emit``: :class:`Started`, :class:`Metrics`,
:class:`Exited`. ``Exited`` always comes after the trial's last metrics have been emitted.

Every file the trial can write (its channel, ``exitcode``, ``trial.stdout``/``trial.stderr``) is read through
:func:`nnix.agent.safeopen.open_regular`: a FIFO, a link or a directory in its place is never opened for
reading (nothing blocks), and the trial gets a warning (:attr:`Metrics.notice`). Metric lines are read a
bounded slice at a time, the loop running between slices; where the receiver can say when it has taken them in
(``pace``, see :class:`Paced`) the runner waits for it before reading more, so that a trial writing faster than
its lines are recorded waits in its own file, not in memory.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from nnix.agent.channel import CHANNEL_ENV, MetricReader, write_parameter
from nnix.agent.containment import CGROUP_ENV, JOIN, REAP, TOKEN_ENV, Containment, release_cgroup
from nnix.agent.reason import TAIL_BYTES
from nnix.agent.safeopen import NotRegularFile, open_regular, read_at_most
from nnix.agent.safeopen import read_tail as read_tail_bytes
from nnix.errors import ServiceError
from nnix.model.runs import Exited, Metrics, Output, RunnerEvent, Started, TrialSpec
from nnix.trial import shim_path

# The wrapper runs the user's command in a subshell (so `exit` in it cannot skip the bookkeeping)
# and records the exit status where a resumed manager can find it.
# In cgroup mode it also joins the trial's cgroup first and kills what is left of it at the end.
BODY = '(eval "$NNIX_TRIAL_COMMAND"); c=$?; printf "%s\\n" "$c" > "$NNIX_TRIAL_CHANNEL/exitcode"; ' + REAP + "exit $c"
WRAPPER = JOIN + BODY
# A wrapper started ahead (the runner's spare, see TrialRunner.prepare): moving a process into a cgroup waits for
# an RCU grace period of the kernel (5-20 ms), so in cgroup mode the next trial's wrapper is started while the
# current trial runs: it joins its cgroup, then waits on its stdin for the path of the trial's launch file (its
# output files, environment and working directory, in shell: see _launch_script), sources it and goes on as the
# wrapper does. Its stdin closed before that (the runner closed, or its process died): it steps out of its cgroup,
# removes it and ends.
SPARE = (
    'g=$NNIX_TRIAL_CGROUP; if [ -n "$g" ] && ! { echo $$ > "$g/cgroup.procs"; } 2>/dev/null; then g=; fi; '
    '_nnix_g=$g; if ! IFS= read -r -d "" f; then [ -n "$g" ] && { echo $$ > "$g/../cgroup.procs"; } 2>/dev/null '
    '&& rmdir "$g" 2>/dev/null; exit 0; fi; . "$f" || exit 126; g=$_nnix_g; '
    'if [ -n "$NNIX_TRIAL_CGROUP" ] && [ -z "$g" ]; then : > "$NNIX_TRIAL_CHANNEL/nocgroup"; fi; ' + BODY
)
LAUNCH_FILE = "launch.sh"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# variables bash sets or guards itself: a trial whose environment changes one is started the usual way
_SHELL_OWN = frozenset({
    "BASHOPTS", "BASHPID", "BASH_ARGV0", "BASH_ENV", "BASH_VERSINFO", "BASH_XTRACEFD", "DIRSTACK", "ENV", "EUID",
    "FUNCNAME", "GROUPS", "HISTCMD", "IFS", "POSIXLY_CORRECT", "PPID", "PS4", "PWD", "SHELLOPTS",
    "SHLVL", "UID", "_nnix_g", "f",
})
LEFTOVER_GRACE = 1.0  # seconds a leftover process gets between SIGTERM and SIGKILL
CHANNEL_DIRNAME = ".nnix"




@runtime_checkable
class Paced(Protocol):
    """An ``emit`` that can say when it has taken in what it was given (the manager's
    :class:`~nnix.core.manager.ServiceEvents`): ``await caught_up()`` returns once its backlog of metric lines is
    small again. A runner given it (``pace``) reads a trial's channel no faster than the lines are recorded."""

    def __call__(self, event: RunnerEvent) -> None: ...

    async def caught_up(self) -> None: ...


async def committed(emit: Callable[[RunnerEvent], None]) -> None:
    """Wait until every event given to ``emit`` so far is durably recorded, when ``emit`` can tell (the
    manager's :class:`~nnix.core.manager.ServiceEvents` can); at once otherwise. Raises when it never will be
    (the manager halted). An agent endpoint awaits this before it acknowledges messages."""
    wait = getattr(emit, "committed", None)
    if wait is not None:
        await wait()


def process_start_token(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat): detects pid reuse."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2 :].split()
    return rest[19] if len(rest) > 19 else None


def _group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in the process group ``pgid``.

    ``killpg(pgid, 0)`` alone is not enough: orphaned zombies (reaped late by some init
    processes) still count as members and would make every kill wait for the grace period."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] != b"Z":
            return True
    return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def read_exit_code(channel: Path) -> int | None:
    try:  # (the trial can write its channel: a FIFO or a link there is not read)
        text = read_at_most(channel / "exitcode", 32).decode("ascii", "replace")
    except OSError:
        return None
    if not text.endswith("\n"):
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


OUTPUT_CHUNK = 64 * 1024
OUTPUT_CAP = 8 * 1024 * 1024
READ_SLICE = 8 * 1024  # bytes of a trial's metrics channel read per poll while it runs (then at once again)
TICK_BYTES = 64 * 1024  # bytes of channels read at most per round of the poller, all trials together
DRAIN_SLICE = 64 * 1024  # bytes of a channel read per step while catching up (an ended or re-attached trial)


def _still_running(run: _Running) -> bool:
    if run.proc is not None:
        return run.proc.returncode is None
    return run.task is None or not run.task.done()


def stderr_tail(output_dir: Path, max_bytes: int = TAIL_BYTES) -> str:
    """The end of the trial's ``trial.stderr`` (sent with its exit; :func:`nnix.agent.reason.exit_reason`
    makes the one-line reason of it); "" when there is none, or it is not a regular file."""
    return _stderr_tail(output_dir, max_bytes)[0]


def _stderr_tail(output_dir: Path, max_bytes: int = TAIL_BYTES) -> tuple[str, str]:
    """``(tail, notice)``: the tail as :func:`stderr_tail`; the notice says why it was not read, when the trial
    made its stderr file a FIFO, a link or a directory."""
    try:
        data, start = read_tail_bytes(output_dir / "trial.stderr", max_bytes)
    except NotRegularFile as e:
        return "", f"{e}: not read for the trial's exit reason"
    except OSError:
        return "", ""
    if start > 0:  # cut: start at a line boundary
        cut = data.find(b"\n")
        data = data[cut + 1 :] if 0 <= cut < len(data) - 1 else data
    return data.decode("utf-8", errors="replace"), ""


class _Child:
    """A trial's process, waited for through its pidfd on the running loop: no watcher thread per child
    (asyncio's default on Python < 3.12), one file descriptor until it ends (a thread only where the OS has
    no pidfds). The surface of :class:`asyncio.subprocess.Process` the runner uses: ``pid``, ``returncode``,
    ``wait()``."""

    def __init__(self, popen: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self._popen = popen
        self.pid = popen.pid
        self._loop = loop
        self._fd = -1
        self._exited: asyncio.Future[int] = loop.create_future()
        try:
            self._fd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):  # not Linux >= 5.3
            waiter = loop.run_in_executor(None, popen.wait)
            waiter.add_done_callback(lambda f: self._done(f.result()) if not f.cancelled() else None)
        else:
            loop.add_reader(self._fd, self._reap)

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def _reap(self) -> None:
        code = self._popen.poll()  # the pidfd is readable once the process ended: poll() reaps it
        if code is not None:
            self._done(code)

    def _done(self, code: int) -> None:
        self._detach()
        if not self._exited.done():
            self._exited.set_result(code)

    def _detach(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    async def wait(self) -> int:
        try:
            return await asyncio.shield(self._exited)
        except asyncio.CancelledError:
            self._detach()  # the runner stops watching (the trial runs on; a later manager re-attaches it)
            raise


async def _spawn(argv: list[str], *, cwd: str, env: dict[str, str], stdout: Any, stderr: Any) -> _Child:
    """Start a trial's command in its own session (the fork happens on the loop, as asyncio's own does)."""
    popen = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                             start_new_session=True)
    return _Child(popen, asyncio.get_running_loop())


@dataclass
class _Spare:
    popen: subprocess.Popen[bytes]
    child: _Child
    made: tuple[str, Path | None]  # its containment's token and cgroup (see Containment.fresh)
    env: dict[str, str]  # the environment it was started with


def _launch_script(spec: TrialSpec, env: dict[str, str], base: dict[str, str], channel: Path) -> str:
    """What a spare sources to become ``spec``'s wrapper: the output files, the environment (what differs from
    ``base``, the one it was started with) and the working directory. Names were checked (_take_spare)."""
    q = shlex.quote
    out, err = spec.output_dir.absolute() / "trial.stdout", spec.output_dir.absolute() / "trial.stderr"
    lines = [f"exec </dev/null >>{q(str(out))} 2>>{q(str(err))} || exit 126"]
    lines += [f"unset -v {k}" for k in base.keys() - env.keys()]
    lines += [f"export {k}={q(v)}" for k, v in env.items() if base.get(k) != v]
    code = q(str(channel.absolute() / "exitcode"))
    lines.append(f"cd -P -- {q(str(spec.code_dir))} || {{ printf '126\\n' > {code}; exit 126; }}")
    old = env.get("OLDPWD")  # (cd set it: as a wrapper started in the directory, the trial sees the inherited one)
    lines.append("unset -v OLDPWD" if old is None else f"export OLDPWD={q(old)}")
    return "\n".join(lines) + "\n"


@dataclass
class _Running:
    spec_id: str
    pid: int
    output_dir: Path
    reader: MetricReader
    proc: _Child | None  # None when re-attached (not our child)
    task: asyncio.Task[None] | None = None
    killing: bool = False
    containment: Containment | None = None
    killed: asyncio.Event | None = None  # set when kill() is over
    leftovers: int = 0
    skip_upto: int = -1  # channel lines up to this one were recorded already (re-attach)
    sent: dict[str, int] = field(default_factory=dict)  # output streaming: bytes sent per stream
    refused: dict[str, tuple[int, int]] = field(default_factory=dict)  # output streaming: stream -> (dev, ino)


@dataclass(eq=False, repr=False)
class TrialRunner:
    emit: Callable[[RunnerEvent], None]
    _: KW_ONLY
    poll_interval: float = 0.1
    kill_grace: float = 5.0
    shell: str = "/bin/bash"
    stream_output: bool = False
    # awaited after metric lines were emitted, before more are read: returns once the receiver took them in (see
    # Paced); None: the runner only lets the loop run between slices
    pace: Callable[[], Awaitable[None]] | None = None
    _running: dict[str, _Running] = field(default_factory=dict, init=False)
    _ticker: asyncio.Task[None] | None = field(default=None, init=False)
    # trials that ended here: their metric channel and how many lines were sent, so that lines an
    # earlier (killed) manager acknowledged but never recorded can still be sent again (resend)
    _ended: dict[str, tuple[Path, int]] = field(default_factory=dict, init=False)
    _spare: _Spare | None = field(default=None, init=False)
    _retiring: set[asyncio.Future[None]] = field(default_factory=set, init=False)
    _closed: bool = field(default=False, init=False)

    @property
    def running(self) -> list[str]:
        return list(self._running)

    async def start(self, spec: TrialSpec) -> Started:
        channel = spec.output_dir / CHANNEL_DIRNAME
        channel.mkdir(parents=True, exist_ok=True)
        write_parameter(channel, spec.record)
        env = dict(os.environ)
        env.update(spec.env)
        pythonpath = env.get("PYTHONPATH")
        env["PYTHONPATH"] = shim_path() + (os.pathsep + pythonpath if pythonpath else "")  # `import nni` works
        env["NNI_SYS_DIR"] = env["NNI_OUTPUT_DIR"] = str(spec.output_dir)
        env["NNI_CODE_DIR"] = str(spec.code_dir)
        env[CHANNEL_ENV] = str(channel)
        env["NNIX_TRIAL_COMMAND"] = spec.command
        for stale in ("exitcode", "leftovers", "nocgroup"):
            (channel / stale).unlink(missing_ok=True)
        spare = self._take_spare(spec, env)
        containment = Containment.create(channel, spare.made if spare is not None else None)
        env.update(containment.env())
        proc: _Child | None = None
        try:
            with (
                open(spec.output_dir / "trial.stdout", "ab") as out,
                open(spec.output_dir / "trial.stderr", "ab") as err,
            ):
                if spare is not None:
                    proc = self._hand_over(spare, spec, env, channel)
                    if proc is None:  # it ended meanwhile (killed by someone): its cgroup goes with it
                        containment = Containment.create(channel)
                        env.update(containment.env())
                if proc is None:
                    proc = await _spawn(
                        [self.shell, "-c", WRAPPER], cwd=str(spec.code_dir), env=env, stdout=out, stderr=err
                    )
        except OSError as e:
            await containment.release()
            raise ServiceError(f"cannot start trial {spec.trial_id}: {e}", f"check {spec.code_dir}") from e
        run = _Running(spec.trial_id, proc.pid, spec.output_dir, MetricReader(channel / "metrics.jsonl"), proc,
                       containment=containment)
        self._running[spec.trial_id] = run
        started = Started(spec.trial_id, proc.pid, process_start_token(proc.pid), str(spec.output_dir))
        run.task = asyncio.create_task(self._watch(run))
        asyncio.get_running_loop().call_soon(self.prepare)  # once this trial's start is recorded
        return started

    def prepare(self) -> None:
        """Start the next trial's wrapper ahead (the spare, see ``SPARE``) where trials get cgroups: its move into
        its cgroup then happens while the current trial runs (or while the tuner thinks), not on the way to
        the next trial. Nothing where trials get no cgroup (no move to hide). Needs a running loop."""
        if self._spare is not None or self._closed:
            return
        made = Containment.fresh()
        if made[1] is None:
            return
        env = dict(os.environ)
        env.update({TOKEN_ENV: made[0], CGROUP_ENV: str(made[1])})
        try:
            popen = subprocess.Popen([self.shell, "-c", SPARE], cwd="/", env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            with contextlib.suppress(OSError):
                made[1].rmdir()
            return
        self._spare = _Spare(popen, _Child(popen, asyncio.get_running_loop()), made, env)

    def _take_spare(self, spec: TrialSpec, env: dict[str, str]) -> _Spare | None:
        """The spare, when it can run this trial (else it is retired and the trial starts the usual way)."""
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        names = {k for k in env.keys() | spare.env.keys() if env.get(k) != spare.env.get(k)}
        if (spare.child.returncode is not None or not spec.code_dir.is_absolute() or not spec.code_dir.is_dir()
                or any(not _ENV_NAME.match(k) or k in _SHELL_OWN for k in names)):
            self._retire(spare)
            return None
        return spare

    def _hand_over(self, spare: _Spare, spec: TrialSpec, env: dict[str, str], channel: Path) -> _Child | None:
        """Give the trial to the spare: its launch file, then the file's path on its stdin. None when that
        fails (the spare is gone, the file cannot be written): the spare is retired."""
        launch = channel.absolute() / LAUNCH_FILE
        stdin = spare.popen.stdin
        assert stdin is not None
        try:
            fd = os.open(launch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with open(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(_launch_script(spec, env, spare.env, channel))
            stdin.write(os.fsencode(launch) + b"\0")
            stdin.close()
        except OSError:  # (a full disk: the usual way says so)
            self._retire(spare)
            return None
        return spare.child

    def _retire(self, spare: _Spare) -> None:
        task = asyncio.ensure_future(self._end_spare(spare))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _end_spare(self, spare: _Spare) -> None:
        """End an unused spare (its stdin closed: it exits at once; killed after 2 s) and remove its cgroup."""
        if spare.popen.stdin is not None:
            with contextlib.suppress(OSError):
                spare.popen.stdin.close()
        ended = asyncio.ensure_future(spare.child.wait())
        await asyncio.wait({ended}, timeout=2.0)
        if not ended.done():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(spare.popen.pid, signal.SIGKILL)
            await ended
        await release_cgroup(spare.made[1])

    async def attach(
        self, trial_id: str, output_dir: Path, pid: int | None, pid_start: str | None, after_index: int
    ) -> None:
        """Watch a trial started by an earlier manager. Emits its missed metrics and, if it
        already ended, its exit. ``after_index``: metrics up to this channel line were recorded."""
        channel = output_dir / CHANNEL_DIRNAME
        reader = MetricReader(channel / "metrics.jsonl")
        run = _Running(trial_id, pid or -1, output_dir, reader, None, containment=Containment.load(channel))
        self._running[trial_id] = run
        run.skip_upto = after_index
        self._drain(run, limit=DRAIN_SLICE)  # (the rest as its watcher polls, a slice at a time)
        alive = pid is not None and pid_start is not None and process_start_token(pid) == pid_start
        run.task = asyncio.create_task(self._watch_foreign(run, alive))

    async def resend(self, trial_id: str, after_index: int) -> None:
        """Emit again the metrics of a watched trial after channel line ``after_index`` that were already
        sent (a manager that crashed may have acknowledged lines it never recorded): read a slice at a time,
        as the channel is while the trial runs."""
        run = self._running.get(trial_id)
        if run is not None:
            path, done = run.reader.path, run.reader.line_index
        elif trial_id in self._ended:  # ended here: its lines were all sent, its exit too
            path, done = self._ended[trial_id]
        else:
            return
        reader = MetricReader(path)
        while reader.line_index < done:
            before = reader.offset
            items = [(i, m) for i, m in reader.read_new(final=True, limit=DRAIN_SLICE) if after_index < i < done]
            if items:
                self.emit(Metrics(trial_id, items))
            if reader.at_eof or reader.offset == before:
                break
            await self._paced()

    async def kill(self, trial_id: str) -> None:
        """SIGTERM the trial's process group and every other process of the trial (its containment),
        SIGKILL them after the grace period. Idempotent. Processes outside the group count as leftovers."""
        run = self._running.get(trial_id)
        if run is None or run.killing:
            return
        run.killing = True
        run.killed = asyncio.Event()
        try:
            pgid = run.pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
            outside: set[int] = set()
            box = run.containment
            if box is not None:
                outside = {p for p in box.members() if _pgid(p) not in (pgid, None)}
                box.signal(outside, signal.SIGTERM)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.kill_grace
            while loop.time() < deadline:
                if box is not None:
                    members = box.members()
                    outside |= {p for p in members if _pgid(p) not in (pgid, None)}
                    if members:
                        await asyncio.sleep(0.05)
                        continue
                if not _group_alive(pgid):
                    break
                await asyncio.sleep(0.02)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            if box is not None:
                outside |= {p for p in box.kill_all() if _pgid(p) not in (pgid, None)}
            run.leftovers += len(outside)
        finally:
            run.killed.set()

    async def close(self, kill: bool) -> None:
        self._closed = True
        if self._spare is not None:
            self._retire(self._spare)
            self._spare = None
        if kill:
            await asyncio.gather(*(self.kill(t) for t in list(self._running)))
        tasks = [r.task for r in self._running.values() if r.task is not None]
        if kill:
            await asyncio.gather(*tasks, return_exceptions=True)
        else:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._running.clear()
        await asyncio.gather(*self._retiring, return_exceptions=True)
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
            self._ticker = None

    # --- internals ---------------------------------------------------------------------------
    def _drain(self, run: _Running, final: bool = False, limit: int = READ_SLICE) -> bool:
        """Emit the channel's new lines: one slice of at most ``limit`` bytes (``final``: the trial is over, a last
        line without its newline counts too). True when a message was emitted."""
        skip_upto = run.skip_upto
        items = [(i, m) for i, m in run.reader.read_new(final=final, limit=limit) if i > skip_upto]
        sample, count, last = run.reader.take_rejected()
        if last <= skip_upto:
            sample, count, last = [], 0, -1
        notice = run.reader.take_notice()
        emitted = bool(items or count or notice)
        if emitted:
            self.emit(Metrics(run.spec_id, items, sample, count, last, notice))
        if self.stream_output:
            self._stream_output(run)
        return emitted

    async def _paced(self) -> None:
        """Let the loop run, and wait until the receiver took in what was emitted (``pace``), before reading on."""
        if self.pace is None:
            await asyncio.sleep(0)
            return
        try:
            await self.pace()
        except asyncio.CancelledError:
            raise
        except Exception:  # (the manager halted: it records nothing more; reading on costs nothing it keeps)
            await asyncio.sleep(0)

    async def _catch_up(self, run: _Running, final: bool = False, most: int | None = None) -> None:
        """Emit the channel's new lines a slice (DRAIN_SLICE) at a time, the loop running (and the receiver taking
        each in) between slices: to the end of the file, or about ``most`` bytes. ``final``: the trial is over."""
        done = 0
        while True:
            await self._paced()  # (what was emitted before, by the poller or the last slice, is taken in first)
            before = run.reader.offset
            self._drain(run, final=final, limit=DRAIN_SLICE)
            done += run.reader.offset - before
            if run.reader.at_eof or run.reader.offset == before or (most is not None and done >= most):
                return

    async def _cleanup(self, run: _Running) -> int:
        """After the trial's command ended: kill and count what is left of it (see containment)."""
        if run.killed is not None:
            await run.killed.wait()
        box = run.containment
        if box is None:
            return run.leftovers
        # the wrapper counted (and killed) what its cgroup held; what this watcher still finds there is the
        # same processes on their way out, not more of them: the larger count, never the sum
        found = box.reported_leftovers()
        if not run.killing:
            found = max(found, await box.reap(LEFTOVER_GRACE))
        n = run.leftovers + found
        await box.release()
        return n

    def _stream_output(self, run: _Running) -> None:
        """Send what the trial wrote to stdout/stderr since the last call: while it runs, at most
        ``OUTPUT_CHUNK`` bytes per stream and call, up to ``OUTPUT_CAP`` bytes per stream; once it is over,
        everything left below the cap and, beyond it, the last ``OUTPUT_CHUNK`` bytes (the manager's copy
        then says how much it skipped)."""
        running = _still_running(run)
        for stream in ("stdout", "stderr"):
            path = run.output_dir / f"trial.{stream}"
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == run.refused.get(stream):
                continue  # refused already (a FIFO, a link...): said once
            try:
                fd = open_regular(path)
            except NotRegularFile as e:
                run.refused[stream] = (st.st_dev, st.st_ino)
                self.emit(Metrics(run.spec_id, [], notice=f"{e}: its output is not sent to the manager"))
                continue
            except OSError:
                continue
            try:
                self._send_output(run, stream, fd, running)
            finally:
                os.close(fd)

    def _send_output(self, run: _Running, stream: str, fd: int, running: bool) -> None:
        try:
            size = os.fstat(fd).st_size
        except OSError:
            return
        while True:
            sent = run.sent.get(stream, 0)
            if size <= sent:
                break
            start = sent
            if sent >= OUTPUT_CAP:
                if running:
                    break
                start = max(sent, size - OUTPUT_CHUNK)
            room = OUTPUT_CAP - start if start < OUTPUT_CAP else size  # never past the cap mid-stream
            try:
                data = os.pread(fd, min(OUTPUT_CHUNK, size - start, room), start)
            except OSError:
                break
            if not data:
                break
            run.sent[stream] = start + len(data)
            self.emit(Output(run.spec_id, stream, start, base64.b64encode(data).decode("ascii")))
            if running:
                break

    def _ensure_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        """One poller for every trial this runner started (not one timer per trial): each ``poll_interval`` it
        reads the channels that grew. A trial reporting faster than that is read a slice at a time and read
        again at once, at most TICK_BYTES per round for all trials together (each round starting one trial
        further, so that every trial gets its turn), and the receiver takes in what a round read before the next
        one (``pace``): one poll never holds the manager's loop for long, and a flood waits in its file. Ends
        when no trial runs."""
        start = 0
        while self._running:
            behind = emitted = False
            runs = list(self._running.values())
            start = start % len(runs)
            budget = TICK_BYTES
            for run in runs[start:] + runs[:start]:
                if run.proc is None or run.proc.returncode is not None:
                    continue  # re-attached (its own watcher polls) or ended (its watcher drains it to the end)
                if budget <= 0:
                    behind = True
                    break
                if run.reader.at_eof and not self.stream_output and not run.reader.has_news():
                    continue  # nothing new: one lstat, no open
                before = run.reader.offset
                emitted = self._drain(run, limit=min(READ_SLICE, budget)) or emitted
                budget -= max(run.reader.offset - before, 1)
                behind = behind or not run.reader.at_eof
            start += 1
            if emitted:
                await self._paced()
            await asyncio.sleep(0 if behind else self.poll_interval)

    def _tail(self, run: _Running, wanted: bool) -> str:
        """The stderr tail sent with the exit (when ``wanted``); a stderr the trial made a FIFO or a link is not
        read, and the trial gets a warning about it."""
        if not wanted:
            return ""
        tail, notice = _stderr_tail(run.output_dir)
        if notice:
            self.emit(Metrics(run.spec_id, [], notice=notice))
        return tail

    async def _watch(self, run: _Running) -> None:
        assert run.proc is not None
        self._ensure_ticker()
        code = await run.proc.wait()
        leftovers = await self._cleanup(run)
        await self._catch_up(run, final=True)
        self._running.pop(run.spec_id, None)
        self._ended[run.spec_id] = (run.reader.path, run.reader.line_index)
        if code < 0:
            self.emit(Exited(run.spec_id, None, -code, self._tail(run, True), leftovers=leftovers))
        else:
            self.emit(Exited(run.spec_id, code, None, self._tail(run, code != 0), leftovers=leftovers))

    async def _watch_foreign(self, run: _Running, alive: bool) -> None:
        if alive:
            await self._wait_foreign(run.pid, run)
        leftovers = await self._cleanup(run)
        await self._catch_up(run, final=True)
        self._running.pop(run.spec_id, None)
        self._ended[run.spec_id] = (run.reader.path, run.reader.line_index)
        code = read_exit_code(run.output_dir / CHANNEL_DIRNAME)
        self.emit(Exited(run.spec_id, code, None, self._tail(run, bool(code)), leftovers=leftovers))

    async def _wait_foreign(self, pid: int, run: _Running) -> None:
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            fd = -1
        if fd >= 0:
            gone: asyncio.Future[None] = loop.create_future()

            def _readable() -> None:
                if not gone.done():
                    gone.set_result(None)

            loop.add_reader(fd, _readable)
            try:
                while True:
                    wait = self.poll_interval if run.reader.at_eof else 0
                    done, _ = await asyncio.wait({gone}, timeout=wait)
                    if not run.reader.at_eof or self.stream_output or run.reader.has_news():
                        await self._catch_up(run, most=TICK_BYTES)
                    if done:
                        return
            finally:
                loop.remove_reader(fd)
                os.close(fd)
        while _group_alive(pid) or os.path.exists(f"/proc/{pid}"):
            await self._catch_up(run, most=TICK_BYTES)
            await asyncio.sleep(self.poll_interval if run.reader.at_eof else 0)
