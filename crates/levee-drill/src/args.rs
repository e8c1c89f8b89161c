//! Flags of `levee drill`, checked and turned into a [`Plan`].

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::DrillError;
use crate::target::{self, Target};

/// Most requests one drill may send (rate × duration).
pub const MAX_REQUESTS: u64 = 1_000_000;
/// Highest `--rate`.
pub const MAX_RATE: f64 = 10_000.0;
/// Longest `--duration`.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// Longest `--timeout-ms`.
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// Flags of `levee drill`.
#[derive(Debug, Clone, clap::Args)]
pub struct DrillArgs {
    /// Base URL of the running gateway (`levee serve`); loopback only.
    #[arg(long, value_name = "URL")]
    pub gateway: String,
    /// Base URL of the `levee mock` behind it; its faults are set at start
    /// (`POST /_mock/faults`) and its stats polled every 100 ms. Loopback only.
    #[arg(long, value_name = "URL")]
    pub mock: String,
    /// Logical requests started per second, open loop: each starts on schedule
    /// whether or not earlier ones were answered.
    #[arg(long, default_value_t = 400.0, value_name = "PER_SECOND")]
    pub rate: f64,
    /// How long requests keep starting (`90s`, `500ms`, `2m`).
    #[arg(long, default_value = "90s", value_name = "DURATION")]
    pub duration: String,
    /// One mock fault as `key=value,...` (e.g. `status=503,retry_after=2,from=20s,to=50s`;
    /// `latency.p50=200ms` nests). Windows count from the drill's start; the
    /// report's fault window spans the faults that have `from` or `to`. Repeatable.
    #[arg(long = "fault", value_name = "K=V,...")]
    pub faults: Vec<String>,
    /// Print exactly one JSON object (the report) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also draw upstream requests/s over time, fault window shaded, as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Deadline each request carries as `x-timeout-ms`; an answer counts as on
    /// time when it arrives within this plus 50 ms.
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    pub timeout_ms: u64,
    /// Seed for `--arrivals poisson` (same seed, same schedule).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,
    /// Arrival schedule: evenly spaced, or a Poisson process of the same mean rate.
    #[arg(long, value_enum, default_value_t = Arrivals::Even)]
    pub arrivals: Arrivals,
    /// The `model` each chat completion asks for (picks the gateway's route).
    #[arg(long, default_value = "drill", value_name = "MODEL")]
    pub model: String,
    /// What one answer the provider generates costs, in US dollars, for the
    /// report's `cost_usd` (every answer the mock generated, read or not)
    /// and `undelivered_usd` (those no caller received). The default is a
    /// chat turn of 1,000 input and 500 output tokens at gpt-4.1's list
    /// price ($2 and $8 per million).
    #[arg(long, default_value_t = 0.006, value_name = "USD")]
    pub answer_usd: f64,
    /// The gateway's admin listener (`http://127.0.0.1:9090`): its
    /// `levee_upstream_attempts_total` is read before and after, and the
    /// report counts the attempts by result (connect errors and timeouts
    /// when the provider is black-holed). Loopback only.
    #[arg(long, value_name = "URL")]
    pub gateway_admin: Option<String>,
    /// Faults outside the provider: the state store and the gateway itself.
    #[command(flatten)]
    pub exercise: Exercise,
}

/// The other two exercises: pause the shared state store, stop a replica.
#[derive(Debug, Clone, clap::Args)]
pub struct Exercise {
    /// Pause the gateway's Redis state store mid-run (`CLIENT PAUSE ms ALL`),
    /// e.g. `redis://127.0.0.1:6379`; loopback only. Every request then
    /// carries an `idempotency-key`, and the report counts how many ran
    /// unshared (`x-levee-idempotency: local`).
    #[arg(long, value_name = "REDIS_URL")]
    pub pause_state: Option<String>,
    /// When the pause starts, since the drill's start.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub pause_at: String,
    /// How long the state store stays paused.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub pause_for: String,
    /// Kill the gateway's Redis primary mid-run (`SHUTDOWN NOSAVE NOW
    /// FORCE`), e.g. `redis://127.0.0.1:6379`; loopback only. With a
    /// Sentinel-managed pair the sentinel then promotes the replica. Every
    /// request carries an `idempotency-key`; after the run each key answered
    /// before the kill is sent again, and one not replayed ran twice.
    #[arg(long, value_name = "REDIS_URL")]
    pub kill_state: Option<String>,
    /// When the primary is killed, since the drill's start.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub kill_at: String,
    /// A second gateway replica: callers fail over as `levee_client` does —
    /// one immediate attempt on the other replica when one sent no response
    /// at all, never after an HTTP answer, never with a sleep; the replica
    /// that answered becomes the first choice. Loopback only.
    #[arg(long, value_name = "URL")]
    pub failover: Option<String>,
    /// Stop this gateway replica's process mid-run (a signal to the PID).
    #[arg(long, value_name = "PID")]
    pub stop_pid: Option<u32>,
    /// When to stop it, since the drill's start.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub stop_at: String,
    /// `term` (a deploy: the replica drains) or `kill` (a crash).
    #[arg(long, value_enum, default_value_t = StopSignal::Term)]
    pub stop_signal: StopSignal,
}

