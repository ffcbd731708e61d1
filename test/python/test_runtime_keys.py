"""The user's key: HLOPT_KEY, else a 0600 key file created at first use; insecure key files refused."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

import hlopt
from hlopt.runtime import keys


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("HLOPT_KEY", raising=False)
    return tmp_path / "config" / "hlopt" / "key"


def test_key_file_is_created_private_at_first_use(config):
    assert keys.user_key(create=False) is None
    assert not config.exists()
    key = keys.user_key()
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    assert len(key.secret) == 64 and key.source == str(config)
    assert keys.user_key() == key  # read back, not made again
    assert [p.name for p in config.parent.iterdir()] == ["key"]  # no temporary file left


def test_hlopt_key_wins_and_the_key_file_is_not_made(config, monkeypatch):
    monkeypatch.setenv("HLOPT_KEY", "k0123456789" * 4)
    assert keys.user_key() == keys.Key(b"k0123456789" * 4, "HLOPT_KEY")
    assert not config.exists()
    assert keys.describe_key() == "HLOPT_KEY"


def test_sharing_the_key_file_as_hlopt_key_gives_the_same_key(config, monkeypatch):
    secret = keys.user_key().secret
    monkeypatch.setenv("HLOPT_KEY", config.read_text().strip())
    assert keys.user_key().secret == secret
    assert keys.user_key().mac(b"x") == keys.Key(secret, "file").mac(b"x")


def test_relative_xdg_config_home_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert keys.key_file_path() == tmp_path / ".config" / "hlopt" / "key"


@pytest.mark.parametrize("value", ["", "short"])
def test_weak_or_empty_hlopt_key(config, monkeypatch, value):
    monkeypatch.setenv("HLOPT_KEY", value)
    if value:
        with pytest.raises(keys.KeyFileError, match="HLOPT_KEY has 5 bytes; use at least 32 random characters"):
            keys.user_key()
    else:
        assert keys.user_key().source == str(config)  # empty means unset


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o666])
def test_key_file_others_can_access_is_refused(config, mode):
    keys.user_key()
    config.chmod(mode)
    with pytest.raises(keys.KeyFileError, match=f"accessible by others \\(mode {mode:04o}\\); run `chmod 600"):
        keys.user_key()


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_key_file_of_another_user_is_refused(config):
    keys.user_key()
    os.chown(config, 65534, 65534)
    with pytest.raises(keys.KeyFileError, match="belongs to user id 65534, not to you"):
        keys.user_key()


def test_symlinked_fifo_and_malformed_key_files_are_refused(config, tmp_path):
    config.parent.mkdir(parents=True, mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_text("x" * 64)
    target.chmod(0o600)
    config.symlink_to(target)
    with pytest.raises(keys.KeyFileError, match="cannot open the key file"):
        keys.user_key()
    config.unlink()
    os.mkfifo(config, 0o600)
    with pytest.raises(keys.KeyFileError, match="is not a regular file"):
        keys.user_key()  # and it does not hang on the FIFO
    config.unlink()
    for content in (b"short", b"\x00" * 64, b"k" * 5000):
        config.write_bytes(content)
        config.chmod(0o600)
        with pytest.raises(keys.KeyFileError, match="does not hold a key"):
            keys.user_key()
        config.unlink()


def test_processes_racing_to_make_the_key_agree(config):
    script = "from hlopt.runtime import keys; print(keys.user_key().secret.decode())"
    env = dict(os.environ, XDG_CONFIG_HOME=str(config.parent.parent))
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(4)]
    secrets = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert secrets == {config.read_text().strip()}
    assert [p.name for p in config.parent.iterdir()] == ["key"]


@pytest.mark.parametrize("value, match", [
    (" " * 32, r"is one byte repeated \(b' '\)"),
    ("A" * 64, r"is one byte repeated \(b'A'\)"),
    ("0123456789" * 3, "has 30 bytes"),
])
def test_short_or_one_byte_keys_are_refused(config, monkeypatch, value, match):
    monkeypatch.setenv("HLOPT_KEY", value)
    with pytest.raises(keys.KeyFileError, match=f"HLOPT_KEY {match}; use at least 32 random characters"):
        keys.user_key()


def test_a_non_utf8_key_is_refused_typed(config, monkeypatch):
    monkeypatch.setenv("HLOPT_KEY", os.fsdecode(b"\xff\xfe key bytes that are not UTF-8 at all"))
    with pytest.raises(keys.KeyFileError, match="HLOPT_KEY is not UTF-8 text"):
        keys.user_key()
    assert issubclass(keys.KeyFileError, hlopt.ExecutableFileError)
    monkeypatch.setenv("HLOPT_KEY", "é" * 16)  # 16 characters, 32 bytes: the bytes count
    assert keys.user_key().secret == ("é" * 16).encode()


def test_a_key_file_of_one_byte_repeated_is_refused(config):
    config.parent.mkdir(parents=True, mode=0o700)
    config.write_text(" x" + "x" * 63 + "\n")  # after stripping: one byte repeated
    config.chmod(0o600)
    with pytest.raises(keys.KeyFileError, match="does not hold a key .*not all one"):
        keys.user_key()


def test_a_folder_at_the_key_path_is_refused_typed(config):
    config.mkdir(parents=True, mode=0o700)
    with pytest.raises(keys.KeyFileError, match="the key file .* is not a regular file; remove it, or set HLOPT_KEY"):
        keys.user_key()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_key_folder_others_can_write_is_refused(config, mode):
    keys.user_key()
    config.parent.chmod(mode)
    with pytest.raises(keys.KeyFileError, match=f"the key folder .* is writable by others \\(mode {mode:04o}\\)"):
        keys.user_key()
    config.parent.chmod(0o700)
    config.parent.parent.chmod(0o777)  # a folder above it
    try:
        with pytest.raises(keys.KeyFileError, match="above the key folder .* is writable by others"):
            keys.user_key()
    finally:
        config.parent.parent.chmod(0o755)


def test_a_symlinked_key_folder_is_refused(config, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    config.parent.parent.mkdir(parents=True)
    config.parent.symlink_to(elsewhere)
    with pytest.raises(keys.KeyFileError, match="the key folder .* is a symbolic link"):
        keys.user_key()
    assert list(elsewhere.iterdir()) == []  # no key was written through the link
