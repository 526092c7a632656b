"""The SSH launcher (nnix.services.ssh) alone: its Launcher part on a real sshd (the lab's loopback host), and
what it refuses without one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from nnix.agent.protocol import Hello, Message
from nnix.config import RemoteMachineConfig
from nnix.errors import ServiceError
from nnix.model.runs import TrialSpec
from nnix.services.agent_server import AgentServer
from nnix.services.cluster import EnvRequest, EnvStatus, Launcher
from nnix.services.launcher import HostLauncher
from nnix.services.ssh import HostError, SshHost, SshLauncher
from nnix.testing import wait_until_async
from nnix.testing.sshhosts import SshLab


def _host(index: int = 0, **cfg: Any) -> SshHost:
    return SshHost(index=index, cfg=RemoteMachineConfig.model_validate({"host": "127.0.0.1", "user": "u", **cfg}))


def _launcher(hosts: list[SshHost], tmp_path: Path, **options: Any) -> SshLauncher:
    return SshLauncher(hosts, experiment_id="exp1", stage_dir=tmp_path / "stage", code_dir=tmp_path / "code",
                       **options)


def test_places_a_trial_on_the_machine_it_runs_on(tmp_path: Path) -> None:
    h = _host(port=2222)
    h.root, h.code_dir = "/w/exp1/127.0.0.1_2222", "/w/exp1/127.0.0.1_2222/code-abc"
    launcher = _launcher([h], tmp_path)
    spec = TrialSpec("t1", "python3 trial.py", Path("/here/code"), Path("/here/out"), {}, {"A": "1"})
    placed = launcher.place(spec, h)
    assert placed.code_dir == Path(h.code_dir) and placed.output_dir == Path(f"{h.root}/trials/t1")
    assert placed.env == {"A": "1"} and placed.command == spec.command
    assert launcher.output_location(spec, h) == f"127.0.0.1:2222:{h.root}/trials/t1"
    h22 = _host(1)
    h22.root = "/w/x"
    assert launcher.output_location(spec, h22) == "127.0.0.1:/w/x/trials/t1"  # port 22 is not named


def test_launch_needs_a_machine_and_a_connection(tmp_path: Path) -> None:
    launcher = _launcher([_host()], tmp_path)
    contract: Launcher = launcher  # the Launcher protocol of nnix.services.cluster (checked by mypy)
    machines: HostLauncher = launcher  # with the optional capability of a fixed list of machines
    assert [h.label for h in machines.hosts] == ["u@127.0.0.1:22"] and launcher.lost_policy == "fail"
    assert (contract.kind, contract.advertise_host, launcher.shares_files) == ("remote", "127.0.0.1", False)
    with pytest.raises(ServiceError, match="no machine named"):
        asyncio.run(launcher.launch(EnvRequest("e1", False, "http://127.0.0.1:1", "tok")))
    with pytest.raises(HostError, match="no SSH connection"):
        asyncio.run(launcher.launch(EnvRequest("e1", False, "http://127.0.0.1:1", "tok", host=0)))
    assert asyncio.run(launcher.poll(["e1"])) == {"e1": EnvStatus("unknown")}


class _Hellos:
    def __init__(self) -> None:
        self.hellos: dict[str, Hello] = {}

    def on_hello(self, environment_id: str, hello: Hello) -> None:
        self.hellos[environment_id] = hello

    def on_message(self, environment_id: str, message: Message) -> None:
        pass

    def on_refused(self, environment_id: str, reason: str) -> None:
        pass


def test_an_agent_launched_polled_probed_and_stopped_over_real_ssh(ssh_lab: SshLab, tmp_path: Path) -> None:
    lab_host = ssh_lab.loopback or ssh_lab.hosts[0]
    code = tmp_path / "code"
    code.mkdir()
    (code / "trial.py").write_text("print('hi')\n")
    h = SshHost(index=0, cfg=RemoteMachineConfig.model_validate(lab_host.machine()))
    launcher = _launcher([h], tmp_path, known_hosts_file=ssh_lab.known_hosts, remote_work_dir=str(ssh_lab.home / "w"),
                         connect_timeout=5.0)
    hellos = _Hellos()

    async def scenario() -> None:
        server = AgentServer(heartbeat=1.0, poll_wait=2.0)
        await server.start()
        try:
            await launcher.prepare()
            h.conn = await launcher.connect(h)
            assert await launcher.setup(h, server.port) is None  # reuse: the agent's hello tells the GPUs
            assert h.code_dir.startswith(h.root) and h.remote_port > 0
            ep = server.register("e1", hellos)
            handle = await launcher.launch(EnvRequest("e1", False, "", ep.token, host=0))
            assert handle == "e1"
            await wait_until_async(lambda: "e1" in hellos.hellos, 60, "the agent's hello through the reverse forward")
            assert (await launcher.poll([handle]))[handle].state == "running"
            pid = await launcher.probe(h, handle, None, timeout=10)
            assert pid is not None and [("e1", pid)] == await launcher.find_agents(h)
            process = launcher.process(handle)
            assert process is not None
            await launcher.stop(handle)
            await wait_until_async(lambda: process.exit_status is not None or process.exit_signal is not None, 30,
                                   "the killed agent's SSH channel to end")
            assert await launcher.probe(h, handle, pid, timeout=10) is None
            assert await launcher.find_agents(h) == []
            [(label, paths, problem, agents)] = await launcher.leftovers()
            work = f"{ssh_lab.home}/w"
            assert (label, sorted(paths), problem, agents) == (h.label, [f"{work}/exp1", f"{work}/venvs"], "", [])
        finally:
            await launcher.close()
            await server.close()

    asyncio.run(scenario())


class _CutConnection:
    """An SSH connection whose link is cut while a command runs: the channel closes without the command's exit
    status, and with no output (what asyncssh returns for a connection lost under a command)."""

    def __init__(self, answer: tuple[int | None, str, str]) -> None:
        self.answer = answer
        self.closed = False

    async def run(self, command: str, check: bool = False) -> Any:
        import asyncssh

        status, out, err = self.answer
        self.closed = status is None
        return asyncssh.SSHCompletedProcess({}, command, None, status, None, status, out, err)

    def is_closed(self) -> bool:
        return self.closed


@pytest.mark.parametrize(("answer", "permanent", "words"), [
    ((None, "", ""), False, "was lost while a command ran"),  # the link cut during the Python check
    ((127, "", "no python3 or python on PATH (/usr/bin)"), True, "no usable Python"),
    ((0, '{"exe": "/usr/bin/python3", "version": [3, 8, 10], "home": "/h"}\n', ""), True, "has Python 3.8.10"),
], ids=["link-cut", "no-python", "old-python"])
def test_only_a_definite_answer_about_python_is_permanent(tmp_path: Path, answer: tuple[int | None, str, str],
                                                          permanent: bool, words: str) -> None:
    """A network cut during host setup is transient (the machine is tried again once the link is back); a Python
    that is missing or too old is permanent."""
    h = _host()
    conn: Any = _CutConnection(answer)
    h.conn = conn
    launcher = _launcher([h], tmp_path)
    launcher._archive = cast(Any, object())  # staged by prepare(): not needed before the Python check
    with pytest.raises(HostError) as err:
        asyncio.run(launcher.setup(h, 1234))
    assert words in err.value.message
    assert err.value.permanent is permanent
