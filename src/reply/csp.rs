//! Content-Security-Policy of the panel documents. Pure.
//!
//! The embedded panel gets [`EMBEDDED`]: same-origin scripts and styles
//! only, no inline code at all. A panel served from a configured
//! directory (`--static-dir`, for instance the Node hub's React panel) gets
//! [`for_document`] for its HTML documents: the same policy, except that
//! each inline `<script>` of that very document is allowed by its SHA-256
//! hash (the Node panel applies its theme with one before its bundle
//! loads), inline styles are allowed (its popovers are positioned with
//! `style` attributes) and fonts may come from the same origin. Nothing
//! else is widened: no `'unsafe-inline'` scripts, no other origin.

/// The embedded panel's policy (and that of every non-document response).
pub const EMBEDDED: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; object-src 'none'; frame-ancestors 'none'; \
base-uri 'none'; form-action 'none'";

/// The policy for an HTML document `html` served from a configured static
/// directory: its inline scripts allowed by hash, inline styles allowed.
pub fn for_document(html: &str) -> String {
    let mut scripts = String::from("script-src 'self'");
    for hash in inline_script_hashes(html) {
        scripts.push_str(" 'sha256-");
        scripts.push_str(&hash);
        scripts.push('\'');
    }
    format!(
        "default-src 'self'; {scripts}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
         font-src 'self'; connect-src 'self'; object-src 'none'; frame-ancestors 'none'; \
         base-uri 'none'; form-action 'none'"
    )
}

/// The base64 SHA-256 digests of the bodies of `html`'s inline scripts
/// (`<script>` elements without a `src` attribute), in document order. The
/// body is hashed byte for byte as written, which is what a browser
/// compares; a script with `src` is covered by `'self'`.
pub fn inline_script_hashes(html: &str) -> Vec<String> {
    // ASCII lowercasing keeps byte offsets, so positions carry over.
    let lower = html.to_ascii_lowercase();
    let mut hashes = Vec::new();
    let mut at = 0;
    while let Some(found) = lower[at..].find("<script") {
        let open = at + found;
        let Some(end_of_tag) = lower[open..].find('>').map(|i| open + i) else {
            break;
        };
        let attributes = &lower[open + "<script".len()..end_of_tag];
        let body_start = end_of_tag + 1;
        let Some(close) = lower[body_start..].find("</script").map(|i| body_start + i) else {
            break;
        };
        if !has_src(attributes) {
            let mut digest = crate::wire::sha256::Sha256::new();
            digest.update(&html.as_bytes()[body_start..close]);
            hashes.push(base64(&digest.finish()));
        }
        at = close + "</script".len();
    }
    hashes
}

/// Whether tag attributes (lowercase) name `src=` as an attribute of its
/// own (not as the end of another name, such as `data-src=`).
fn has_src(attributes: &str) -> bool {
    attributes.match_indices("src").any(|(i, _)| {
        let before = attributes[..i].chars().next_back();
        let boundary = before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        boundary && attributes[i + 3..].trim_start().starts_with('=')
    })
}

/// Standard base64 with padding (RFC 4648).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_follows_rfc_4648() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected, "{input:?}");
        }
    }

    #[test]
    fn inline_scripts_are_hashed_and_external_ones_are_not() {
        // The known digest of `alert('Hello, world.');` as CSP documents it.
        let html = "<html><head><SCRIPT>alert('Hello, world.');</script>\
            <script type=\"module\" src=\"/assets/index.js\"></script>\
            <script data-src=\"x\">b()</script>\
            <script src = '/a.js' defer></script></head></html>";
        let hashes = inline_script_hashes(html);
        assert_eq!(hashes.len(), 2, "{hashes:?}");
        assert_eq!(hashes[0], "qznLcsROx4GACP2dm0UCKCzCG+HiZ1guq6ZZDob/Tng=");
        let mut digest = crate::wire::sha256::Sha256::new();
        digest.update(b"b()");
        assert_eq!(hashes[1], base64(&digest.finish()));
        // an unterminated script hashes nothing
        assert!(inline_script_hashes("<script>a()").is_empty());
        assert!(inline_script_hashes("<script").is_empty());
    }

    #[test]
    fn a_static_document_policy_names_its_scripts_and_allows_inline_styles() {
        let policy = for_document("<script>alert('Hello, world.');</script>");
        assert!(
            policy.contains(
                "script-src 'self' 'sha256-qznLcsROx4GACP2dm0UCKCzCG+HiZ1guq6ZZDob/Tng=';"
            ),
            "{policy}"
        );
        assert!(
            policy.contains("style-src 'self' 'unsafe-inline'"),
            "{policy}"
        );
        for kept in [
            "object-src 'none'",
            "frame-ancestors 'none'",
            "connect-src 'self'",
        ] {
            assert!(policy.contains(kept), "{policy}");
        }
        assert_eq!(
            for_document("<p>no scripts</p>")
                .matches("script-src 'self';")
                .count(),
            1
        );
        // the embedded policy allows no inline code
        assert!(!EMBEDDED.contains("unsafe-inline") && !EMBEDDED.contains("sha256"));
    }
}