impl Default for Exercise {
    fn default() -> Self {
        Exercise {
            pause_state: None,
            pause_at: "1s".into(),
            pause_for: "2s".into(),
            kill_state: None,
            kill_at: "1s".into(),
            failover: None,
            stop_pid: None,
            stop_at: "1s".into(),
            stop_signal: StopSignal::Term,
        }
    }
}

/// How a replica is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StopSignal {
    #[default]
    Term,
    Kill,
}

/// A pause of the Redis state store.
#[derive(Debug, Clone)]
pub struct StatePause {
    /// `redis://HOST:PORT[/DB]`, host loopback.
    pub url: String,
    pub at: Duration,
    pub length: Duration,
}

impl Plan {
    /// Whether every request carries an `idempotency-key` (the state
    /// store's exercises count what ran unshared, or twice).
    pub fn keyed(&self) -> bool {
        self.pause.is_some() || self.kill.is_some()
    }
}

/// Killing the state store's primary.
#[derive(Debug, Clone)]
pub struct StateKill {
    /// `redis://HOST:PORT[/DB]`, host loopback.
    pub url: String,
    pub at: Duration,
}

/// Stopping one replica.
#[derive(Debug, Clone)]
pub struct ReplicaStop {
    /// The process to signal; `None` when the caller stops it (a library
    /// user passing its own stop, as the tests do).
    pub pid: Option<u32>,
    pub signal: StopSignal,
    pub at: Duration,
}

/// How request start times are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arrivals {
    Even,
    Poisson,
}

/// A checked drill: what to send where, for how long.
#[derive(Debug, Clone)]
pub struct Plan {
    pub gateway: Target,
    pub mock: Target,
    /// Where to write the SVG plot, if anywhere.
    pub plot: Option<PathBuf>,
    /// Logical requests started per second, for `duration`.
    /// Calls a second (`--rate`) for the run's length (`--duration`).
    pub rate: f64,
    pub duration: Duration,
    /// From the earliest `from` to the latest `to` among faults that have
    /// either (a missing `from` is the start, a missing `to` the run's end);
    /// the whole run when no fault has either; `None` without faults.
    pub fault_window: Option<(Duration, Duration)>,
    /// Each request's deadline (`--timeout-ms`).
    pub timeout: Duration,
    /// Seed for `--arrivals poisson` (same seed, same schedule).
    pub seed: u64,
    /// The `--fault` flags as given, for the human report.
    pub fault_text: Vec<String>,
    /// `--pause-state`: pause the state store mid-run.
    pub pause: Option<StatePause>,
    /// `--kill-state`: kill the state store's primary mid-run.
    pub kill: Option<StateKill>,
    /// `--failover`: the second replica callers fail over to.
    pub failover: Option<Target>,
    /// `--stop-pid`: stop a replica mid-run.
    pub stop: Option<ReplicaStop>,
    /// How calls arrive (`--arrivals`).
    pub arrivals: Arrivals,
    /// The model every call asks for (`--model`).
    pub model: String,
    /// What one generated answer costs (US dollars).
    pub answer_usd: f64,
    /// The gateway's admin listener, when given.
    pub gateway_admin: Option<Target>,
    /// The fault document POSTed to the mock at start (`{"faults":[...]}`).
    pub fault_doc: Value,
    /// `--json`: one JSON report on stdout, no progress.
    pub json: bool,
}

pub use levee_config::parse_duration;

