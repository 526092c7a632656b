"""nnix.documents: bounded reading and parsing of config and search-space files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nnix.documents import DocumentError, load_json, load_yaml, read_text

ROOT = Path(__file__).resolve().parents[1]
YAML_FILES = sorted([*ROOT.glob("examples/**/*.yml"), *ROOT.glob("tests/compat/data/*.yml")])


@pytest.mark.parametrize("path", YAML_FILES, ids=[str(p.relative_to(ROOT)) for p in YAML_FILES])
def test_real_configs_load_as_pyyaml_loads_them(path: Path) -> None:
    text = path.read_text()
    assert load_yaml(text) == yaml.safe_load(text)


def test_yaml_features_configs_use_still_work() -> None:
    text = (
        "base: &b {platform: local, useActiveGpu: false}\n"
        "svc:\n  <<: *b\n  useActiveGpu: true\n"
        "list: [*b, *b]\n"
        "when: 2001-12-14\n"
        "big: 123456789012345678901234567890\n"
        "hex: 0x1f\n"
    )
    assert load_yaml(text) == yaml.safe_load(text)
    assert load_yaml("") is None and load_yaml("# only a comment\n") is None


@pytest.mark.parametrize(
    ("text", "path", "line", "fragment"),
    [
        ("a: 1\nb:\n  c: 2\n  c: 3\n", "b.c", 4, "duplicate key (first at line 3)"),
        ("a: [1, {x: 1, x: 2}]\n", "a[1].x", 1, "duplicate key"),
        ("a: &x [1]\nb: &x [2]\n", "b", 2, "anchor &x is defined twice"),
        ("a: *x\n", "a", 1, "alias *x names no anchor"),
        ("a: &x {b: *x}\n", "a.b", 1, "inside its own anchor"),
        ("a: " + "[" * 101 + "]" * 101 + "\n", "a" + "[0]" * 99, 1, "nested deeper than 100 levels"),
        ("a: 1\n---\nb: 2\n", "", 2, "a second YAML document"),
        ("n: " + "1" * 4001 + "\n", "", 1, "more than 4000 digits"),
        ("a: 1\nwhen: 2001-02-30\n", "", 2, "cannot read '2001-02-30' as a timestamp: day is out of range"),
    ],
)
def test_yaml_problems_name_the_path_and_line(text: str, path: str, line: int, fragment: str) -> None:
    with pytest.raises(DocumentError) as info:
        load_yaml(text)
    assert (info.value.path, info.value.line) == (path, line)
    assert fragment in info.value.message


def test_alias_expansion_is_counted_at_every_use() -> None:
    lines = ["l0: &l0 [" + ", ".join(["x"] * 100) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 100) + "]" for i in range(1, 4)]
    with pytest.raises(DocumentError, match="more than 2,000,000 values") as info:
        load_yaml("\n".join(lines))  # 100**4: refused while composing l3, at line 4
    assert info.value.line == 4 and info.value.hint
    # the same anchors used within bounds are fine
    assert len(load_yaml("\n".join(lines[:3]))["l2"]) == 100


def test_json_duplicates_depth_and_size() -> None:
    assert load_json('{"a": [1, 2.5, null, true]}') == {"a": [1, 2.5, None, True]}
    with pytest.raises(DocumentError, match="duplicate key 'a'"):
        load_json('{"a": 1, "b": {}, "a": 2}')
    with pytest.raises(DocumentError, match="nested deeper than 100 levels") as info:
        load_json("[" * 150 + "]" * 150)
    assert info.value.path == "[0]" * 100
    with pytest.raises(DocumentError, match="nested deeper than 100 levels"):
        load_json("[" * 100_000 + "]" * 100_000)  # json's own RecursionError, translated
    with pytest.raises(DocumentError, match="more than 2,000,000 values"):
        load_json("[" + ",".join(["0"] * 2_000_001) + "]")
    with pytest.raises(ValueError) as err:
        load_json("{not json")
    assert not isinstance(err.value, DocumentError)  # the caller may try YAML next


def test_read_text(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert read_text(f) == "a: 1\n"  # the BOM is dropped
    f.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(DocumentError, match="is not UTF-8 text") as info:
        read_text(f)
    assert info.value.line == 2
    with pytest.raises(DocumentError, match="is a directory"):
        read_text(tmp_path)
    with pytest.raises(DocumentError, match="does not exist"):
        read_text(tmp_path / "missing.yml", "config file")
    with open(f, "r+b") as handle:
        handle.truncate(32 * 1024 * 1024 + 1)
    with pytest.raises(DocumentError, match="larger than 32 MiB"):
        read_text(f)
    f.write_bytes(b"a: 1\n")
    with open(f, "r+b") as handle:
        handle.truncate(32 * 1024 * 1024)
    assert len(read_text(f)) == 32 * 1024 * 1024  # exactly at the limit: read


