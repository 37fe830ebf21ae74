//! Durations as Kubernetes writes them: Go's `time.ParseDuration` syntax (`500ms`, `32s`,
//! `1m30s`, `1.5h`), as in a request's `timeout` parameter and the components' flags.

use std::time::Duration;

/// A duration that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (expected e.g. 500ms, 32s, 1m30s or 1.5h)")]
pub struct DurationError {
    pub input: String,
    pub reason: &'static str,
}

/// Nanoseconds per unit, longest suffix first where one is a prefix of another.
const UNITS: [(&str, u128); 8] =
    [("ns", 1), ("us", 1_000), ("µs", 1_000), ("μs", 1_000), ("ms", 1_000_000), ("s", 1_000_000_000), ("m", 60_000_000_000), ("h", 3_600_000_000_000)];

/// Parses a non-negative Go duration: one or more `<decimal><unit>` terms, or a bare `0`.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let fail = |reason| DurationError { input: input.to_string(), reason };
    let mut rest = input.strip_prefix('+').unwrap_or(input);
    if rest.starts_with('-') {
        return Err(fail("a duration here may not be negative"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(fail("it is empty"));
    }
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(fail("a number is missing or malformed"));
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let Some(&(_, per_unit)) = UNITS.iter().find(|(u, _)| *u == unit) else {
            return Err(fail(if unit.is_empty() { "a unit is missing" } else { "the units are ns, us, ms, s, m and h" }));
        };
        let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| fail("a number is too large"))? };
        let mut term = whole.checked_mul(per_unit).ok_or_else(|| fail("it is too long"))?;
        // The fraction's digits, scaled down one place at a time (as Go, exact to the ns).
        let mut scale = per_unit;
        for digit in fraction.bytes() {
            scale /= 10;
            term += u128::from(digit - b'0') * scale;
        }
        nanos = nanos.checked_add(term).ok_or_else(|| fail("it is too long"))?;
        rest = next;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| fail("it is too long"))?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// [`parse`], also taking a bare number as seconds (`15` = `15s`), as command-line flags do.
pub fn parse_flag(input: &str) -> Result<Duration, DurationError> {
    let input = input.trim();
    if !input.is_empty() && input.bytes().all(|b| b.is_ascii_digit()) {
        return parse(&format!("{input}s"));
    }
    parse(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("0", Duration::ZERO),
            ("500ms", ms(500)),
            ("32s", ms(32_000)),
            ("1m30s", ms(90_000)),
            ("1.5h", ms(5_400_000)),
            ("1h2m3.5s", ms(3_723_500)),
            (".5s", ms(500)),
            ("2us", Duration::from_micros(2)),
            ("3µs", Duration::from_micros(3)),
            ("7ns", Duration::from_nanos(7)),
            ("+10s", ms(10_000)),
            ("1.000000001s", Duration::new(1, 1)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
        for bad in ["", "-1s", "10", "1x", "s", "1..5s", ".s", "1.2.3s", "99999999999999999999999h"] {
            assert!(parse(bad).is_err(), "{bad} parsed");
        }
        assert!(parse("1x").unwrap_err().to_string().contains("the units are"));
    }

    #[test]
    fn flags_also_take_bare_seconds() {
        assert_eq!(parse_flag("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_flag(" 2m "), Ok(Duration::from_secs(120)));
        assert!(parse_flag("two").is_err());
    }
}
