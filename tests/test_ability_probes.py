"""Optional abilities are declared, never probed (DESIGN.md, amendments after the second wave): what a service,
launcher, tuner or agent handler may have beyond its contract is a small ``runtime_checkable`` Protocol checked with
``isinstance`` (:class:`~nnix.services.base.TakesDemand`, :class:`~nnix.tuners.base.Heavy`,
:class:`~nnix.services.launcher.SharesFiles`, ...), so mypy checks both sides. This scans the manager's packages
for ``getattr(obj, "<name>", ...)`` / ``hasattr(obj, "<name>")``: each one left must be on the allow-list below,
with the reason it is not an ability of an nnix object."""

from __future__ import annotations

import ast
from pathlib import Path

import nnix
from nnix.services.base import TakesDemand
from nnix.services.cluster import ClusterService
from nnix.services.launcher import Admits, HostLauncher, LostPolicy, MultiTrial, SharesFiles
from nnix.services.ssh import SshLauncher
from nnix.testing.cluster import ProcessHostsLauncher, ProcessLauncher
from nnix.tuners.base import Heavy

SRC = Path(nnix.__file__).parent
SCANNED = ("core", "services", "host")

ALLOWED: dict[tuple[str, str, str], str] = {
    # foreign objects: third-party and standard-library types whose attributes vary by version, class or OS
    ("services/ssh.py", "result", "exit_status"): "asyncssh's process result: set only when the process exited",
    ("services/ssh.py", "result", "exit_signal"): "asyncssh's process result: set only when a signal ended it",
    ("services/ssh.py", "e", "reason"): "an asyncssh error: only some of its exception classes carry a reason",
    ("services/openpai.py", "e", "reason"): "urllib's URLError has a reason; a plain OSError does not",
    ("services/kubernetes.py", "e", "status"): "the kubernetes client's ApiException; any other error has none",
    ("services/kubernetes.py", "e", "body"): "the kubernetes client's ApiException; any other error has none",
    ("services/ray.py", "consts", "ENABLE_RAY_CLUSTER"): "a private constant of ray, absent in some versions",
    ("services/rayguardian.py", "signal", "SIGXFSZ"): "the standard library's signal module: not on every OS",
    # user code: a tuner or assessor class named by the config (entry point, file): an NNI-style class has no Args
    # (that is how it is told apart and adapted); optimize_mode is an optional field of the class's own Args model
    ("host/build.py", "cls", "Args"): "a user's tuner/assessor class: nnix's has Args, an NNI-style one does not",
    ("host/build.py", "args", "optimize_mode"): "a field a user's Args model may or may not declare",
    # data, not abilities (owned by the read-side work: core sits below nnix.query and cannot name its types)
    ("core/manager.py", "stored.event", "trial_id"): "a field of some event types of the leaf event union",
    ("core/state.py", "trials", "final_values"): "the fold's trial table, or the read side's lazy one (nnix.query)",
}


def probes(source: str) -> list[tuple[str, str, int]]:
    """``(object, attribute, line)`` of each ``getattr``/``hasattr`` of a literal attribute name in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            out.append((ast.unparse(node.args[0]), node.args[1].value, node.lineno))
    return out


def test_the_scan_finds_a_probe() -> None:
    src = ('def f(service, launcher):\n    x = getattr(service, "set_demand", None)\n'
           '    return hasattr(launcher, "hosts")\n')
    assert probes(src) == [("service", "set_demand", 2), ("launcher", "hosts", 3)]
    assert probes('getattr(head, k)\n') == []  # a name not known in advance is not an ability probe


def test_no_ability_is_probed_with_getattr() -> None:
    found = []
    for pkg in SCANNED:
        for path in sorted((SRC / pkg).rglob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            for obj, attr, line in probes(path.read_text(encoding="utf-8")):
                if (rel, obj, attr) not in ALLOWED:
                    found.append(f"{rel}:{line}: getattr({obj}, {attr!r})")
    assert found == [], "declare these abilities as runtime_checkable Protocols (isinstance), or justify them"


def test_the_launchers_declare_their_abilities(tmp_path: Path) -> None:
    engine = ProcessLauncher(capacity=2, lost_policy="requeue")
    assert isinstance(engine, MultiTrial) and isinstance(engine, Admits) and isinstance(engine, LostPolicy)
    assert not isinstance(engine, HostLauncher)  # an engine places its environments itself
    hosts = ProcessHostsLauncher(tmp_path)
    assert isinstance(hosts, HostLauncher) and isinstance(hosts, SharesFiles) and not hosts.shares_files
    ssh = SshLauncher([], experiment_id="e", stage_dir=None, code_dir=tmp_path, reuse=True)
    assert isinstance(ssh, HostLauncher) and isinstance(ssh, LostPolicy) and isinstance(ssh, SharesFiles)
    service = ClusterService(lambda _: None, launcher=engine, context=None)
    assert isinstance(service, TakesDemand)


def test_a_heavy_tuner_says_so() -> None:
    from nnix.tuners.gp import GPTuner
    from nnix.tuners.random import RandomTuner

    assert isinstance(GPTuner(), Heavy) and GPTuner.heavy
    assert not isinstance(RandomTuner(), Heavy)  # called on the loop
