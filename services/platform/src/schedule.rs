//! Schedules: a five-field cron expression (`minute hour day-of-month month day-of-week`) in an
//! IANA time zone, and the instants it names. Daylight-saving changes are the time zone
//! database's business ([`croner`] over [`jiff`]): a tick in a skipped hour runs once, and an
//! hour that repeats does not run its ticks twice.

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A parsed schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    cron: Cron,
    tz: TimeZone,
}

impl Schedule {
    /// Parses `cron` (five fields, no seconds) in `timezone`; the error says what to fix.
    pub fn parse(cron: &str, timezone: &str) -> Result<Self, String> {
        if cron.split_whitespace().count() != 5 {
            return Err(format!("{cron:?} is not a five-field cron expression (minute hour day-of-month month day-of-week)"));
        }
        let parsed = CronParser::builder().seconds(Seconds::Disallowed).build().parse(cron).map_err(|e| format!("{cron:?}: {e}"))?;
        let tz = TimeZone::get(timezone).map_err(|_| format!("{timezone:?} is not an IANA time zone (e.g. `Europe/Paris`, `UTC`)"))?;
        Ok(Self { cron: parsed, tz })
    }

    /// The first tick strictly after `after_ms` (milliseconds since the epoch), if any.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let at = Timestamp::from_millisecond(after_ms).ok()?.to_zoned(self.tz.clone());
        self.cron.find_next_occurrence(&at, false).ok().map(|z| z.timestamp().as_millisecond())
    }

    /// The last tick at or before `at_ms`, if any.
    pub fn last_at_or_before(&self, at_ms: i64) -> Option<i64> {
        let at = Timestamp::from_millisecond(at_ms).ok()?.to_zoned(self.tz.clone());
        self.cron.find_previous_occurrence(&at, true).ok().map(|z| z.timestamp().as_millisecond())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn ticks_follow_the_time_zone() {
        let s = Schedule::parse("30 9 * * 1-5", "Europe/Paris").unwrap();
        // Thursday 2026-11-26 10:00 UTC is 11:00 in Paris: the next tick is Friday 09:30 Paris.
        assert_eq!(s.next_after(ms("2026-11-26T10:00:00Z")), Some(ms("2026-11-27T08:30:00Z")));
        assert_eq!(s.last_at_or_before(ms("2026-11-26T10:00:00Z")), Some(ms("2026-11-26T08:30:00Z")));
        // A tick is not after itself; it is at or before itself.
        assert_eq!(s.next_after(ms("2026-11-27T08:30:00Z")), Some(ms("2026-11-30T08:30:00Z")));
        assert_eq!(s.last_at_or_before(ms("2026-11-27T08:30:00Z")), Some(ms("2026-11-27T08:30:00Z")));
        let every = Schedule::parse("*/15 * * * *", "UTC").unwrap();
        assert_eq!(every.next_after(ms("2026-11-26T10:07:59Z")), Some(ms("2026-11-26T10:15:00Z")));
    }

    #[test]
    fn bad_schedules_say_what_is_wrong() {
        assert!(Schedule::parse("* * * *", "UTC").unwrap_err().contains("five-field"));
        assert!(Schedule::parse("0 0 * * * *", "UTC").unwrap_err().contains("five-field"));
        assert!(Schedule::parse("61 * * * *", "UTC").is_err());
        assert!(Schedule::parse("0 9 * * *", "Mars/Olympus").unwrap_err().contains("IANA"));
    }
}
