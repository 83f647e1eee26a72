//! Results: repeated samples per metric, medians and spread, the A/B ratio,
//! the target check, and the Markdown table.

use std::fmt::Write;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[allow(dead_code)] // recorded for readers of the JSON; the table shows the target
pub enum Better {
    Higher,
    Lower,
    /// Informational (no direction).
    None,
}

#[derive(Clone, Debug)]
pub struct Target {
    pub text: String,
    /// Returns whether the hub's median (and the Node median, if any)
    /// meets it.
    pub check: fn(hub: f64, node: Option<f64>) -> bool,
}

#[derive(Clone, Debug)]
pub struct Row {
    pub group: String,
    pub metric: String,
    pub unit: String,
    pub hub: Vec<f64>,
    pub node: Vec<f64>,
    #[allow(dead_code)]
    pub better: Better,
    pub target: Option<Target>,
    pub note: String,
}

#[derive(Default)]
pub struct Report {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

fn spread(v: &[f64]) -> Option<(f64, f64)> {
    let s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.len() < 2 {
        return None;
    }
    let lo = s.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lo, hi))
}

pub fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if a >= 1e4 {
        format!("{:.1} k", x / 1e3)
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn cell(v: &[f64]) -> String {
    match median(v) {
        None => "—".into(),
        Some(m) => match spread(v) {
            Some((lo, hi)) => format!("{} ({}–{})", fmt_num(m), fmt_num(lo), fmt_num(hi)),
            None => fmt_num(m),
        },
    }
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        group: &str,
        metric: &str,
        unit: &str,
        hub: Vec<f64>,
        node: Vec<f64>,
        better: Better,
        target: Option<Target>,
        note: &str,
    ) {
        self.rows.push(Row {
            group: group.into(),
            metric: metric.into(),
            unit: unit.into(),
            hub,
            node,
            better,
            target,
            note: note.into(),
        });
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| group | metric | unit | hub (A) median (min–max) | node (B) median (min–max) | A/B | target | met |"
        );
        let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- |");
        for r in &self.rows {
            let ratio = match (median(&r.hub), median(&r.node)) {
                (Some(a), Some(b)) if b != 0.0 => {
                    let x = a / b;
                    if x >= 10.0 {
                        format!("{x:.0}×")
                    } else if x >= 0.1 {
                        format!("{x:.2}×")
                    } else {
                        format!("{x:.3}×")
                    }
                }
                _ => "—".into(),
            };
            let (target, met) = match &r.target {
                None => ("".to_string(), "".to_string()),
                Some(t) => {
                    let met = match median(&r.hub) {
                        Some(h) => {
                            if (t.check)(h, median(&r.node)) {
                                "yes"
                            } else {
                                "**no**"
                            }
                        }
                        None => "n/a",
                    };
                    (t.text.clone(), met.to_string())
                }
            };
            let metric = if r.note.is_empty() {
                r.metric.clone()
            } else {
                format!("{} ({})", r.metric, r.note)
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.group,
                metric,
                r.unit,
                cell(&r.hub),
                cell(&r.node),
                ratio,
                target,
                met
            );
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                let _ = writeln!(out, "- {n}");
            }
        }
        out
    }

    /// Raw samples as JSON (kept next to the table).
    pub fn json(&self) -> String {
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "group": r.group, "metric": r.metric, "unit": r.unit,
                    "hub": r.hub, "node": r.node,
                    "hub_median": median(&r.hub), "node_median": median(&r.node),
                    "target": r.target.as_ref().map(|t| t.text.clone()),
                    "note": r.note,
                })
            })
            .collect();
        serde_json::to_string_pretty(&serde_json::json!({"rows": rows, "notes": self.notes}))
            .unwrap_or_default()
    }
}
