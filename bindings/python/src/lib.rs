//! `ferry._ferry`, the native half of the `ferry` Python package: a
//! transfer started on a runtime shared by the process, whose events the
//! Python half (python/ferry/__init__.py) reads with the GIL released,
//! and a filesystem handle (stat, list, ranged reads) for the fsspec
//! class. Everything Pythonic (exceptions, event classes, asyncio) lives
//! in the Python half; this file only moves data across, as plain tuples
//! and dicts, so the two halves meet at one small, typed surface
//! (python/ferry/_ferry.pyi).
//!
//! Threading (docs/internals/bindings.md): every transfer runs on one
//! tokio runtime made on first use; Python threads wait for events in
//! `next_event`, which releases the GIL, so any number of threads may
//! copy at once. Credential questions come from runtime threads and take
//! the GIL only for the callback.
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ferry_engine::backend::{Backend, EntryKind};
use ferry_engine::named::{remote_error_path, ErrorClass};
use ferry_engine::{
    Cancel, CopyOptions, ErrorKind, Event, FileReport, Location, Prompt, PromptHandle, Report,
    Transfer, TransferError,
};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

/// The engine allocates and frees many buffers of 32 KiB - 1 MiB a
/// second; mimalloc is what `ferry cp` measured best with
/// (crates/ferry/src/main.rs). Only Rust's allocations use it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One runtime for the process, made on first use: two workers, as
/// `ferry_engine::run_blocking` makes for `ferry cp`.
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ferry-rt")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| PyRuntimeError::new_err(format!("ferry: cannot start a runtime: {e}")))
}

/// Options from `(name, text)` pairs (the Python half turns keyword
/// arguments into these), and the credentials callable as the Prompt.
fn options(pairs: Vec<(String, String)>, credentials: Option<Py<PyAny>>) -> PyResult<CopyOptions> {
    let mut o = CopyOptions::default();
    // S3 as the AWS CLI finds it: the engine reads no environment, so the
    // binding hands it the AWS_* variables and $HOME (for ~/.aws) as they
    // are now, and lets requests go unsigned when they hold no
    // credentials, as `ferry cp` does (`s3_anonymous=False` forbids it).
    o.s3.aws_config = Some(ferry_engine::s3::AwsConfig::from_vars(
        std::env::vars_os(),
        std::env::var_os("HOME").map(Into::into),
    ));
    o.s3.anonymous = true;
    for (k, v) in pairs {
        o.set(&k, &v).map_err(PyValueError::new_err)?;
    }
    // Keys given by name (s3_access_key_id...) come before the AWS_*
    // variables; half a pair is refused here.
    o.check_named().map_err(PyValueError::new_err)?;
    if let Some(cb) = credentials {
        o.connect.prompt = PromptHandle::new(Arc::new(PyPrompt { cb }));
        // The callable is there to be asked: passwords, passphrases and
        // unknown host keys (StrictHostKeyChecking ask) go to it.
        o.connect.interactive = true;
    }
    Ok(o)
}

/// The credentials callable, asked as `cb(kind, subject)`: `"password"`
/// with `user@host`, `"passphrase"` with the key's path, `"hostkey"` with
/// the question (a true answer accepts), `"notice"` with a message.
struct PyPrompt {
    cb: Py<PyAny>,
}

impl PyPrompt {
    fn ask(&self, kind: &str, subject: &str) -> Option<Py<PyAny>> {
        Python::with_gil(|py| match self.cb.call1(py, (kind, subject)) {
            Ok(v) if v.is_none(py) => None,
            Ok(v) => Some(v),
            Err(e) => {
                // An exception in the callable is an answer of "no"; it is
                // shown the way Python shows errors it cannot raise.
                e.write_unraisable(py, Some(self.cb.bind(py)));
                None
            }
        })
    }
    fn text(&self, kind: &str, subject: &str) -> Option<String> {
        let v = self.ask(kind, subject)?;
        Python::with_gil(|py| v.extract::<String>(py).ok())
    }
}

impl Prompt for PyPrompt {
    fn password(&self, who: &str, _ask: bool) -> Option<String> {
        self.text("password", who)
    }
    fn passphrase(&self, key: &Path, _ask: bool) -> Option<String> {
        self.text("passphrase", &key.display().to_string())
    }
    fn confirm(&self, question: &str) -> bool {
        self.ask("hostkey", question)
            .is_some_and(|v| Python::with_gil(|py| v.bind(py).is_truthy().unwrap_or(false)))
    }
    fn notice(&self, message: &str) {
        let _ = self.ask("notice", message);
    }
}

