"""ferry.copy, ferry.copy_async and ferry.Transfer against real servers on
127.0.0.1: OpenSSH's sshd, ferry serve and nginx (conftest.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import ferry
from conftest import make_file, tree

MB = 1 << 20


# --- copies both ways, -r --------------------------------------------------


def test_upload_then_download_one_file(sshd, work: Path) -> None:
    data = make_file(work / "a.bin", 3 * MB + 17)
    (work / "remote").mkdir()
    up = ferry.copy(work / "a.bin", sshd.url(f"{work}/remote/a.bin"), **sshd.options())
    assert up.bytes == len(data)
    assert (work / "remote/a.bin").read_bytes() == data
    down = ferry.copy(sshd.url(f"{work}/remote/a.bin"), work / "back.bin", **sshd.options())
    assert down.bytes == len(data) and down.error is None
    assert (work / "back.bin").read_bytes() == data


def test_recursive_up_and_down(sshd, work: Path) -> None:
    for i in range(12):
        make_file(work / "src" / f"d{i % 3}" / f"f{i}.bin", 1000 * i + 1, seed=i)
    (work / "remote").mkdir()
    ferry.copy(str(work / "src"), sshd.url(f"{work}/remote/"), recursive=True, **sshd.options())
    assert tree(work / "remote/src") == tree(work / "src")
    ferry.copy(sshd.url(f"{work}/remote/src"), str(work / "back") + "/", recursive=True, **sshd.options())
    assert tree(work / "back/src") == tree(work / "src")


def test_several_sources_and_options_as_the_cli_names_them(sshd, work: Path) -> None:
    srcs = [work / f"s{i}.txt" for i in range(3)]
    for i, s in enumerate(srcs):
        make_file(s, 5000 + i, seed=i)
    (work / "remote").mkdir()
    r = ferry.copy(srcs, sshd.url(f"{work}/remote/"), parallel=2, streams=1, chunk="64k", depth=16,
                   preserve=True, **sshd.options())
    assert r.files_copied == 3
    for s in srcs:
        assert (work / "remote" / s.name).read_bytes() == s.read_bytes()


def test_ferry_serve_sftp_both_ways(ferry_serve, work: Path) -> None:
    data = make_file(work / "up.bin", 2 * MB + 3)
    ferry.copy(work / "up.bin", ferry_serve.sftp("/up.bin"), **ferry_serve.ssh_options())
    assert (ferry_serve.root / "up.bin").read_bytes() == data
    ferry.copy(ferry_serve.sftp("/up.bin"), work / "down.bin", **ferry_serve.ssh_options())
    assert (work / "down.bin").read_bytes() == data


def test_ferry_serve_https_with_a_pin(ferry_serve, work: Path) -> None:
    data = make_file(ferry_serve.root / "web.bin", MB + 5)
    ferry.copy(ferry_serve.https("/web.bin"), work / "web.bin", pin=ferry_serve.cert_sha256,
               token=ferry_serve.token)
    assert (work / "web.bin").read_bytes() == data


def test_nginx_https_with_cacert(nginx, work: Path) -> None:
    data = make_file(nginx.www / "n.bin", 700_000)
    r = ferry.copy(nginx.https("/n.bin"), work / "n.bin", cacert=nginx.cert)
    assert (work / "n.bin").read_bytes() == data
    assert r.bytes == len(data)


def test_per_file_report_of_an_engine_copy(sshd, ferry_serve, work: Path) -> None:
    """Between two servers the engine runs the copy, one result a file."""
    make_file(work / "x1", 1234)
    make_file(work / "x2", 4321, seed=1)
    opts = sshd.options()
    (work / "r").mkdir()
    ferry.copy([work / "x1", work / "x2"], sshd.url(f"{work}/r/"), **opts)
    # sshd -> local with a local source too: mixed sources run on the engine.
    make_file(work / "x3", 99, seed=2)
    (work / "out").mkdir()
    r = ferry.copy([sshd.url(f"{work}/r/x1"), str(work / "x3")], str(work / "out") + "/", **opts)
    assert sorted(Path(f.dest).name for f in r.files) == ["x1", "x3"]
    assert all(f.ok for f in r.files)
    assert sum(f.bytes for f in r.files) == 1234 + 99


# --- progress and cancellation -----------------------------------------------


def test_progress_events_arrive_in_order(sshd, work: Path) -> None:
    make_file(work / "p.bin", 8 * MB)
    events = []
    ferry.copy(work / "p.bin", sshd.url(f"{work}/p.out"), progress=events.append, **sshd.options())
    progress = [e for e in events if isinstance(e, ferry.Progress)]
    assert progress, events
    last = progress[-1]
    assert last.bytes_done == last.bytes_total == 8 * MB
    assert [p.bytes_done for p in progress] == sorted(p.bytes_done for p in progress)


def _big_remote(sshd, work: Path) -> Path:
    src = work / "big.bin"
    with open(src, "wb") as f:  # sparse: nothing on disk, 1 GiB to move
        f.truncate(1 << 30)
    return src


def test_raising_in_progress_cancels_and_leaves_no_final_file(sshd, work: Path) -> None:
    src = _big_remote(sshd, work)
    dst = work / "dst.bin"

    class Stop(Exception):
        pass

    def progress(ev: ferry.Event) -> None:
        if isinstance(ev, ferry.Progress):
            raise Stop

    with pytest.raises(Stop):
        ferry.copy(sshd.url(str(src)), dst, progress=progress, **sshd.options())
    assert not dst.exists()


def test_progress_returning_false_raises_cancelled(sshd, work: Path) -> None:
    src = _big_remote(sshd, work)
    dst = work / "dst2.bin"
    with pytest.raises(ferry.Cancelled) as e:
        ferry.copy(sshd.url(str(src)), dst, progress=lambda ev: False, **sshd.options())
    assert not dst.exists()
    assert isinstance(e.value, ferry.Error)


def test_transfer_cancel_from_another_thread(sshd, work: Path) -> None:
    src = _big_remote(sshd, work)
    dst = work / "dst3.bin"
    t = ferry.Transfer(sshd.url(str(src)), dst, **sshd.options()).start()
    threading.Timer(0.3, t.cancel).start()
    with pytest.raises(ferry.Cancelled):
        t.result()
    assert not dst.exists()


# --- exceptions --------------------------------------------------------------


def test_unknown_host_key_is_host_key_error(sshd, work: Path) -> None:
    empty = work / "known_hosts"
    empty.write_text("")
    opts = sshd.options()
    opts["option"] = [o for o in opts["option"] if not o.startswith("UserKnownHostsFile")] + [
        f"UserKnownHostsFile={empty}"
    ]
    with pytest.raises(ferry.HostKeyError) as e:
        ferry.copy(sshd.url("/etc/hostname"), work / "h", **opts)
    assert "host key" in e.value.message
    assert not isinstance(e.value, ferry.AuthError)


def test_refused_key_is_auth_error(sshd, work: Path) -> None:
    with pytest.raises(ferry.AuthError) as e:
        ferry.copy(sshd.url("/etc/hostname"), work / "h", **sshd.options(key=sshd.other_key))
    assert "denied" in e.value.message or "auth" in e.value.message.lower()


def test_missing_remote_file_is_remote_error_with_path(sshd, work: Path) -> None:
    missing = f"{work}/no/such/file.bin"
    with pytest.raises(ferry.RemoteError) as e:
        ferry.copy(sshd.url(missing), work / "x", **sshd.options())
    assert e.value.path is not None and "no/such" in e.value.path, e.value.message


def test_missing_local_file_is_local_io_error(sshd, work: Path) -> None:
    with pytest.raises(ferry.LocalIOError):
        ferry.copy(work / "nope.bin", sshd.url(f"{work}/nope.out"), **sshd.options())


def test_untrusted_certificate_is_host_key_error(nginx, work: Path) -> None:
    make_file(nginx.www / "t.bin", 10)
    with pytest.raises(ferry.HostKeyError):
        ferry.copy(nginx.https("/t.bin"), work / "t.bin", netrc=False)


def test_bad_option_is_usage_error() -> None:
    with pytest.raises(ferry.UsageError) as e:
        ferry.copy("/tmp/a", "sftp://127.0.0.1:1/b", paralel=3)
    assert "parallel" in str(e.value)
    with pytest.raises(ValueError):  # UsageError is a ValueError too
        ferry.copy("/tmp/a", "sftp://127.0.0.1:1/b", parallel=0)


def test_connection_refused_is_network_error(work: Path) -> None:
    from conftest import free_port

    make_file(work / "a", 1)
    with pytest.raises(ferry.NetworkError):
        ferry.copy(work / "a", f"sftp://127.0.0.1:{free_port()}/tmp/a", retries=1)


# --- credentials callback ----------------------------------------------------


def test_passphrase_comes_from_the_credentials_callable(sshd, work: Path) -> None:
    make_file(work / "c.bin", 1000)
    asked = []

    def credentials(kind: str, subject: str):
        asked.append((kind, subject))
        return sshd.passphrase if kind == "passphrase" else None

    ferry.copy(work / "c.bin", sshd.url(f"{work}/c.out"), credentials=credentials,
               **sshd.options(key=sshd.encrypted_key))
    assert (work / "c.out").read_bytes() == (work / "c.bin").read_bytes()
    assert ("passphrase", str(sshd.encrypted_key)) in asked


def test_host_key_question_goes_to_the_credentials_callable(sshd, work: Path) -> None:
    make_file(work / "q.bin", 10)
    kh = work / "kh"
    kh.write_text("")
    opts = sshd.options(strict="ask")
    opts["option"] = [o for o in opts["option"] if not o.startswith("UserKnownHostsFile")] + [
        f"UserKnownHostsFile={kh}"
    ]
    questions = []

    def yes(kind: str, subject: str):
        questions.append(kind)
        return kind == "hostkey"

    ferry.copy(work / "q.bin", sshd.url(f"{work}/q.out"), credentials=yes, **opts)
    assert "hostkey" in questions
    assert (work / "q.out").exists()
    kh.write_text("")
    with pytest.raises(ferry.HostKeyError):
        ferry.copy(work / "q.bin", sshd.url(f"{work}/q2.out"), credentials=lambda k, s: None, **opts)


# --- threads and asyncio -----------------------------------------------------


def test_threads_copy_at_once(sshd, work: Path) -> None:
    (work / "remote").mkdir()
    datas = {i: make_file(work / f"t{i}.bin", MB + i, seed=i) for i in range(6)}
    errors = []
    ticks = []

    def one(i: int) -> None:
        try:
            ferry.copy(work / f"t{i}.bin", sshd.url(f"{work}/remote/t{i}.bin"), **sshd.options())
            ferry.copy(sshd.url(f"{work}/remote/t{i}.bin"), work / f"b{i}.bin", **sshd.options())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    # The GIL is free while the copies run: this thread keeps counting.
    while any(t.is_alive() for t in threads):
        ticks.append(1)
        threads[0].join(0.001)
    assert not errors, errors
    for i, d in datas.items():
        assert (work / f"b{i}.bin").read_bytes() == d
    assert len(ticks) > 1


def test_asyncio_copy_and_events(sshd, work: Path) -> None:
    data = make_file(work / "as.bin", 4 * MB)

    async def main() -> ferry.Report:
        seen = []
        heartbeat = 0

        async def beat() -> None:
            nonlocal heartbeat
            while True:
                heartbeat += 1
                await asyncio.sleep(0.001)

        hb = asyncio.ensure_future(beat())
        r = await ferry.copy_async(work / "as.bin", sshd.url(f"{work}/as.out"), progress=seen.append,
                                   **sshd.options())
        t = ferry.Transfer(sshd.url(f"{work}/as.out"), work / "as.back", **sshd.options())
        async for ev in t:
            seen.append(ev)
        r2 = await t.wait()
        hb.cancel()
        assert any(isinstance(e, ferry.Progress) for e in seen)
        assert r2.bytes == len(data)
        return r

    r = asyncio.run(main())
    assert r.bytes == len(data)
    assert (work / "as.back").read_bytes() == data


def test_asyncio_task_cancel_cancels_the_transfer(sshd, work: Path) -> None:
    src = _big_remote(sshd, work)
    dst = work / "acancel.bin"

    async def main() -> None:
        task = asyncio.ensure_future(ferry.copy_async(sshd.url(str(src)), dst, **sshd.options()))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert not dst.exists()


def test_tilde_in_path_options_is_expanded(sshd, work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(sshd.dir))
    make_file(work / "t.bin", 100)
    opts = sshd.options()
    opts["identity"] = "~/id"
    ferry.copy(work / "t.bin", sshd.url(f"{work}/t.out"), **opts)
    assert (work / "t.out").exists()
