//! The hourly ledger of spend: for each hour, each series (caller, route,
//! provider, model, outcome) with its dollars, tokens and answers. Kept for
//! 32 days (768 hours); one series per label set, so it is bounded as the
//! metrics' labels are (the caller label keeps `limits.caller_names`
//! names). Recording allocates only for a new series or a new hour.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::Arc;

/// Hours the ledger keeps.
pub(crate) const HOURS_KEPT: u64 = 32 * 24;

/// A series by number: the config generation, route, provider, fault
/// domain (model), caller slot, and whether the work was delivered.
pub(crate) type SeriesKey = (u64, u32, u32, u16, u32, bool);

/// A series' names, made once per series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SeriesNames {
    pub caller: String,
    pub route: String,
    pub provider: String,
    pub model: String,
    pub outcome: &'static str,
}

/// What one series spent in one hour (or any span, summed).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Row {
    /// US dollars of the tokens whose price is known.
    pub usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Tokens with no known price (their dollars are unknown, not 0).
    pub unpriced_tokens: u64,
    /// Answers (and cut-short attempts) charged.
    pub charges: u64,
    /// Of them, counts that are partial: what arrived of an attempt cut
    /// short, or its input estimated from the request.
    pub partial: u64,
}

impl Row {
    pub(crate) fn add(&mut self, o: &Row) {
        self.usd += o.usd;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.unpriced_tokens += o.unpriced_tokens;
        self.charges += o.charges;
        self.partial += o.partial;
    }
}

#[derive(Debug)]
struct Hour {
    hour: u64,
    rows: Vec<Row>,
}

/// The ledger.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// Hashed with FxHash: the keys are Levee's own indices, never a
    /// caller's bytes, so resisting hash flooding buys nothing, and
    /// SipHash cost ~550 instructions a lookup (one per answer).
    index: FxHashMap<SeriesKey, usize>,
    names: Vec<Arc<SeriesNames>>,
    hours: VecDeque<Hour>,
}

impl Ledger {
    /// Adds `row` to series `key` (named by `names` when new) in the hour
    /// `hour` (hours since the epoch); returns the series' names.
    pub(crate) fn add(
        &mut self,
        key: SeriesKey,
        names: impl FnOnce() -> SeriesNames,
        hour: u64,
        row: &Row,
    ) -> Arc<SeriesNames> {
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                self.names.push(Arc::new(names()));
                self.index.insert(key, self.names.len() - 1);
                self.names.len() - 1
            }
        };
        if self.hours.back().is_none_or(|h| h.hour < hour) {
            self.hours.push_back(Hour {
                hour,
                rows: Vec::new(),
            });
            while self
                .hours
                .front()
                .is_some_and(|h| h.hour + HOURS_KEPT <= hour)
            {
                self.hours.pop_front();
            }
        }
        // A clock stepped back lands in the latest hour.
        if let Some(h) = self.hours.back_mut() {
            if h.rows.len() <= i {
                h.rows.resize(i + 1, Row::default());
            }
            h.rows[i].add(row);
        }
        Arc::clone(&self.names[i])
    }

    /// Every series' total over the hours from `from_hour` on.
    pub(crate) fn since(&self, from_hour: u64) -> Vec<(SeriesNames, Row)> {
        let mut sums = vec![Row::default(); self.names.len()];
        for h in self.hours.iter().filter(|h| h.hour >= from_hour) {
            for (i, r) in h.rows.iter().enumerate() {
                sums[i].add(r);
            }
        }
        self.names
            .iter()
            .map(|n| SeriesNames::clone(n))
            .zip(sums)
            .filter(|(_, r)| r.charges > 0)
            .collect()
    }
}

/// What a report groups by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum By {
    Caller,
    Route,
    Provider,
    Model,
    Outcome,
}

impl By {
    pub(crate) fn parse(s: &str) -> Option<By> {
        Some(match s {
            "caller" => By::Caller,
            "route" => By::Route,
            "provider" => By::Provider,
            "model" => By::Model,
            "outcome" => By::Outcome,
            _ => return None,
        })
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            By::Caller => "caller",
            By::Route => "route",
            By::Provider => "provider",
            By::Model => "model",
            By::Outcome => "outcome",
        }
    }

    fn of(self, n: &SeriesNames) -> &str {
        match self {
            By::Caller => &n.caller,
            By::Route => &n.route,
            By::Provider => &n.provider,
            By::Model => &n.model,
            By::Outcome => n.outcome,
        }
    }
}

/// One group of a report: its total, and its delivered and undelivered
/// dollars apart.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Group {
    pub name: String,
    pub total: Row,
    pub undelivered_usd: f64,
}

/// Sums series by `by`, the largest spend first.
pub(crate) fn group(series: &[(SeriesNames, Row)], by: By) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (names, row) in series {
        let name = by.of(names);
        let g = match groups.iter().position(|g| g.name == name) {
            Some(i) => &mut groups[i],
            None => {
                groups.push(Group {
                    name: name.to_string(),
                    ..Group::default()
                });
                let last = groups.len() - 1;
                &mut groups[last]
            }
        };
        g.total.add(row);
        if names.outcome == "undelivered" {
            g.undelivered_usd += row.usd;
        }
    }
    groups.sort_by(|a, b| {
        b.total
            .usd
            .total_cmp(&a.total.usd)
            .then(a.name.cmp(&b.name))
    });
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(caller: &str, outcome: &'static str) -> SeriesNames {
        SeriesNames {
            caller: caller.into(),
            route: "r".into(),
            provider: "p".into(),
            model: "m".into(),
            outcome,
        }
    }

    fn usd(x: f64) -> Row {
        Row {
            usd: x,
            input_tokens: 10,
            charges: 1,
            ..Row::default()
        }
    }

    #[test]
    fn the_ledger_sums_hours_and_groups_with_the_undelivered_share() {
        let mut l = Ledger::default();
        let a = (1, 0, 0, 0, 0, true);
        let b = (1, 0, 0, 0, 1, true);
        let b_lost = (1, 0, 0, 0, 1, false);
        l.add(a, || names("a", "delivered"), 100, &usd(1.0));
        l.add(a, || names("a", "delivered"), 101, &usd(2.0));
        l.add(b, || names("b", "delivered"), 101, &usd(0.5));
        l.add(b_lost, || names("b", "undelivered"), 101, &usd(4.0));
        let all = group(&l.since(0), By::Caller);
        assert_eq!(all[0].name, "b");
        assert_eq!(all[0].total.usd, 4.5);
        assert_eq!(all[0].undelivered_usd, 4.0);
        assert_eq!(all[1].total.usd, 3.0);
        let last_hour = group(&l.since(101), By::Caller);
        assert_eq!(
            last_hour
                .iter()
                .find(|g| g.name == "a")
                .map(|g| g.total.usd),
            Some(2.0)
        );
        let by_outcome = group(&l.since(0), By::Outcome);
        assert_eq!(by_outcome[0].name, "undelivered");
    }

    #[test]
    fn hours_older_than_the_kept_span_are_dropped() {
        let mut l = Ledger::default();
        let k = (1, 0, 0, 0, 0, true);
        l.add(k, || names("a", "delivered"), 10, &usd(1.0));
        l.add(k, || names("a", "delivered"), 10 + HOURS_KEPT, &usd(1.0));
        assert_eq!(group(&l.since(0), By::Caller)[0].total.usd, 1.0);
    }
}
