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

/// The file a temporary sibling written by [`write_private_atomic`] was
/// for: `.<name>.<32 hex digits>.tmp` gives `name`. Pure.
pub fn temp_target(file_name: &str) -> Option<&str> {
    let inner = file_name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (name, tag) = inner.rsplit_once('.')?;
    let hex = tag.len() == 32 && tag.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && !name.is_empty()).then_some(name)
}

/// Removes the temporary siblings [`write_private_atomic`] left in `dir`
/// when the process died mid-write, for the targets `owned` accepts (the
/// files only this process writes there: another writer's temporary file
/// may be in use). Only regular files, never through a link. Returns how
/// many were removed; a missing `dir` is none.
pub fn sweep_temp(dir: &Path, owned: impl Fn(&str) -> bool) -> io::Result<usize> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(target) = name.to_str().and_then(temp_target) else {
            continue;
        };
        if owned(target) && entry.file_type()?.is_file() {
            fs::remove_file(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testkit::TempDir;

    #[test]
    fn a_temporary_sibling_names_its_target() {
        let tag = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            temp_target(&format!(".plan.json.{tag}.tmp")),
            Some("plan.json")
        );
        assert_eq!(temp_target(&format!(".a.{tag}.tmp")), Some("a"));
        for name in [
            format!("plan.json.{tag}.tmp"),
            format!(".plan.json.{tag}"),
            format!("..{tag}.tmp"),
            ".plan.json.0123.tmp".to_string(),
            format!(".plan.json.{}.tmp", "g".repeat(32)),
            ".tmp".to_string(),
        ] {
            assert_eq!(temp_target(&name), None, "{name}");
        }
    }

    #[test]
    fn only_owned_leftovers_are_swept() {
        let dir = TempDir::new("sweep");
        write_private_atomic(&dir.join("plan.json"), b"{}").unwrap();
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let mine = dir.join(format!(".plan.json.{tag}.tmp"));
        let theirs = dir.join(format!(".state.json.{tag}.tmp"));
        let linked = dir.join(format!(".config.yaml.{tag}.tmp"));
        fs::write(&mine, b"half").unwrap();
        fs::write(&theirs, b"half").unwrap();
        std::os::unix::fs::symlink(dir.join("plan.json"), &linked).unwrap();
        fs::create_dir(dir.join(format!(".source.json.{tag}.tmp"))).unwrap();
        let owned = |name: &str| name != "state.json";
        assert_eq!(sweep_temp(dir.path(), owned).unwrap(), 1);
        assert!(!mine.exists());
        assert!(theirs.exists() && linked.symlink_metadata().is_ok());
        assert!(dir.join("plan.json").is_file());
        assert_eq!(sweep_temp(&dir.join("gone"), owned).unwrap(), 0);
    }
}
