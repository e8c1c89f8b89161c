//! Reading a raw HTTP/1.1 head, for the tests' hand-written providers. The
//! gateway's and the binary's tests include this one file.

/// The value of header `name` (any case) in `head`, trimmed; `None` when absent.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}
