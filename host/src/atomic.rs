//! Replacing a file atomically: whoever reads it, and whenever the writer stops, sees the
//! old bytes or the new ones, never a mix — and nothing but a regular file is replaced.
//!
//! # Rules
//!
//! - **Only a regular file is replaced.** The destination must be absent or a regular file.
//!   A directory, a FIFO, a socket or a device is refused (renaming over `/dev/null` as
//!   root would replace the device with a file). A **symbolic link is refused, not
//!   followed**: following it would write wherever it points, and renaming over it would
//!   silently turn the link into a file; name the target instead. The destination is
//!   looked at (without following links) before anything is written and again just before
//!   the rename.
//! - **The directory is checked first.** [`check_destination`] says before a job starts
//!   whether a save could succeed: the directory exists, is a directory, and a file can be
//!   created in it (by creating and removing a temporary, the only test that is not fooled
//!   by permissions, read-only mounts or ACLs); the destination passes the rule above.
//! - **Temporaries are recognizable and never outlive a save.** The bytes go to
//!   `.NAME.tmp-PID-N` beside the destination (`NAME` the destination's file name, `PID`
//!   this process, `N` a per-process counter), created exclusively (`O_EXCL`: never through
//!   a link planted under that name), flushed to disk, then renamed over the destination,
//!   and the directory is flushed. A guard removes the temporary on every way out of a save
//!   — an error, a panic — and a process-wide list holds the temporaries being written, so
//!   that a signal handler that exits without unwinding can remove them
//!   ([`remove_pending`]).
//! - **Stale temporaries are swept.** A process killed outright (SIGKILL) runs no code; its
//!   temporary stays. Every save, and [`check_destination`], removes the temporaries of its
//!   destination whose `PID` is no running process on this machine (per `/proc`; where
//!   there is no `/proc`, nothing is swept). A running process's temporary is never
//!   touched. A directory shared by several machines could see another machine's
//!   temporary swept while it is written: that save then fails with an error and the
//!   previous file stays.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::input::irregular_kind;

/// Why a file could not be replaced.
#[derive(Debug, thiserror::Error)]
pub enum ReplaceError {
    /// The destination exists and is not a regular file.
    #[error(
        "{} is {kind}; only a regular file (or a new name) is replaced, and symbolic links are \
         not followed",
        .path.display()
    )]
    Destination {
        /// The destination.
        path: PathBuf,
        /// What it is ("a symbolic link", "a directory", "a character device", ...).
        kind: &'static str,
    },
    /// The destination's directory is missing, not a directory, or not writable.
    #[error(fmt = describe_directory)]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
        /// The system's reason, when it gave one.
        source: Option<std::io::Error>,
    },
    /// Writing, flushing or renaming failed.
    #[error("{}: {step}: {source}", .path.display())]
    Io {
        /// The file written (the temporary, or the destination for the rename).
        path: PathBuf,
        /// The step that failed.
        step: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

/// [`ReplaceError::Directory`]'s message: the system's reason, when it gave one, after the
/// problem.
fn describe_directory(
    dir: &Path,
    problem: &str,
    source: &Option<std::io::Error>,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    write!(f, "directory {}: {problem}", dir.display())?;
    match source {
        Some(e) => write!(f, " ({e})"),
        None => Ok(()),
    }
}

/// Temporaries being written by this process (see [`remove_pending`]).
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes every temporary this process is writing. For a signal handler about to exit
/// without unwinding (the guards then never run); a save under way fails at its rename.
pub fn remove_pending() {
    let pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    for path in pending.iter() {
        let _ = std::fs::remove_file(path);
    }
}

/// A temporary file that is removed when dropped, unless it was renamed.
struct Temporary {
    path: PathBuf,
    renamed: bool,
}

impl Temporary {
    fn create(path: PathBuf) -> Result<(Self, std::fs::File), ReplaceError> {
        // Listed before it exists: a signal between the two cannot miss it.
        PENDING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(path.clone());
        // Not ours until created: a file already under that name is left alone.
        let mut guard = Self {
            path,
            renamed: true,
        };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&guard.path)
            .map_err(|source| ReplaceError::Io {
                path: guard.path.clone(),
                step: "creating the temporary file",
                source,
            })?;
        guard.renamed = false;
        Ok((guard, file))
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = std::fs::remove_file(&self.path);
        }
        let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|p| p != &self.path);
    }
}

