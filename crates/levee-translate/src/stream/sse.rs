//! The incremental SSE parser a translator feeds upstream bytes through.

/// Incremental SSE parser (`\n`, `\r\n` and `\r` line ends; `data:` lines
/// joined with `\n`; comments and unknown fields skipped).
#[derive(Debug, Default)]
pub(super) struct SseParser {
    line: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    after_cr: bool,
}

impl SseParser {
    pub(super) fn push(&mut self, chunk: &[u8], mut on_event: impl FnMut(&str, &str)) {
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut on_event);
                }
                b'\n' => self.end_line(&mut on_event),
                _ => self.line.push(b),
            }
        }
    }

    /// The stream ended: an unterminated last line and event still count.
    pub(super) fn finish(&mut self, mut on_event: impl FnMut(&str, &str)) {
        if !self.line.is_empty() {
            self.end_line(&mut on_event);
        }
        if self.has_data {
            self.end_line(&mut on_event);
        }
    }

    fn end_line(&mut self, on_event: &mut impl FnMut(&str, &str)) {
        if self.line.is_empty() {
            if self.has_data {
                on_event(&self.event, &self.data);
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return;
        }
        let line = String::from_utf8_lossy(&self.line);
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        self.line.clear();
    }
}
