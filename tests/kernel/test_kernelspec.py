"""The kernelspec planner (envbuild.kernel.kernelspec) and the shell's command (envbuild.kernel.shell): pure."""

from __future__ import annotations

import json
import subprocess

import pytest

from envbuild.kernel.kernelspec import (
    IPYKERNEL_MOUNT,
    KERNEL_LAUNCHER,
    KernelEntry,
    check_name,
    default_display_name,
    default_name,
    is_envrun_kernel,
    kernel_binds,
    kernel_command,
    kernel_overlays,
    kernels_dir,
    kernelspec,
    log_path,
    overlay_dir,
    overlay_spec_text,
    read_entry,
)
from envbuild.kernel.shell import SHELL_BOOT, prompt_for, shell_command
from envbuild.shared.errors import UsageError

ENTRY = KernelEntry(name="envrun-env", display_name="env (envrun)", image="/p/env.sif", overlays=("/p/extras.sqsh",),
                    ipykernel_overlay="/c/kernels/env-1/ipykernel.sqsh", python="python3", system="lumi-g",
                    binds=("/scratch/p",), log="/h/.local/state/envrun/kernels/envrun-env.log", envrun="/opt/e/bin/envrun")


def test_the_kernelspec_runs_envrun_with_the_kernel_file_and_keeps_the_entry() -> None:
    spec = kernelspec(ENTRY, "/h/.local/share/jupyter/kernels/envrun-env", "1.0")
    assert spec["argv"] == ["/opt/e/bin/envrun", "kernel", "run", "/h/.local/share/jupyter/kernels/envrun-env/kernel.json",
                            "{connection_file}"]
    assert spec["display_name"] == "env (envrun)" and spec["language"] == "python"
    assert is_envrun_kernel(spec)
    assert read_entry(json.loads(json.dumps(spec)), "kernel.json") == ENTRY, "what install writes, run reads back"


def test_a_kernel_of_someone_else_or_a_damaged_entry_is_refused_with_a_fix() -> None:
    assert not is_envrun_kernel({"argv": ["python"], "metadata": {"debugger": True}})
    with pytest.raises(UsageError, match="not a kernel envrun installed") as caught:
        read_entry({"argv": ["python"]}, "k.json")
    assert "envrun kernel install --force" in (caught.value.hint or "")
    spec = kernelspec(ENTRY, "/k", "1.0")
    spec["metadata"]["envrun"]["overlays"] = "not-a-list"  # type: ignore[index]
    with pytest.raises(UsageError, match="overlays is not a list"):
        read_entry(spec, "k.json")
    spec["metadata"]["envrun"]["format"] = 99  # type: ignore[index]
    with pytest.raises(UsageError, match="format 99"):
        read_entry(spec, "k.json")


def test_the_ipykernel_overlay_lies_under_the_users_overlays_and_is_appended_to_sys_path() -> None:
    assert kernel_overlays(ENTRY) == ["/c/kernels/env-1/ipykernel.sqsh", "/p/extras.sqsh"]
    command = kernel_command(ENTRY, "/run/user/1/jupyter/kernel-1.json")
    assert command == ["python3", "-c", KERNEL_LAUNCHER, IPYKERNEL_MOUNT, "-f", "/run/user/1/jupyter/kernel-1.json"]
    assert "sys.path.append(" in KERNEL_LAUNCHER and "insert" not in KERNEL_LAUNCHER
    plain = KernelEntry(**{**ENTRY.__dict__, "ipykernel_overlay": "", "overlays": ()})
    assert kernel_overlays(plain) == []
    assert kernel_command(plain, "/r/k.json") == ["python3", "-m", "ipykernel_launcher", "-f", "/r/k.json"]


def test_the_launcher_puts_the_mounts_site_directory_last_and_passes_the_rest_to_ipykernel(tmp_path) -> None:
    """KERNEL_LAUNCHER run by this Python, with a stand-in ipykernel module that reports what it got."""
    site = tmp_path / "mnt" / "lib" / "python{}.{}".format(*__import__("sys").version_info[:2]) / "site-packages"
    (site / "ipykernel").mkdir(parents=True)
    (site / "ipykernel" / "__init__.py").write_text("")
    (site / "ipykernel" / "kernelapp.py").write_text(
        "import json, sys\ndef launch_new_instance():\n    print(json.dumps({'argv': sys.argv[1:], 'last': sys.path[-1]}))\n")
    result = subprocess.run(["python3", "-S", "-c", KERNEL_LAUNCHER, str(tmp_path / "mnt"), "-f", "/r/k.json"],
                            capture_output=True, text=True, check=True)
    seen = json.loads(result.stdout)
    assert seen == {"argv": ["-f", "/r/k.json"], "last": str(site)}


