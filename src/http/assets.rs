//! The browser panel's static files. They are embedded in the binary from
//! `static/` (a fixed allow-list, so no filesystem path is ever built from a
//! URL), with an optional development override that serves a directory.
//!
//! A request path becomes an asset name by `wire::http::path::resolve_path`
//! (pure and fuzzed) before it is looked up here.

use std::path::{Path, PathBuf};

/// One embedded file: its name relative to `static/`, bytes and MIME type.
pub struct Asset {
    pub name: &'static str,
    pub bytes: &'static [u8],
    pub mime: &'static str,
}

macro_rules! asset {
    ($name:literal, $mime:literal) => {
        Asset {
            name: $name,
            bytes: include_bytes!(concat!("../../static/", $name)),
            mime: $mime,
        }
    };
}

/// Every file the panel consists of. A unit test checks that this list and
/// the `static/` directory agree, so a new file cannot be forgotten.
pub const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("state.js", "text/javascript; charset=utf-8"),
    asset!("messages.js", "text/javascript; charset=utf-8"),
    asset!("history.js", "text/javascript; charset=utf-8"),
    asset!("actions.js", "text/javascript; charset=utf-8"),
    asset!("render.js", "text/javascript; charset=utf-8"),
    asset!("dialogs.js", "text/javascript; charset=utf-8"),
    asset!("dom.js", "text/javascript; charset=utf-8"),
    asset!("net.js", "text/javascript; charset=utf-8"),
    asset!("views.js", "text/javascript; charset=utf-8"),
    asset!("transcript.js", "text/javascript; charset=utf-8"),
    asset!("approvals.js", "text/javascript; charset=utf-8"),
    asset!("inspector.js", "text/javascript; charset=utf-8"),
    asset!("configs.js", "text/javascript; charset=utf-8"),
    asset!("editor.js", "text/javascript; charset=utf-8"),
    asset!("skills.js", "text/javascript; charset=utf-8"),
    asset!("palette.js", "text/javascript; charset=utf-8"),
    asset!("composer.js", "text/javascript; charset=utf-8"),
    asset!("confirm-mode.js", "text/javascript; charset=utf-8"),
    asset!("tokens.js", "text/javascript; charset=utf-8"),
    asset!("statusbar.js", "text/javascript; charset=utf-8"),
    asset!("theme.js", "text/javascript; charset=utf-8"),
    asset!("markdown.js", "text/javascript; charset=utf-8"),
    asset!("highlight.js", "text/javascript; charset=utf-8"),
    asset!("answers.js", "text/javascript; charset=utf-8"),
    asset!("toolcard.js", "text/javascript; charset=utf-8"),
    asset!("toolout.js", "text/javascript; charset=utf-8"),
    asset!("health.js", "text/javascript; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("dark.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
];

/// A found asset: bytes (borrowed when embedded) and MIME type.
pub struct Found {
    pub bytes: std::borrow::Cow<'static, [u8]>,
    pub mime: &'static str,
}

/// Looks `name` up in the embedded list, or, with a development directory,
/// on disk inside that directory (canonicalized; anything resolving outside
/// it, including through symlinks, is not found).
pub fn lookup(name: &str, dev_dir: Option<&Path>) -> Option<Found> {
    match dev_dir {
        None => ASSETS.iter().find(|a| a.name == name).map(|a| Found {
            bytes: std::borrow::Cow::Borrowed(a.bytes),
            mime: a.mime,
        }),
        Some(dir) => {
            let root = dir.canonicalize().ok()?;
            let path: PathBuf = root.join(name).canonicalize().ok()?;
            if !path.starts_with(&root) || !path.is_file() {
                return None;
            }
            let bytes = std::fs::read(&path).ok()?;
            Some(Found {
                bytes: std::borrow::Cow::Owned(bytes),
                mime: mime_for(name),
            })
        }
    }
}

fn mime_for(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" | "map" => "application/json",
        "txt" | "md" => "text/plain; charset=utf-8",
        "ico" => "image/x-icon",
        "webp" => "image/webp",
        "jpg" | "jpeg" => "image/jpeg",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_list_matches_the_static_directory() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("static");
        let mut on_disk = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let rel = path
                        .strip_prefix(&root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    on_disk.push(rel);
                }
            }
        }
        on_disk.sort();
        let mut listed: Vec<String> = ASSETS.iter().map(|a| a.name.to_string()).collect();
        listed.sort();
        assert_eq!(listed, on_disk, "static/ and ASSETS disagree");
    }

    #[test]
    fn every_embedded_asset_is_found() {
        for asset in ASSETS {
            let found = lookup(asset.name, None).expect(asset.name);
            assert!(!found.bytes.is_empty());
        }
        assert!(lookup("missing.js", None).is_none());
    }

    #[test]
    fn dev_directory_is_confined() {
        let base = std::env::temp_dir().join(format!("hub-assets-{}", uuid::Uuid::new_v4()));
        let root = base.join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("index.html"), "x").unwrap();
        std::fs::write(base.join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(base.join("secret.txt"), root.join("link.txt")).unwrap();
        assert!(lookup("index.html", Some(&root)).is_some());
        assert!(lookup("link.txt", Some(&root)).is_none());
        assert!(lookup("../secret.txt", Some(&root)).is_none());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