fn scalar(text: &str) -> Value {
    let t = text.trim();
    match t {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(n) = t.parse::<u64>() {
        return Value::from(n);
    }
    if let Ok(x) = t.parse::<f64>() {
        if x.is_finite() && t.contains('.') {
            return Value::from(x);
        }
    }
    Value::String(t.to_owned())
}

/// Turns `status=503,retry_after=2,from=20s,to=50s` into the JSON object of
/// one fault. Numbers and booleans become JSON numbers and booleans; dotted
/// keys nest (`latency.p50=200ms`). The mock validates the meaning.
pub fn parse_fault(text: &str) -> Result<Map<String, Value>, DrillError> {
    let bad = |reason: String| DrillError::Flag {
        flag: "fault",
        value: text.to_owned(),
        reason,
    };
    let mut fault = Map::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(bad(format!(
                "`{pair}` is not key=value (e.g. status=503,retry_after=2,from=20s,to=50s)"
            )));
        };
        let path: Vec<&str> = key.trim().split('.').map(str::trim).collect();
        if path.iter().any(|k| k.is_empty()) {
            return Err(bad(format!("`{pair}` has an empty key")));
        }
        let (last, parents) = match path.split_last() {
            Some(split) => split,
            None => return Err(bad(format!("`{pair}` has an empty key"))),
        };
        let mut node = &mut fault;
        for parent in parents {
            let entry = node
                .entry((*parent).to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            node = match entry {
                Value::Object(m) => m,
                _ => return Err(bad(format!("`{key}`: `{parent}` already has a value"))),
            };
        }
        if node.contains_key(*last) {
            return Err(bad(format!("`{key}` is given twice")));
        }
        node.insert((*last).to_owned(), scalar(value));
    }
    if fault.is_empty() {
        return Err(bad(
            "empty fault (e.g. status=503,retry_after=2,from=20s,to=50s)".to_owned(),
        ));
    }
    Ok(fault)
}

fn window_edge(
    fault: &Map<String, Value>,
    key: &str,
    text: &str,
) -> Result<Option<Duration>, DrillError> {
    match fault.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => parse_duration(s).map(Some).ok_or_else(|| DrillError::Flag {
            flag: "fault",
            value: text.to_owned(),
            reason: format!("`{key}={s}` must be a duration like 20s or 150ms"),
        }),
        Some(other) => Err(DrillError::Flag {
            flag: "fault",
            value: text.to_owned(),
            reason: format!("`{key}={other}` must be a duration with a unit, like 20s"),
        }),
    }
}

impl DrillArgs {
    /// Checks every flag; the error names the flag and says what is allowed.
    pub fn plan(&self) -> Result<Plan, DrillError> {
        let gateway = target::parse("gateway", &self.gateway)?;
        let mock = target::parse("mock", &self.mock)?;
        let duration = self.check_load()?;
        let (faults, window) = self.check_faults(duration)?;
        let (pause, failover, stop) = self.exercise.check(duration)?;
        let kill = self.exercise.check_kill(duration)?;
        Ok(Plan {
            gateway,
            mock,
            rate: self.rate,
            duration,
            fault_doc: serde_json::json!({ "faults": faults }),
            fault_window: window,
            timeout: Duration::from_millis(self.timeout_ms),
            seed: self.seed,
            arrivals: self.arrivals,
            model: self.model.clone(),
            answer_usd: self.answer_usd,
            gateway_admin: self
                .gateway_admin
                .as_deref()
                .map(|u| target::parse("gateway-admin", u))
                .transpose()?,
            json: self.json,
            plot: self.plot.clone(),
            fault_text: self.faults.clone(),
            pause,
            kill,
            failover,
            stop,
        })
    }

    /// Checks the load's flags (`--rate`, `--duration`, their product, and
    /// `--timeout-ms`); returns the run's duration.
    fn check_load(&self) -> Result<Duration, DrillError> {
        if !(self.rate.is_finite() && self.rate > 0.0 && self.rate <= MAX_RATE) {
            return Err(flag(
                "rate",
                self.rate.to_string(),
                &format!("must be above 0 and at most {MAX_RATE} requests per second"),
            ));
        }
        let duration = parse_duration(&self.duration)
            .filter(|d| !d.is_zero() && *d <= MAX_DURATION)
            .ok_or_else(|| {
                flag(
                    "duration",
                    self.duration.clone(),
                    "must be a duration above 0 and at most 1h, like 90s or 500ms",
                )
            })?;
        if !(self.answer_usd.is_finite() && self.answer_usd >= 0.0) {
            return Err(flag(
                "answer-usd",
                self.answer_usd.to_string(),
                "must be US dollars, 0 or more, like 0.006",
            ));
        }
        let total = (self.rate * duration.as_secs_f64()).ceil();
        if total > MAX_REQUESTS as f64 {
            return Err(flag(
                "rate",
                self.rate.to_string(),
                &format!(
                    "rate × duration is {total} requests; a drill sends at most {MAX_REQUESTS} \
                     (lower --rate or --duration)"
                ),
            ));
        }
        if self.timeout_ms == 0 || self.timeout_ms > MAX_TIMEOUT_MS {
            return Err(flag(
                "timeout-ms",
                self.timeout_ms.to_string(),
                &format!("must be between 1 and {MAX_TIMEOUT_MS}"),
            ));
        }
        Ok(duration)
    }

