"""Packaging beyond pyproject.toml: ``nnix-nni.pth`` goes to the root of site-packages (``import nni`` for
scripts run by hand, see ``src/_nnix_nni.py``), in wheels and in editable installs alike."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = Path(__file__).resolve().parent / "src" / "nnix-nni.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # PEP 660: the editable wheel's root is the install target
            target = Path(self.get_finalized_command("install").install_lib)
        else:
            target = Path(self.build_lib)
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PTH, target / PTH.name)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs: list[str] = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            outputs.append(str(Path(self.build_lib) / PTH.name))
        return outputs


setup(cmdclass={"build_py": BuildPyWithPth})
