//! Time helpers for table cells: RFC 3339 parsing and formatting over a
//! proleptic Gregorian calendar, and the human duration style kubectl shows
//! in AGE-like columns. No clock is read here: callers pass "now".

/// Unix seconds of Go's zero `time.Time` (`0001-01-01T00:00:00Z`). The API
/// server treats that instant as "unset" and prints `<unknown>` for it.
pub const GO_ZERO_UNIX: i64 = -62_135_596_800;

const NANOS: i128 = 1_000_000_000;

/// An instant parsed from an RFC 3339 string: whole Unix seconds (floored)
/// plus the nanoseconds within that second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub unix: i64,
    pub nanos: u32,
}

impl Timestamp {
    /// Whether this is Go's zero time, which Kubernetes treats as unset.
    pub fn is_go_zero(&self) -> bool {
        self.unix == GO_ZERO_UNIX && self.nanos == 0
    }

    fn total_nanos(&self) -> i128 {
        self.unix as i128 * NANOS + self.nanos as i128
    }

    /// Whole seconds from `self` to `later`, truncated toward zero (negative
    /// when `later` is earlier), as Go's `int(d.Seconds())` does.
    pub fn seconds_until(&self, later: &Timestamp) -> i64 {
        let d = (later.total_nanos() - self.total_nanos()) / NANOS;
        d.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// Whole seconds elapsed from `self` to the Unix second `now`.
    pub fn seconds_since(&self, now_unix: i64) -> i64 {
        self.seconds_until(&Timestamp { unix: now_unix, nanos: 0 })
    }
}

/// Unix seconds of a UTC civil time (year 0000–9999, as RFC 3339 allows), or `None` when
/// the date does not exist (Feb 30th, month 13).
fn unix_of(year: i64, month: u32, day: u32, hour: u32, minute: u32, second: u32) -> Option<i64> {
    let dt = jiff::civil::DateTime::new(year as i16, month as i8, day as i8, hour as i8, minute as i8, second as i8, 0).ok()?;
    // Civil arithmetic, not jiff's Timestamp: that stops short of 9999-12-31 in UTC.
    Some(dt.duration_since(EPOCH).as_secs())
}

const EPOCH: jiff::civil::DateTime = jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0);

fn digits(b: &[u8], start: usize, len: usize) -> Option<u32> {
    let part = b.get(start..start + len)?;
    part.iter().try_fold(0u32, |acc, c| {
        c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
    })
}

