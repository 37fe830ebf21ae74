//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2e3`), parsed exactly: quantities
//! are decimal, so `700m` is 700 thousandths, never 700.0000000000001.

/// `q` in thousandths of its unit, exactly (Kubernetes quantities are decimal, so `700m`
/// is 700, not 700.0000000000001), rounded up; `None` if malformed or out of range.
pub fn parse_quantity_milli(q: &str) -> Option<i128> {
    let q = q.trim();
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let (negative, num) = match num.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, num.strip_prefix('+').unwrap_or(num)),
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if whole.is_empty() && frac.is_empty() || !whole.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) || frac.len() > 18 {
        return None;
    }
    let digits: i128 = format!("{whole}{frac}").trim_start_matches('0').parse().unwrap_or(0);
    // value = digits × 10^(-frac) × multiplier; we want ceil(value × 1000).
    let (mut num, mut den): (i128, i128) = (digits.checked_mul(1000)?, 10i128.checked_pow(frac.len() as u32)?);
    let pow10 = |e: i32| -> Option<(i128, i128)> {
        if e >= 0 {
            Some((10i128.checked_pow(e as u32)?, 1))
        } else {
            Some((1, 10i128.checked_pow((-e) as u32)?))
        }
    };
    let (mn, md) = match suffix {
        "" => (1, 1),
        "n" => pow10(-9)?,
        "u" => pow10(-6)?,
        "m" => pow10(-3)?,
        "k" => pow10(3)?,
        "M" => pow10(6)?,
        "G" => pow10(9)?,
        "T" => pow10(12)?,
        "P" => pow10(15)?,
        "E" => pow10(18)?,
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        s if s.starts_with(['e', 'E']) => pow10(s[1..].parse().ok()?)?,
        _ => return None,
    };
    num = num.checked_mul(mn)?;
    den = den.checked_mul(md)?;
    let v = (num + den - 1) / den;
    Some(if negative { -(num / den) } else { v })
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_and_rounding() {
        assert_eq!(parse_quantity_milli("700m"), Some(700));
        assert_eq!(parse_quantity_milli("1.5Gi"), Some(1_610_612_736_000));
        assert_eq!(parse_quantity_milli("100n"), Some(1), "rounded up");
        assert_eq!(parse_quantity_milli("-1"), Some(-1000));
        assert_eq!(parse_quantity_milli("1Zi"), None);
    }
}
