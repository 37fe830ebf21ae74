//! Standard 5-field cron schedules as Kubernetes reads them (robfig/cron's standard
//! parser): minute, hour, day of month, month, day of week; `*`, `?`, lists, ranges,
//! steps (`*/5`, `1-30/10`, `7/15`), month and weekday names, `7` for Sunday, and the
//! macros `@yearly` `@annually` `@monthly` `@weekly` `@daily` `@midnight` `@hourly`.
//! When both day fields are restricted a day matching either runs (as cron does).
//!
//! Times are in the CronJob's time zone. On a day when clocks jump forward, a time in
//! the gap does not exist and is skipped; when they fall back, a time that occurs twice
//! runs at each occurrence — both as Kubernetes' schedule library behaves.

use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;

/// A schedule could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    /// Not five fields (and not a known macro).
    #[error("expected exactly 5 fields, found {0}: {1:?}")]
    FieldCount(usize, String),
    /// A field with a value out of range or not a number or name.
    #[error("failed to parse {field} field {text:?}")]
    Field { field: &'static str, text: String },
}

/// A parsed schedule: the set of allowed values of each field as bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// The day-of-month or day-of-week field was `*` or `?` (unrestricted).
    any_day: bool,
    any_weekday: bool,
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// The furthest ahead a next time is looked for (as the library Kubernetes uses: 5 years).
const SEARCH_DAYS: i32 = 366 * 5;

fn value(s: &str, names: &[&str], offset: u32) -> Option<u32> {
    if let Ok(n) = s.parse::<u32>() {
        return Some(n);
    }
    let lower = s.to_ascii_lowercase();
    names.iter().position(|n| *n == lower).map(|i| i as u32 + offset)
}

/// The bits of one field, values in `min..=max`.
fn field(text: &str, name: &'static str, min: u32, max: u32, names: &[&str]) -> Result<u64, ScheduleError> {
    let err = || ScheduleError::Field { field: name, text: text.to_string() };
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().ok().filter(|s| *s > 0).ok_or_else(err)?),
            None => (part, 1),
        };
        let (lo, hi) = if range == "*" || range == "?" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, names, min).ok_or_else(err)?, value(b, names, min).ok_or_else(err)?)
        } else {
            let v = value(range, names, min).ok_or_else(err)?;
            // `7/15` means from 7 to the end, every 15.
            (v, if part.contains('/') { max } else { v })
        };
        if lo < min || hi > max || lo > hi {
            return Err(err());
        }
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

