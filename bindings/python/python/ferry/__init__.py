"""ferry: fast file transfers over SFTP, HTTP(S) and FTP(S), from Python.

The same engine, URLs and options as the ``ferry cp`` command line::

    import ferry

    report = ferry.copy("sftp://alice@example.org/data/big.bin", "/tmp/",
                        progress=lambda ev: print(ev))
    print(report.bytes, "bytes in", report.seconds, "s")

``copy`` blocks the calling thread with the GIL released while bytes move;
``copy_async`` and ``Transfer`` are the asyncio forms. Failures raise an
:class:`Error` subclass. Options are those of ``ferry cp`` by their long
names, ``-`` written ``_`` (``identity="~/.ssh/id_ed25519"``,
``option=["StrictHostKeyChecking=accept-new"]``, ``pin=...``,
``cacert=...``, ``token=...``); see :func:`option_names`.

S3 takes its options the same way, per transfer: ``s3_endpoint``,
``s3_region``, ``s3_profile``, ``s3_no_sign_request``,
``s3_virtual_hosted``, ``s3_multipart_threshold``, ``s3_part_size``,
``s3_upload_concurrency``, ``s3_checksum`` (``crc32``, ``md5``,
``none``), and keys that ``ferry cp`` reads only from the environment:
``s3_access_key_id``, ``s3_secret_access_key``, ``s3_session_token``
(they come before the ``AWS_*`` variables and ``~/.aws``; one without
the other raises :class:`UsageError`), ``s3_anonymous`` (``False``: no
credentials found is an error, not unsigned requests)::

    ferry.copy("big.bin", "s3://bucket/dir/",
               s3_endpoint="https://minio.local:9000",
               s3_access_key_id="AKIA...", s3_secret_access_key="...")

docs/internals/bindings.md in the ferry repository says how it works
(threads, the GIL, who owns what, how errors map).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import (
    Any,
    AsyncIterator,
    Callable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import _ferry

# asyncio is imported inside the async functions, not here: it was 0.1 s of
# CPU at `import ferry` (most of the import), paid by every program that
# only calls ferry.copy; a program awaiting ferry has imported it already.

__all__ = [
    "copy",
    "copy_async",
    "Transfer",
    "Report",
    "FileResult",
    "Event",
    "Planned",
    "FileStarted",
    "Progress",
    "FileDone",
    "WarningEvent",
    "Error",
    "UsageError",
    "AuthError",
    "HostKeyError",
    "RemoteError",
    "LocalIOError",
    "NetworkError",
    "Cancelled",
    "option_names",
]

__version__: str = _ferry.__version__

PathLike = Union[str, "os.PathLike[str]"]
Sources = Union[PathLike, Sequence[PathLike]]
#: ``credentials(kind, subject)``: kind is ``"password"`` (subject
#: ``user@host``), ``"passphrase"`` (the key's path), ``"hostkey"`` (the
#: question; a true answer trusts the key) or ``"notice"``. Return the
#: answer, or None to decline.
Credentials = Callable[[str, str], Any]


# --- exceptions --------------------------------------------------------------


class Error(Exception):
    """A transfer failed. ``message`` says what, on which file or URL, and
    what to do; ``report`` is the transfer's :class:`Report` (files that
    did complete are in it) when there is one."""

    def __init__(self, message: str, report: Optional["Report"] = None) -> None:
        super().__init__(message)
        self.message = message
        self.report = report


class UsageError(Error, ValueError):
    """A bad URL, option or combination (``ferry cp`` exit code 2)."""


class AuthError(Error):
    """The server refused the login: no key or password it accepts, or
    credentials over HTTP(S)/FTP refused (exit code 3)."""


class HostKeyError(Error):
    """The server's identity could not be trusted: an unknown or changed
    SSH host key, or a TLS certificate that is not trusted or pinned
    (exit code 3)."""


class RemoteError(Error):
    """The server refused an operation on a file: ``path`` names it (when
    the message does), the message is the server's (exit code 4)."""

    def __init__(
        self,
        message: str,
        report: Optional["Report"] = None,
        path: Optional[str] = None,
    ) -> None:
        super().__init__(message, report)
        self.path = path


class LocalIOError(Error):
    """Reading or writing a local file failed (exit code 5)."""


class NetworkError(Error):
    """A connection failed, was lost or broke the protocol (exit code 1)."""


class Cancelled(Error):
    """The transfer was cancelled (``Transfer.cancel``, or a progress
    callable that returned False). Nothing incomplete was put under a
    final name; part files are kept for ``resume=True``."""


_CLASSES = {
    "usage": UsageError,
    "auth": AuthError,
    "host_key": HostKeyError,
    "remote": RemoteError,
    "local_io": LocalIOError,
    "network": NetworkError,
    "cancelled": Cancelled,
}


def _error(t: Tuple[str, str, Optional[str]], report: Optional["Report"] = None) -> Error:
    cls, message, path = t
    exc_cls = _CLASSES.get(cls, Error)
    if exc_cls is RemoteError:
        return RemoteError(message, report, path)
    return exc_cls(message, report)