/// The destination's directory (`.` for a bare name) and file name.
fn split(path: &Path) -> (PathBuf, String) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (dir, name)
}

/// The prefix of every temporary of `name` made by process `pid`.
fn temp_prefix(name: &str, pid: u32) -> String {
    format!(".{name}.tmp-{pid}-")
}

/// A fresh temporary name beside `name` in `dir`: unique per process and per call, so two
/// saves to one path never share one.
fn temp_path(dir: &Path, name: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let call = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{}{call}", temp_prefix(name, std::process::id())))
}

/// `path` is absent or a regular file (not following a symbolic link).
fn check_replaceable(path: &Path) -> Result<(), ReplaceError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => match irregular_kind(&meta) {
            Some(kind) => Err(ReplaceError::Destination {
                path: path.to_owned(),
                kind,
            }),
            None => Ok(()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ReplaceError::Io {
            path: path.to_owned(),
            step: "looking at the destination",
            source,
        }),
    }
}

/// Removes the temporaries of `name` in `dir` left by processes that no longer run.
fn sweep_stale(dir: &Path, name: &str) {
    // Without /proc no process can be told dead: sweep nothing rather than guess.
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{name}.tmp-");
    for entry in entries.flatten() {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        let Some(pid) = file
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, n)| Some((pid.parse::<u32>().ok()?, n.parse::<u64>().ok()?)))
            .map(|(pid, _)| pid)
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Checks, before a job starts, that a save to `path` could succeed (see the module's
/// rules), and sweeps its stale temporaries.
pub fn check_destination(path: &Path) -> Result<(), ReplaceError> {
    let (dir, name) = split(path);
    if name.is_empty() {
        return Err(ReplaceError::Destination {
            path: path.to_owned(),
            kind: "a directory name (it has no file name)",
        });
    }
    let problem = |problem, source| ReplaceError::Directory {
        dir: dir.clone(),
        problem,
        source,
    };
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(problem("not a directory", None)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(problem("does not exist", None))
        }
        Err(e) => return Err(problem("cannot be looked at", Some(e))),
    }
    check_replaceable(path)?;
    sweep_stale(&dir, &name);
    let (probe, _file) = Temporary::create(temp_path(&dir, &name)).map_err(|e| match e {
        ReplaceError::Io { source, .. } => problem("a file cannot be created in it", Some(source)),
        other => other,
    })?;
    drop(probe);
    Ok(())
}

/// Writes `bytes` to a temporary file beside `path`, flushes it to disk, renames it over
/// `path` and flushes the directory: `path` holds the old bytes or the new, never a mix.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ReplaceError> {
    replace_with(path, |file| file.write_all(bytes))
}

/// Like [`write_atomically`], with `write` filling the temporary file (it may seek, and
/// write in several passes) before it is flushed and renamed over `path`.
pub fn replace_with(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), ReplaceError> {
    let (dir, name) = split(path);
    check_replaceable(path)?;
    sweep_stale(&dir, &name);
    let (mut temp, mut file) = Temporary::create(temp_path(&dir, &name))?;
    let io = |step, path: &Path| {
        let path = path.to_owned();
        move |source| ReplaceError::Io { path, step, source }
    };
    write(&mut file).map_err(io("writing", &temp.path))?;
    file.sync_all()
        .map_err(io("flushing to disk", &temp.path))?;
    drop(file);
    // Again: the destination may have been replaced while the bytes were written.
    check_replaceable(path)?;
    std::fs::rename(&temp.path, path).map_err(io("renaming the temporary over it", path))?;
    temp.renamed = true;
    drop(temp);
    // The rename itself must reach the disk too.
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io("flushing the directory", &dir))
}
