//! Caller layers: the retry loops that are not Levee.
//!
//! An SDK, a service's wrapper, a naive gateway: each makes up to `attempts`
//! tries, waits a backoff between them, gives up on an attempt after
//! `timeout`, and retries what its `retry_on` list says — which, for the
//! wrappers in the seeds, includes deterministic 400s. Whether it honours
//! `x-should-retry: false` (as the official SDKs do) and `retry-after` is a
//! switch. A layer can run in a bounded pool of workers: a call holds its
//! worker for its whole loop, sleeps included (service time is the
//! retry schedule). These are deliberately simple: they are what Levee
//! replaces, so they are modelled here and not in `levee-policy`.

use levee_config::raw::RawOn;
use levee_policy::backoff::Backoff;
use rand::Rng;
use std::time::Duration;

/// What a layer hears back for one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A response (an error's `x-should-retry: false` is `no_retry`).
    Status {
        status: u16,
        retry_after: Option<Duration>,
        no_retry: bool,
    },
    /// The layer's own attempt timeout fired first.
    TimedOut,
}

impl Reply {
    /// A plain response.
    pub fn status(status: u16) -> Self {
        Reply::Status {
            status,
            retry_after: None,
            no_retry: false,
        }
    }

    /// Whether it is a 2xx.
    pub fn is_success(self) -> bool {
        matches!(self, Reply::Status { status, .. } if (200..300).contains(&status))
    }

    /// What the layer answers its own caller with when it stops on this.
    pub fn passed_on(self) -> Reply {
        match self {
            Reply::TimedOut => Reply::status(504),
            r => r,
        }
    }
}

/// Which failures a layer retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryRule {
    statuses: Vec<u16>,
    any_4xx: bool,
    any_5xx: bool,
    timeout: bool,
    connect_error: bool,
}

impl RetryRule {
    /// The official SDKs' set: 408, 409, 429, 5xx, timeouts, connection errors.
    pub fn sdk_default() -> Self {
        RetryRule {
            statuses: vec![408, 409, 429],
            any_4xx: false,
            any_5xx: true,
            timeout: true,
            connect_error: true,
        }
    }

    /// `[429, 5xx, timeout]`; `any` (every non-2xx, as some wrappers do), `4xx`,
    /// `5xx`, `timeout`, `connect_error`, or a status.
    pub fn parse(on: &[RawOn]) -> Result<Self, String> {
        let mut r = RetryRule {
            statuses: Vec::new(),
            any_4xx: false,
            any_5xx: false,
            timeout: false,
            connect_error: false,
        };
        for o in on {
            match o {
                RawOn::Code(c) if (400..=599).contains(c) => r.statuses.push(*c),
                RawOn::Code(c) => return Err(format!("`{c}` is not an error status (400–599)")),
                RawOn::Name(n) => match n.as_str() {
                    "any" => {
                        r.any_4xx = true;
                        r.any_5xx = true;
                        r.timeout = true;
                        r.connect_error = true;
                    }
                    "4xx" => r.any_4xx = true,
                    "5xx" => r.any_5xx = true,
                    "timeout" => r.timeout = true,
                    "connect_error" => r.connect_error = true,
                    other => {
                        return Err(format!(
                            "`{other}` is not a retry condition: use a status, `4xx`, `5xx`, `any`, `timeout` or `connect_error`"
                        ))
                    }
                },
            }
        }
        Ok(r)
    }

    fn covers(&self, reply: Reply) -> bool {
        match reply {
            Reply::TimedOut => self.timeout,
            Reply::Status { status, .. } => {
                (self.any_4xx && (400..500).contains(&status))
                    || (self.any_5xx && (500..600).contains(&status))
                    || self.statuses.contains(&status)
            }
        }
    }
}

/// A non-Levee retry layer.
#[derive(Clone, Debug)]
pub struct Layer {
    pub name: String,
    /// Tries in all, the first included.
    pub attempts: u32,
    pub backoff: Backoff,
    /// Per-attempt timeout.
    pub timeout: Option<Duration>,
    pub retry: RetryRule,
    pub honours_should_retry: bool,
    pub honours_retry_after: bool,
    /// A bounded pool the layer's calls run in (held for the whole loop).
    pub workers: Option<u32>,
    /// Whether a call stops when its own caller gives up on it. Most servers
    /// do not notice: the loop runs on for nobody.
    pub stops_when_caller_leaves: bool,
    /// Whether attempts carry the remaining time downstream (`x-timeout-ms`).
    pub sends_timeout: bool,
    /// Whether its retries say so (the official SDKs send
    /// `x-stainless-retry-count`). Levee sees it only on the layer right in
    /// front of it; an outer layer's retry arrives as a fresh request.
    pub marks_retries: bool,
    /// The layer stands in the gateway's place.
    pub gateway: bool,
}

/// What a layer does after an attempt's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Answer the caller with this.
    Done(Reply),
    /// Try again after this wait.
    RetryIn(Duration),
}

impl Layer {
    /// After attempt number `attempt` (1-based) came back with `reply`.
    pub fn next<R: Rng + ?Sized>(&self, attempt: u32, reply: Reply, rng: &mut R) -> Next {
        if reply.is_success() || attempt >= self.attempts || !self.retry.covers(reply) {
            return Next::Done(reply.passed_on());
        }
        let mut wait = self.backoff.delay(attempt - 1, rng);
        if let Reply::Status {
            no_retry,
            retry_after,
            ..
        } = reply
        {
            if no_retry && self.honours_should_retry {
                return Next::Done(reply);
            }
            if self.honours_retry_after {
                if let Some(ra) = retry_after {
                    wait = wait.max(ra);
                }
            }
        }
        Next::RetryIn(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use levee_policy::backoff::Jitter;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn wrapper() -> Layer {
        Layer {
            name: "w".into(),
            attempts: 5,
            backoff: Backoff::exponential(1000, 2.0, 60_000, Jitter::None).unwrap(),
            timeout: None,
            retry: RetryRule::parse(&[RawOn::Name("any".into())]).unwrap(),
            honours_should_retry: false,
            honours_retry_after: false,
            workers: None,
            stops_when_caller_leaves: false,
            sends_timeout: true,
            marks_retries: false,
            gateway: false,
        }
    }

    #[test]
    fn seed_003_wrapper_sleeps_one_two_four_eight_on_a_permanent_400() {
        let w = wrapper();
        let mut rng = SmallRng::seed_from_u64(1);
        let waits: Vec<Next> = (1..=5)
            .map(|a| w.next(a, Reply::status(400), &mut rng))
            .collect();
        let secs = |s| Next::RetryIn(Duration::from_secs(s));
        assert_eq!(waits[..4], [secs(1), secs(2), secs(4), secs(8)]);
        assert_eq!(waits[4], Next::Done(Reply::status(400)));
    }

    #[test]
    fn should_retry_false_stops_only_a_layer_that_honours_it() {
        let mut w = wrapper();
        let mut rng = SmallRng::seed_from_u64(1);
        let levee_400 = Reply::Status {
            status: 400,
            retry_after: None,
            no_retry: true,
        };
        assert!(matches!(w.next(1, levee_400, &mut rng), Next::RetryIn(_)));
        w.honours_should_retry = true;
        assert_eq!(w.next(1, levee_400, &mut rng), Next::Done(levee_400));
    }

    #[test]
    fn a_timeout_is_passed_on_as_504() {
        let mut w = wrapper();
        w.attempts = 1;
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(
            w.next(1, Reply::TimedOut, &mut rng),
            Next::Done(Reply::status(504))
        );
    }
}
