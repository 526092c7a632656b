"""The training-service platform table comes from entry points: a third-party service adds its platform by
declaring one in its own package, with no edit inside nnix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from nnix.config import services
from nnix.config.services import (
    BUILT_IN_PLATFORMS,
    ENTRY_POINT_GROUP,
    LocalConfig,
    platform_problems,
    training_service_platforms,
)
from nnix.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"

# A third-party package: its own model and an entry point in its own metadata (a dist-info directory on
# sys.path is what an installed distribution is to importlib.metadata).
ACME_MODULE = """
from typing import Literal

from nnix.config.fields import PositiveInt, Problem
from nnix.config.services import ServiceConfig


class AcmeConfig(ServiceConfig):
    platform: Literal["acme"]
    queue: str = "default"
    slots_per_gpu: PositiveInt = 1

    def cross_check(self, trial_gpu_number):
        if trial_gpu_number is None and self.slots_per_gpu != 1:
            return [Problem(("slots_per_gpu",), "must stay 1 unless {trial_gpu_number} is set")]
        return []
"""

PROBE = """
import json, sys
from pathlib import Path
from nnix.config import ExperimentConfig, parse_config, training_service_platforms
from nnix.errors import ConfigError

base = {"searchSpace": {"x": {"_type": "choice", "_value": [1, 2]}}, "trialCommand": "python3 t.py",
        "trialConcurrency": 1, "tuner": {"name": "Random"}}
out = {"platforms": sorted(training_service_platforms())}
cfg = parse_config({**base, "trainingService": {"platform": "acme", "queue": "gpu"}}, Path("."))
out["service"] = cfg.config.to_json()["trainingService"]
out["type"] = type(cfg.config.training_service).__module__
cfg = parse_config({**base, "trainingService": [{"platform": "local"}, {"platform": "acme"}]}, Path("."))
out["hybrid"] = [s["platform"] for s in cfg.config.to_json()["trainingService"]["services"]]
for name, ts in (("typo", {"platform": "acme", "queu": "gpu"}), ("cross", {"platform": "acme", "slotsPerGpu": 2}),
                 ("unknown", {"platform": "acmee"})):
    try:
        parse_config({**base, "trainingService": ts}, Path("."))
        out[name] = None
    except ConfigError as e:
        out[name] = [[i.path, i.message, i.hint] for i in e.issues]
built = ExperimentConfig.model_validate({**base, "searchSpace": base["searchSpace"],
                                         "trainingService": {"platform": "acme"}})
out["python_api"] = built.training_service.platform
print(json.dumps(out))
"""


def _install_acme(site: Path) -> None:
    (site / "acmeplat").mkdir(parents=True)
    (site / "acmeplat" / "__init__.py").write_text(textwrap.dedent(ACME_MODULE))
    dist = site / "acmeplat-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acmeplat\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nacme = acmeplat:AcmeConfig\n")


def test_a_third_party_platform_validates_through_its_entry_point(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install_acme(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(site)])}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "acme" in out["platforms"] and {"local", "remote", "hybrid"} <= set(out["platforms"])
    assert out["service"] == {"platform": "acme", "queue": "gpu", "slotsPerGpu": 1}
    assert out["type"] == "acmeplat"
    assert out["hybrid"] == ["local", "acme"]
    # errors in the third party's fields read like nnix's own: the user's path, a hint
    assert out["typo"] == [["trainingService.queu", "unknown key", "did you mean 'queue'?"]]
    assert out["cross"] == [["trainingService.slotsPerGpu", "must stay 1 unless trialGpuNumber is set", None]]
    [[path, message, hint]] = out["unknown"]
    assert (path, message) == ("trainingService.platform", "unknown platform 'acmee'")
    assert hint.startswith("did you mean 'acme'? supported platforms: acme, frameworkcontroller,")
    assert out["python_api"] == "acme"


@pytest.fixture
def fresh_table(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The platform table read again (entry points patched by the test), and as before afterwards."""
    services._discover.cache_clear()
    yield
    monkeypatch.undo()
    services._discover.cache_clear()


