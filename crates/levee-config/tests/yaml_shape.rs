//! Mistakes in the shape of the YAML itself: a key given twice, a key
//! indented one level too little, a tab in the indentation. Each is refused
//! with the line to fix and what to do there.

use levee_config::{parse_callers, Config, ConfigError};

/// The error's line and message; panics when it has no line.
fn refused(text: &str) -> (usize, String) {
    match Config::parse(text) {
        Err(ConfigError::AtLine { line, message }) => (line, message.to_string()),
        other => panic!("expected an error with a line for\n{text}\ngot {other:?}"),
    }
}

const PROVIDER_A: &str = "  a:\n    api: openai\n    base_url: http://127.0.0.1:1\n";

#[test]
fn a_provider_defined_twice_is_refused_naming_both_lines() {
    // The second block used to replace the first without a word.
    let text = format!(
        "providers:\n{PROVIDER_A}  b: {{ api: anthropic, base_url: \"http://127.0.0.1:2\" }}\n  a:\n    api: anthropic\n    base_url: http://127.0.0.1:3\nroutes:\n  - targets: [a]\n"
    );
    let (line, msg) = refused(&text);
    assert_eq!(line, 6, "{msg}");
    assert!(
        msg.contains("provider `a` is defined twice, on lines 2 and 6")
            && msg.contains("another name"),
        "{msg}"
    );
}

#[test]
fn a_key_given_twice_anywhere_names_both_lines() {
    for (text, line, want) in [
        (
            "listen: 127.0.0.1:1\nadmin: { listen: 127.0.0.1:2 }\nlisten: 127.0.0.1:3\n",
            3,
            "`listen` is given at the top level twice, on lines 1 and 3",
        ),
        (
            "providers:\n  a:\n    api: openai\n    base_url: http://127.0.0.1:1\n    api: anthropic\n",
            5,
            "`api` is given under `providers.a` twice, on lines 3 and 5",
        ),
        (
            "routes:\n  - match: { model_prefix: x/ }\n  - match: { model_prefix: y/ }\n    retry:\n      max_attempts: 2\n      max_attempts: 3\n",
            6,
            "`max_attempts` is given under `routes[1].retry` twice, on lines 5 and 6",
        ),
        (
            "routes:\n  - match: { model_prefix: x/, model_prefix: y/ }\n",
            2,
            "`model_prefix` is given under `routes[0].match` twice, both on line 2",
        ),
    ] {
        let (got, msg) = refused(text);
        assert_eq!(got, line, "{msg}");
        assert!(msg.contains(want) && msg.contains("keep one"), "{msg}");
    }
    match parse_callers("- name: a\n  deadline: 5s\n  name: b\n") {
        Err(ConfigError::AtLine { line, message }) => {
            let msg = message.to_string();
            assert_eq!(line, 3, "{msg}");
            assert!(
                msg.contains("`name` is given under `[0]` twice, on lines 1 and 3"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_key_dedented_out_of_its_provider_names_the_provider_it_left() {
    // Read as a provider named `api_key_env`.
    let (line, msg) = refused(&format!("providers:\n{PROVIDER_A}  api_key_env: KEY\n"));
    assert_eq!(line, 5, "{msg}");
    assert!(
        msg.contains("`api_key_env` on line 5 is indented less than the lines above it, which leaves it outside `a` (line 2)")
            && msg.contains("indent it by 2 more spaces"),
        "{msg}"
    );
    // `base_url` dedented (optional for the cloud kinds, so the reader
    // takes it for a provider of that name): the line to fix is named.
    let (line, msg) =
        refused("providers:\n  a:\n    api: openai\n  base_url: http://127.0.0.1:1\n");
    assert_eq!(line, 4, "{msg}");
    assert!(
        msg.contains("`base_url` on line 4 is indented less than the lines above it, which leaves it outside `a` (line 2)")
            && msg.contains("indent it by 2 more spaces"),
        "{msg}"
    );
}

#[test]
fn a_key_dedented_under_routes_names_the_route_or_block_it_left() {
    // Out of the list item, to the column of its `-`.
    let (line, msg) = refused(
        "providers:\n  x: { api: openai, base_url: \"http://127.0.0.1:1\" }\nroutes:\n  - match:\n      model_prefix: a/\n  targets: [x]\n",
    );
    assert_eq!(line, 6, "{msg}");
    assert!(
        msg.contains("`targets` on line 6 is indented less than the lines above it, which leaves it outside the list item on line 4"),
        "{msg}"
    );
    // Out of `retry:`, into the route.
    let (line, msg) = refused(
        "routes:\n  - match: { model_prefix: a/ }\n    retry:\n      max_attempts: 3\n    backoff: { base_ms: 10 }\n",
    );
    assert_eq!(line, 5, "{msg}");
    assert!(
        msg.contains("routes[0]: unknown field `backoff`")
            && msg.contains("which leaves it outside `retry` (line 3)"),
        "{msg}"
    );
}

#[test]
fn an_unknown_key_after_a_nested_block_gets_no_indentation_hint() {
    // Indented under `retry:` it would be just as unknown: no hint.
    let (line, msg) = refused(
        "routes:\n  - match: { model_prefix: a/ }\n    retry:\n      max_attempts: 3\n    retries: 2\n",
    );
    assert_eq!(line, 5, "{msg}");
    assert!(msg.contains("unknown field `retries`"), "{msg}");
    assert!(!msg.contains("indented"), "{msg}");
}

#[test]
fn a_tab_in_indentation_is_named_with_its_line() {
    for (text, line, column) in [
        ("providers:\n\ta:\n    api: openai\n", 2, 1),
        ("providers:\n  a:\n  \tapi: openai\n", 3, 3),
        (
            "providers:\n  a:\n    api: openai\n\t  base_url: http://127.0.0.1:1\n",
            4,
            1,
        ),
        ("routes:\n  -\ttargets: [a]\n", 2, 4),
    ] {
        let (got, msg) = refused(text);
        assert_eq!(got, line, "{text:?}: {msg}");
        assert!(
            msg.contains(&format!(
                "tabs are not allowed in YAML indentation (a tab at column {column})"
            )) && msg.contains("indent with spaces"),
            "{text:?}: {msg}"
        );
    }
    // A tab between a key and its value is not indentation.
    Config::parse("listen:\t127.0.0.1:1\n").expect("a tab after the colon is accepted");
}
