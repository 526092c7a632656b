"""NNI's remaining nnictl verbs, through the `nnictl` spelling and real processes: experiment save on one
NNIX_HOME and load into another (another directory, the code moved), then view and resume there; webui url,
config show, trial run-local, tensorboard start/stop, algo register/unregister/show, platform clean, a
create on a busy port, tunerGpuIndices, RegularizedEvolutionTuner and NAS-only names."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nnix.core.state import ExperimentState
from nnix.core.status import ExperimentStatus, TrialStatus
from nnix.home import Registry, read_state
from nnix.testing import wait_until

NNICTL = [sys.executable, "-c", "import sys; sys.argv[0] = 'nnictl'; from nnix.cli.main import main; main()"]


def nnictl(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
           input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NNICTL, *args], capture_output=True, text=True, timeout=timeout,
                          env=env or os.environ.copy(), input=input)


def _state(exp_id: str) -> ExperimentState:
    return read_state(Path(Registry().get(exp_id).dir))


# trials 0 and 1 finish at once; later ones wait for a file named `gate` in their code directory (it exists
# only where the archive is loaded), so the first experiment stops with trial #2 running
TRIAL = """import nni, os, sys, time
p = nni.get_next_parameter()
seq = int(os.environ.get('NNI_TRIAL_SEQ_ID', '0'))
nni.report_intermediate_result(p['x'] / 2)
if seq >= 2:
    while not os.path.exists('gate'):
        time.sleep(0.05)
out = os.environ.get('NNI_OUTPUT_DIR')
if out:
    os.makedirs(os.path.join(out, 'tensorboard'), exist_ok=True)
print('cwd', os.getcwd(), 'x', p['x'], flush=True)
nni.report_final_result(p['x'])
"""


def _config(code: Path, **extra: Any) -> Path:
    code.mkdir(parents=True, exist_ok=True)
    (code / "trial.py").write_text(TRIAL)
    cfg = {
        "experimentName": "portable",
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": f"{sys.executable} trial.py",
        "trialCodeDirectory": ".",
        "trialConcurrency": 1,
        "maxTrialNumber": 4,
        "tuner": {"name": "Random", "classArgs": {"seed": 7}},
        "trainingService": {"platform": "local"},
        **extra,
    }
    path = code / "config.yml"
    path.write_text(json.dumps(cfg))
    return path


@pytest.fixture
def stopped(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """An experiment (under its own NNIX_HOME) stopped with 2 succeeded trials and #2 canceled."""
    base = tmp_path / "machine-a"
    env = {**os.environ, "NNIX_HOME": str(base / "home")}
    cfg = _config(base / "code")
    (base / "code" / "run.sh").write_text("#!/bin/sh\nexec python3 trial.py\n")
    (base / "code" / "run.sh").chmod(0o755)
    r = nnictl("create", "--config", str(cfg), "--port", "0", env=env)
    assert r.returncode == 0, r.stderr
    exp_id = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Experiment "))
    try:
        wait_until(lambda: _state_in(env, exp_id).count(TrialStatus.SUCCEEDED) == 2
              and _state_in(env, exp_id).count(TrialStatus.RUNNING) == 1, 60.0)
    finally:
        s = nnictl("stop", exp_id, env=env)
    assert s.returncode == 0, s.stderr
    yield exp_id, base, env


def _state_in(env: dict[str, str], exp_id: str) -> ExperimentState:
    return read_state(Path(Registry(Path(env["NNIX_HOME"])).get(exp_id).dir))