/// Parses an RFC 3339 timestamp such as `2026-11-30T08:00:00Z`,
/// `2026-11-30T08:00:00.123456Z` or `2026-11-30T09:30:00+01:30`, as Go's
/// `time.Parse(time.RFC3339, …)` reads it: the syntax is checked here (jiff's parser
/// also takes a space for `T`, `+0200` and other ISO 8601 forms the API server refuses),
/// the calendar is jiff's. Returns `None` for anything malformed or out of range.
pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    let sep = |i: usize, c: u8| b.get(i) == Some(&c);
    let year = digits(b, 0, 4)? as i64;
    let month = digits(b, 5, 2)?;
    let day = digits(b, 8, 2)?;
    let hour = digits(b, 11, 2)?;
    let minute = digits(b, 14, 2)?;
    let second = digits(b, 17, 2)?;
    if !(sep(4, b'-') && sep(7, b'-') && (sep(10, b'T') || sep(10, b't')))
        || !(sep(13, b':') && sep(16, b':'))
    {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let local = unix_of(year, month, day, hour, minute, second)?;
    let mut i = 19;
    let mut nanos: u32 = 0;
    if sep(i, b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 9 {
                nanos = nanos * 10 + u32::from(b[i] - b'0');
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..9 {
            nanos *= 10;
        }
    }
    let offset: i64 = match b.get(i) {
        Some(b'Z') | Some(b'z') if b.len() == i + 1 => 0,
        Some(&sign @ (b'+' | b'-')) if b.len() == i + 6 && sep(i + 3, b':') => {
            let oh = digits(b, i + 1, 2)?;
            let om = digits(b, i + 4, 2)?;
            if oh > 23 || om > 59 {
                return None;
            }
            let off = i64::from(oh * 3600 + om * 60);
            if sign == b'-' {
                -off
            } else {
                off
            }
        }
        _ => return None,
    };
    Some(Timestamp { unix: local - offset, nanos })
}

/// Formats Unix seconds as UTC RFC 3339 without fraction, like Go's
/// `t.UTC().Format(time.RFC3339)`: `2026-11-30T08:00:00Z`.
pub fn format_rfc3339(unix: i64) -> String {
    match EPOCH.checked_add(jiff::SignedDuration::from_secs(unix)) {
        Ok(dt) => dt.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => "<invalid>".into(),
    }
}

/// kubectl's human duration (Kubernetes `duration.HumanDuration`):
/// `<invalid>` below -1s, `0s` for -1s, seconds below 2 minutes (`90s`),
/// `5m3s` below 10 minutes, `45m` below 3 hours, `3h5m` below 8 hours,
/// `20h` below 2 days, `3d4h` below 8 days, `45d` below 2 years,
/// `2y30d` below 8 years, then `10y`. A zero remainder is dropped (`2m`).
pub fn human_age(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return with_rest(minutes, "m", seconds % 60, "s");
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return with_rest(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return with_rest(days, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    if hours < 24 * 365 * 8 {
        return with_rest(days / 365, "y", days % 365, "d");
    }
    format!("{}y", days / 365)
}

fn with_rest(major: i64, major_unit: &str, rest: i64, rest_unit: &str) -> String {
    if rest == 0 {
        format!("{major}{major_unit}")
    } else {
        format!("{major}{major_unit}{rest}{rest_unit}")
    }
}

/// The age cell for an optional timestamp string relative to `now_unix`:
/// `<unknown>` when absent, unparseable or Go's zero time.
pub(super) fn since(ts: Option<&str>, now_unix: i64) -> String {
    match ts.and_then(parse_rfc3339) {
        Some(t) if !t.is_go_zero() => human_age(t.seconds_since(now_unix)),
        _ => "<unknown>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_age_thresholds() {
        let cases: &[(i64, &str)] = &[
            (-5, "<invalid>"),
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (59, "59s"),
            (90, "90s"),
            (119, "119s"),
            (120, "2m"),
            (121, "2m1s"),
            (303, "5m3s"),
            (599, "9m59s"),
            (600, "10m"),
            (659, "10m"),
            (45 * 60, "45m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 5 * 60 + 30, "3h5m"),
            (8 * 3600 - 1, "7h59m"),
            (8 * 3600, "8h"),
            (20 * 3600, "20h"),
            (48 * 3600 - 1, "47h"),
            (48 * 3600, "2d"),
            (3 * 86_400 + 4 * 3600, "3d4h"),
            (8 * 86_400 - 1, "7d23h"),
            (8 * 86_400, "8d"),
            (45 * 86_400, "45d"),
            (730 * 86_400 - 1, "729d"),
            (730 * 86_400, "2y"),
            (760 * 86_400, "2y30d"),
            (8 * 365 * 86_400 - 1, "7y364d"),
            (8 * 365 * 86_400, "8y"),
            (3650 * 86_400 + 100, "10y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_age(*secs), *want, "human_age({secs})");
        }
    }

    #[test]
    fn civil_times_and_impossible_dates() {
        assert_eq!(unix_of(1970, 1, 1, 0, 0, 0), Some(0));
        assert_eq!(unix_of(1969, 12, 31, 23, 59, 59), Some(-1));
        assert_eq!(unix_of(2024, 2, 29, 0, 0, 0), Some(19_782 * 86_400));
        assert_eq!(unix_of(1, 1, 1, 0, 0, 0), Some(GO_ZERO_UNIX));
        assert_eq!(unix_of(2023, 2, 29, 0, 0, 0), None);
        assert_eq!(unix_of(2024, 13, 1, 0, 0, 0), None);
    }

    #[test]
    fn parse_rfc3339_variants() {
        let t = |s| parse_rfc3339(s);
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(Timestamp { unix: 0, nanos: 0 }));
        assert_eq!(t("2026-11-30T08:00:00Z").unwrap().unix, 1_795_996_800 + 8 * 3600);
        assert_eq!(t("2000-02-29T12:34:56Z").unwrap().unix, 951_827_696);
        assert_eq!(t("2024-01-15T10:30:00+02:00").unwrap().unix, t("2024-01-15T08:30:00Z").unwrap().unix);
        assert_eq!(t("2024-01-15T00:15:00-05:30").unwrap().unix, t("2024-01-15T05:45:00Z").unwrap().unix);
        assert_eq!(t("2024-01-15t08:30:00z"), t("2024-01-15T08:30:00Z"));
        let f = t("2024-01-15T08:30:00.5Z").unwrap();
        assert_eq!((f.unix, f.nanos), (t("2024-01-15T08:30:00Z").unwrap().unix, 500_000_000));
        assert_eq!(t("2024-01-15T08:30:00.123456789123Z").unwrap().nanos, 123_456_789);
        assert_eq!(t("2024-01-15T08:30:00.000001+00:00").unwrap().nanos, 1_000);
        assert_eq!(t("1969-12-31T23:59:59Z").unwrap().unix, -1);
        assert!(t("0001-01-01T00:00:00Z").unwrap().is_go_zero());
        for bad in [
            "",
            "2024-01-15",
            "2024-01-15T08:30:00",
            "2024-01-15 08:30:00Z",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-04-31T00:00:00Z",
            "2024-01-15T24:00:00Z",
            "2024-01-15T08:60:00Z",
            "2024-01-15T08:30:60Z",
            "2024-01-15T08:30:00.Z",
            "2024-01-15T08:30:00+0200",
            "2024-01-15T08:30:00+02:00x",
            "2024-01-15T08:30:00Zx",
            "2024/01/15T08:30:00Z",
            "20a4-01-15T08:30:00Z",
        ] {
            assert_eq!(t(bad), None, "{bad:?} should not parse");
        }
    }

    #[test]
    fn format_rfc3339_round_trips() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(GO_ZERO_UNIX), "0001-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(951_827_696), "2000-02-29T12:34:56Z");
        for unix in [-86_401, -1, 1, 1_700_000_000, 4_102_444_799] {
            assert_eq!(parse_rfc3339(&format_rfc3339(unix)).unwrap().unix, unix);
        }
    }

    #[test]
    fn since_truncates_fractions_and_handles_unset() {
        let base = parse_rfc3339("2026-01-01T00:00:00Z").unwrap().unix;
        assert_eq!(since(Some("2026-01-01T00:00:00Z"), base + 300), "5m");
        // 10.5s before now: Go truncates the 9.5s... elapsed toward zero.
        assert_eq!(since(Some("2026-01-01T00:00:00.5Z"), base + 10), "9s");
        assert_eq!(since(None, base), "<unknown>");
        assert_eq!(since(Some("garbage"), base), "<unknown>");
        assert_eq!(since(Some("0001-01-01T00:00:00Z"), base), "<unknown>");
        assert_eq!(since(Some("2026-01-01T00:01:00Z"), base), "<invalid>");
    }
}
