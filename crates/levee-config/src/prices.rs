//! What a model's tokens cost: the config's `prices:` (per provider and
//! model, exact), else a built-in list price for the vendors Levee knows
//! by their own hosts (OpenAI's and Anthropic's APIs, and Anthropic's
//! models on Bedrock at their list price). Anything else has no price: its
//! spend is unknown, never 0.
//!
//! The built-in prices were taken from the vendors' price pages on
//! [`PRICES_TAKEN`]; a price that changed since is set in `prices:`.

use crate::platform::Platform;
pub use crate::platform::Vendor;
use crate::values::Api;

/// When the built-in prices were taken from the vendors' price pages.
pub const PRICES_TAKEN: &str = "2025-08-01";

/// US dollars per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Input read from the provider's prompt cache, where it bills it apart.
    pub cached_input_per_mtok: Option<f64>,
    /// Input written to the prompt cache, where it bills it apart.
    pub cache_write_per_mtok: Option<f64>,
}

impl Price {
    const fn of(input: f64, output: f64, cached: f64, write: Option<f64>) -> Price {
        Price {
            input_per_mtok: input,
            output_per_mtok: output,
            cached_input_per_mtok: Some(cached),
            cache_write_per_mtok: write,
        }
    }

    /// The cost of `input` and `output` tokens, in US dollars.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        self.cost_cached(input, output, Cached::default())
    }

    /// The cost of an answer's tokens with some of its input read from or
    /// written to the provider's prompt cache, each at its own price where
    /// the price has one (else at the input price).
    pub fn cost_cached(&self, input: u64, output: u64, cached: Cached) -> f64 {
        let read = u64::from(cached.read);
        let write = u64::from(cached.write);
        // OpenAI counts cached tokens inside its input; Anthropic apart.
        let fresh = if cached.in_input {
            input.saturating_sub(read + write)
        } else {
            input
        };
        let read_price = self.cached_input_per_mtok.unwrap_or(self.input_per_mtok);
        let write_price = self.cache_write_per_mtok.unwrap_or(self.input_per_mtok);
        (fresh as f64 * self.input_per_mtok
            + read as f64 * read_price
            + write as f64 * write_price
            + output as f64 * self.output_per_mtok)
            / 1e6
    }

    /// This price less a fraction `discount` (0.2: 20 % off).
    pub fn discounted(self, discount: f64) -> Price {
        let off = |x: f64| x * (1.0 - discount);
        Price {
            input_per_mtok: off(self.input_per_mtok),
            output_per_mtok: off(self.output_per_mtok),
            cached_input_per_mtok: self.cached_input_per_mtok.map(off),
            cache_write_per_mtok: self.cache_write_per_mtok.map(off),
        }
    }
}

/// An answer's input tokens read from (`read`) and written to (`write`)
/// the provider's prompt cache, as its usage reports them; `in_input`:
/// they are part of its input count (OpenAI's `cached_tokens`), not apart
/// from it (Anthropic's `cache_read_input_tokens` and
/// `cache_creation_input_tokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cached {
    pub read: u32,
    pub write: u32,
    pub in_input: bool,
}

/// One `prices:` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceEntry {
    /// The provider's index in `providers`.
    pub provider: usize,
    /// The model, as the provider is sent it.
    pub model: String,
    pub price: Price,
}

/// OpenAI's list prices: a model name, or a dated snapshot of it
/// (`gpt-4o-2024-08-06`).
const OPENAI: &[(&str, Price)] = &[
    ("gpt-4.1", Price::of(2.00, 8.00, 0.50, None)),
    ("gpt-4.1-mini", Price::of(0.40, 1.60, 0.10, None)),
    ("gpt-4.1-nano", Price::of(0.10, 0.40, 0.025, None)),
    ("gpt-4o", Price::of(2.50, 10.00, 1.25, None)),
    ("gpt-4o-mini", Price::of(0.15, 0.60, 0.075, None)),
    ("o3", Price::of(2.00, 8.00, 0.50, None)),
    ("o4-mini", Price::of(1.10, 4.40, 0.275, None)),
    ("text-embedding-3-small", Price::of(0.02, 0.0, 0.02, None)),
    ("text-embedding-3-large", Price::of(0.13, 0.0, 0.13, None)),
];

/// Anthropic's list prices (cache reads and 5-minute cache writes).
const ANTHROPIC: &[(&str, Price)] = &[
    ("claude-opus-4-1", Price::of(15.0, 75.0, 1.50, Some(18.75))),
    ("claude-opus-4", Price::of(15.0, 75.0, 1.50, Some(18.75))),
    ("claude-sonnet-4-5", Price::of(3.0, 15.0, 0.30, Some(3.75))),
    ("claude-sonnet-4", Price::of(3.0, 15.0, 0.30, Some(3.75))),
    ("claude-3-7-sonnet", Price::of(3.0, 15.0, 0.30, Some(3.75))),
    ("claude-haiku-4-5", Price::of(1.0, 5.0, 0.10, Some(1.25))),
    ("claude-3-5-haiku", Price::of(0.80, 4.0, 0.08, Some(1.0))),
];

