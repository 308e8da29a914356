//! Times as GitHub writes and reads them.

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `secs` as GitHub writes times: RFC 3339 in UTC, whole seconds (`2024-05-01T12:00:00Z`).
pub(crate) fn timestamp(secs: u64) -> String {
    let days = secs / 86_400;
    let rest = secs % 86_400;
    // Howard Hinnant's civil-from-days: day count to proleptic Gregorian date.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// A time as GitHub's query parameters take it (`since`): ISO 8601 `YYYY-MM-DDTHH:MM:SS`, an
/// optional fraction (dropped: the fake keeps whole seconds), then `Z` or `±HH:MM`. `None` if
/// it is not one, or is before 1970.
pub(crate) fn parse_timestamp(text: &str) -> Option<u64> {
    let (date, time) = text.split_once('T')?;
    let (clock, offset) = match time.strip_suffix('Z') {
        Some(clock) => (clock, 0),
        None => {
            let at = time.rfind(['+', '-'])?;
            let (clock, zone) = time.split_at(at);
            let (h, m) = zone[1..].split_once(':')?;
            let secs = number(h, 0..=23)? * 3600 + number(m, 0..=59)? * 60;
            (clock, if zone.starts_with('-') { -secs } else { secs })
        }
    };
    let clock = match clock.split_once('.') {
        Some((whole, fraction))
            if !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit()) =>
        {
            whole
        }
        Some(_) => return None,
        None => clock,
    };
    let [year, month, day] = fields(date, '-')?;
    let [hour, minute, second] = fields(clock, ':')?;
    let (year, month, day) = (
        number(year, 1970..=9999)?,
        number(month, 1..=12)?,
        number(day, 1..=31)?,
    );
    let secs = days_from_civil(year, month, day) * 86_400
        + number(hour, 0..=23)? * 3600
        + number(minute, 0..=59)? * 60
        + number(second, 0..=60)?
        - offset;
    u64::try_from(secs).ok()
}

/// Exactly three `sep`-separated fields.
fn fields(text: &str, sep: char) -> Option<[&str; 3]> {
    let mut parts = text.split(sep);
    let three = [parts.next()?, parts.next()?, parts.next()?];
    parts.next().is_none().then_some(three)
}

/// Plain decimal digits within `range`.
fn number(text: &str, range: std::ops::RangeInclusive<i64>) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|n| range.contains(n))
}

/// Howard Hinnant's days-from-civil, the inverse of the date half of [`timestamp`].
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