# --- reports and events ------------------------------------------------------


@dataclass(frozen=True)
class FileResult:
    """How one file went: ``error`` is None when it is complete under its
    final name."""

    source: str
    dest: str
    bytes: int
    error: Optional[Error] = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Report:
    """What a finished transfer did. ``files`` has one entry per file
    planned (a source not found among several is one, with its error)."""

    files: List[FileResult]
    files_copied: int
    bytes: int
    seconds: float
    protocol: str
    streams: int
    chunk: int
    cipher: Optional[str]
    error: Optional[Error] = field(default=None, repr=False)


def _file(d: dict) -> FileResult:
    err = d["error"]
    return FileResult(d["source"], d["dest"], d["bytes"], _error(err) if err else None)


def _report(d: dict) -> Report:
    r = Report(
        files=[_file(f) for f in d["files"]],
        files_copied=d["files_copied"],
        bytes=d["bytes"],
        seconds=d["seconds"],
        protocol=d["protocol"],
        streams=d["streams"],
        chunk=d["chunk"],
        cipher=d["cipher"],
    )
    if d["error"]:
        object.__setattr__(r, "error", _error(d["error"], r))
    return r


@dataclass(frozen=True)
class Planned:
    """The plan is made: this many files and bytes will move."""

    files: int
    bytes: int


@dataclass(frozen=True)
class FileStarted:
    source: str
    dest: str
    size: Optional[int]


@dataclass(frozen=True)
class Progress:
    """At most ten a second, and once at the end."""

    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int


@dataclass(frozen=True)
class FileDone:
    """One file is finished, well or not."""

    file: FileResult


@dataclass(frozen=True)
class WarningEvent:
    """Something to know that did not stop the transfer."""

    message: str


Event = Union[Planned, FileStarted, Progress, FileDone, WarningEvent]


def _event(kind: str, d: dict) -> Event:
    if kind == "progress":
        return Progress(**d)
    if kind == "file_done":
        return FileDone(_file(d["file"]))
    if kind == "file_started":
        return FileStarted(**d)
    if kind == "planned":
        return Planned(**d)
    return WarningEvent(d.get("message", ""))


# --- options -----------------------------------------------------------------


def option_names() -> List[str]:
    """The option names ``copy`` and ``Transfer`` accept (``ferry cp``'s
    long flags; ``-`` may be written ``_``)."""
    return list(_ferry.option_names())


# Options naming local files: `~` is expanded here, as a shell would for
# `ferry cp -i ~/.ssh/key`.
_PATH_OPTIONS = {"identity", "identity_file", "ssh_config", "cacert"}


def _text(v: Any, name: str = "") -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if name in _PATH_OPTIONS:
        return os.path.expanduser(str(v))
    return str(v)


def _pairs(options: dict) -> List[Tuple[str, str]]:
    """``name=value`` keywords as ``(name, text)``; a list or tuple value
    gives the option once per item (``identity``, ``option``, ``pin``,
    ``resolve``), None leaves the default."""
    out: List[Tuple[str, str]] = []
    for k, v in options.items():
        if v is None:
            continue
        name = k  # ferry-engine's table takes `_` for `-` (http1_1 too)
        if isinstance(v, (list, tuple)):
            out.extend((name, _text(x, name)) for x in v)
        else:
            out.append((name, _text(v, name)))
    return out


def _sources(src: Sources) -> List[str]:
    if isinstance(src, (str, os.PathLike)):
        return [os.fspath(src)]
    return [os.fspath(s) for s in src]


# --- transfers ---------------------------------------------------------------


