//! A controller's health for the status views: the few figures of the
//! SMART / Health Information log (NVMe Base 2.0 §5.16.1.3) an operator
//! watches, in the units the views print.

use nvme_driver::spec::log::{CriticalWarning, SmartHealthLog};
use serde::Serialize;

/// What the status views show of one controller's SMART / Health log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Health {
    /// Critical Warning, the raw bits (0: none).
    pub critical_warning: u8,
    /// The Critical Warning bits set, by name (`spare`, `temperature`,
    /// `degraded`, `read_only`, `volatile_backup`, `pmr_read_only`).
    pub critical_warnings: Vec<String>,
    /// Composite Temperature, kelvin.
    pub composite_temperature_kelvin: u16,
    /// Composite Temperature, degrees Celsius.
    pub composite_temperature_celsius: i32,
    /// Available Spare, percent of the spare capacity left.
    pub available_spare_percent: u8,
    /// Available Spare Threshold, percent.
    pub available_spare_threshold_percent: u8,
    /// Percentage Used of the estimated life (may exceed 100).
    pub percentage_used: u8,
    /// Media and Data Integrity Errors over the controller's life.
    pub media_errors: u128,
    /// Error Information Log Entries over the controller's life.
    pub error_log_entries: u128,
    /// Power On Hours.
    pub power_on_hours: u128,
    /// Unsafe Shutdowns.
    pub unsafe_shutdowns: u128,
}

impl Health {
    /// The figures of `log`.
    pub fn from_log(log: &SmartHealthLog) -> Health {
        let mut critical_warnings: Vec<String> =
            log.critical_warning.iter_names().map(|(name, _)| name.to_lowercase()).collect();
        let unknown = log.critical_warning.bits() & !CriticalWarning::all().bits();
        if unknown != 0 {
            critical_warnings.push(format!("reserved bits {unknown:#04x}"));
        }
        Health {
            critical_warning: log.critical_warning.bits(),
            critical_warnings,
            composite_temperature_kelvin: log.composite_temperature_kelvin,
            composite_temperature_celsius: log.composite_temperature_celsius(),
            available_spare_percent: log.available_spare,
            available_spare_threshold_percent: log.available_spare_threshold,
            percentage_used: log.percentage_used,
            media_errors: log.media_errors,
            error_log_entries: log.error_log_entries,
            power_on_hours: log.power_on_hours,
            unsafe_shutdowns: log.unsafe_shutdowns,
        }
    }

    /// One line: `35 C, 3% used, 0 media errors, spare 100%, no critical
    /// warning`.
    pub fn summary(&self) -> String {
        let warning = if self.critical_warning == 0 {
            "no critical warning".to_string()
        } else {
            format!("CRITICAL WARNING {:#04x} ({})", self.critical_warning, self.critical_warnings.join(", "))
        };
        format!(
            "{} C, {}% used, {} media error(s), spare {}% (threshold {}%), {warning}",
            self.composite_temperature_celsius,
            self.percentage_used,
            self.media_errors,
            self.available_spare_percent,
            self.available_spare_threshold_percent,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::spec::log::{smart_offsets, SMART_HEALTH_LOG_SIZE};

    fn log(critical_warning: u8) -> SmartHealthLog {
        let mut page = [0u8; SMART_HEALTH_LOG_SIZE];
        page[smart_offsets::CRITICAL_WARNING] = critical_warning;
        page[smart_offsets::COMPOSITE_TEMPERATURE..][..2].copy_from_slice(&310u16.to_le_bytes());
        page[smart_offsets::AVAILABLE_SPARE] = 97;
        page[smart_offsets::AVAILABLE_SPARE_THRESHOLD] = 10;
        page[smart_offsets::PERCENTAGE_USED] = 4;
        page[smart_offsets::MEDIA_ERRORS] = 2;
        SmartHealthLog::parse(&page).expect("a whole page")
    }

    #[test]
    fn the_figures_and_the_warnings_by_name() {
        let health = Health::from_log(&log(0));
        assert_eq!(health.composite_temperature_kelvin, 310);
        assert_eq!(health.composite_temperature_celsius, 37);
        assert_eq!((health.available_spare_percent, health.percentage_used, health.media_errors), (97, 4, 2));
        assert!(health.critical_warnings.is_empty());
        assert_eq!(health.summary(), "37 C, 4% used, 2 media error(s), spare 97% (threshold 10%), no critical warning");
        let warned = Health::from_log(&log(0b1000_0101));
        assert_eq!(warned.critical_warning, 0x85);
        assert_eq!(warned.critical_warnings, ["spare", "degraded", "reserved bits 0x80"]);
        assert!(warned.summary().ends_with("CRITICAL WARNING 0x85 (spare, degraded, reserved bits 0x80)"));
    }
}
