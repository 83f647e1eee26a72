//! Helpers shared by unit tests: a deterministic xorshift generator and
//! unique temporary directories.
//!
//! Compiled only for `cargo test`; nothing here is part of the binary.

use std::fs;
use std::path::{Path, PathBuf};

/// Deterministic xorshift64 generator (`x ^= x << 13; x ^= x >> 7;
/// x ^= x << 17`). The same seed always yields the same sequence, so a
/// failing property test reproduces exactly. A clone continues the same
/// sequence independently.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    /// Used in place of a zero seed, which xorshift would never leave.
    const ZERO_SEED: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A generator starting from `seed`; a zero seed is replaced by a fixed
    /// non-zero constant so the sequence does not stay at zero.
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 { Self::ZERO_SEED } else { seed })
    }

    /// The next value; also the generator's new state.
    #[allow(clippy::should_implement_trait)] // a generator, not an iterator
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `0..n`, or 0 when `n == 0`. Always advances the state by
    /// one step, whatever `n` is, and never panics.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// The low byte of the next value.
    pub fn byte(&mut self) -> u8 {
        self.next() as u8
    }

    /// A uniformly chosen element of `items` (one step, as
    /// `items[self.below(items.len())]`); panics if `items` is empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        assert!(!items.is_empty(), "Rng::pick from an empty slice");
        items[self.below(items.len())]
    }
}

/// A unique directory under the system temp dir
/// (`simplex-hub-unit-<tag>-<pid>-<uuid>`), created by [`TempDir::new`] and
/// removed, with everything in it, on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates the directory; panics if that fails.
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "simplex-hub-unit-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` inside the directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_zero_seed_moves() {
        let mut a = Rng::new(0x9E37_79B9_7F4A_7C15);
        let mut b = Rng::new(0x9E37_79B9_7F4A_7C15);
        for _ in 0..100 {
            assert_eq!(a.next(), b.next());
        }
        let mut z = Rng::new(0);
        assert_ne!(z.next(), 0);
        assert_eq!(z.below(0), 0);
        for n in 1..50 {
            assert!(z.below(n) < n);
        }
        let items = [1, 2, 3];
        assert!(items.contains(&z.pick(&items)));
        let _ = z.byte();
    }

    #[test]
    fn temp_dir_is_unique_and_removed_on_drop() {
        let a = TempDir::new("testkit");
        let b = TempDir::new("testkit");
        assert_ne!(a.path(), b.path());
        assert!(a.path().is_dir());
        fs::write(a.join("f"), "x").unwrap();
        let kept = a.path().to_path_buf();
        drop(a);
        assert!(!kept.exists());
    }
}