class Transfer:
    """A transfer that runs in the background once started.

    Iterate it (``for ev in t`` blocking, or ``async for ev in t``) to get
    its events; ``cancel()`` stops it from any thread; ``result()`` (or
    ``await t.wait()``) gives the :class:`Report` or raises the
    :class:`Error`. Starts on the first of these calls, or ``start()``.
    """

    def __init__(
        self,
        src: Sources,
        dst: PathLike,
        *,
        recursive: bool = False,
        resume: bool = False,
        parallel: Optional[int] = None,
        streams: Optional[int] = None,
        credentials: Optional[Credentials] = None,
        **options: Any,
    ) -> None:
        self._sources = _sources(src)
        self._dest = os.fspath(dst)
        opts = dict(recursive=recursive, resume=resume, parallel=parallel, streams=streams)
        opts.update(options)
        self._options = _pairs(opts)
        self._credentials = credentials
        self._native: Optional[_ferry.NativeTransfer] = None
        self._lock = threading.Lock()
        self._cancelled = False

    def start(self) -> "Transfer":
        """Start copying (once); returns self."""
        with self._lock:
            if self._native is None:
                try:
                    self._native = _ferry.NativeTransfer(
                        self._sources, self._dest, self._options, self._credentials
                    )
                except ValueError as e:
                    raise UsageError(str(e)) from None
        return self

    def _started(self) -> "_ferry.NativeTransfer":
        self.start()
        assert self._native is not None
        return self._native

    def cancel(self) -> None:
        """Stop promptly (from any thread). Nothing incomplete appears
        under a final name; the transfer then raises :class:`Cancelled`."""
        self._cancelled = True
        if self._native is not None:
            self._native.cancel()

    @property
    def done(self) -> bool:
        return self._native is not None and self._native.report() is not None

    def _next(self, timeout: Optional[float]) -> Optional[Event]:
        """The next event, or None at the end. Raises TimeoutError."""
        kind, d = self._started().next_event(timeout)
        if kind == "end":
            return None
        if kind == "timeout":
            raise TimeoutError
        return _event(kind, d)

    def __iter__(self) -> Iterator[Event]:
        while True:
            try:
                # A short wait so that Ctrl-C (KeyboardInterrupt) is seen.
                ev = self._next(0.25)
            except TimeoutError:
                continue
            if ev is None:
                return
            yield ev

    def report(self) -> Optional[Report]:
        """The report once the transfer is over, else None; never raises
        the transfer's error (it is in ``Report.error``)."""
        d = self._native.report() if self._native is not None else None
        return _report(d) if d is not None else None

    def result(self) -> Report:
        """Wait for the end (reading any events left) and return the
        :class:`Report`, or raise its :class:`Error`."""
        for _ in self:
            pass
        r = self.report()
        assert r is not None
        if r.error is not None:
            raise r.error
        return r

    # asyncio: one thread per transfer pumps events into the loop, so the
    # loop never blocks and no executor thread is held.

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._aevents()

    async def _aevents(self) -> AsyncIterator[Event]:
        import asyncio

        native = self._started()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def pump() -> None:
            while True:
                try:
                    ev = self._next(None)
                except BaseException as e:  # noqa: BLE001 - handed to the loop
                    loop.call_soon_threadsafe(queue.put_nowait, e)
                    return
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, ev)
                except RuntimeError:
                    # The loop closed; keep draining so the transfer ends.
                    native.cancel()
                if ev is None:
                    return

        threading.Thread(target=pump, name="ferry-events", daemon=True).start()
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item is None:
                    finished = True
                    return
                yield item
        finally:
            if not finished:
                # Left early (break, an exception, task cancellation): stop
                # the transfer and let the pump thread see its end.
                native.cancel()

    async def wait(self) -> Report:
        """Wait (asynchronously) for the end; return the :class:`Report` or
        raise its :class:`Error`. Cancelling the awaiting task cancels the
        transfer and waits for it to stop, so no file is left half-written
        under its final name."""
        import asyncio

        try:
            async for _ in self:
                pass
        except asyncio.CancelledError:
            self.cancel()
            await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, self._drain))
            raise
        r = self.report()
        assert r is not None
        if r.error is not None:
            raise r.error
        return r

    def _drain(self) -> None:
        for _ in self:
            pass


def _run_progress(t: Transfer, progress: Optional[Callable[[Event], Any]], ev: Event) -> None:
    if progress is not None and progress(ev) is False:
        t.cancel()


def copy(
    src: Sources,
    dst: PathLike,
    *,
    recursive: bool = False,
    resume: bool = False,
    parallel: Optional[int] = None,
    streams: Optional[int] = None,
    progress: Optional[Callable[[Event], Any]] = None,
    credentials: Optional[Credentials] = None,
    **options: Any,
) -> Report:
    """Copy ``src`` (a path or URL, or a list of them) to ``dst`` and
    return the :class:`Report`; raise an :class:`Error` subclass if the
    transfer failed.

    The GIL is released while bytes move, so other threads run, and any
    number of threads may copy at once. ``progress(event)`` is called on
    this thread for each :class:`Event`; returning False cancels
    (:class:`Cancelled` is raised), and an exception raised in it cancels
    the transfer, waits for it to stop, and propagates.
    """
    t = Transfer(
        src,
        dst,
        recursive=recursive,
        resume=resume,
        parallel=parallel,
        streams=streams,
        credentials=credentials,
        **options,
    )
    t.start()
    try:
        for ev in t:
            _run_progress(t, progress, ev)
    except BaseException:
        t.cancel()
        t._drain()
        raise
    return t.result()


async def copy_async(
    src: Sources,
    dst: PathLike,
    *,
    recursive: bool = False,
    resume: bool = False,
    parallel: Optional[int] = None,
    streams: Optional[int] = None,
    progress: Optional[Callable[[Event], Any]] = None,
    credentials: Optional[Credentials] = None,
    **options: Any,
) -> Report:
    """``copy`` for asyncio: the loop keeps running while bytes move.
    Cancelling the task cancels the transfer and waits for it to stop."""
    import asyncio

    t = Transfer(
        src,
        dst,
        recursive=recursive,
        resume=resume,
        parallel=parallel,
        streams=streams,
        credentials=credentials,
        **options,
    )
    try:
        async for ev in t:
            _run_progress(t, progress, ev)
    except BaseException:
        t.cancel()
        await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, t._drain))
        raise
    return t.result()
