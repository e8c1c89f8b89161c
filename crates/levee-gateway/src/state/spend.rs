//! Callers' spend shared by the replicas: each caller's dollars per budget
//! period and its requests and tokens per minute (keys under one hash tag
//! per caller, so a Redis Cluster keeps a caller's keys in one slot), and
//! the hourly ledger (one hash per hour, a field per series and measure).
//! Every key expires when nothing can read it any more.

use super::{RedisState, StateUse};
use crate::spend::ledger::{Row, SeriesNames, HOURS_KEPT};
use crate::spend::PERIODS;
use levee_policy::spend::{minute, Period, Seen};

/// Between a series' names and its measure in a ledger field: a byte no
/// name has.
const SEP: char = '\u{1f}';

impl RedisState {
    fn caller_key(&self, name: &str, suffix: &str) -> String {
        format!("{{{}:sp:{name}}}{suffix}", self.prefix())
    }

    fn budget_key(&self, name: &str, period: Period, unix_ms: u64) -> String {
        let suffix = format!("usd:{}:{}", period.label(), period.start(unix_ms));
        self.caller_key(name, &suffix)
    }

    fn ledger_key(&self, hour: u64) -> String {
        format!("{{{}:ledger}}h:{hour}", self.prefix())
    }

    /// What every replica has seen of caller `name` at `unix_ms` (its
    /// spend over `period`); `None`: Redis unavailable.
    pub(crate) async fn spend_seen(
        &self,
        name: &str,
        period: Option<Period>,
        unix_ms: u64,
    ) -> Option<Seen> {
        let m = minute(unix_ms);
        let mut cmd = redis::cmd("MGET");
        cmd.arg(self.caller_key(name, &format!("req:{}", m.saturating_sub(1))))
            .arg(self.caller_key(name, &format!("req:{m}")))
            .arg(self.caller_key(name, &format!("tok:{}", m.saturating_sub(1))))
            .arg(self.caller_key(name, &format!("tok:{m}")));
        if let Some(p) = period {
            cmd.arg(self.budget_key(name, p, unix_ms));
        }
        let got: Vec<Option<String>> = self
            .query_within(StateUse::Spend, cmd, self.timeout())
            .await?;
        let int = |i: usize| {
            got.get(i)
                .and_then(Option::as_deref)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let spent_usd = got
            .get(4)
            .and_then(Option::as_deref)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        Some(Seen {
            spent_usd,
            requests: (int(0), int(1)),
            tokens: (int(2), int(3)),
        })
    }

    /// Counts a request admitted for caller `name` at `unix_ms`.
    pub(crate) async fn count_caller_request(&self, name: &str, unix_ms: u64) -> Option<()> {
        let key = self.caller_key(name, &format!("req:{}", minute(unix_ms)));
        let mut pipe = redis::pipe();
        pipe.incr(&key, 1).ignore().expire(&key, 180).ignore();
        self.pipe(StateUse::Spend, &pipe).await
    }

    /// Charges caller `name` `usd` and `tokens` at `unix_ms`: its spend in
    /// each budget period and its tokens this minute.
    pub(crate) async fn charge_caller(
        &self,
        name: &str,
        usd: f64,
        tokens: u64,
        unix_ms: u64,
    ) -> Option<()> {
        let mut pipe = redis::pipe();
        if usd > 0.0 {
            for p in PERIODS {
                let key = self.budget_key(name, p, unix_ms);
                let ttl = (p.end(unix_ms) - p.start(unix_ms)) / 1000 + 86_400;
                pipe.cmd("INCRBYFLOAT").arg(&key).arg(usd).ignore();
                pipe.expire(&key, i64::try_from(ttl).unwrap_or(i64::MAX))
                    .ignore();
            }
        }
        let key = self.caller_key(name, &format!("tok:{}", minute(unix_ms)));
        pipe.incr(&key, tokens).ignore().expire(&key, 180).ignore();
        self.pipe(StateUse::Spend, &pipe).await
    }

    /// Adds `row` to a series of the shared ledger in `hour`.
    pub(crate) async fn ledger_add(&self, hour: u64, names: &SeriesNames, row: &Row) -> Option<()> {
        let key = self.ledger_key(hour);
        let series = format!(
            "{}{SEP}{}{SEP}{}{SEP}{}{SEP}{}{SEP}",
            names.caller, names.route, names.provider, names.model, names.outcome
        );
        let mut pipe = redis::pipe();
        if row.usd > 0.0 {
            pipe.hincr(&key, format!("{series}usd"), row.usd).ignore();
        }
        let counts = [
            ("in", row.input_tokens),
            ("out", row.output_tokens),
            ("unpriced", row.unpriced_tokens),
            ("n", row.charges),
            ("partial", row.partial),
        ];
        for (m, n) in counts.into_iter().filter(|(_, n)| *n > 0) {
            pipe.hincr(&key, format!("{series}{m}"), n).ignore();
        }
        let ttl = i64::try_from((HOURS_KEPT + 24) * 3600).unwrap_or(i64::MAX);
        pipe.expire(&key, ttl).ignore();
        self.pipe(StateUse::Spend, &pipe).await
    }

    /// Every series' total in the shared ledger over the hours from
    /// `from_hour` to `to_hour`; `None`: Redis unavailable.
    pub(crate) async fn ledger_since(
        &self,
        from_hour: u64,
        to_hour: u64,
    ) -> Option<Vec<(SeriesNames, Row)>> {
        let mut pipe = redis::pipe();
        for h in from_hour..=to_hour {
            pipe.hgetall(self.ledger_key(h));
        }
        let hours: Vec<Vec<(String, String)>> = self.pipe(StateUse::Spend, &pipe).await?;
        let mut out: Vec<(SeriesNames, Row)> = Vec::new();
        for (field, value) in hours.into_iter().flatten() {
            let mut parts = field.split(SEP);
            let (Some(caller), Some(route), Some(provider), Some(model), Some(outcome), Some(m)) = (
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
            ) else {
                continue;
            };
            let outcome = if outcome == "undelivered" {
                "undelivered"
            } else {
                "delivered"
            };
            let names = SeriesNames {
                caller: caller.into(),
                route: route.into(),
                provider: provider.into(),
                model: model.into(),
                outcome,
            };
            let i = match out.iter().position(|(n, _)| *n == names) {
                Some(i) => i,
                None => {
                    out.push((names, Row::default()));
                    out.len() - 1
                }
            };
            let row = &mut out[i].1;
            let int = || value.parse::<u64>().unwrap_or(0);
            match m {
                "usd" => row.usd += value.parse::<f64>().unwrap_or(0.0),
                "in" => row.input_tokens += int(),
                "out" => row.output_tokens += int(),
                "unpriced" => row.unpriced_tokens += int(),
                "n" => row.charges += int(),
                "partial" => row.partial += int(),
                _ => {}
            }
        }
        Some(out)
    }
}