def test_save_load_view_resume_on_another_root(stopped: tuple[str, Path, dict[str, str]],
                                               tmp_path: Path) -> None:
    exp_id, base, env_a = stopped
    before = _state_in(env_a, exp_id)
    finals = {t.trial_id: t.final_value for t in before.trials.values() if t.final_value is not None}
    assert len(finals) == 2

    r = nnictl("experiment", "save", exp_id, "-p", str(tmp_path / "out"), "-s", env=env_a)
    assert r.returncode == 0, r.stderr
    archive = tmp_path / "out" / f"nnix_experiment_{exp_id}.zip"
    names = zipfile.ZipFile(archive).namelist()
    assert "code/trial.py" in names and "experiment/db/nnix.sqlite" in names and "nnix-archive.json" in names
    assert not any(n.endswith(("secrets.json", "api.token", "nnix.sqlite-wal")) for n in names)

    # "another machine": the original experiment and code are gone, a new NNIX_HOME, another root and code dir
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.move(str(base), str(moved / "a"))
    env_b = {**os.environ, "NNIX_HOME": str(tmp_path / "home-b")}
    code_b = tmp_path / "machine-b" / "code"
    root_b = tmp_path / "machine-b" / "experiments"
    space_b = tmp_path / "machine-b" / "space.json"
    r = nnictl("experiment", "load", "-p", str(archive), "-c", str(code_b), "-l", str(root_b), "-s", str(space_b),
               env=env_b)
    assert r.returncode == 0, r.stderr
    exp_dir = root_b / exp_id
    assert f"loaded experiment {exp_id} into {exp_dir}" in r.stdout
    assert (code_b / "trial.py").read_text() == TRIAL
    assert os.access(code_b / "run.sh", os.X_OK)  # modes of the code kept (the executable bit)
    assert json.loads(space_b.read_text()) == {"x": {"_type": "uniform", "_value": [0, 1]}}
    st = _state_in(env_b, exp_id)
    assert st.config["trial_code_directory"] == str(code_b)
    assert st.config["experiment_working_directory"] == str(root_b)
    assert st.config["search_space_file"] == str(space_b)
    for t in st.trials.values():  # every recorded path resolves under the new root
        assert t.output_dir is not None and t.output_dir.startswith(str(exp_dir) + "/"), t.output_dir
        assert Path(t.output_dir, "trial.stdout").is_file()
    assert {t.trial_id: t.final_value for t in st.trials.values() if t.final_value is not None} == finals

    # loading again over the same id is refused, and changes nothing
    again = nnictl("experiment", "load", "-p", str(archive), "-c", str(tmp_path / "c2"), "-l", str(root_b), env=env_b)
    assert again.returncode == 1 and "already exists" in again.stderr and "--force" in again.stderr
    assert not (tmp_path / "c2").exists()

    # config show: the stored config, with the new paths
    shown = nnictl("config", "show", exp_id, env=env_b)
    assert shown.returncode == 0, shown.stderr
    assert f"trialCodeDirectory: {code_b}" in shown.stdout and "experimentName: portable" in shown.stdout
    assert "maxTrialNumber: 4" in shown.stdout

    # trial run-local: one trial's command, standalone, in the (new) code directory with its parameters
    first = next(t for t in st.trials.values() if t.sequence_id == 0)
    run = nnictl("trial", "run-local", exp_id, "-T", first.trial_id, env=env_b)
    assert run.returncode == 0, run.stderr
    assert f"cwd {code_b} x {first.params['x']}" in run.stdout
    assert "Final result" in run.stdout + run.stderr

    # view: served read-only from the new location (metrics intact), webui url answers
    v = nnictl("view", exp_id, "--port", "0", env=env_b)
    assert v.returncode == 0, v.stderr
    try:
        url = nnictl("webui", "url", exp_id, env=env_b)
        assert url.returncode == 0, url.stderr
        base_url = url.stdout.strip()
        with urllib.request.urlopen(base_url + "api/v1/nni/trial-jobs", timeout=10) as resp:
            jobs = json.loads(resp.read())
        got = {j["trialJobId"]: json.loads(json.loads(j["finalMetricData"][0]["data"]))
               for j in jobs if j.get("finalMetricData")}
        assert got == finals
        with urllib.request.urlopen(f"{base_url}api/v1/nni/trial-file/{first.trial_id}/stdout", timeout=10) as resp:
            assert b"cwd" in resp.read()
    finally:
        assert nnictl("stop", exp_id, env=env_b).returncode == 0

    stopped_url = nnictl("webui", "url", exp_id, env=env_b)
    assert stopped_url.returncode == 1 and f"nnix view {exp_id}" in stopped_url.stderr

    # resume there: the remaining trial runs in the new code directory (where `gate` exists) and finishes
    (code_b / "gate").write_text("")
    res = nnictl("resume", exp_id, "--port", "0", "--foreground", env=env_b)
    assert res.returncode == 0, res.stdout + res.stderr
    st = _state_in(env_b, exp_id)
    assert st.status is ExperimentStatus.DONE
    assert len(st.trials) == 4 and st.count(TrialStatus.SUCCEEDED) == 3
    assert {t.trial_id: t.final_value for t in st.trials.values() if t.trial_id in finals} == finals
    last = max(st.trials.values(), key=lambda t: t.sequence_id)
    assert last.output_dir is not None
    assert last.status is TrialStatus.SUCCEEDED and last.output_dir.startswith(str(exp_dir))
    assert f"cwd {code_b}" in Path(last.output_dir, "trial.stdout").read_text()


def _zip(path: Path, members: dict[str, bytes], link: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("nnix-archive.json", json.dumps({"format": 1, "experimentId": "evil0001"}))
        for name, data in members.items():
            zf.writestr(name, data)
        if link is not None:
            info = zipfile.ZipInfo("experiment/log/link")
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, link)
    return path