    /// Checks every `--fault` against the run's `duration`; returns the
    /// faults' JSON objects and the fault window they span.
    fn check_faults(&self, duration: Duration) -> Result<(Vec<Value>, FaultWindow), DrillError> {
        let mut faults = Vec::new();
        let mut window: FaultWindow = None;
        for text in &self.faults {
            let fault = parse_fault(text)?;
            let from = window_edge(&fault, "from", text)?;
            let to = window_edge(&fault, "to", text)?;
            if let (Some(a), Some(b)) = (from, to) {
                if b < a {
                    return Err(flag("fault", text.clone(), "`to` is before `from`"));
                }
            }
            // Only faults with `from` or `to` shape the window; the others are
            // background conditions (say, latency) for the whole run.
            if from.is_some() || to.is_some() {
                let from = from.unwrap_or(Duration::ZERO).min(duration);
                let to = to.unwrap_or(duration).min(duration);
                window = Some(match window {
                    None => (from, to),
                    Some((a, b)) => (a.min(from), b.max(to)),
                });
            }
            faults.push(Value::Object(fault));
        }
        if window.is_none() && !faults.is_empty() {
            window = Some((Duration::ZERO, duration));
        }
        Ok((faults, window))
    }
}

/// A fault window: from, to (since the start), when there is one.
type FaultWindow = Option<(Duration, Duration)>;

/// A bad `--flag`'s error: the flag, its value, and what is allowed.
fn flag(flag: &'static str, value: String, reason: &str) -> DrillError {
    DrillError::Flag {
        flag,
        value,
        reason: reason.to_owned(),
    }
}

type Checked = (Option<StatePause>, Option<Target>, Option<ReplicaStop>);

impl Exercise {
    /// Checks `--kill-state` and `--kill-at` against the run's `duration`.
    fn check_kill(&self, duration: Duration) -> Result<Option<StateKill>, DrillError> {
        let Some(url) = &self.kill_state else {
            return Ok(None);
        };
        let at = parse_duration(&self.kill_at)
            .filter(|d| *d < duration)
            .ok_or_else(|| DrillError::Flag {
                flag: "kill-at",
                value: self.kill_at.clone(),
                reason: "must be a duration within --duration, like 1s or 500ms".to_owned(),
            })?;
        Ok(Some(StateKill {
            url: target::parse_redis("kill-state", url)?,
            at,
        }))
    }

    /// Checks the exercise flags against the run's `duration`.
    fn check(&self, duration: Duration) -> Result<Checked, DrillError> {
        let within = |flag: &'static str, text: &str| {
            parse_duration(text)
                .filter(|d| *d < duration)
                .ok_or_else(|| DrillError::Flag {
                    flag,
                    value: text.to_owned(),
                    reason: "must be a duration within --duration, like 1s or 500ms".to_owned(),
                })
        };
        let pause = match &self.pause_state {
            None => None,
            Some(url) => Some(StatePause {
                url: target::parse_redis("pause-state", url)?,
                at: within("pause-at", &self.pause_at)?,
                length: parse_duration(&self.pause_for)
                    .filter(|d| !d.is_zero() && *d <= Duration::from_secs(600))
                    .ok_or_else(|| DrillError::Flag {
                        flag: "pause-for",
                        value: self.pause_for.clone(),
                        reason: "must be a duration above 0 and at most 10m".to_owned(),
                    })?,
            }),
        };
        let failover = match &self.failover {
            None => None,
            Some(url) => Some(target::parse("failover", url)?),
        };
        let stop = match self.stop_pid {
            None => None,
            Some(pid) if pid <= 1 => {
                return Err(DrillError::Flag {
                    flag: "stop-pid",
                    value: pid.to_string(),
                    reason: "must be the PID of a gateway replica".to_owned(),
                })
            }
            Some(pid) => Some(ReplicaStop {
                pid: Some(pid),
                signal: self.stop_signal,
                at: within("stop-at", &self.stop_at)?,
            }),
        };
        Ok((pause, failover, stop))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(faults: &[&str]) -> DrillArgs {
        DrillArgs {
            gateway: "http://127.0.0.1:8080".into(),
            mock: "http://127.0.0.1:9100".into(),
            rate: 400.0,
            duration: "90s".into(),
            faults: faults.iter().map(|s| s.to_string()).collect(),
            json: false,
            plot: None,
            timeout_ms: 10_000,
            seed: 0,
            arrivals: Arrivals::Even,
            model: "drill".into(),
            answer_usd: 0.006,
            gateway_admin: None,
            exercise: Exercise::default(),
        }
    }

