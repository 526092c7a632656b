"""Parsing cost of big and hostile configs: nnix's bounded loader against plain PyYAML, in the same run.

Run: python bench/config_parse.py [--options 1000000]

* a choice of ``--options`` integer options written inline in the config YAML: ``load_config`` end to end,
  and ``nnix.documents.load_yaml`` alone, against ``yaml.safe_load`` (pure Python: what nnix used
  before) and ``yaml.load(Loader=CSafeLoader)`` (libyaml, no bounds) on the same text;
* the same choice in a JSON search-space file: ``load_config`` end to end;
* ``SearchSpace.from_json`` on it against the former ``copy.deepcopy``-based copies;
* an alias bomb (9**10 values): how long until it is refused.

Prints seconds and ratios. Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from nnix.config import load_config
from nnix.documents import load_yaml
from nnix.errors import ConfigError
from nnix.space import SearchSpace

TAIL = "trialCommand: python3 main.py\ntrialConcurrency: 1\ntuner: {name: Random}\ntrainingService: {platform: local}\n"


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--options", type=int, default=1_000_000)
    n = parser.parse_args().options
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        options = ", ".join(map(str, range(n)))
        inline = d / "inline.yml"
        inline.write_text(f"searchSpace: {{x: {{_type: choice, _value: [{options}]}}}}\n{TAIL}")
        (d / "space.json").write_text(json.dumps({"x": {"_type": "choice", "_value": list(range(n))}}))
        from_file = d / "file.yml"
        from_file.write_text(f"searchSpaceFile: space.json\n{TAIL}")
        text = inline.read_text()

        print(f"choice of {n:,} options")
        t_nnix = timed(lambda: load_yaml(text))
        t_c = timed(lambda: yaml.load(text, Loader=yaml.CSafeLoader))
        t_py = timed(lambda: yaml.safe_load(text))
        print(f"  YAML parse: nnix load_yaml {t_nnix:.2f} s | PyYAML CSafeLoader {t_c:.2f} s | "
              f"PyYAML safe_load (former) {t_py:.2f} s | former/nnix {t_py / t_nnix:.1f}x")
        t_inline = timed(lambda: load_config(inline))
        t_file = timed(lambda: load_config(from_file))
        print(f"  load_config: inline YAML {t_inline:.2f} s | JSON search-space file {t_file:.2f} s")
        raw = json.loads((d / "space.json").read_text())
        t_space = timed(lambda: SearchSpace.from_json(raw))
        t_copies = timed(lambda: copy.deepcopy(copy.deepcopy(raw)))
        print(f"  SearchSpace.from_json {t_space:.2f} s (the two deepcopies it used to make alone: {t_copies:.2f} s)")

        bomb = d / "bomb.yml"
        lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
        bomb.write_text("\n".join(lines) + "\nsearchSpace: {x: {_type: choice, _value: *l9}}\n" + TAIL)

        def refuse() -> None:
            try:
                load_config(bomb)
            except ConfigError:
                return
            sys.exit("the alias bomb was accepted")

        print(f"alias bomb (9**10 values) refused in {timed(refuse) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
