//! A header map from `(name, value)` pairs, for tests of what Levee reads
//! off an answer's head (shared by the unit tests and the allocation test).

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

/// The fields in order; a name or value that is not valid panics (test data).
pub fn headers(fields: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in fields {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}
