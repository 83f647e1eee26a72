//! Storage fault injection (as root: mounts; otherwise permission bits),
//! undone when the test ends.

use std::path::Path;

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `cmd` with `args` (stderr discarded); whether it succeeded.
pub fn run(cmd: &str, args: &[&str]) -> bool {
    std::process::Command::new(cmd)
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Undoes a mount or a permission change when the test ends, even on a
/// failed assertion (declared after the TempDir, so dropped before it).
pub struct Undo(pub Vec<Box<dyn FnMut()>>);

impl Undo {
    pub fn run(&mut self) {
        while let Some(mut undo) = self.0.pop() {
            undo();
        }
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        self.run();
    }
}

/// Makes `dir` read-only: a read-only bind mount as root (root ignores
/// permission bits), mode 0500 otherwise. False when this machine cannot
/// (root without the right to mount).
pub fn make_read_only(dir: &Path, undo: &mut Undo) -> bool {
    let path = dir.to_str().unwrap().to_string();
    if is_root() {
        if !run("mount", &["--bind", &path, &path]) {
            return false;
        }
        let unmount = path.clone();
        undo.0.push(Box::new(move || {
            run("umount", &[&unmount]);
        }));
        run("mount", &["-o", "remount,bind,ro", &path, &path])
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        let back = dir.to_path_buf();
        undo.0.push(Box::new(move || {
            let _ = std::fs::set_permissions(&back, std::fs::Permissions::from_mode(0o700));
        }));
        true
    }
}

/// Mounts a tmpfs of `size` (`mount`'s spelling: `1m`, `8m`) on `dir`,
/// unmounted when `undo` runs. False when this machine cannot (not root,
/// or root without the right to mount).
pub fn mount_tmpfs(dir: &Path, size: &str, undo: &mut Undo) -> bool {
    if !is_root() {
        return false;
    }
    let path = dir.to_str().unwrap().to_string();
    let options = format!("size={size},mode=0700");
    if !run("mount", &["-t", "tmpfs", "-o", &options, "tmpfs", &path]) {
        return false;
    }
    undo.0.push(Box::new(move || {
        run("umount", &["-l", &path]);
    }));
    true
}

/// Fills the file system holding `path` by writing `path` until the
/// disk refuses (`ENOSPC`); returns the bytes written. Removing the file
/// gives the room back.
pub fn fill_disk(path: &Path) -> u64 {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5a_u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(err) if err.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(err) => panic!("filling {}: {err}", path.display()),
        }
    }
    // Whatever a partial page left, one byte at a time.
    while file.write(&[0x5a]).is_ok_and(|n| n == 1) {
        written += 1;
    }
    written
}
