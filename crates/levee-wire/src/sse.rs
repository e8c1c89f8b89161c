//! Server-sent events as both providers stream them: `event: NAME` (Anthropic
//! and the Responses API) and `data: JSON` lines, an empty line after each
//! event; OpenAI's chat stream ends with `data: [DONE]`.

/// The events of a complete stream, each as (name, data): the name is empty
/// for an event without an `event:` line; several `data:` lines are joined
/// with `\n`; a `data:` value that is JSON is parsed, any other (`[DONE]`)
/// kept as a string. For reading whole streams in tests and reports; a
/// relay reads incrementally instead.
pub fn events(text: &str) -> Vec<(String, serde_json::Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data: Vec<&str> = Vec::new();
            for line in e.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim_start().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            let data = data.join("\n");
            let value = serde_json::from_str(&data).unwrap_or(serde_json::Value::String(data));
            (name, value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_data_of_each_event() {
        let ev =
            events("event: ping\ndata: {\"type\":\"ping\"}\n\ndata: {\"a\":1}\n\ndata: [DONE]\n\n");
        assert_eq!(ev.len(), 3);
        assert_eq!(ev[0].0, "ping");
        assert_eq!(ev[0].1["type"], "ping");
        assert_eq!(ev[1].0, "");
        assert_eq!(ev[1].1["a"], 1);
        assert_eq!(ev[2].1, serde_json::Value::String("[DONE]".into()));
    }
}
