//! Panel protocol identity and the capabilities this build really
//! implements. `docs/protocol-panel.md` carries the same table; a test
//! fails when the two disagree.

/// The panel protocol's name and version, as `/api/meta` reports them.
pub const PROTOCOL_NAME: &str = "simplex-hub-panel";
pub const PROTOCOL_VERSION: u64 = 1;

/// The worker protocol the hub speaks, as the Node hub names it in
/// `/api/meta` (`worker_protocol`): its document in the upstream repository.
pub const WORKER_PROTOCOL: &str = "docs/core/worker-protocol.md";

/// Every capability protocol v1 defines, in the order of its table, then
/// this hub's additions for the seed's features that the table does not
/// name (checked against the docs and against [`IMPLEMENTED`] in the
/// tests).
#[cfg(test)]
pub const ALL: &[&str] = &[
    "worker-events",
    "confirmations",
    "supervisor",
    "transcript-replay",
    "transcript-pages",
    "snapshot-view",
    "transcript-epoch",
    "global-confirmations",
    "answer-pages",
    "session-history",
    "context-compact",
    "headless-subagents",
    "configuration-library",
    "skill-library",
    "hub-health",
];

/// The capabilities this build implements end to end. A capability joins
/// this list in the same change that makes it true.
pub const IMPLEMENTED: &[&str] = &[
    "worker-events",
    "confirmations",
    "supervisor",
    "transcript-replay",
    "transcript-pages",
    "snapshot-view",
    "transcript-epoch",
    "global-confirmations",
    "answer-pages",
    "session-history",
    "context-compact",
    "headless-subagents",
    "configuration-library",
    "skill-library",
    "hub-health",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implemented_is_a_subset_in_table_order() {
        let mut last = None;
        for cap in IMPLEMENTED {
            let pos = ALL.iter().position(|c| c == cap).expect(cap);
            assert!(last < Some(pos), "{cap} out of order");
            last = Some(pos);
        }
    }
}

#[cfg(test)]
mod docs_drift {
    use super::*;

    /// The capability table in the protocol notes must match [`ALL`] and
    /// [`IMPLEMENTED`] exactly.
    #[test]
    fn docs_table_matches_the_constant() {
        let doc = include_str!("../docs/protocol-panel.md");
        let section = doc
            .split("## Capabilities")
            .nth(1)
            .expect("capabilities section")
            .split("\n## ")
            .next()
            .unwrap();
        let rows: Vec<(String, bool)> = section
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                match cells.as_slice() {
                    ["", name, state, ""] if *state == "yes" || *state == "no" => {
                        Some((name.to_string(), *state == "yes"))
                    }
                    _ => None,
                }
            })
            .collect();
        let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ALL, "docs list different capabilities");
        let implemented: Vec<&str> = rows.iter().filter(|r| r.1).map(|r| r.0.as_str()).collect();
        assert_eq!(
            implemented, IMPLEMENTED,
            "docs and code disagree on what is implemented"
        );
    }
}