/// What the pump task sends to the Python side.
enum Msg {
    Event(Event),
    Done(Report),
}

/// A started transfer: its events and, at the end, its report.
#[pyclass(module = "ferry._ferry")]
struct NativeTransfer {
    rx: Mutex<mpsc::Receiver<Msg>>,
    cancel: Cancel,
    /// The report once `Done` was read. Set while the reader still holds
    /// `rx`, so a second reader (copy's drain and an asyncio pump may both
    /// read) that then finds the channel closed always sees it.
    ended: Mutex<Option<Report>>,
}

/// What one read of the channel gave.
enum Got {
    Event(Event),
    Timeout,
    End,
}

#[pymethods]
impl NativeTransfer {
    /// Start copying `sources` to `dest` at once; returns immediately.
    #[new]
    #[pyo3(signature = (sources, dest, options, credentials=None))]
    fn new(
        sources: Vec<String>,
        dest: String,
        options: Vec<(String, String)>,
        credentials: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        if sources.is_empty() {
            return Err(PyValueError::new_err("no source given"));
        }
        let mut srcs = Vec::with_capacity(sources.len());
        for s in &sources {
            srcs.push(Location::parse(s).map_err(PyValueError::new_err)?);
        }
        let dst = Location::parse(&dest).map_err(PyValueError::new_err)?;
        let opts = self::options(options, credentials)?;
        let rt = runtime()?;
        let (tx, rx) = mpsc::channel();
        // Started inside the runtime's context so the canceller exists
        // before this returns (a cancel can never be lost).
        let mut handle = {
            let _entered = rt.enter();
            Transfer::new(srcs, dst, opts).start()
        };
        let cancel = handle.canceller();
        rt.spawn(async move {
            while let Some(ev) = handle.next_event().await {
                if tx.send(Msg::Event(ev)).is_err() {
                    // Nobody reads any more (the object was dropped):
                    // stop the transfer rather than run unwatched.
                    handle.cancel();
                }
            }
            let report = handle.wait().await;
            let _ = tx.send(Msg::Done(report));
        });
        Ok(NativeTransfer {
            rx: Mutex::new(rx),
            cancel,
            ended: Mutex::new(None),
        })
    }

