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
