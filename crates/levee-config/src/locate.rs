//! Finding the line a key sits on, so that validation errors (which happen
//! after parsing, when serde's positions are gone) can still say "line 12".
//! A heuristic over the text: it understands block mappings, lists and inline
//! `{ key: value }` maps, which is what Levee's configs are made of.

/// One step of a path into the document.
#[derive(Clone, Copy, Debug)]
pub enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn indent(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

fn is_content(l: &str) -> bool {
    let t = l.trim_start();
    !t.is_empty() && !t.starts_with('#')
}

fn has_key(l: &str, key: &str) -> Option<bool> {
    let t = l.trim_start().trim_start_matches("- ").trim_start();
    let pat = format!("{key}:");
    if t.starts_with(&pat) {
        return Some(false);
    }
    for sep in ["{ ", "{", ", ", ","] {
        if t.contains(&format!("{sep}{pat}")) {
            return Some(true);
        }
    }
    None
}

/// The 1-based line of `path` in `text`, or the nearest enclosing line found.
pub fn locate(text: &str, path: &[Seg<'_>]) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let (mut lo, mut hi) = (0usize, lines.len());
    let mut best = None;
    for seg in path {
        match *seg {
            Seg::Key(k) => {
                let found = (lo..hi).find_map(|i| has_key(lines[i], k).map(|inline| (i, inline)));
                let Some((i, inline)) = found else {
                    return best.map(|b: usize| b + 1);
                };
                best = Some(i);
                if inline {
                    return Some(i + 1);
                }
                let ind =
                    indent(lines[i]) + usize::from(lines[i].trim_start().starts_with("- ")) * 2;
                lo = i + 1;
                hi = (lo..hi)
                    .find(|&j| is_content(lines[j]) && indent(lines[j]) < ind.max(1))
                    .unwrap_or(hi);
                // `key: value` or `key: [a, b]` on one line. Trimmed exactly as
                // `has_key` trims, so the slice starts right after `key:` (the
                // fuzzer found a panic when Unicode whitespace came before it).
                let t = lines[i].trim_start().trim_start_matches("- ").trim_start();
                if let Some(rest) = t.get(k.len() + 1..).map(str::trim) {
                    if !rest.is_empty() && !rest.starts_with('#') {
                        hi = lo;
                    }
                }
            }
            Seg::Index(n) => {
                let items: Vec<usize> = (lo..hi)
                    .filter(|&j| lines[j].trim_start().starts_with("- ") || lines[j].trim() == "-")
                    .collect();
                let Some(min_ind) = items.iter().map(|&j| indent(lines[j])).min() else {
                    return best.map(|b| b + 1);
                };
                let items: Vec<usize> = items
                    .into_iter()
                    .filter(|&j| indent(lines[j]) == min_ind)
                    .collect();
                let Some(&start) = items.get(n) else {
                    return best.map(|b| b + 1);
                };
                best = Some(start);
                lo = start;
                hi = items.get(n + 1).copied().unwrap_or(hi);
            }
        }
    }
    best.map(|b| b + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "listen: x\nroutes:\n  - match: { model_prefix: \"a/\" }\n    retry:\n      max_attempts: 0\n  - match: { model_prefix: \"b/\" }\n    retry: { max_attempts: 9 }\n";

    #[test]
    fn finds_block_inline_and_listed_keys() {
        use Seg::*;
        assert_eq!(locate(DOC, &[Key("listen")]), Some(1));
        assert_eq!(
            locate(
                DOC,
                &[Key("routes"), Index(0), Key("retry"), Key("max_attempts")]
            ),
            Some(5)
        );
        assert_eq!(
            locate(
                DOC,
                &[Key("routes"), Index(1), Key("retry"), Key("max_attempts")]
            ),
            Some(7)
        );
        assert_eq!(
            locate(DOC, &[Key("routes"), Index(1), Key("match")]),
            Some(6)
        );
        assert_eq!(locate(DOC, &[Key("routes"), Index(5)]), Some(2));
    }
}
