//! Private, atomic file writes: directories 0700, files 0600, written to a
//! temporary sibling, synced, renamed into place, and the directory synced.
//!
//! Every hub-written file under the data directory goes through here so the
//! permission and durability rules live in one place.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Creates `dir` and any missing parents with mode 0700.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Writes `bytes` to `path` atomically with mode 0600: a temporary file in
/// the same directory, fsync, rename, then fsync of the directory.
pub fn write_private_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates `path` with mode 0600 only if it does not exist yet
/// (create-exclusive). Returns `Ok(false)` when it already existed.
pub fn write_private_new(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let mut file = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(err) => return Err(err),
    };
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(true)
}

/// Largest file [`read_private_file`] reads.
pub const MAX_READ_BYTES: u64 = 4 * 1024 * 1024;

/// Reads a hub-owned UTF-8 file without following a symbolic link in its
/// place, refusing anything but a regular file of at most
/// [`MAX_READ_BYTES`].
pub fn read_private_file(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > MAX_READ_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file of a readable size",
        ));
    }
    let mut text = String::new();
    file.take(MAX_READ_BYTES).read_to_string(&mut text)?;
    Ok(text)
}

/// Why [`read_regular_bounded`] read nothing.
#[derive(Debug)]
pub enum BoundedRead {
    NotFound,
    /// A symbolic link, directory, FIFO or anything but a regular file.
    NotRegular,
    /// Larger than the bound.
    TooLarge,
    NotUtf8,
    Io(io::Error),
}

/// Reads a UTF-8 file of at most `max` bytes that is a regular file in
/// its own name: a symbolic link in its place is never followed, and a
/// FIFO is not waited on.
pub fn read_regular_bounded(path: &Path, max: usize) -> Result<String, BoundedRead> {
    use std::io::Read;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Err(BoundedRead::NotFound),
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => return Err(BoundedRead::NotRegular),
        Err(err) => return Err(BoundedRead::Io(err)),
    };
    let meta = file.metadata().map_err(BoundedRead::Io)?;
    if !meta.is_file() {
        return Err(BoundedRead::NotRegular);
    }
    if meta.len() > max as u64 {
        return Err(BoundedRead::TooLarge);
    }
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(BoundedRead::Io)?;
    if bytes.len() > max {
        return Err(BoundedRead::TooLarge);
    }
    String::from_utf8(bytes).map_err(|_| BoundedRead::NotUtf8)
}
