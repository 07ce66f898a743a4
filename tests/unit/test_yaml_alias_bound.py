"""YAML aliases are bounded (issue 22): an alias bomb (aliases 9 wide, 6 deep) kept `resolve`
busy past 60 s at half a gigabyte, then printed a misleading OmegaConf error. It is refused at
the alias that crosses the bound, naming the file and line, before anything is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_compose.config import ConfigRequest, load
from gym_compose.config.yaml_files import MAX_ALIAS_VALUES, check_alias_expansion, read_config_file
from gym_compose.errors import UserError


def alias_bomb(width: int, depth: int) -> str:
    items = ", ".join(['"x"'] * width)
    lines = [f"a0: &a0 [{items}]"]
    for level in range(1, depth):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + f"\nbomb: *a{depth - 1}\n"


def test_the_alias_bomb_is_refused_at_the_line_of_the_alias_that_crosses_the_bound(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb(9, 6))
    with pytest.raises(UserError) as refused:
        load(ConfigRequest(config_files=[bomb]), cwd=tmp_path)
    message = str(refused.value)
    # a1's aliases add 9 x 10 values, a2's 9 x 91, a3's 9 x 820 (8,289 in all); a4's first, *a3, adds
    # 7,381 more: the total passes 10,000 on line 5
    assert message.startswith(f"{bomb}, line 5: YAML aliases expand this file by more than {MAX_ALIAS_VALUES:,} values")
    assert "alias bomb" in str(refused.value.hint)
    assert "OmegaConf" not in message and "Traceback" not in message


def test_the_count_follows_aliases_of_aliases():
    # b: the mapping, its keys x and y, 1, the list and its two items: 7 values
    text = "base: &b {x: 1, y: [1, 2]}\none: *b\nl: &l [*b, *b]\ntwo: *l\n"
    check_alias_expansion(text, Path("f.yaml"), limit=7 * 3 + 15)  # *l stands for 1 + 7 + 7
    with pytest.raises(UserError, match=r"f.yaml, line 4: .* more than 35 values \(\*l alone stands for 15\)"):
        check_alias_expansion(text, Path("f.yaml"), limit=35)


def test_a_block_repeated_by_alias_loads_as_before(tmp_path):
    config = tmp_path / "shared.yaml"
    config.write_text("defaults: &d {memory: 1g, cpus: 2}\na: {docker: *d}\nb: {docker: {<<: *d, cpus: 4}}\n")
    loaded = read_config_file(config)
    assert loaded.a.docker.memory == "1g" and loaded.b.docker.cpus == 4 and loaded.b.docker.memory == "1g"


def test_an_alias_inside_its_own_node_is_refused_with_its_line(tmp_path):
    config = tmp_path / "loop.yaml"
    config.write_text("ok: 1\nloop: &l\n  - 1\n  - *l\n")
    with pytest.raises(UserError, match=r"loop.yaml, line 4: alias \*l refers to a node it is inside of"):
        read_config_file(config)


def test_an_undefined_alias_is_still_the_parsers_error_with_its_line(tmp_path):
    config = tmp_path / "undefined.yaml"
    config.write_text("a: 1\nb: *nowhere\n")
    with pytest.raises(UserError, match=r"YAML syntax error in .*undefined.yaml, line 2.*undefined alias"):
        read_config_file(config)
