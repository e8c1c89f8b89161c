//! Inputs found while fuzzing `Config::parse` (fuzz/fuzz_targets/config.rs),
//! kept as ordinary tests. Each must be refused with an error, never a panic.

use levee_config::{Config, ConfigError};

/// The line of a validation error was once found by searching the text,
/// which sliced a line at a byte offset computed from a differently trimmed
/// copy of it; Unicode whitespace before a key (here inside a multi-line
/// quoted string) put the offset inside a character: "start byte index 6 is
/// not a char boundary". Lines now come from the YAML parser; the input stays
/// as a regression test.
#[test]
fn locate_unicode_whitespace_before_a_key_is_not_a_panic() {
    let text = "routes:\n  - match:\n      model_prefix: \"a\n        - \u{a0}\u{3000}\u{a0}retry: x\"\n    retry:\n      max_attempts: 0\n";
    match Config::parse(text) {
        Err(ConfigError::AtLine { message, .. }) => {
            assert!(message.to_string().contains("max_attempts"), "{message}")
        }
        other => panic!("expected a max_attempts error with a line, got {other:?}"),
    }
    // The same in a block scalar, and with other multi-byte spaces.
    for ws in [
        "\u{a0}\u{3000}\u{a0}",
        "\u{2003}\u{a0}",
        "\u{85}\u{85}\u{a0}",
    ] {
        let text = format!(
            "routes:\n  - match:\n      model_prefix: |\n        - {ws}retry: x\n    retry:\n      max_attempts: 0\n"
        );
        assert!(Config::parse(&text).is_err(), "{text:?}");
    }
}