@pytest.mark.parametrize("members,link", [
    ({"experiment/../../escape.txt": b"x"}, None),
    ({"/tmp/abs.txt": b"x"}, None),
    ({"experiment/db/nnix.sqlite": b"x", "elsewhere/file": b"x"}, None),
    ({"experiment/db/nnix.sqlite": b"x"}, "/etc/passwd"),
])
def test_load_refuses_unsafe_members_and_writes_nothing(tmp_path: Path, members: dict[str, bytes],
                                                        link: str | None) -> None:
    archive = _zip(tmp_path / "evil.zip", members, link)
    root = tmp_path / "root"
    r = nnictl("experiment", "load", "-p", str(archive), "-c", str(tmp_path / "code"), "-l", str(root))
    assert r.returncode == 1 and "refusing archive member" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not root.exists() and not (tmp_path / "code").exists() and not (tmp_path / "escape.txt").exists()


def test_tensorboard_start_stop_and_stopped_with_the_manager(tmp_path: Path) -> None:
    """A fake `tensorboard` on PATH (a tiny HTTP server that records its arguments) stands in for the real one."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "tensorboard"
    fake.write_text(f"""#!{sys.executable}
import http.server, json, os, sys
args = sys.argv[1:]
port = int(args[args.index('--port') + 1])
open(os.path.join({str(tmp_path)!r}, 'tb-%d.json' % os.getpid()), 'w').write(json.dumps(args))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'fake tensorboard')
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', port), H).serve_forever()
""")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    code = tmp_path / "code"
    (code).mkdir()
    (code / "gate").write_text("")
    cfg = _config(code, maxTrialNumber=2)
    r = nnictl("create", "--config", str(cfg), "--port", "0", env=env)
    assert r.returncode == 0, r.stderr
    exp_id = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("Experiment "))
    try:
        wait_until(lambda: _state(exp_id).count(TrialStatus.SUCCEEDED) == 2, 60.0)
        ids = sorted(_state(exp_id).trials)
        tb = nnictl("tensorboard", "start", exp_id, "--trial_id", ",".join(ids), env=env)
        assert tb.returncode == 0, tb.stderr
        assert "(RUNNING)" in tb.stdout
        url = tb.stdout.strip().rsplit(" ", 1)[-1]
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.read() == b"fake tensorboard"
        recorded = [json.loads(p.read_text()) for p in tmp_path.glob("tb-*.json")]
        assert len(recorded) == 1
        spec = recorded[0][recorded[0].index("--logdir_spec") + 1]
        exp_dir = Registry().get(exp_id).dir
        assert spec == ",".join(f"{i}:{exp_dir}/environments/local-env/trials/{i}/tensorboard" for i in ids)
        stop = nnictl("tensorboard", "stop", exp_id, env=env)
        assert stop.returncode == 0 and "STOPPED" in stop.stdout, stop.stderr
        wait_until(lambda: not _port_open(url), 60.0)
        # a second one, left running: stopping the experiment stops it
        tb2 = nnictl("tensorboard", "start", exp_id, "-T", ids[0], env=env)
        assert tb2.returncode == 0, tb2.stderr
        url2 = tb2.stdout.strip().rsplit(" ", 1)[-1]
        assert _port_open(url2)
    finally:
        assert nnictl("stop", exp_id, env=env).returncode == 0
    wait_until(lambda: not _port_open(url2), 15)
    # without TensorBoard installed: a clear error
    bare = {**os.environ, "PATH": "/usr/bin:/bin"}
    v = nnictl("view", exp_id, "--port", "0", env=bare)
    assert v.returncode == 0, v.stderr
    try:
        missing = nnictl("tensorboard", "start", exp_id, "-T", ids[0], env=bare)
        if shutil.which("tensorboard", path=bare["PATH"]) is None and not _importable("tensorboard"):
            assert missing.returncode == 1 and "TensorBoard is not installed" in missing.stderr
            assert "nnix[tensorboard]" in missing.stderr
    finally:
        nnictl("stop", exp_id, env=bare)


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _port_open(url: str) -> bool:
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


META = """algorithms:
  - builtinName: MyTuner
    alias: mine
    algoType: tuner
    className: my_tuners.MyTuner
    codeDirectory: pkg
    classArgsValidator: my_tuners.Validator
  - builtinName: MyAssessor
    algoType: assessor
    className: my_tuners.MyAssessor
    codeDirectory: pkg
"""
TUNER_CODE = """
class MyTuner:
    def __init__(self, optimize_mode='maximize'):
        self.n = 0
    def generate_parameters(self, parameter_id, **kwargs):
        self.n += 1
        return {'x': 0.25}
    def receive_trial_result(self, parameter_id, parameters, value, **kwargs):
        pass
    def update_search_space(self, search_space):
        pass

class MyAssessor:
    def assess_trial(self, trial_job_id, trial_history):
        return True