def _entry_points(*specs: tuple[str, str]) -> Any:
    def fake(group: str) -> list[EntryPoint]:
        assert group == ENTRY_POINT_GROUP
        return [EntryPoint(name, value, group) for name, value in specs]

    return fake


@pytest.mark.usefixtures("fresh_table")
def test_built_in_platforms_stand_in_when_nnix_metadata_has_no_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "entry_points", _entry_points())
    table = training_service_platforms()
    assert table == {**BUILT_IN_PLATFORMS, "hybrid": services.HybridConfig}
    assert platform_problems() == {}


@pytest.mark.usefixtures("fresh_table")
def test_a_broken_entry_point_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(services, "entry_points", _entry_points(
        ("local", "nnix.config.services:LocalConfig"),
        ("gone", "nnix_no_such_package:Config"),
        ("wrongtag", "nnix.config.services:RemoteConfig"),
        ("notamodel", "nnix.config.services:cross_check"),
    ))
    table = training_service_platforms()
    assert table["local"] is LocalConfig and not {"gone", "wrongtag", "notamodel"} & set(table)
    problems = platform_problems()
    assert "cannot be loaded: ModuleNotFoundError" in problems["gone"]
    assert "has no field platform: Literal['wrongtag']" in problems["wrongtag"]
    assert "is not a pydantic model" in problems["notamodel"]

    from nnix.config import parse_config

    data = {"searchSpace": {"x": {"_type": "choice", "_value": [1]}}, "trialCommand": "python3 t.py",
            "trialConcurrency": 1, "tuner": {"name": "Random"}, "trainingService": {"platform": "gone"}}
    with pytest.raises(ConfigError) as info:
        parse_config(data, tmp_path)
    [issue] = info.value.issues
    assert issue.path == "trainingService.platform"
    assert issue.message.startswith("platform 'gone' is installed but cannot be used: entry point "
                                    "nnix_no_such_package:Config cannot be loaded")


def test_pyproject_declares_exactly_the_built_in_platforms() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"][ENTRY_POINT_GROUP]
    assert declared == {name: f"{model.__module__}:{model.__qualname__}" for name, model in BUILT_IN_PLATFORMS.items()}
    # every platform with a config model has a service, and the reverse (hybrid is built from the others)
    assert set(project["entry-points"]["nnix.services"]) == {*declared, "hybrid"}


SERVICES: list[Any] = [
    {"platform": "local"},
    {"platform": "ray", "address": "127.0.0.1:6379"},
    {"platform": "remote", "machineList": [{"host": "127.0.0.1", "user": "u", "sshKeyFile": "/x/id_ed25519"}]},
    {"platform": "kubernetes", "storage": {"storageType": "hostPath", "path": "/x", "containerMountPoint": "/x"}},
    [{"platform": "local"}, {"platform": "ray", "address": "127.0.0.1:6379"}],
]


@pytest.mark.parametrize("service", SERVICES, ids=lambda s: s["platform"] if isinstance(s, dict) else "hybrid")
def test_a_config_dumps_without_warnings_and_validates_again_to_itself(service: Any, tmp_path: Path) -> None:
    """The platform union validates each platform with its own model; dumping must use that model too (pydantic
    warned 'unexpected value' when it had to guess) and give back what validates to the same config."""
    from nnix.config import parse_config

    doc = {"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": "python t.py",
           "trialConcurrency": 1, "trialCodeDirectory": str(tmp_path), "tuner": {"name": "Random"},
           "trainingService": service}
    cfg = parse_config(doc, tmp_path).config
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dumped = cfg.model_dump(mode="json", by_alias=True, exclude_none=True)
        as_json = json.loads(cfg.model_dump_json(by_alias=True, exclude_none=True))
    assert as_json == dumped
    assert parse_config(dumped, tmp_path).config == cfg