    /// The next event as `(kind, fields)`, `("timeout", None)` when none
    /// came within `timeout` seconds (`None`: wait as long as it takes),
    /// or `("end", None)` once the transfer is over (its report is then
    /// in `report()`). The GIL is released while waiting.
    #[pyo3(signature = (timeout=None))]
    fn next_event(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<(String, PyObject)> {
        let got = py.allow_threads(|| {
            let rx = self.rx.lock().map_err(|_| "poisoned")?;
            let mut ended = self.ended.lock().map_err(|_| "poisoned")?;
            if ended.is_some() {
                return Ok(Got::End);
            }
            // Not holding `ended` while waiting: report() may be called.
            drop(ended);
            let msg = match timeout {
                None => rx.recv().map_err(|_| "closed")?,
                Some(t) => match rx.recv_timeout(Duration::from_secs_f64(t.max(0.0))) {
                    Ok(m) => m,
                    Err(mpsc::RecvTimeoutError::Timeout) => return Ok(Got::Timeout),
                    Err(mpsc::RecvTimeoutError::Disconnected) => return Err("closed"),
                },
            };
            match msg {
                Msg::Event(ev) => Ok(Got::Event(ev)),
                Msg::Done(r) => {
                    ended = self.ended.lock().map_err(|_| "poisoned")?;
                    *ended = Some(r);
                    Ok(Got::End)
                }
            }
        });
        match got {
            Ok(Got::Timeout) => Ok(("timeout".into(), py.None())),
            Ok(Got::Event(ev)) => event(py, &ev),
            Ok(Got::End) => Ok(("end".into(), py.None())),
            Err(why) => Err(PyRuntimeError::new_err(format!(
                "ferry: the transfer's event channel is {why} (the runtime stopped?)"
            ))),
        }
    }

    /// Stop promptly; nothing incomplete appears under a final name.
    fn cancel(&self) {
        self.cancel.cancel()
    }

    /// The report (a dict) once `next_event` returned `"end"`, else `None`.
    fn report(&self, py: Python<'_>) -> PyResult<Option<Py<PyDict>>> {
        let ended = self
            .ended
            .lock()
            .map_err(|_| PyRuntimeError::new_err("ferry: internal lock poisoned"))?;
        match ended.as_ref() {
            Some(r) => Ok(Some(report(py, r)?.unbind())),
            None => Ok(None),
        }
    }
}

fn event(py: Python<'_>, ev: &Event) -> PyResult<(String, PyObject)> {
    let d = PyDict::new(py);
    let kind = match ev {
        Event::Planned { files, bytes } => {
            d.set_item("files", files)?;
            d.set_item("bytes", bytes)?;
            "planned"
        }
        Event::FileStarted { source, dest, size } => {
            d.set_item("source", source)?;
            d.set_item("dest", dest)?;
            d.set_item("size", size)?;
            "file_started"
        }
        Event::Progress {
            bytes_done,
            bytes_total,
            files_done,
            files_total,
        } => {
            d.set_item("bytes_done", bytes_done)?;
            d.set_item("bytes_total", bytes_total)?;
            d.set_item("files_done", files_done)?;
            d.set_item("files_total", files_total)?;
            "progress"
        }
        Event::FileDone(f) => {
            d.set_item("file", file(py, f)?)?;
            "file_done"
        }
        Event::Warning(m) => {
            d.set_item("message", m)?;
            "warning"
        }
        Event::Compared { path, verdict } => {
            d.set_item("path", path)?;
            d.set_item("verdict", format!("{verdict:?}"))?;
            "compared"
        }
        Event::Deleted { path, dry_run } => {
            d.set_item("path", path)?;
            d.set_item("dry_run", dry_run)?;
            "deleted"
        }
        // Kinds added to the engine later reach Python by name only.
        _ => "other",
    };
    Ok((kind.to_string(), d.into_any().unbind()))
}

/// `(class, message, path)` of an error, or `None`.
fn error_tuple<'py>(
    py: Python<'py>,
    kind: ErrorKind,
    message: &str,
) -> PyResult<Bound<'py, PyTuple>> {
    let class = ErrorClass::of(kind, message);
    let path = match class {
        ErrorClass::Remote => remote_error_path(message),
        _ => None,
    };
    PyTuple::new(
        py,
        [
            class.name().into_pyobject(py)?.into_any(),
            message.into_pyobject(py)?.into_any(),
            path.into_pyobject(py)?.into_any(),
        ],
    )
}

fn file<'py>(py: Python<'py>, f: &FileReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("source", &f.source)?;
    d.set_item("dest", &f.dest)?;
    d.set_item("bytes", f.bytes)?;
    match &f.error {
        Some(e) => d.set_item("error", error_tuple(py, e.kind, &e.message)?)?,
        None => d.set_item("error", py.None())?,
    }
    Ok(d)
}

fn report<'py>(py: Python<'py>, r: &Report) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let files = PyList::empty(py);
    for f in &r.files {
        files.append(file(py, f)?)?;
    }
    d.set_item("files", files)?;
    d.set_item("files_copied", r.files_copied)?;
    d.set_item("bytes", r.bytes)?;
    d.set_item("seconds", r.seconds)?;
    d.set_item("protocol", &r.protocol)?;
    d.set_item("streams", r.streams)?;
    d.set_item("chunk", r.chunk)?;
    d.set_item("cipher", r.cipher.as_deref())?;
    match &r.error {
        Some(e) => d.set_item("error", error_tuple(py, e.kind(), &e.to_string())?)?,
        None => d.set_item("error", py.None())?,
    }
    Ok(d)
}

/// A connection to one server for the fsspec filesystem: stat, list and
/// ranged reads through the engine's backend (`backend::connect`).
#[pyclass(module = "ferry._ferry")]
struct NativeFs {
    backend: Arc<dyn Backend>,
    /// The path the URL named, resolved by the server (`~` expanded).
    root: Vec<u8>,
}

/// Errors of the filesystem calls: `OSError`-like tuples raised by the
/// Python half as the matching `ferry` exception.
fn fs_err(e: TransferError) -> PyErr {
    let msg = e.to_string();
    let class = ErrorClass::of(e.kind(), &msg);
    let path = match class {
        ErrorClass::Remote => remote_error_path(&msg),
        _ => None,
    };
    FsError::new_err((class.name(), msg, path))
}