"""


def test_algo_register_show_use_unregister(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "my_tuners.py").write_text(TUNER_CODE)
    meta = tmp_path / "meta.yml"
    meta.write_text(META)
    r = nnictl("algo", "register", "-m", str(meta))
    assert r.returncode == 0, r.stderr
    assert "registered tuner MyTuner (my_tuners.MyTuner, NNI-style), alias mine" in r.stdout
    listed = json.loads(nnictl("algo", "list", "--json").stdout)
    assert {"name": "mytuner", "type": "tuner", "source": "user", "class": "my_tuners:MyTuner"} in listed
    shown = json.loads(nnictl("algo", "show", "mine").stdout)
    assert shown["className"] == "my_tuners.MyTuner" and shown["source"] == "user"
    assert json.loads(nnictl("algo", "show", "TPE").stdout)["source"] == "nnix"
    # a config names it (by its alias, any case), the experiment runs with it
    code = tmp_path / "code"
    code.mkdir()
    (code / "gate").write_text("")
    cfg = _config(code, maxTrialNumber=1, tuner={"name": "MINE", "classArgs": {"optimize_mode": "maximize"}})
    run = nnictl("create", "--config", str(cfg), "--port", "0", "--foreground")
    assert run.returncode == 0, run.stdout + run.stderr
    assert '"x": 0.25' in run.stdout
    # built-in and NNI names cannot be taken; a second registration of a name is refused
    for name in ("TPE", "RegularizedEvolutionTuner", "mytuner"):
        other = tmp_path / f"m-{name}.yml"
        other.write_text(f"builtinName: {name}\nclassName: my_tuners.MyTuner\ncodeDirectory: pkg\n")
        bad = nnictl("algo", "reg", "-m", str(other))
        assert bad.returncode == 1 and ("built-in" in bad.stderr or "already registered" in bad.stderr), bad.stderr
    assert nnictl("algo", "unregister", "TPE").returncode == 1
    u = nnictl("algo", "unreg", "MyTuner")
    assert u.returncode == 0 and "unregistered MyTuner" in u.stdout
    assert nnictl("algo", "show", "mine").returncode == 1
    nnictl("algo", "unregister", "MyAssessor")
    assert "user" not in {a["source"] for a in json.loads(nnictl("algo", "list", "--json").stdout)}


def test_platform_clean(tmp_path: Path) -> None:
    code = tmp_path / "code"
    local = _config(code)
    r = nnictl("platform", "clean", "-c", str(local))
    assert r.returncode == 0 and "nothing to clean for platform local" in r.stdout, r.stderr
    shared = tmp_path / "shared"
    for sub in ("envs/e1", "trials/t1", "wheels"):
        (shared / sub).mkdir(parents=True)
    (shared / "keep.txt").write_text("not nnix's")
    cfg = json.loads(local.read_text())
    cfg["trainingService"] = {"platform": "slurm", "sharedWorkingDirectory": str(shared)}
    slurm = tmp_path / "slurm.yml"
    slurm.write_text(json.dumps(cfg))
    no = nnictl("platform", "clean", "-c", str(slurm), input="n\n")
    assert no.returncode == 1 and f"slurm local: {shared}/envs" in no.stdout
    assert (shared / "envs").exists()
    yes = nnictl("platform", "clean", "-c", str(slurm), "-y")
    assert yes.returncode == 0, yes.stderr
    assert sorted(p.name for p in shared.iterdir()) == ["keep.txt"]


def test_create_on_a_busy_port_leaves_nothing(tmp_path: Path) -> None:
    cfg = _config(tmp_path / "code")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = nnictl("create", "--config", str(cfg), "--port", str(port))
    assert r.returncode == 1 and f"port {port} is not idle" in r.stderr
    assert Registry().all() == []
    home = Path(os.environ["NNIX_HOME"])
    assert not [p for p in home.iterdir() if p.name != ".nnix"]


def test_tuner_gpu_indices_warns_regularized_evolution_runs_and_nas_is_refused(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "gate").write_text("")
    cfg = _config(code, maxTrialNumber=3, tunerGpuIndices="0",
                  tuner={"name": "RegularizedEvolutionTuner",
                         "classArgs": {"optimize_mode": "maximize", "population_size": 2, "sample_size": 2}})
    r = nnictl("create", "--config", str(cfg), "--port", "0", "--foreground")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning: tunerGpuIndices has no effect in nnix" in r.stderr
    assert "trials 3/3: 3 succeeded" in r.stdout
    for name in ("PPOTuner", "NetworkMorphism"):
        bad = _config(code, tuner={"name": name})
        out = nnictl("create", "--config", str(bad), "--port", "0")
        assert out.returncode == 2 and "not supported: NAS" in out.stderr, out.stderr
