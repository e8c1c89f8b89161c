//! A reference HTTP/1.1 message framer written from RFC 9112 (and the
//! RFC 9110 field grammar it uses), independently of Levee's `h1wire`:
//! the oracle of the `h1_request` and `h1_answer` targets. Heads are
//! parsed by `httparse` (the same crate and defaults Levee uses, so the
//! two agree on where a head ends and on its fields); everything after
//! the head — the body length, the chunked coding, trailers, whether the
//! connection stays open — is decided here.
//!
//! Line ends: RFC 9112 §2.2 lets a recipient take a bare LF as a line end
//! and ignore the CR before it; Levee does that in chunk-size lines, after
//! chunk data and in trailer lines, and so does this reference. A CR
//! anywhere else in such a line is refused (§2.2: a bare CR outside
//! content is invalid).
//!
//! Known differences from the letter of the RFC, each one Levee's too and
//! each unable to move where a message ends:
//! - chunk extensions are checked against §7.1.1's grammar only for their
//!   line end: a recipient MUST ignore extensions it does not recognise, and
//!   Levee ends a chunk-size line at its first LF and refuses any other CR
//!   in it, so bytes inside an extension cannot end the line elsewhere.
//!   `EXTENSION_GRAMMAR` turns the full grammar check on (as a refusal
//!   Levee may not share); it is off in the targets.
//!
#![allow(dead_code)]

/// Checks chunk extensions against the full §7.1.1 grammar when true.
pub const EXTENSION_GRAMMAR: bool = false;

/// `tchar` (RFC 9110 §5.6.2).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

pub fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// OWS / BWS: spaces and horizontal tabs only (RFC 9110 §5.6.3).
pub fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_ows(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_ows(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// The elements of a comma-separated list field (RFC 9110 §5.6.1), each
/// trimmed of OWS; empty elements are dropped, as a recipient must.
/// Commas inside quoted strings are not special-cased: none of the fields
/// read here (connection, content-length, transfer-encoding without
/// parameters) has any.
pub fn list<'a>(values: &[&'a [u8]]) -> Vec<&'a [u8]> {
    values
        .iter()
        .flat_map(|v| v.split(|&b| b == b','))
        .map(trim_ows)
        .filter(|e| !e.is_empty())
        .collect()
}

/// A field value (RFC 9110 §5.5): visible characters, obs-text, spaces and
/// tabs.
pub fn is_field_value(v: &[u8]) -> bool {
    v.iter()
        .all(|&b| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80)
}

/// `field-line = field-name ":" OWS field-value OWS` (RFC 9112 §5), with
/// no whitespace before the colon (§5.1) and no obs-fold (§5.2: a server
/// refuses it; inside a trailer section it can only be refused).
pub fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    is_token(&line[..colon]) && is_field_value(&line[colon + 1..])
}

/// The keep-alive decision of RFC 9112 §9.3 from every `connection`
/// field's tokens and the version (`minor` of HTTP/1.x).
pub fn persistent(minor: u8, connection: &[&[u8]]) -> bool {
    let tokens = list(connection);
    if tokens.iter().any(|t| t.eq_ignore_ascii_case(b"close")) {
        return false;
    }
    minor >= 1 || tokens.iter().any(|t| t.eq_ignore_ascii_case(b"keep-alive"))
}

/// `Content-Length = 1*DIGIT`, or a list of one repeated value (RFC 9110
/// §8.6 lets a recipient take `5, 5` as 5). `None` without the field.
pub fn content_length(values: &[&[u8]]) -> Result<Option<u64>, &'static str> {
    if values.is_empty() {
        return Ok(None);
    }
    let mut n: Option<u64> = None;
    for v in values {
        for part in v.split(|&b| b == b',') {
            let part = trim_ows(part);
            if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
                return Err("content-length is not 1*DIGIT");
            }
            let mut x: u64 = 0;
            for &d in part {
                x = x
                    .checked_mul(10)
                    .and_then(|x| x.checked_add(u64::from(d - b'0')))
                    .ok_or("content-length overflows")?;
            }
            if n.is_some_and(|m| m != x) {
                return Err("content-lengths differ");
            }
            n = Some(x);
        }
    }
    Ok(n)
}

/// The transfer codings a message lists, in order (RFC 9112 §6.1: every
/// `transfer-encoding` field, combined as one list), each a coding name in
/// lower case and whether it had parameters.
pub fn codings(values: &[&[u8]]) -> Result<Vec<(Vec<u8>, bool)>, &'static str> {
    let mut out = Vec::new();
    for element in list(values) {
        let (name, params) = match element.iter().position(|&b| b == b';') {
            Some(semi) => (trim_ows(&element[..semi]), true),
            None => (element, false),
        };
        if !is_token(name) {
            return Err("transfer coding is not a token");
        }
        out.push((name.to_ascii_lowercase(), params));
    }
    Ok(out)
}

/// `quoted-string` at the front of `s` (RFC 9110 §5.6.4): its length.
fn quoted_string(s: &[u8]) -> Option<usize> {
    if s.first() != Some(&b'"') {
        return None;
    }
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'"' => return Some(i + 1),
            b'\\' => {
                let next = *s.get(i + 1)?;
                if !(next == b'\t' || next == b' ' || (0x21..=0x7e).contains(&next) || next >= 0x80)
                {
                    return None;
                }
                i += 2;
            }
            b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff => i += 1,
            _ => return None,
        }
    }
    None
}