impl Schedule {
    pub fn parse(spec: &str) -> Result<Self, ScheduleError> {
        let spec = spec.trim();
        let expanded = match spec {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            s => s,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(ScheduleError::FieldCount(fields.len(), spec.to_string()));
        }
        let starred = |f: &str| f.starts_with('*') || f.starts_with('?');
        let mut weekdays = field(fields[4], "day-of-week", 0, 7, &WEEKDAYS)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & !(1 << 7);
        }
        Ok(Schedule {
            minutes: field(fields[0], "minute", 0, 59, &[])?,
            hours: field(fields[1], "hour", 0, 23, &[])?,
            days: field(fields[2], "day-of-month", 1, 31, &[])?,
            months: field(fields[3], "month", 1, 12, &MONTHS)?,
            weekdays,
            any_day: starred(fields[2]),
            any_weekday: starred(fields[4]),
        })
    }

    fn day_matches(&self, d: Date) -> bool {
        if self.months & (1 << d.month() as u32) == 0 {
            return false;
        }
        let dom = self.days & (1 << d.day() as u32) != 0;
        let dow = self.weekdays & (1 << d.weekday().to_sunday_zero_offset() as u32) != 0;
        if self.any_day || self.any_weekday {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The scheduled instants of `day`, in civil order, each hour's tried only until two
    /// hours past the first that `keep` accepts (a fold repeats at most that much).
    fn day_instants(&self, day: Date, tz: &TimeZone, keep: impl Fn(Timestamp) -> bool) -> Vec<Timestamp> {
        let mut out = Vec::new();
        let mut first_hit: Option<i32> = None;
        for h in (0..24).filter(|h| self.hours & (1 << h) != 0) {
            if first_hit.is_some_and(|f| h > f + 2) {
                break;
            }
            for m in (0..60).filter(|m| self.minutes & (1 << m) != 0) {
                for t in instants(tz, day.at(h as i8, m as i8, 0, 0)) {
                    if keep(t) {
                        first_hit.get_or_insert(h);
                        out.push(t);
                    }
                }
            }
        }
        out
    }

    /// The first scheduled time strictly after `after`, in time zone `tz`.
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = tz.to_datetime(after).date();
        let mut day = start.yesterday().unwrap_or(start); // a fold can put `after` a day ahead
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(day) {
                if let Some(t) = self.day_instants(day, tz, |t| t > after).into_iter().min() {
                    return Some(t);
                }
            }
            day = day.tomorrow().ok()?;
        }
        None
    }

    /// The last scheduled time at or before `at`, in time zone `tz`, if within 5 years.
    pub fn latest_at_or_before(&self, at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = tz.to_datetime(at).date();
        let mut day = start.tomorrow().unwrap_or(start);
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(day) {
                // All of the day: the latest, not the first, is wanted.
                let all: Vec<Timestamp> = (0..24)
                    .filter(|h| self.hours & (1 << h) != 0)
                    .flat_map(|h| (0..60).filter(|m| self.minutes & (1u64 << m) != 0).map(move |m| (h, m)))
                    .flat_map(|(h, m)| instants(tz, day.at(h as i8, m as i8, 0, 0)))
                    .filter(|t| *t <= at)
                    .collect();
                if let Some(t) = all.into_iter().max() {
                    return Some(t);
                }
            }
            day = day.yesterday().ok()?;
        }
        None
    }

    /// Every scheduled time in `(after, until]`, at most `limit + 1` of them (so a caller
    /// can tell there were more than `limit`), oldest first.
    pub fn times_between(&self, after: Timestamp, until: Timestamp, tz: &TimeZone, limit: usize) -> Vec<Timestamp> {
        let mut out = Vec::new();
        let mut t = after;
        while out.len() <= limit {
            match self.next_after(t, tz) {
                Some(n) if n <= until => {
                    out.push(n);
                    t = n;
                }
                _ => break,
            }
        }
        out
    }
}

