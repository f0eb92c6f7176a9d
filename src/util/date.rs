//! Dates as HTTP writes them: the IMF-fixdate of the `Date` header, cached per shard for
//! the current second ([`DateCache`]), and the civil date of a day count (for logs and the
//! templates' `strftime_now`).

use std::cell::{Cell, RefCell};
use std::time::{SystemTime, UNIX_EPOCH};

/// The current time as an IMF-fixdate, formatted at most once per second per shard.
pub struct DateCache {
    secs: Cell<u64>,
    text: RefCell<[u8; 29]>,
}

impl Default for DateCache {
    fn default() -> Self {
        DateCache { secs: Cell::new(u64::MAX), text: RefCell::new([b' '; 29]) }
    }
}

impl DateCache {
    /// Call `f` with the 29-byte date of the current second.
    pub fn with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if now != self.secs.get() {
            self.secs.set(now);
            *self.text.borrow_mut() = imf_fixdate(now);
        }
        f(&self.text.borrow()[..])
    }
}

/// (year, month 1–12, day 1–31) of a count of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Format seconds since the epoch as `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 §5.6.7).
pub fn imf_fixdate(secs: u64) -> [u8; 29] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] =
        [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (hh, mm, ss) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    let (year, month, day) = civil_from_days(days as i64);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    let two = |v: u64, o: &mut [u8]| {
        o[0] = b'0' + (v / 10) as u8;
        o[1] = b'0' + (v % 10) as u8;
    };
    two(u64::from(day), &mut out[5..7]);
    out[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    let y = year as u64;
    two(y / 100, &mut out[12..14]);
    two(y % 100, &mut out[14..16]);
    two(hh, &mut out[17..19]);
    two(mm, &mut out[20..22]);
    two(ss, &mut out[23..25]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixdate_known_values() {
        assert_eq!(&imf_fixdate(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&imf_fixdate(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&imf_fixdate(1_709_210_096), b"Thu, 29 Feb 2024 12:34:56 GMT");
    }
}
