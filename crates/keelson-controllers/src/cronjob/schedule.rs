//! Standard 5-field cron schedules as Kubernetes reads them (robfig/cron's standard
//! parser): minute, hour, day of month, month, day of week; `*`, `?`, lists, ranges,
//! steps (`*/5`, `1-30/10`, `7/15`), month and weekday names, `7` for Sunday, and the
//! macros `@yearly` `@annually` `@monthly` `@weekly` `@daily` `@midnight` `@hourly`.
//! When both day fields are restricted a day matching either runs (as cron does).
//!
//! Parsing and matching are the `croner` crate's (on jiff); what is Kubernetes' own
//! is adapted here, on top:
//! - only robfig's syntax and macros: croner's extensions (seconds and year fields,
//!   `L`, `W`, `#`, `@reboot`-like nicknames) are refused, and errors name the field
//!   as Kubernetes' Events do;
//! - `?` in any field and `*/1` mean `*` (robfig), which croner only takes for `?` in
//!   the day fields; a day field is unrestricted only when it is `*` (or `?`, `*/1`),
//!   so `*/2` in a day field is a restriction, as in robfig;
//! - time zones: croner runs a fixed time in a DST gap just after the gap and a fixed
//!   time in a fold once; Kubernetes' library skips the gap and runs at each
//!   occurrence of a fold. So croner is asked for the matching *civil* times only,
//!   and each is turned into instants here (none in a gap, two in a fold).

use croner::parser::{CronParser, Seconds, Year};
use croner::{Cron, Direction};
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

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

/// A parsed schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    cron: Cron,
}

const FIELDS: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// The furthest ahead (or back) a time is looked for (as the library Kubernetes uses: 5 years).
const SEARCH: SignedDuration = SignedDuration::from_hours(24 * 366 * 5);
/// More than any DST fold: the civil times this far around a search's start (and its
/// best answer) can name instants that come first.
const FOLD_MARGIN: SignedDuration = SignedDuration::from_hours(3);

/// One field in robfig's syntax, written as croner reads it: `?` is `*`, `*/1` is `*`, a
/// list holding `*` is `*` (once the rest of the list is valid), and `*/N` inside a list
/// is `min-max/N` (croner takes a star only alone). Returns the field to use and the
/// field to check; `None` for anything robfig refuses (croner would take `L`, `W`, `#`,
/// `/10`).
fn robfig_field(text: &str, (min, max): (u32, u32), names: &[&str]) -> Option<(String, String)> {
    let number_or_name = |t: &str| !t.is_empty() && (t.bytes().all(|b| b.is_ascii_digit()) || names.contains(&t.to_ascii_lowercase().as_str()));
    let list = text.contains(',');
    let (mut parts, mut star) = (Vec::new(), false);
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (part, None),
        };
        let is_star = range == "*" || range == "?";
        let range_ok = is_star || range.split_once('-').map_or(number_or_name(range), |(a, b)| number_or_name(a) && number_or_name(b));
        let step_ok = step.is_none_or(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
        if !(range_ok && step_ok) {
            return None;
        }
        match (is_star, step) {
            (true, None | Some("1")) => star = true,
            (true, Some(s)) if list => parts.push(format!("{min}-{max}/{s}")),
            (true, Some(s)) => parts.push(format!("*/{s}")),
            _ => parts.push(part.to_string()),
        }
    }
    let check = if parts.is_empty() { "*".to_string() } else { parts.join(",") };
    Some((if star { "*".to_string() } else { check.clone() }, check))
}

