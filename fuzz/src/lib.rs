//! Helpers shared by the fuzz targets: turning raw fuzzer bytes into
//! parameters, and a few walkers over `serde_json` values.
//!
//! Targets that parse text take the whole input as (lossily decoded) UTF-8,
//! so the committed seeds are plain frames and files. Targets that need
//! numbers read them from the front with [`Reader`], which never fails: an
//! exhausted input reads as zeros, so every byte string is a valid case.

use serde_json::Value;

/// A cursor over fuzzer bytes.
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// Up to `n` bytes.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// Everything not yet read.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    /// A size that is mostly small but reaches the edges: one selector
    /// byte picks a small value, a value near `around`, or an extreme.
    pub fn size(&mut self, around: usize) -> usize {
        match self.u8() % 8 {
            0 => 0,
            1 => usize::MAX - usize::from(self.u8()),
            2 | 3 => around
                .saturating_sub(512)
                .saturating_add(usize::from(self.u16() % 1024)),
            4 => self.u32() as usize,
            _ => usize::from(self.u16()),
        }
    }
}

/// The input as text, the way a WebSocket text frame or a file read with
/// replacement would present it.
pub fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// Calls `f` on `value` and every value nested in it (iteratively, so deep
/// inputs cannot overflow the stack).
pub fn walk(value: &Value, mut f: impl FnMut(&Value)) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        f(v);
        match v {
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
}

/// Whether any object in `value` has the member `key`.
pub fn has_key(value: &Value, key: &str) -> bool {
    let mut found = false;
    walk(value, |v| {
        if let Value::Object(map) = v {
            found |= map.contains_key(key);
        }
    });
    found
}

/// `serde_json::to_string`, which cannot fail for a `Value`.
pub fn encode(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
