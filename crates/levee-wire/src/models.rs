//! The model list's query: which page of Anthropic's model list a request
//! asks for. The gateway reads it to page its own list, the mock to page
//! the provider's.

/// A page of the Anthropic model list: its query's `limit`, `after_id` and
/// `before_id`, each `None` when not given.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Page {
    pub limit: Option<usize>,
    pub after_id: Option<String>,
    pub before_id: Option<String>,
}

impl Page {
    /// Reads the query (percent-decoded; unknown keys are ignored). `Err`
    /// is the message of the 400 Anthropic answers for a `limit` outside 1
    /// to 1000.
    pub fn of_query(query: Option<&str>) -> Result<Page, String> {
        let mut page = Page::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned();
            match k {
                "limit" => match v.parse::<usize>() {
                    Ok(n) if (1..=1000).contains(&n) => page.limit = Some(n),
                    _ => return Err("limit: Input should be between 1 and 1000".to_string()),
                },
                "after_id" => page.after_id = Some(v),
                "before_id" => page.before_id = Some(v),
                _ => {}
            }
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_gives_the_page_and_a_limit_out_of_range_is_refused() {
        assert_eq!(Page::of_query(None), Ok(Page::default()));
        assert_eq!(
            Page::of_query(Some("limit=2&after_id=claude%3Ax&x=1&before_id")),
            Ok(Page {
                limit: Some(2),
                after_id: Some("claude:x".to_string()),
                before_id: Some(String::new()),
            })
        );
        for q in ["limit=0", "limit=1001", "limit=ten"] {
            assert_eq!(
                Page::of_query(Some(q)),
                Err("limit: Input should be between 1 and 1000".to_string()),
                "{q}"
            );
        }
    }
}
