//! Lower-case hexadecimal text: the one digit table, and a UUID's
//! hyphenated form. A leaf: it imports nothing of the crate.

/// The hexadecimal digits, lower case.
pub(crate) const HEX: &[u8; 16] = b"0123456789abcdef";

/// A UUID's hyphenated lower-case text, a byte pair at a time (the `uuid`
/// crate's own encoder took ~200 instructions, twice a request).
pub(crate) fn hyphenated(id: &[u8; 16]) -> [u8; 36] {
    const PAIRS: [[u8; 2]; 256] = {
        let mut t = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = [HEX[i >> 4], HEX[i & 0xf]];
            i += 1;
        }
        t
    };
    let mut out = [b'-'; 36];
    let mut at = 0;
    for (i, b) in id.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        out[at..at + 2].copy_from_slice(&PAIRS[usize::from(*b)]);
        at += 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuids_text_is_the_uuid_crates_own() {
        let mut x = 0x0123_4567_89ab_cdefu128;
        for _ in 0..1000 {
            let id = uuid::Uuid::from_u128(x);
            let ours = hyphenated(id.as_bytes());
            assert_eq!(&ours[..], id.hyphenated().to_string().as_bytes());
            x = x
                .wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
                .wrapping_add(1);
        }
    }
}