    #[test]
    fn the_seed_fault_becomes_the_mocks_document() {
        let plan = args(&["status=503,retry_after=2,from=20s,to=50s"])
            .plan()
            .map_err(|e| e.to_string());
        let plan = plan.as_ref().expect("plan");
        assert_eq!(
            plan.fault_doc,
            serde_json::json!({"faults":[{"status":503,"retry_after":2,"from":"20s","to":"50s"}]})
        );
        assert_eq!(
            plan.fault_window,
            Some((Duration::from_secs(20), Duration::from_secs(50)))
        );
    }

    #[test]
    fn faults_nest_union_and_default_to_the_whole_run() {
        let plan = args(&[
            "latency.p50=200ms,latency.p99=1.5s",
            "status=429, retry_after_ms=1500, from=5s",
            "reset=true,probability=0.05,to=30s",
        ])
        .plan()
        .map_err(|e| e.to_string());
        let plan = plan.as_ref().expect("plan");
        assert_eq!(
            plan.fault_doc["faults"][0],
            serde_json::json!({"latency":{"p50":"200ms","p99":"1.5s"}})
        );
        assert_eq!(plan.fault_doc["faults"][1]["retry_after_ms"], 1500);
        assert_eq!(plan.fault_doc["faults"][2]["reset"], true);
        assert_eq!(plan.fault_doc["faults"][2]["probability"], 0.05);
        assert_eq!(
            plan.fault_window,
            Some((Duration::ZERO, Duration::from_secs(90))),
            "from 0 (no `from` on the reset fault) to the end (no `to` on the 429)"
        );
        let plan = args(&["latency.p50=200ms", "status=503,from=20s,to=50s"]).plan();
        assert_eq!(
            plan.map(|p| p.fault_window).ok().flatten(),
            Some((Duration::from_secs(20), Duration::from_secs(50))),
            "a background fault does not widen the window"
        );
        let plan = args(&["latency.p50=200ms"]).plan();
        assert_eq!(
            plan.map(|p| p.fault_window).ok().flatten(),
            Some((Duration::ZERO, Duration::from_secs(90)))
        );
    }

    #[test]
    fn bad_flags_name_the_flag() {
        for (faults, needle) in [
            (vec!["status"], "key=value"),
            (vec!["=3"], "empty key"),
            (vec!["status=503,status=500"], "twice"),
            (vec!["from=soon"], "duration"),
            (vec!["from=20"], "unit"),
            (vec!["from=20s,to=10s"], "before"),
            (vec!["latency=1,latency.p50=2ms"], "already"),
        ] {
            let e = args(&faults).plan().expect_err(needle).to_string();
            assert!(e.contains("--fault") && e.contains(needle), "{e}");
        }
        let refused = |change: &dyn Fn(&mut DrillArgs), says: &str| {
            let mut a = args(&[]);
            change(&mut a);
            let e = a.plan().expect_err(says).to_string();
            assert!(e.contains(says), "{says}: {e}");
        };
        refused(&|a| a.rate = 0.0, "--rate");
        refused(
            &|a| {
                a.rate = 10_000.0;
                a.duration = "2h".into();
            },
            "--duration",
        );
        refused(
            &|a| {
                a.rate = 10_000.0;
                a.duration = "200s".into();
            },
            "at most",
        );
        refused(&|a| a.timeout_ms = 0, "--timeout-ms");
        refused(&|a| a.gateway = "http://10.1.2.3:8080".into(), "loopback");
    }
}
