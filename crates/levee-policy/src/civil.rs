//! Calendar dates as day counts since 1970-01-01, in the proleptic
//! Gregorian calendar (Howard Hinnant's algorithms): what the providers'
//! RFC 3339 times (Anthropic's rate-limit resets, model lists' creation
//! dates) and callers' budget periods need, without a date crate. Pure
//! arithmetic: the wire formats read times with it (`levee_wire::civil`),
//! the policy counts calendar days, weeks and months.

/// Days from 1970-01-01 to `year-month-day`.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `(year, month, day)` `days` after 1970-01-01 (the inverse of
/// [`days_from_civil`]).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Unix seconds as an RFC 3339 UTC time to the second,
/// `2025-01-15T14:24:00Z`.
pub fn rfc3339(unix_secs: i64) -> String {
    let (y, m, d) = civil_from_days(unix_secs.div_euclid(86_400));
    let rem = unix_secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Unix milliseconds of an RFC 3339 UTC time (`2026-12-06T07:00:00Z`,
/// fractions of a second allowed, `+00:00` too).
pub fn rfc3339_unix_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    let (date, time) = s.split_once(['T', 't'])?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let time = time
        .strip_suffix(['Z', 'z'])
        .or_else(|| time.strip_suffix("+00:00"))?;
    let mut t = time.split(':');
    let (h, mi) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let sec: f64 = t.next()?.parse().ok()?;
    let days = days_from_civil(y, mo, da);
    let secs = days * 86_400 + h * 3600 + mi * 60;
    let ms = secs.checked_mul(1000)? + (sec * 1000.0) as i64;
    u64::try_from(ms).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_are_read() {
        assert_eq!(rfc3339_unix_ms("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(
            rfc3339_unix_ms("2026-12-06T07:00:00.500Z"),
            Some(1_796_540_400_500)
        );
        assert_eq!(
            rfc3339_unix_ms("2026-12-06T07:00:00+00:00"),
            Some(1_796_540_400_000)
        );
        assert_eq!(rfc3339_unix_ms("yesterday"), None);
    }

    #[test]
    fn known_dates_and_the_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(19_737), (2024, 1, 15));
        for days in (-800_000..800_000).step_by(97) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }
}