def test_the_connection_files_directory_is_bound() -> None:
    assert kernel_binds(ENTRY, "/home/u/.local/share/jupyter/runtime/kernel-9.json") == [
        "/scratch/p", "/home/u/.local/share/jupyter/runtime"]


@pytest.mark.parametrize(("image", "name", "display"), [
    ("/p/local-cpu-pytorch.sif", "envrun-local-cpu-pytorch", "local-cpu-pytorch (envrun)"),
    ("/p/My Env+GPU.sif", "envrun-my-env-gpu", "My Env+GPU (envrun)"),
    ("/p/.sif", "envrun-image", " (envrun)"),
])
def test_default_names_are_valid_kernel_names(image: str, name: str, display: str) -> None:
    assert default_name(image) == name and check_name(name) == name
    assert default_display_name(image) == display


@pytest.mark.parametrize("name", ["My-Env", "a/b", "", "..", "with space"])
def test_an_invalid_name_is_refused_with_a_valid_one(name: str) -> None:
    with pytest.raises(UsageError, match="kernel names are lowercase") as caught:
        check_name(name)
    suggestion = (caught.value.hint or "").removeprefix("use --name ")
    assert check_name(suggestion) == suggestion


def test_where_kernelspecs_and_logs_go() -> None:
    assert kernels_dir(prefix=None, data_dir="/h/.local/share/jupyter") == "/h/.local/share/jupyter/kernels"
    assert kernels_dir(prefix="/proj/jup", data_dir="/x") == "/proj/jup/share/jupyter/kernels"
    assert log_path("k", {"HOME": "/h"}) == "/h/.local/state/envrun/kernels/k.log"
    assert log_path("k", {"HOME": "/h", "XDG_STATE_HOME": "/s"}) == "/s/envrun/kernels/k.log"


def test_the_overlay_spec_is_an_overlay_of_the_image_with_ipykernel() -> None:
    from envbuild.envspec.loadspec import load_spec_text

    loaded = load_spec_text(overlay_spec_text("/p/it's env.sif", "local"))
    spec = loaded.spec
    assert spec.base.ref == "/p/it's env.sif" and spec.overlay is not None and spec.overlay.mount == IPYKERNEL_MOUNT
    assert spec.python.requirements() == ["ipykernel"] and spec.system == "local"
    one, other = overlay_dir("/c", "/p/env.sif"), overlay_dir("/c", "/q/env.sif")
    assert one.startswith("/c/kernels/env-") and one != other, "one overlay per image path"


def test_the_shell_command_and_prompt() -> None:
    assert shell_command("/p/env.sif", None) == ["sh", "-c", SHELL_BOOT, "envrun-shell", "[envrun env] \\u@\\h:\\w\\$ "]
    assert shell_command("/p/env.sif", "echo $X")[-1] == "echo $X"
    assert prompt_for("/p/a$b`c\\.sif") == "[envrun a\\$b\\`c\\\\] \\u@\\h:\\w\\$ "


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_the_shell_boot_runs_the_command_or_an_interactive_shell_with_the_prompt(shell: str, tmp_path) -> None:
    """SHELL_BOOT under a PATH with only the shells it may pick: bash when there, else sh."""
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in {"sh", "env", shell}:
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    env = {"PATH": str(bin_dir)}
    ran = subprocess.run([str(bin_dir / "sh"), "-c", SHELL_BOOT, "envrun-shell", "[envrun x] $ ",
                          'echo "$0 ${BASH_VERSION:+bash}"'], capture_output=True, text=True, env=env, check=True)
    assert ran.stdout.strip() == ("bash bash" if shell == "bash" else "sh")
    interactive = subprocess.run([str(bin_dir / "sh"), "-c", SHELL_BOOT, "envrun-shell", "[envrun x] \\u$ "],
                                 input="echo \"PS1=$PS1\"\nexit\n", capture_output=True, text=True, env=env, check=True)
    assert "PS1=[envrun x] \\u$ " in interactive.stdout if shell == "bash" else "PS1=[envrun x] $ " in interactive.stdout