/// The instants a civil time names in `tz`: none in a gap, two in a fold.
fn instants(tz: &TimeZone, dt: DateTime) -> Vec<Timestamp> {
    match tz.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(dt).ok().into_iter().collect(),
        AmbiguousOffset::Gap { .. } => Vec::new(),
        AmbiguousOffset::Fold { before, after } => [before, after].into_iter().filter_map(|o| o.to_timestamp(dt).ok()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, after: &str) -> String {
        Schedule::parse(spec).unwrap().next_after(ts(after), &TimeZone::UTC).unwrap().to_string()
    }

    #[test]
    fn fields_steps_ranges_lists_and_names() {
        assert_eq!(next("*/1 * * * *", "2026-01-01T00:00:30Z"), "2026-01-01T00:01:00Z");
        assert_eq!(next("*/15 * * * *", "2026-01-01T00:15:00Z"), "2026-01-01T00:30:00Z");
        assert_eq!(next("5 4 * * *", "2026-01-01T04:05:00Z"), "2026-01-02T04:05:00Z");
        assert_eq!(next("0 9-17/4 * * mon-fri", "2026-01-02T13:00:00Z"), "2026-01-02T17:00:00Z"); // a Friday
        assert_eq!(next("0 9 * * mon-fri", "2026-01-02T10:00:00Z"), "2026-01-05T09:00:00Z", "over the weekend");
        assert_eq!(next("0 0 1,15 * *", "2026-01-02T00:00:00Z"), "2026-01-15T00:00:00Z");
        assert_eq!(next("0 0 * FEB *", "2026-03-01T00:00:00Z"), "2027-02-01T00:00:00Z");
        assert_eq!(next("30 7/6 * * *", "2026-01-01T08:00:00Z"), "2026-01-01T13:30:00Z");
        assert_eq!(next("0 0 * * 7", "2026-01-01T00:00:00Z"), "2026-01-04T00:00:00Z", "7 is Sunday");
        assert_eq!(next("@hourly", "2026-01-01T00:00:00Z"), "2026-01-01T01:00:00Z");
        assert_eq!(next("@weekly", "2026-01-01T00:00:00Z"), "2026-01-04T00:00:00Z");
        assert_eq!(next("@yearly", "2026-01-01T00:00:00Z"), "2027-01-01T00:00:00Z");
    }

    #[test]
    fn restricted_day_fields_match_either_day() {
        // The 13th or any Friday.
        assert_eq!(next("0 0 13 * 5", "2026-01-03T00:00:00Z"), "2026-01-09T00:00:00Z");
        assert_eq!(next("0 0 13 * 5", "2026-01-10T00:00:00Z"), "2026-01-13T00:00:00Z");
        // A starred day of week leaves only the day of month.
        assert_eq!(next("0 0 31 * *", "2026-02-01T00:00:00Z"), "2026-03-31T00:00:00Z");
        assert_eq!(next("0 0 29 2 *", "2026-01-01T00:00:00Z"), "2028-02-29T00:00:00Z", "leap days");
    }

    #[test]
    fn bad_schedules_are_refused() {
        assert_eq!(Schedule::parse("* * * *"), Err(ScheduleError::FieldCount(4, "* * * *".into())));
        assert!(Schedule::parse("60 * * * *").is_err());
        assert!(Schedule::parse("* 24 * * *").is_err());
        assert!(Schedule::parse("* * 0 * *").is_err());
        assert!(Schedule::parse("*/0 * * * *").is_err());
        assert!(Schedule::parse("5-1 * * * *").is_err());
        assert!(Schedule::parse("* * * foo *").is_err());
        assert!(Schedule::parse("@reboot").is_err());
    }

    #[test]
    fn time_zones_and_daylight_saving() {
        let ny = TimeZone::get("America/New_York").unwrap();
        let s = Schedule::parse("0 9 * * *").unwrap();
        // 09:00 in New York is 14:00 UTC in winter, 13:00 in summer.
        assert_eq!(s.next_after(ts("2026-01-01T00:00:00Z"), &ny).unwrap().to_string(), "2026-01-01T14:00:00Z");
        assert_eq!(s.next_after(ts("2026-07-01T00:00:00Z"), &ny).unwrap().to_string(), "2026-07-01T13:00:00Z");
        // 2026-03-08: 02:30 does not exist in New York; that day is skipped.
        let gap = Schedule::parse("30 2 * * *").unwrap();
        assert_eq!(gap.next_after(ts("2026-03-07T08:00:00Z"), &ny).unwrap().to_string(), "2026-03-09T06:30:00Z");
        // 2026-11-01: 01:30 happens twice (EDT, then EST): both run.
        let fold = Schedule::parse("30 1 * * *").unwrap();
        let first = fold.next_after(ts("2026-11-01T00:00:00Z"), &ny).unwrap();
        assert_eq!(first.to_string(), "2026-11-01T05:30:00Z");
        assert_eq!(fold.next_after(first, &ny).unwrap().to_string(), "2026-11-01T06:30:00Z");
    }

    #[test]
    fn times_between_stop_after_the_limit() {
        let s = Schedule::parse("* * * * *").unwrap();
        let t = s.times_between(ts("2026-01-01T00:00:00Z"), ts("2026-01-01T00:03:00Z"), &TimeZone::UTC, 100);
        assert_eq!(t.len(), 3);
        let many = s.times_between(ts("2026-01-01T00:00:00Z"), ts("2026-01-02T00:00:00Z"), &TimeZone::UTC, 100);
        assert_eq!(many.len(), 101, "one more than the limit says there were too many");
        assert_eq!(s.latest_at_or_before(ts("2026-01-02T00:00:30Z"), &TimeZone::UTC).unwrap().to_string(), "2026-01-02T00:00:00Z");
        let daily = Schedule::parse("0 9 * * *").unwrap();
        assert_eq!(daily.latest_at_or_before(ts("2026-01-02T08:00:00Z"), &TimeZone::UTC).unwrap().to_string(), "2026-01-01T09:00:00Z");
        assert_eq!(daily.latest_at_or_before(ts("2026-01-02T09:00:00Z"), &TimeZone::UTC).unwrap().to_string(), "2026-01-02T09:00:00Z");
    }
}
