"""envrun signal-ranks: which recorded processes get the checkpoint signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from envbuild.slurm.batch.forward import children_map, signal_ranks, targets


def test_targets_pick_this_nodes_ranks_and_a_launchers_children(tmp_path: Path) -> None:
    for name in ("node1.100.rank", "node1.200.children", "node2.300.rank", "junk"):
        (tmp_path / name).touch()
    tree = {200: [201, 202], 201: [250]}  # 250: a DataLoader worker of rank 201: left alone
    assert targets(str(tmp_path), "node1", tree) == [100, 201, 202]
    assert targets(str(tmp_path), "node2", tree) == [300]
    assert targets(str(tmp_path / "missing"), "node1", tree) == []


def test_a_recorded_process_gets_the_signal(tmp_path: Path, capsys) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(7))\n"
                              "print('ready', flush=True)\ntime.sleep(30)"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    (tmp_path / f"nodeX.{child.pid}.rank").touch()
    assert child.pid in children_map().get(os.getpid(), [])
    assert signal_ranks("USR1", str(tmp_path), node="nodeX") == 1
    assert child.wait(timeout=10) == 7
    assert "nodeX: SIGUSR1 sent to 1 training process(es)" in capsys.readouterr().out
    time.sleep(0)
    assert signal.SIGUSR1 == 10
