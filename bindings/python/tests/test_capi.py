"""libferry from C: examples/c/seedsets.c, built by scripts/test.sh
against the installed libferry (pkg-config), uploads the four scaled data
sets to the test sshd and downloads them back, verifying every file. The
binaries come from $FERRY_SEEDSETS (shared libferry) and
$FERRY_SEEDSETS_STATIC (libferry.a); without them the test skips."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def seedsets_args(sshd, work: Path, percent: int):
    o = sshd.options()
    opts = ["-O", f"ssh_config={o['ssh_config']}", "-O", f"identity={o['identity']}"]
    for x in o["option"]:
        opts += ["-O", f"option={x}"]
    (work / "remote").mkdir()
    return ["-s", str(percent), *opts, str(work / "local"), sshd.url(f"{work}/remote/")]


@pytest.mark.parametrize("env,percent", [("FERRY_SEEDSETS", 5), ("FERRY_SEEDSETS_STATIC", 1)])
def test_seedsets_up_and_back_verified(sshd, work: Path, env: str, percent: int) -> None:
    exe = os.environ.get(env)
    if not exe:
        pytest.skip(f"${env} is not set (scripts/test.sh builds examples/c/seedsets.c)")
    p = subprocess.run([exe, *seedsets_args(sshd, work, percent)], capture_output=True, text=True, timeout=600)
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "all files verified" in p.stdout
    # Every set came back: 1 + 10 + 100 + 1000 files.
    assert sum(1 for f in (work / "local" / "down").rglob("*") if f.is_file()) == 1111


def test_a_bad_option_is_a_usage_code(sshd, work: Path) -> None:
    exe = os.environ.get("FERRY_SEEDSETS")
    if not exe:
        pytest.skip("$FERRY_SEEDSETS is not set")
    p = subprocess.run([exe, "-O", "paralel=2", "-c", str(work), sshd.url(f"{work}/x/")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1
    assert "parallel" in p.stderr and "usage error" in p.stderr
