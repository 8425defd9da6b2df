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


def test_sftp_open_for_writing_uploads_on_close(sshd, work: Path) -> None:
    (work / "w").mkdir()
    fs = sftp_fs(sshd)
    data = bytes(range(256)) * 5000  # 1.28 MB: several of fsspec's blocks
    with fs.open(f"{work}/w/out.bin", "wb", block_size=256 * 1024) as f:
        for i in range(0, len(data), 100_000):
            f.write(data[i:i + 100_000])
        # Nothing is on the server, under any name, before the close.
        assert list((work / "w").iterdir()) == []
    assert (work / "w" / "out.bin").read_bytes() == data
    assert sorted(p.name for p in (work / "w").iterdir()) == ["out.bin"]
    with fsspec.open(f"ferry+sftp://{sshd.user}@127.0.0.1:{sshd.port}{work}/w/url.txt", "w",
                     **sshd.options()) as t:
        t.write("text mode too\n")
    assert (work / "w" / "url.txt").read_text() == "text mode too\n"


def test_an_exception_inside_open_wb_leaves_no_file(sshd, work: Path) -> None:
    (work / "w").mkdir()
    (work / "w" / "keep.bin").write_bytes(b"old contents")
    fs = sftp_fs(sshd)
    with pytest.raises(RuntimeError, match="stop here"):
        with fs.open(f"{work}/w/new.bin", "wb", block_size=65536) as f:
            f.write(b"x" * 300_000)
            raise RuntimeError("stop here")
    with pytest.raises(KeyError):
        with fs.open(f"{work}/w/keep.bin", "wb") as f:
            f.write(b"half of the new contents")
            raise KeyError("again")
    # No final file, no part file; the old file is untouched.
    assert sorted(p.name for p in (work / "w").iterdir()) == ["keep.bin"]
    assert (work / "w" / "keep.bin").read_bytes() == b"old contents"


def test_a_transaction_uploads_at_its_end_or_not_at_all(sshd, work: Path) -> None:
    (work / "t").mkdir()
    fs = sftp_fs(sshd)
    with pytest.raises(ValueError):
        with fs.transaction:
            with fs.open(f"{work}/t/a.txt", "w") as t:  # text mode: a wrapper closes it
                t.write("a")
            raise ValueError("abandon the transaction")
    assert list((work / "t").iterdir()) == []
    with fs.transaction:
        for n in ("a", "b"):
            with fs.open(f"{work}/t/{n}.bin", "wb") as f:
                f.write(n.encode() * 10)
        assert list((work / "t").iterdir()) == []
    assert (work / "t" / "a.bin").read_bytes() == b"a" * 10
    assert (work / "t" / "b.bin").read_bytes() == b"b" * 10


def ftp_fs(vsftpd):
    return fsspec.filesystem("ferry+ftp", host="127.0.0.1", port=vsftpd.port, skip_instance_cache=True)


def test_ftp_ls_info_cat_get_put_and_open(vsftpd, work: Path) -> None:
    data = make_file(vsftpd.root / "pub" / "a.bin", 200_000, seed=3)
    make_file(vsftpd.root / "pub" / "b.txt", 12)
    fs = ftp_fs(vsftpd)
    assert fs.ls("/pub", detail=False) == ["/pub/a.bin", "/pub/b.txt"]
    assert fs.info("/pub/a.bin")["size"] == 200_000
    assert fs.info("/pub")["type"] == "directory"
    assert fs.cat_file("/pub/a.bin", 1000, 1010) == data[1000:1010]
    with fs.open("/pub/a.bin", "rb", block_size=8192) as f:
        f.seek(150_000)
        assert f.read(1000) == data[150_000:151_000]
    fs.get("/pub/a.bin", str(work / "got.bin"))
    assert (work / "got.bin").read_bytes() == data
    up = make_file(work / "up.bin", 300_000, seed=4)
    fs.put(str(work / "up.bin"), "/pub/up.bin")
    assert (vsftpd.root / "pub" / "up.bin").read_bytes() == up
    with fs.open("/pub/w.bin", "wb") as f:
        f.write(b"written through open()")
    assert (vsftpd.root / "pub" / "w.bin").read_bytes() == b"written through open()"
    with pytest.raises(FileNotFoundError):
        fs.info("/pub/missing")