pyo3::create_exception!(
    _ferry,
    FsError,
    pyo3::exceptions::PyException,
    "(class, message, path) of a failed filesystem call; ferry raises its own exceptions from it."
);

#[pymethods]
impl NativeFs {
    /// Connect to `url` (SSH handshake, TLS, FTP login) with the same
    /// options as a copy. Blocks with the GIL released.
    #[new]
    #[pyo3(signature = (url, options, credentials=None))]
    fn new(
        py: Python<'_>,
        url: String,
        options: Vec<(String, String)>,
        credentials: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let loc = Location::parse(&url).map_err(PyValueError::new_err)?;
        let opts = self::options(options, credentials)?;
        let rt = runtime()?;
        let opened = py
            .allow_threads(|| rt.block_on(ferry_engine::backend::connect(&loc, &opts)))
            .map_err(fs_err)?;
        Ok(NativeFs {
            backend: opened.backend,
            root: opened.path,
        })
    }

    /// The path the URL named, as the server resolved it.
    #[getter]
    fn root(&self) -> String {
        String::from_utf8_lossy(&self.root).into_owned()
    }

    /// `user@host:port` or URL form of `path`, for messages.
    fn display(&self, path: &str) -> String {
        self.backend.display(path.as_bytes())
    }

    /// `(name, kind, size, mtime, mode)` of `path`, or `None`.
    fn stat(&self, py: Python<'_>, path: &str) -> PyResult<Option<PyObject>> {
        let rt = runtime()?;
        let b = self.backend.clone();
        let p = path.as_bytes().to_vec();
        let e = py
            .allow_threads(|| rt.block_on(async move { b.stat(&p).await }))
            .map_err(fs_err)?;
        e.map(|e| entry(py, &e)).transpose()
    }

    /// The entries of directory `path`, as `stat` gives them.
    fn list(&self, py: Python<'_>, path: &str) -> PyResult<Vec<PyObject>> {
        let rt = runtime()?;
        let b = self.backend.clone();
        let p = path.as_bytes().to_vec();
        let es = py
            .allow_threads(|| rt.block_on(async move { b.list(&p).await }))
            .map_err(fs_err)?;
        es.iter().map(|e| entry(py, e)).collect()
    }

    /// `length` bytes of `path` from `offset` (`None`: to the end).
    #[pyo3(signature = (path, offset=0, length=None))]
    fn read(
        &self,
        py: Python<'_>,
        path: &str,
        offset: u64,
        length: Option<u64>,
    ) -> PyResult<Py<PyBytes>> {
        let rt = runtime()?;
        let b = self.backend.clone();
        let p = path.as_bytes().to_vec();
        let data = py
            .allow_threads(|| {
                rt.block_on(async move {
                    let mut s = b.read(&p, offset, length).await?;
                    let mut out = Vec::with_capacity(length.unwrap_or(0).min(64 << 20) as usize);
                    while let Some(chunk) = s.next().await? {
                        out.extend_from_slice(&chunk);
                    }
                    Ok::<_, TransferError>(out)
                })
            })
            .map_err(fs_err)?;
        Ok(PyBytes::new(py, &data).unbind())
    }

    /// Close the connection(s); later calls fail.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let rt = runtime()?;
        let b = self.backend.clone();
        py.allow_threads(|| rt.block_on(async move { b.close().await }));
        Ok(())
    }
}

fn entry(py: Python<'_>, e: &ferry_engine::backend::Entry) -> PyResult<PyObject> {
    let kind = match e.kind {
        EntryKind::File => "file",
        EntryKind::Dir => "directory",
        EntryKind::Other => "other",
    };
    let t = (
        String::from_utf8_lossy(&e.name).into_owned(),
        kind,
        e.size,
        e.mtime,
        e.mode,
    );
    Ok(t.into_pyobject(py)?.into_any().unbind())
}

/// The names `options` accepts (those of `ferry cp`'s flags).
#[pyfunction]
fn option_names() -> Vec<&'static str> {
    ferry_engine::named::OPTION_NAMES.to_vec()
}

#[pymodule]
fn _ferry(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeTransfer>()?;
    m.add_class::<NativeFs>()?;
    m.add_function(wrap_pyfunction!(option_names, m)?)?;
    m.add("FsError", m.py().get_type::<FsError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
