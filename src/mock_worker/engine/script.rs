//! What a message's text asks the scripted model to do: the test knobs
//! (`/run`, `/sleep`, `/big`, `/flood`, `/crash`, `/plan`, the subagent
//! triggers), parsed from the first word.

use super::super::subagent;
use super::{MAX_BIG_BYTES, MAX_FLOOD, MAX_SLEEP_MS};

/// What a message's text asks the scripted model to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Script {
    Echo(String),
    Tool(String),
    Sleep(u64, String),
    Big(usize),
    Flood(u64, String),
    Crash,
    /// `/plan <markdown>`: `plan/replace` through the hub's tools listener.
    Plan(String),
    /// `/plan-read`: `plan/read`.
    PlanRead,
    /// `/fork`, `/receive`, `/send`, `/subagent`, ...: trusted tool calls
    /// to the hub's `subagent/*` routes, made one after another.
    Subagent(Vec<subagent::Call>),
    Continue,
    Compact,
}

impl Script {
    pub(super) fn parse(text: &str) -> Script {
        let mut words = text.split_whitespace();
        let first = words.next().unwrap_or("");
        let number = |max: u64| {
            words
                .clone()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .map(|n| n.min(max))
        };
        match first {
            "/run" => {
                let command = text.trim_start()["/run".len()..].trim();
                if command.is_empty() {
                    Script::Echo(text.to_string())
                } else {
                    Script::Tool(command.to_string())
                }
            }
            "/sleep" => match number(MAX_SLEEP_MS) {
                Some(ms) => Script::Sleep(ms, text.to_string()),
                None => Script::Echo(text.to_string()),
            },
            "/big" => match number(MAX_BIG_BYTES as u64) {
                Some(bytes) => Script::Big(bytes as usize),
                None => Script::Echo(text.to_string()),
            },
            "/flood" => match number(MAX_FLOOD) {
                Some(n) => Script::Flood(n, text.to_string()),
                None => Script::Echo(text.to_string()),
            },
            "/crash" => Script::Crash,
            "/plan" => {
                let rest = &text.trim_start()["/plan".len()..];
                // One separating space or line break; the rest is verbatim.
                let markdown = rest
                    .strip_prefix(|c: char| c.is_whitespace())
                    .unwrap_or(rest);
                Script::Plan(markdown.to_string())
            }
            "/plan-read" => Script::PlanRead,
            _ => match subagent::parse(text) {
                Some(calls) => Script::Subagent(calls),
                None => Script::Echo(text.to_string()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts() {
        assert_eq!(Script::parse("/run  ls -l "), Script::Tool("ls -l".into()));
        assert_eq!(Script::parse("/run"), Script::Echo("/run".into()));
        assert_eq!(
            Script::parse("/sleep 20 then"),
            Script::Sleep(20, "/sleep 20 then".into())
        );
        assert_eq!(Script::parse("/sleep x"), Script::Echo("/sleep x".into()));
        assert_eq!(
            Script::parse("/big 999999999999"),
            Script::Big(MAX_BIG_BYTES)
        );
        assert_eq!(
            Script::parse("/flood 3"),
            Script::Flood(3, "/flood 3".into())
        );
        assert_eq!(Script::parse("/crash"), Script::Crash);
        assert_eq!(
            Script::parse(" /plan  two\nlines "),
            Script::Plan(" two\nlines ".into())
        );
        assert_eq!(Script::parse("/plan"), Script::Plan(String::new()));
        assert_eq!(Script::parse("/plan\n# x"), Script::Plan("# x".into()));
        assert_eq!(Script::parse("/plan-read"), Script::PlanRead);
        assert_eq!(Script::parse("/planx"), Script::Echo("/planx".into()));
        assert_eq!(
            Script::parse("/fork"),
            Script::Subagent(subagent::parse("/fork").unwrap())
        );
        assert_eq!(Script::parse("/send s"), Script::Echo("/send s".into()));
        assert_eq!(
            Script::parse("/receive s x"),
            Script::Echo("/receive s x".into())
        );
        assert_eq!(
            Script::parse("hello /run x"),
            Script::Echo("hello /run x".into())
        );
    }
}
