"""The ferry+ fsspec filesystems against sshd and nginx on 127.0.0.1:
registered by entry point, ls, info, get, put, cat_file and ranged reads
through open()."""

from __future__ import annotations

from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")

import ferry  # noqa: E402
from conftest import make_file  # noqa: E402


def sftp_fs(sshd):
    return fsspec.filesystem("ferry+sftp", host="127.0.0.1", port=sshd.port, username=sshd.user,
                             skip_instance_cache=True, **sshd.options())


def test_the_entry_point_names_the_class() -> None:
    from ferry.fsspec import FerryHTTPSFileSystem, FerrySFTPFileSystem

    assert fsspec.get_filesystem_class("ferry+sftp") is FerrySFTPFileSystem
    assert fsspec.get_filesystem_class("ferry+https") is FerryHTTPSFileSystem


def test_sftp_ls_info_cat_and_ranged_open(sshd, work: Path) -> None:
    data = make_file(work / "d" / "x.bin", 300_000)
    make_file(work / "d" / "y.txt", 10)
    (work / "d" / "sub").mkdir()
    fs = sftp_fs(sshd)
    names = fs.ls(str(work / "d"), detail=False)
    assert names == [f"{work}/d/sub", f"{work}/d/x.bin", f"{work}/d/y.txt"]
    info = fs.info(str(work / "d" / "x.bin"))
    assert info["size"] == 300_000 and info["type"] == "file"
    assert fs.info(str(work / "d" / "sub"))["type"] == "directory"
    assert fs.cat_file(str(work / "d" / "x.bin"), 1000, 1100) == data[1000:1100]
    assert fs.cat_file(str(work / "d" / "x.bin"), -10) == data[-10:]
    with fs.open(str(work / "d" / "x.bin"), "rb", block_size=4096) as f:
        f.seek(123_456)
        assert f.read(5000) == data[123_456:128_456]
    with pytest.raises(FileNotFoundError):
        fs.info(str(work / "d" / "missing"))


def test_sftp_get_and_put_use_ferry_copy(sshd, work: Path) -> None:
    data = make_file(work / "local.bin", 2_000_000)
    fs = sftp_fs(sshd)
    (work / "remote").mkdir()
    fs.put(str(work / "local.bin"), f"{work}/remote/put.bin")
    assert (work / "remote" / "put.bin").read_bytes() == data
    fs.get(f"{work}/remote/put.bin", str(work / "got.bin"))
    assert (work / "got.bin").read_bytes() == data


def test_url_form_through_fsspec_open(sshd, work: Path) -> None:
    data = make_file(work / "u.bin", 5000)
    url = f"ferry+sftp://{sshd.user}@127.0.0.1:{sshd.port}{work}/u.bin"
    with fsspec.open(url, "rb", **sshd.options()) as f:
        assert f.read() == data


def test_https_ranged_read_from_nginx(nginx) -> None:
    data = make_file(nginx.www / "r.bin", 100_000)
    fs = fsspec.filesystem("ferry+https", host="127.0.0.1", port=nginx.port, cacert=str(nginx.cert),
                           skip_instance_cache=True)
    assert fs.info("/r.bin")["size"] == 100_000
    assert fs.cat_file("/r.bin", 50_000, 50_010) == data[50_000:50_010]
    with fs.open("/r.bin") as f:
        f.seek(99_990)
        assert f.read() == data[99_990:]


def test_errors_are_ferry_exceptions(sshd) -> None:
    fs = fsspec.filesystem("ferry+sftp", host="127.0.0.1", port=sshd.port, username=sshd.user,
                           skip_instance_cache=True, **sshd.options(key=sshd.other_key))
    with pytest.raises(ferry.AuthError):
        fs.ls("/")