fn parser() -> CronParser {
    // sloppy_ranges: robfig's `7/15` (from 7 to the end, every 15).
    CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).sloppy_ranges(true).build()
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
        let mut normalized = Vec::with_capacity(5);
        for (i, text) in fields.iter().enumerate() {
            let err = || ScheduleError::Field { field: FIELDS[i], text: text.to_string() };
            let (range, names): ((u32, u32), &[&str]) = match i {
                0 => ((0, 59), &[]),
                1 => ((0, 23), &[]),
                2 => ((1, 31), &[]),
                3 => ((1, 12), &MONTHS),
                _ => ((0, 6), &WEEKDAYS),
            };
            let (field, check) = robfig_field(text, range, names).ok_or_else(err)?;
            // Each field alone, so a refusal names its field.
            let mut alone = ["*"; 5];
            alone[i] = &check;
            parser().parse(&alone.join(" ")).map_err(|_| err())?;
            normalized.push(field);
        }
        let cron = parser().parse(&normalized.join(" ")).map_err(|_| ScheduleError::FieldCount(5, spec.to_string()))?;
        Ok(Schedule { cron })
    }

    /// The civil times the schedule names, from `start` (inclusive) in `direction`,
    /// until `limit` (exclusive).
    fn civil_times(&self, start: DateTime, direction: Direction, limit: DateTime) -> impl Iterator<Item = DateTime> + '_ {
        self.cron.iter_from(start, direction).take_while(move |c| match direction {
            Direction::Forward => *c < limit,
            Direction::Backward => *c > limit,
        })
    }

    /// The first scheduled time strictly after `after`, in time zone `tz`.
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let civil = tz.to_datetime(after);
        let (start, limit) = (civil.checked_sub(FOLD_MARGIN).ok()?, civil.checked_add(SEARCH).ok()?);
        let mut best: Option<(Timestamp, DateTime)> = None;
        for c in self.civil_times(start, Direction::Forward, limit) {
            if best.is_some_and(|(_, b)| c > b.saturating_add(FOLD_MARGIN)) {
                break;
            }
            for t in instants(tz, c).into_iter().filter(|t| *t > after) {
                if best.is_none_or(|(b, _)| t < b) {
                    best = Some((t, c));
                }
            }
        }
        best.map(|(t, _)| t)
    }

    /// The last scheduled time at or before `at`, in time zone `tz`, if within 5 years.
    pub fn latest_at_or_before(&self, at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let civil = tz.to_datetime(at);
        let (start, limit) = (civil.checked_add(FOLD_MARGIN).ok()?, civil.checked_sub(SEARCH).ok()?);
        let mut best: Option<(Timestamp, DateTime)> = None;
        for c in self.civil_times(start, Direction::Backward, limit) {
            if best.is_some_and(|(_, b)| c < b.saturating_sub(FOLD_MARGIN)) {
                break;
            }
            for t in instants(tz, c).into_iter().filter(|t| *t <= at) {
                if best.is_none_or(|(b, _)| t > b) {
                    best = Some((t, c));
                }
            }
        }
        best.map(|(t, _)| t)
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
        // As robfig: a stepped star restricts a day field (the 1st, or Sun/Tue/Thu/Sat)…
        assert_eq!(next("0 0 1 * */2", "2026-01-01T00:00:00Z"), "2026-01-03T00:00:00Z");
        // …while a list holding a star, `?` and `*/1` leave it unrestricted (Sundays only).
        assert_eq!(next("0 0 1,* * 0", "2026-01-01T00:00:00Z"), "2026-01-04T00:00:00Z");
        assert_eq!(next("? ? */1 * 0", "2026-01-01T00:00:00Z"), "2026-01-04T00:00:00Z");
        assert_eq!(Schedule::parse("0 0 30 2 *").unwrap().next_after(ts("2026-01-01T00:00:00Z"), &TimeZone::UTC), None, "never");
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
        // croner's extensions are not robfig's.
        assert_eq!(Schedule::parse("0 0 L * *"), Err(ScheduleError::Field { field: "day-of-month", text: "L".into() }));
        assert_eq!(Schedule::parse("0 0 * * 5#3"), Err(ScheduleError::Field { field: "day-of-week", text: "5#3".into() }));
        assert_eq!(Schedule::parse("0 0 /5 * *"), Err(ScheduleError::Field { field: "day-of-month", text: "/5".into() }));
        assert_eq!(Schedule::parse("0 0 0 * * *"), Err(ScheduleError::FieldCount(6, "0 0 0 * * *".into())));
        // Fields are judged in order, as robfig does.
        assert_eq!(Schedule::parse("60 * * * 8"), Err(ScheduleError::Field { field: "minute", text: "60".into() }));
        assert_eq!(Schedule::parse("0 0 0,* * *"), Err(ScheduleError::Field { field: "day-of-month", text: "0,*".into() }));
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
