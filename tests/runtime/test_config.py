"""Configuration: defaults < TOML file < env < flags; anything unknown or malformed is a clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coordinator import config as C


def test_defaults_are_kafkas() -> None:
    cfg = C.load(None, env={}, flags={})
    assert cfg["offsets.topic.num.partitions"] == 50
    assert cfg["group.initial.rebalance.delay.ms"] == 3000
    assert cfg["group.min.session.timeout.ms"] == 6000
    assert cfg["socket.request.max.bytes"] == 100 * 1024 * 1024
    assert (cfg["host"], cfg["port"], cfg["data.dir"]) == ("127.0.0.1", 9092, "./data")


def test_precedence_file_env_flag(tmp_path: Path) -> None:
    f = tmp_path / "g.toml"
    f.write_text('port = 1111\n"group.max.size" = 7\n[group.initial.rebalance.delay]\nms = 5\n')
    cfg = C.load(f, env={}, flags={})
    assert (cfg["port"], cfg["group.max.size"], cfg["group.initial.rebalance.delay.ms"]) == (1111, 7, 5)
    cfg = C.load(f, env={"GROUPCOORD_PORT": "2222", "GROUPCOORD_GROUP_MAX_SIZE": "8"}, flags={})
    assert (cfg["port"], cfg["group.max.size"]) == (2222, 8)
    cfg = C.load(f, env={"GROUPCOORD_PORT": "2222"}, flags={"port": "3333"})
    assert cfg["port"] == 3333


@pytest.mark.parametrize(
    "text, message",
    [
        ("port = [[[", "not valid TOML"),
        ("\x00\x01garbage = = =", "not valid TOML"),
        ("no.such.key = 1", "unknown config key 'no.such.key'"),
        ('port = "eighty"', "bad value for port"),
        ("port = -3", "below the minimum"),
        ('"auto.create.topics.enable" = "maybe"', "expected true or false"),
        ('"group.max.size" = 1.5', "expected an integer"),
    ],
)
def test_garbage_config_files_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(C.ConfigError, match=message):
        C.load(f, env={}, flags={})


def test_binary_and_missing_files(tmp_path: Path) -> None:
    f = tmp_path / "bin.toml"
    f.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(C.ConfigError, match="not UTF-8"):
        C.load(f, env={}, flags={})
    with pytest.raises(C.ConfigError, match="cannot read config file"):
        C.load(tmp_path / "nope.toml", env={}, flags={})


def test_unknown_env_var_and_inconsistent_bounds() -> None:
    with pytest.raises(C.ConfigError, match="GROUPCOORD_NOPE"):
        C.load(None, env={"GROUPCOORD_NOPE": "1"}, flags={})
    with pytest.raises(C.ConfigError, match="above"):
        C.load(None, env={}, flags={"group.min.session.timeout.ms": 9000, "group.max.session.timeout.ms": 8000})


def test_cli_prints_one_line_and_exits_2_on_bad_config(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("this is not toml")
    out = subprocess.run([sys.executable, "-m", "coordinator.cli", "serve", "--config", str(f)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert out.stderr.startswith("groupcoord: config error:") and "not valid TOML" in out.stderr
    out = subprocess.run([sys.executable, "-m", "coordinator.cli", "serve", "--group-max-size", "lots"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "flag --group-max-size" in out.stderr
