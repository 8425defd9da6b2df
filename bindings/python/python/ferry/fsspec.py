"""An fsspec filesystem over ferry: ``ferry+sftp://``, ``ferry+https://``,
``ferry+http://``, ``ferry+ftp://`` and ``ferry+ftps://`` URLs, registered
through the ``fsspec.specs`` entry point, so pandas, dask and pyarrow can
read through ferry::

    import fsspec
    fs = fsspec.filesystem("ferry+sftp", host="example.org", username="alice")
    fs.ls("/data")
    with fsspec.open("ferry+sftp://alice@example.org/data/x.csv") as f:
        head = f.read(100)

``get``/``put`` of whole files run ``ferry.copy`` (pipelined, parallel);
``ls``, ``info``, ``cat_file`` and ``open(mode="rb")`` (ranged reads) go
through one connection held by the filesystem object. ``open(mode="wb")``
spools what is written to a local temporary file and uploads it with
``ferry.copy`` when the file is closed, so the server sees the whole file
appear at once under its name (ferry's part file and rename) or not at
all: an exception inside ``with fs.open(p, "wb")`` uploads nothing.
Options are ``ferry.copy``'s (``identity=``, ``option=[...]``, ``pin=``,
``cacert=``, ``token=``...).
"""

from __future__ import annotations

import os
import tempfile
import threading
from typing import Any, Dict, List, Optional, Union
from urllib.parse import urlsplit

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from . import Credentials, Error, RemoteError, _error, _ferry, _pairs, copy

_SCHEMES = ("sftp", "https", "http", "ftp", "ftps")


def _raise(e: "_ferry.FsError") -> Error:
    cls, message, path = e.args
    err = _error((cls, message, path))
    if isinstance(err, RemoteError) and "no such file" in message.lower():
        # fsspec and its users test for FileNotFoundError.
        raise FileNotFoundError(path or message) from err
    raise err from None


class FerryFileSystem(AbstractFileSystem):
    """One server, reached over ``scheme`` (sftp, https, http, ftp, ftps;
    the subclasses below fix it, one per registered protocol)."""

    protocol = tuple(f"ferry+{s}" for s in _SCHEMES)
    root_marker = "/"
    default_scheme = "sftp"

    def __init__(
        self,
        host: str,
        port: Optional[int] = None,
        username: Optional[str] = None,
        scheme: Optional[str] = None,
        credentials: Optional[Credentials] = None,
        **options: Any,
    ) -> None:
        fs_keys = {"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths"}
        super().__init__(**{k: v for k, v in options.items() if k in fs_keys})
        scheme = scheme or self.default_scheme
        if scheme not in _SCHEMES:
            raise ValueError(f"ferry+{scheme}: the schemes are {', '.join(_SCHEMES)}")
        self.scheme = scheme
        self.host = host
        self.port = port
        self.username = username
        self._credentials = credentials
        self._options = {k: v for k, v in options.items() if k not in fs_keys}
        self._native: Optional[_ferry.NativeFs] = None
        self._lock = threading.Lock()

    # --- URLs --------------------------------------------------------------

    @property
    def base(self) -> str:
        """``scheme://[user@]host[:port]``, what paths are appended to."""
        user = f"{self.username}@" if self.username else ""
        port = f":{self.port}" if self.port else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{user}{host}{port}"

    def url(self, path: str) -> str:
        return self.base + "/" + self._strip_protocol(path).lstrip("/")

    @classmethod
    def _strip_protocol(cls, path: Union[str, List[str]]) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        if "://" in path:
            path = urlsplit(path).path or "/"
        return "/" + path.lstrip("/") if path != "/" else "/"

    @staticmethod
    def _get_kwargs_from_urls(urlpath: str) -> Dict[str, Any]:
        u = urlsplit(urlpath)
        out: Dict[str, Any] = {"host": u.hostname or ""}
        if "+" in u.scheme:
            out["scheme"] = u.scheme.split("+", 1)[1]
        if u.port:
            out["port"] = u.port
        if u.username:
            out["username"] = u.username
        return out

    # --- the connection ----------------------------------------------------

    def _fs(self) -> "_ferry.NativeFs":
        with self._lock:
            if self._native is None:
                try:
                    self._native = _ferry.NativeFs(self.base + "/", _pairs(self._options), self._credentials)
                except _ferry.FsError as e:
                    _raise(e)
                except ValueError as e:
                    from . import UsageError

                    raise UsageError(str(e)) from None
            return self._native

    def _remote(self, path: str) -> str:
        """The server's path for fsspec's ``path``. FTP URLs name paths
        relative to the login directory (as ``ferry cp`` and curl read
        them), and so do this filesystem's paths; the connection speaks
        the server's absolute paths, so FTP paths are put under the login
        directory the server reported. SFTP and HTTP paths are absolute."""
        if self.scheme in ("ftp", "ftps"):
            return self._fs().root.rstrip("/") + path
        return path

    def _entry(self, path: str, t: tuple) -> Dict[str, Any]:
        _, kind, size, mtime, mode = t
        return {
            "name": path,
            "size": size if size is not None else 0,
            "type": kind,
            "mtime": mtime,
            "mode": mode,
        }

    # --- the fsspec interface ----------------------------------------------

    def info(self, path: str, **kwargs: Any) -> Dict[str, Any]:
        p = self._strip_protocol(path)
        try:
            t = self._fs().stat(self._remote(p))
        except _ferry.FsError as e:
            _raise(e)
        if t is None:
            raise FileNotFoundError(self.url(p))
        return self._entry(p, t)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> List[Any]:
        p = self._strip_protocol(path)
        info = self.info(p)
        if info["type"] != "directory":
            return [info] if detail else [p]
        try:
            entries = self._fs().list(self._remote(p))
        except _ferry.FsError as e:
            _raise(e)
        base = p.rstrip("/")
        out = [self._entry(f"{base}/{t[0]}", t) for t in entries]
        out.sort(key=lambda e: e["name"])
        return out if detail else [e["name"] for e in out]

    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None, **kwargs: Any) -> bytes:
        p = self._strip_protocol(path)
        size = None
        if (start is not None and start < 0) or (end is not None and end < 0):
            size = self.info(p)["size"]
        s = start or 0
        if s < 0:
            s = max(size + s, 0)
        e = end
        if e is not None and e < 0:
            e = max(size + e, 0)
        length = None if e is None else max(e - s, 0)
        if length == 0:
            return b""
        try:
            return self._fs().read(self._remote(p), s, length)
        except _ferry.FsError as err:
            _raise(err)
        raise AssertionError("unreachable")

    def get_file(self, rpath: str, lpath: str, callback: Any = None, outfile: Any = None, **kwargs: Any) -> None:
        if os.path.isdir(lpath):
            lpath = os.path.join(lpath, os.path.basename(self._strip_protocol(rpath)))
        copy(self.url(rpath), lpath, credentials=self._credentials, **self._options)

    def put_file(self, lpath: str, rpath: str, callback: Any = None, mode: str = "overwrite", **kwargs: Any) -> None:
        if os.path.isdir(lpath):
            self.makedirs(rpath, exist_ok=True)
            return
        copy(lpath, self.url(rpath), credentials=self._credentials, **self._options)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        # ferry creates the directories a copy needs; a lone mkdir is not
        # in the backend contract the bindings see.
        if not exist_ok and self.exists(path):
            raise FileExistsError(path)

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, autocommit: bool = True,
              cache_options: Any = None, **kwargs: Any) -> Union["FerryFile", "FerryWriteFile"]:
        if mode == "wb":
            return FerryWriteFile(self, self._strip_protocol(path), mode=mode, block_size=block_size,
                                  autocommit=autocommit, **kwargs)
        if mode != "rb":
            raise NotImplementedError(f"ferry+ filesystems open files with mode 'rb' or 'wb', not {mode!r}")
        return FerryFile(self, self._strip_protocol(path), mode=mode, block_size=block_size,
                         cache_options=cache_options, **kwargs)

    def close(self) -> None:
        """Close the connection (a later call opens a new one)."""
        with self._lock:
            if self._native is not None:
                self._native.close()
                self._native = None