/// Whether `model` is `name` or a dated or versioned form of it: the
/// name, then `-` and a digit (`gpt-4o-2024-08-06`, `claude-sonnet-4-5-
/// 20250929`), or `@` (Vertex), or `-v` (Bedrock). `gpt-4o-mini` is not
/// `gpt-4o`.
fn names(model: &str, name: &str) -> bool {
    match model.strip_prefix(name) {
        Some("") => true,
        Some(rest) => {
            let b = rest.as_bytes();
            (b[0] == b'-' && b.get(1).is_some_and(u8::is_ascii_digit))
                || b[0] == b'@'
                || rest.starts_with("-v")
                || rest.starts_with(":")
        }
        None => false,
    }
}

fn listed(table: &[(&str, Price)], model: &str) -> Option<Price> {
    // The longest name that fits: `gpt-4.1-mini` before `gpt-4.1`.
    table
        .iter()
        .filter(|(name, _)| names(model, name))
        .max_by_key(|(name, _)| name.len())
        .map(|(_, p)| *p)
}

/// The built-in list price of `model` at a provider of `api` on `platform`
/// at `base_url` (`None`: not a vendor Levee knows the prices of).
pub fn builtin(platform: &Platform, api: Api, base_url: &http::Uri, model: &str) -> Option<Price> {
    builtin_of(platform, platform.list_vendor(api, base_url), model)
}

/// [`builtin`] for a provider whose vendor is known already
/// ([`Platform::list_vendor`], kept with the provider: reading the host
/// out of the base URL cost ~400 instructions a request).
pub fn builtin_of(platform: &Platform, vendor: Option<Vendor>, model: &str) -> Option<Price> {
    let name = platform.list_name(model)?;
    match vendor? {
        Vendor::OpenAi => listed(OPENAI, name),
        Vendor::Anthropic => listed(ANTHROPIC, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dated_name_has_its_models_price_and_a_longer_name_its_own() {
        let openai: http::Uri = "https://api.openai.com/v1".parse().unwrap();
        let p = |m| builtin(&Platform::Direct, Api::OpenAi, &openai, m);
        assert_eq!(p("gpt-4o-2024-08-06").map(|p| p.input_per_mtok), Some(2.50));
        assert_eq!(p("gpt-4o-mini").map(|p| p.input_per_mtok), Some(0.15));
        assert_eq!(p("gpt-4.1-mini").map(|p| p.output_per_mtok), Some(1.60));
        assert_eq!(p("gpt-4o-audio-preview"), None);
        let vllm: http::Uri = "http://10.0.0.5:8000/v1".parse().unwrap();
        assert_eq!(
            builtin(&Platform::Direct, Api::OpenAi, &vllm, "gpt-4o"),
            None
        );
        let bedrock = Platform::Bedrock {
            region: "us-east-1".into(),
            profile: None,
            credentials_file: None,
        };
        let b = builtin(
            &bedrock,
            Api::Anthropic,
            &openai,
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        );
        assert_eq!(b.map(|p| p.output_per_mtok), Some(15.0));
        assert!((Price::of(3.0, 15.0, 0.3, None).cost(1_000, 2_000) - 0.033).abs() < 1e-12);
    }

    #[test]
    fn cached_input_is_priced_apart_in_either_dialects_count() {
        let p = Price::of(2.0, 8.0, 0.5, Some(2.5));
        // OpenAI: 1,000 input of which 800 cached: 200 × 2 + 800 × 0.5.
        let openai = Cached {
            read: 800,
            write: 0,
            in_input: true,
        };
        assert!((p.cost_cached(1_000, 0, openai) - 0.0008).abs() < 1e-12);
        // Anthropic: 200 fresh, 800 read and 100 written, counted apart.
        let anthropic = Cached {
            read: 800,
            write: 100,
            in_input: false,
        };
        let want = (200.0 * 2.0 + 800.0 * 0.5 + 100.0 * 2.5) / 1e6;
        assert!((p.cost_cached(200, 0, anthropic) - want).abs() < 1e-12);
        // A price without a cached rate bills cached input as input.
        let plain = Price {
            cached_input_per_mtok: None,
            ..p
        };
        assert!((plain.cost_cached(1_000, 0, openai) - 0.002).abs() < 1e-12);
        let off = p.discounted(0.25);
        assert_eq!(off.input_per_mtok, 1.5);
        assert_eq!(off.cached_input_per_mtok, Some(0.375));
    }
}