/// `chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )`
/// (RFC 9112 §7.1.1), the whole of `s`.
fn is_chunk_ext(mut s: &[u8]) -> bool {
    let skip_bws = |s: &mut &[u8]| {
        while s.first().is_some_and(|&b| is_ows(b)) {
            *s = &s[1..];
        }
    };
    let token = |s: &mut &[u8]| {
        let n = s.iter().take_while(|&&b| is_tchar(b)).count();
        *s = &s[n..];
        n > 0
    };
    loop {
        skip_bws(&mut s);
        if s.is_empty() {
            return true;
        }
        if s[0] != b';' {
            return false;
        }
        s = &s[1..];
        skip_bws(&mut s);
        if !token(&mut s) {
            return false;
        }
        let mut look = s;
        skip_bws(&mut look);
        if look.first() == Some(&b'=') {
            s = &look[1..];
            skip_bws(&mut s);
            if let Some(n) = quoted_string(s) {
                s = &s[n..];
            } else if !token(&mut s) {
                return false;
            }
        }
    }
}

/// The line at the front of `buf`, without its line end (LF, with an
/// optional CR before it): `None` while no LF has arrived; `Err` for a CR
/// anywhere but just before the LF.
fn line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, &'static str> {
    let Some(lf) = buf.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let l = &buf[..lf];
    let l = l.strip_suffix(b"\r").unwrap_or(l);
    if l.contains(&b'\r') {
        return Err("bare CR in a line");
    }
    Ok(Some((l, lf + 1)))
}

/// A chunk-size line (without its line end): the size.
fn chunk_size_line(l: &[u8]) -> Result<u64, &'static str> {
    let digits = l.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err("chunk-size is not 1*HEXDIG");
    }
    let ext = &l[digits..];
    if EXTENSION_GRAMMAR {
        if !is_chunk_ext(ext) {
            return Err("invalid chunk-ext");
        }
    } else {
        // The extension's content is ignored; its start is not: after the
        // size, only BWS and then either nothing or ";".
        let rest = &ext[ext.iter().take_while(|&&b| is_ows(b)).count()..];
        if !(rest.is_empty() || rest[0] == b';') {
            return Err("junk after chunk-size");
        }
    }
    let mut size: u64 = 0;
    for &d in &l[..digits] {
        let v = (d as char).to_digit(16).unwrap_or(0);
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(u64::from(v)))
            .ok_or("chunk-size overflows 64 bits")?;
    }
    Ok(size)
}

/// What a chunked body at the front of `buf` decodes to.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunked {
    /// The body and how many bytes of `buf` it took, trailers included.
    Whole(Vec<u8>, usize),
    /// More bytes are needed.
    Partial,
    /// Misframed.
    Refused(&'static str),
}

/// `chunked-body = *chunk last-chunk trailer-section CRLF` (RFC 9112 §7.1).
pub fn chunked(buf: &[u8]) -> Chunked {
    let mut at = 0;
    let mut body = Vec::new();
    loop {
        let (l, used) = match line(&buf[at..]) {
            Ok(Some(x)) => x,
            Ok(None) => return Chunked::Partial,
            Err(e) => return Chunked::Refused(e),
        };
        let size = match chunk_size_line(l) {
            Ok(n) => n,
            Err(e) => return Chunked::Refused(e),
        };
        at += used;
        if size == 0 {
            break;
        }
        let left = (buf.len() - at) as u64;
        if left < size {
            return Chunked::Partial;
        }
        let size = size as usize;
        body.extend_from_slice(&buf[at..at + size]);
        at += size;
        // The data's CRLF (or bare LF).
        match &buf[at..] {
            [] | [b'\r'] => return Chunked::Partial,
            [b'\n', ..] => at += 1,
            [b'\r', b'\n', ..] => at += 2,
            _ => return Chunked::Refused("chunk data not followed by CRLF"),
        }
    }
    // trailer-section = *( field-line CRLF ), then the empty line.
    loop {
        let (l, used) = match line(&buf[at..]) {
            Ok(Some(x)) => x,
            Ok(None) => return Chunked::Partial,
            Err(e) => return Chunked::Refused(e),
        };
        at += used;
        if l.is_empty() {
            return Chunked::Whole(body, at);
        }
        if !is_field_line(l) {
            return Chunked::Refused("trailer line is not a field line");
        }
    }
}

/// `uri-host [ ":" port ]` (RFC 9112 §3.2, RFC 3986 §3.2.2-3.2.3); an
/// empty value is allowed (a target without an authority).
pub fn valid_host(v: &[u8]) -> bool {
    let (host, port) = if let Some(rest) = v.strip_prefix(b"[") {
        let Some(close) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &rest[..close];
        let ok = std::str::from_utf8(literal)
            .ok()
            .and_then(|s| s.parse::<std::net::Ipv6Addr>().ok())
            .is_some();
        if !ok {
            return false;
        }
        match &rest[close + 1..] {
            [] => (&b""[..], None),
            [b':', p @ ..] => (&b""[..], Some(p)),
            _ => return false,
        }
    } else {
        match v.iter().rposition(|&b| b == b':') {
            Some(c) => (&v[..c], Some(&v[c + 1..])),
            None => (v, None),
        }
    };
    // reg-name = *( unreserved / pct-encoded / sub-delims ); an IPv4
    // address is one too.
    let mut i = 0;
    while i < host.len() {
        let b = host[i];
        if b == b'%' {
            let hex = |j: usize| host.get(j).is_some_and(u8::is_ascii_hexdigit);
            if !(hex(i + 1) && hex(i + 2)) {
                return false;
            }
            i += 3;
            continue;
        }
        if !(b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b)) {
            return false;
        }
        i += 1;
    }
    port.is_none_or(|p| p.iter().all(u8::is_ascii_digit))
}