class FerryFile(AbstractBufferedFile):
    """A file read in ranges (fsspec's read-ahead cache over ``cat_file``)."""

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.fs.cat_file(self.path, start, end)


class FerryWriteFile(AbstractBufferedFile):
    """A file opened with ``"wb"``: fsspec's buffer is spooled in blocks to
    a local temporary file (memory stays at one block), and closing the
    file uploads the spool with ``ferry.copy``, which writes
    ``.NAME.ferry-part`` on the server and renames it over NAME once every
    byte is there. Leaving the ``with`` block by an exception discards the
    spool instead, so no final file appears. With ``autocommit=False``
    (``fs.transaction``) the upload waits for the transaction's commit."""

    _spool: Optional[Any] = None

    def _initiate_upload(self) -> None:
        self._spool = tempfile.NamedTemporaryFile(prefix="ferry-spool-", suffix=".part", delete=False)

    def _upload_chunk(self, final: bool = False) -> bool:
        assert self._spool is not None
        self._spool.write(self.buffer.getbuffer())
        if final and self.autocommit:
            self.commit()
        return True

    def commit(self) -> None:
        """Upload the spool to the file's path (and remove the spool)."""
        spool, self._spool = self._spool, None
        if spool is None:
            return
        try:
            spool.close()
            copy(spool.name, self.fs.url(self.path), credentials=self.fs._credentials, **self.fs._options)
        finally:
            os.unlink(spool.name)

    def discard(self) -> None:
        """Drop what was written; nothing is uploaded."""
        spool, self._spool = self._spool, None
        if spool is not None:
            spool.close()
            os.unlink(spool.name)

    def __exit__(self, exc_type: Any, *args: Any) -> None:
        if exc_type is None:
            self.close()
            return
        # An exception inside `with`: upload nothing (fsspec's default
        # would close, that is upload, the half-written file).
        self.discard()
        self.closed = True


class FerrySFTPFileSystem(FerryFileSystem):
    protocol = ("ferry+sftp",)
    default_scheme = "sftp"


class FerryHTTPSFileSystem(FerryFileSystem):
    protocol = ("ferry+https",)
    default_scheme = "https"


class FerryHTTPFileSystem(FerryFileSystem):
    protocol = ("ferry+http",)
    default_scheme = "http"


class FerryFTPFileSystem(FerryFileSystem):
    protocol = ("ferry+ftp",)
    default_scheme = "ftp"


class FerryFTPSFileSystem(FerryFileSystem):
    protocol = ("ferry+ftps",)
    default_scheme = "ftps"
