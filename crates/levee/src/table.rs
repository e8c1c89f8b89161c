//! Plain-text tables for `levee check`: cells, seconds and yes/no as the
//! census and the schedule print them.

use std::fmt::Write;
use std::time::Duration;

/// `yes`, `no`, or `-` for not applicable.
pub(crate) fn yes_no(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    }
}

/// A duration in seconds, as short as it is exact (`22s`, `0.25s`).
pub(crate) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s == s.trunc() {
        format!("{s:.0}s")
    } else if (s * 100.0).fract().abs() < 1e-9 {
        format!("{s:.2}s")
    } else {
        format!("{s:.3}s")
    }
}

/// `rows` under `head`, each column as wide as its widest cell.
pub(crate) fn table(out: &mut String, head: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c}{}", " ".repeat(w[i] - c.chars().count())))
            .collect();
        format!("  {}", s.join("  ").trim_end())
    };
    let _ = writeln!(out, "{}", line(head.to_vec()));
    for r in rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
}
