//! The Philly job list Pollux samples its workloads from (petuum/adaptdl, branch
//! `osdi21-artifact`, `simulator/traces/philly.csv`): CSV with header
//! `timestamp,duration,num_gpus,gpu_time,cluster`, e.g.
//! `2017-10-09 07:01:55,66.0,1,66.0,11cb48`.
//!
//! `timestamp` is the submit time as a 2017 local date-time (`YYYY-MM-DD HH:MM:SS`; ISO-8601
//! with `T`, fractional seconds and a `Z`/`±HH:MM` offset are accepted too); submit times become
//! relative to the earliest job. `duration` is seconds, `cluster` (the virtual cluster) becomes
//! the tenant, and `gpu_time` (= duration × GPUs) is ignored.

use tessera_model::{SimTime, TrainingJob};

use crate::error::{TraceError, TraceErrorKind};
use crate::fields::{default_iterations, read_rows, Ctx, Layout, Parsed, Row};

/// Columns a Pollux-Philly trace must have (`gpu_time` and `cluster` are optional).
pub const REQUIRED: [&str; 3] = ["timestamp", "duration", "num_gpus"];

pub(crate) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Parsed, TraceError> {
    read_rows(ctx, text, &Layout::csv_with_header(&REQUIRED), job)
}

fn job(row: &Row<'_>) -> Result<TrainingJob, TraceError> {
    let stamp = row.nonempty("timestamp")?;
    let submit = parse_datetime(stamp)
        .map(SimTime::from_micros)
        .ok_or_else(|| row.err("timestamp", TraceErrorKind::BadTimestamp(stamp.to_string())))?;
    let duration = row.duration("duration")?;
    let gpus = row.gpus("num_gpus")?;
    let mut job = TrainingJob::simple(0, submit, gpus, duration);
    job.name = row.index.to_string().into();
    job.iterations = default_iterations(duration);
    job.tenant = row.text("cluster")?.to_string();
    Ok(job)
}

/// Microseconds since 0000-03-01T00:00:00 UTC (an epoch early enough that every accepted
/// date is after it), or `None` if `text` is not a valid date-time of years 1..=9999.
pub(crate) fn parse_datetime(text: &str) -> Option<u64> {
    let b = text.trim().as_bytes();
    let num = |from: usize, to: usize| -> Option<u64> {
        let digits = b.get(from..to)?;
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    let is = |at: usize, chars: &[u8]| b.get(at).is_some_and(|c| chars.contains(c));
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    if !(is(4, b"-") && is(7, b"-") && is(10, b" Tt") && is(13, b":")) {
        return None;
    }
    let (hour, minute) = (num(11, 13)?, num(14, 16)?);
    let mut at = 16;
    let mut second = 0;
    let mut micros = 0;
    if is(at, b":") {
        second = num(at + 1, at + 3)?;
        at += 3;
        if is(at, b".,") {
            let start = at + 1;
            let end = start
                + b.get(start..)?
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count();
            if end == start {
                return None;
            }
            for i in 0..6 {
                micros = micros * 10
                    + b.get(start + i)
                        .filter(|_| start + i < end)
                        .map_or(0, |c| u64::from(c - b'0'));
            }
            at = end;
        }
    }
    let offset_s = parse_offset(b.get(at..)?)?;
    let valid = (1..=9999).contains(&year)
        && (1..=12).contains(&month)
        && day >= 1
        && day <= days_in_month(year, month)
        && hour < 24
        && minute < 60
        && second < 60;
    if !valid {
        return None;
    }
    let days = days_since_epoch(year, month, day);
    let local_s = days * 86_400 + hour * 3600 + minute * 60 + second;
    let utc_s = u64::try_from(i64::try_from(local_s).ok()?.checked_sub(offset_s)?).ok()?;
    utc_s.checked_mul(1_000_000)?.checked_add(micros)
}

/// A trailing UTC offset in seconds: empty, `Z`, `±HH:MM` or `±HHMM`.
fn parse_offset(rest: &[u8]) -> Option<i64> {
    match rest {
        [] | [b'Z' | b'z'] => Some(0),
        [sign @ (b'+' | b'-'), h1, h2, tail @ ..] => {
            let minutes = match tail {
                [b':', m1, m2] | [m1, m2] => [*m1, *m2],
                _ => return None,
            };
            let two = |d: [u8; 2]| -> Option<i64> {
                d.iter()
                    .all(u8::is_ascii_digit)
                    .then(|| i64::from((d[0] - b'0') * 10 + (d[1] - b'0')))
            };
            let (h, m) = (two([*h1, *h2])?, two(minutes)?);
            if h > 23 || m > 59 {
                return None;
            }
            let s = h * 3600 + m * 60;
            Some(if *sign == b'-' { -s } else { s })
        }
        _ => None,
    }
}

fn is_leap(y: u64) -> bool {
    // Divisible by 4 and not by 100, or by 400 (written as a match to stay within Rust 1.85).
    matches!((y % 4, y % 100, y % 400), (0, 1.., _) | (_, _, 0))
}

fn days_in_month(y: u64, m: u64) -> u64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 0000-03-01 to the given civil date (proleptic Gregorian; years are counted
/// from March so that leap days fall at the end of a year).
fn days_since_epoch(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y % 400;
    let mp = (month + 9) % 12; // March = 0
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(t: &str) -> u64 {
        parse_datetime(t).unwrap() / 1_000_000
    }

    #[test]
    fn date_times_parse_and_differ_by_the_right_amounts() {
        let base = secs("2017-10-09 07:01:55");
        assert_eq!(secs("2017-10-09T07:01:56") - base, 1);
        assert_eq!(secs("2017-10-10 07:01:55") - base, 86_400);
        assert_eq!(secs("2017-10-09 08:01:55+01:00"), base);
        assert_eq!(secs("2017-10-09 07:01:55Z"), base);
        assert_eq!(secs("2017-10-09 07:01"), base - 55);
        assert_eq!(
            parse_datetime("2017-10-09 07:01:55.25").unwrap() % 1_000_000,
            250_000
        );
        // 2016 is a leap year, 1900 is not, 2000 is.
        assert_eq!(
            secs("2016-03-01 00:00:00") - secs("2016-02-28 00:00:00"),
            2 * 86_400
        );
        assert_eq!(
            secs("1900-03-01 00:00:00") - secs("1900-02-28 00:00:00"),
            86_400
        );
        assert_eq!(
            secs("2000-03-01 00:00:00") - secs("2000-02-28 00:00:00"),
            2 * 86_400
        );
        assert_eq!(
            secs("1970-01-01 00:00:00") - secs("1969-12-31 00:00:00"),
            86_400
        );
    }

    #[test]
    fn bad_date_times_are_rejected() {
        for bad in [
            "",
            "2017-13-01 00:00:00",
            "2017-02-29 00:00:00",
            "2017-10-09 24:00:00",
            "2017-10-09 07:61:00",
            "2017-10-09X07:01:55",
            "2017-10-09 07:01:55 junk",
            "0000-01-01 00:00:00",
            "2017-10-09 07:01:55.",
            "2017-10-09 07:01:55+25:00",
            "17-10-09 07:01:55",
            "2017-1a-09 07:01:55",
        ] {
            assert!(parse_datetime(bad).is_none(), "{bad:?} accepted");
        }
    }
}
