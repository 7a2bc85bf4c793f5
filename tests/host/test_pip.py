"""Reading the host's pip configuration the way pip does."""

from __future__ import annotations

from pathlib import Path

from envbuild.host.pip import local_path_of, parse_pip_settings, pip_config_files


def test_later_files_and_install_section_win() -> None:
    settings = parse_pip_settings(
        [
            ("/etc/pip.conf", "[global]\nindex-url = https://mirror.example/simple\ncert = /etc/ca.pem\n"),
            ("~/.config/pip/pip.conf", "[global]\nfind-links = /opt/wheels\n  /opt/more\n[install]\nindex-url = https://site/simple\n"),
        ],
        {},
    )
    assert settings.index_url == "https://site/simple"
    assert settings.find_links == ("/opt/wheels", "/opt/more")
    assert settings.cert == "/etc/ca.pem"


def test_environment_overrides_files() -> None:
    settings = parse_pip_settings(
        [("/etc/pip.conf", "[global]\nextra-index-url = file:///a/simple\nno-index = false\n")],
        {"PIP_EXTRA_INDEX_URL": "file:///b/simple https://c/simple", "PIP_NO_INDEX": "1", "PIP_TRUSTED_HOST": "c"},
    )
    assert settings.extra_index_urls == ("file:///b/simple", "https://c/simple")
    assert settings.no_index is True
    assert settings.trusted_hosts == ("c",)


def test_unreadable_config_is_ignored_like_unknown_keys() -> None:
    settings = parse_pip_settings([("/etc/pip.conf", "not an ini file"), ("u", "[global]\ntimeout = 60\n")], {})
    assert settings.index_url is None and settings.find_links == ()


def test_config_file_order_and_devnull() -> None:
    files = pip_config_files({"XDG_CONFIG_DIRS": "/etc/xdg"}, Path("/home/u"), Path("/venv"))
    assert files == [Path("/etc/xdg/pip/pip.conf"), Path("/etc/pip.conf"), Path("/home/u/.pip/pip.conf"),
                     Path("/home/u/.config/pip/pip.conf"), Path("/venv/pip.conf")]
    assert pip_config_files({"PIP_CONFIG_FILE": "/dev/null"}, Path("/h"), Path("/v")) == []


def test_local_path_of() -> None:
    assert local_path_of("file:///opt/pypi/simple") == "/opt/pypi/simple"
    assert local_path_of("/opt/wheels") == "/opt/wheels"
    assert local_path_of("https://pypi.org/simple") is None
