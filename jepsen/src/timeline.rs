//! Self-contained HTML (inline SVG) timelines of operations: one lane per
//! process, a bar from invoke to completion coloured by outcome (green ok,
//! orange indeterminate — extended to the right edge since it may take
//! effect later — grey failed), an optional highlighted operation (red) and
//! the linearization position of each linearized operation.
//!
//! The time axis is ordinal: distinct event times are spaced evenly, which
//! keeps short concurrent operations readable next to long ones; only the
//! order of events matters for linearizability.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use crate::history::Function;
use crate::ops::{Operation, Outcome};

const LANE: usize = 34;
const BAR: usize = 22;
const LEFT: usize = 80;
const TOP: usize = 30;

/// Escapes text for HTML / SVG content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn short_label(op: &Operation) -> String {
    let mut label = match op.f {
        Function::Read | Function::Get => match op.outcome {
            Outcome::Ok => format!("{} → {}", op.f, op.output),
            _ => format!("{} ?", op.f),
        },
        _ => format!("{} {}", op.f, op.value),
    };
    if label.chars().count() > 28 {
        label = label.chars().take(27).collect::<String>() + "…";
    }
    label
}

/// Renders `ops` as an HTML page. `highlight` is the [`Operation::index`] of
/// the operation to mark; `order` maps operation indices to their position
/// in a linearization (shown as `#n`).
pub fn render_html(
    title: &str,
    note: &str,
    ops: &[Operation],
    highlight: Option<usize>,
    order: &HashMap<usize, usize>,
) -> String {
    let times: BTreeSet<u64> = ops
        .iter()
        .flat_map(|op| std::iter::once(op.invoke_time).chain(op.complete_time))
        .collect();
    let rank: HashMap<u64, usize> = times.iter().enumerate().map(|(i, &t)| (t, i)).collect();
    let columns = times.len().max(1);
    let step = (1400 / columns).clamp(14, 48);
    let right_edge = LEFT + (columns + 1) * step;
    let width = right_edge + 40;

    let processes: BTreeSet<u64> = ops.iter().map(|op| op.process).collect();
    let lane: HashMap<u64, usize> = processes.iter().enumerate().map(|(i, &p)| (p, i)).collect();
    let height = TOP + processes.len().max(1) * LANE + 20;

    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="11">"#
    );
    for (&p, &i) in &lane {
        let y = TOP + i * LANE;
        let _ = write!(
            svg,
            r##"<rect x="0" y="{y}" width="{width}" height="{LANE}" fill="{}"/><text x="6" y="{}" fill="#333">p{p}</text>"##,
            if i % 2 == 0 { "#f7f7f7" } else { "#ffffff" },
            y + LANE / 2 + 4
        );
    }
    for op in ops {
        let x0 = LEFT + rank.get(&op.invoke_time).copied().unwrap_or(0) * step;
        let (x1, open) = match (op.outcome, op.complete_time) {
            (Outcome::Info, _) | (_, None) => (right_edge, true),
            (_, Some(t)) => (LEFT + rank.get(&t).copied().unwrap_or(0) * step, false),
        };
        let w = x1.saturating_sub(x0).max(6);
        let y = TOP + lane.get(&op.process).copied().unwrap_or(0) * LANE + (LANE - BAR) / 2;
        let highlighted = highlight == Some(op.index);
        let (fill, stroke, stroke_width) = match (highlighted, op.outcome) {
            (true, _) => ("#ef5350", "#b71c1c", 3),
            (false, Outcome::Ok) => ("#81c784", "#2e7d32", 1),
            (false, Outcome::Info) => ("#ffcc80", "#ef6c00", 1),
            (false, Outcome::Fail) => ("#e0e0e0", "#9e9e9e", 1),
        };
        let dash = if open {
            r#" stroke-dasharray="4 3""#
        } else {
            ""
        };
        let _ = write!(
            svg,
            r#"<g><title>{}</title><rect x="{x0}" y="{y}" width="{w}" height="{BAR}" rx="3" fill="{fill}" stroke="{stroke}" stroke-width="{stroke_width}"{dash}/>"#,
            escape(&op.to_string())
        );
        let mut label = short_label(op);
        if let Some(pos) = order.get(&op.index) {
            label = format!("#{} {label}", pos + 1);
        }
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" fill="#111">{}</text></g>"##,
            x0 + 3,
            y + BAR / 2 + 4,
            escape(&label)
        );
    }
    svg.push_str("</svg>");

    let legend = r##"<p class="legend"><span style="background:#81c784">ok</span> <span style="background:#ffcc80">indeterminate (info / pending: may take effect any time after its invoke, or never)</span> <span style="background:#e0e0e0">failed (did not happen)</span> <span style="background:#ef5350;color:#fff">cannot be linearized</span></p>"##;
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title><style>\
         body{{font-family:sans-serif;margin:16px}} .legend span{{padding:2px 6px;margin-right:6px;border-radius:3px}} \
         .scroll{{overflow-x:auto;border:1px solid #ccc}}</style></head><body>\n<h1>{t}</h1>\n<p>{n}</p>\n{legend}\n\
         <div class=\"scroll\">{svg}</div>\n<p>Time runs left to right (ordinal scale: distinct event times evenly spaced). \
         Hover a bar for details.</p>\n</body></html>\n",
        t = escape(title),
        n = escape(note),
    )
}
